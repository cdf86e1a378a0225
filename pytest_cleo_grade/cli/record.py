"""``cleo-grade record``: record one call of a shell agent into its graded session."""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pytest_cleo_grade.cli.common import (
    ENV_AUDIT_DB,
    ENV_GRADE,
    ENV_GRADE_ID,
    ENV_SESSION_ID,
    CommandError,
)
from pytest_cleo_grade.core.errors import CleoGradeError, EntryError

if TYPE_CHECKING:
    from pydantic import ValidationError

__all__ = ["register"]

# A shell agent runs this once per call, so its common path, an existing store that is
# current, imports neither pydantic nor sqlite-utils: the arguments are checked here and the
# row is written by store._fast_append. Whatever that path is not sure of (no store yet, an
# older schema, a value whose JSON pydantic-core might write differently, a bad argument)
# goes the full way, through the entry model and AuditStore, which says what is wrong.

#: The gateways CLEO writes (capture.audit.GATEWAYS and MUTATE_GATEWAYS, held equal by a test).
_MUTATE_GATEWAYS: Final = frozenset({"cleo_mutate", "mutate"})
_GATEWAYS: Final = frozenset({"cleo_query", "query", *_MUTATE_GATEWAYS})
#: The bounds of the entry model's exit code (SQLite's INTEGER).
_EXIT_CODES: Final = range(-(2**63), 2**63)
#: How long each wait for another writer lasts before Python runs again (see _record_entry).
_BUSY_SLICE_S: Final = 0.05


def register(subparsers: Any) -> None:
    recorder = subparsers.add_parser(
        "record",
        help="record one call into the active graded session (for shell agents)",
        description=(
            "Record DOMAIN.OPERATION into the session named by the environment "
            "(CLEO_SESSION_GRADE_ID / CLEO_SESSION_ID and CLEO_AUDIT_DB, as a graded session "
            "sets them). Outside grade mode only mutations are recorded. Without an active "
            "session nothing is recorded and a warning is printed."
        ),
    )
    recorder.add_argument("domain", metavar="DOMAIN")
    recorder.add_argument("operation", metavar="OPERATION")
    recorder.add_argument("--params", metavar="JSON", help="the call's parameters, a JSON object")
    recorder.add_argument(
        "--exit-code",
        dest="exit_code",
        type=int,
        default=0,
        metavar="N",
        help="the call's exit code; non-zero records a failure (4 is E_NOT_FOUND)",
    )
    recorder.add_argument("--gateway", metavar="G", help="cleo_query, cleo_mutate, query, mutate")
    recorder.add_argument("--error", metavar="MSG", help="the error message of a failed call")
    recorder.add_argument(
        "--duration", type=float, metavar="MS", help="how long the call took, in milliseconds"
    )
    recorder.add_argument("--task-id", dest="task_id", metavar="ID", help="task the call concerned")
    recorder.add_argument("--source", default="cli", help="front end (default: cli)")
    recorder.set_defaults(handler=run_record)


def _params(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    from pytest_cleo_grade.core._files import parse_json_strict

    try:
        # The entry files' parser: NaN, Infinity and absurd nesting are input errors too.
        value = parse_json_strict(text)
    except ValueError as exc:
        raise CommandError(f"cleo-grade record: --params is not valid JSON: {exc}") from exc
    if value is None:
        return {}  # as an entry's "params": null reads (CLEO writes it for calls without any)
    if not isinstance(value, dict):
        raise CommandError(
            f"cleo-grade record: --params must be a JSON object, got {type(value).__name__}"
        )
    return value


#: The entry field each of ``record``'s arguments fills (by name or alias, as pydantic may
#: report either): an error names what the user typed, not the model's field. (The session
#: id, from the environment, is any string the model accepts.)
_OPTION_OF_FIELD: Final = {
    ("domain",): "DOMAIN",
    ("operation",): "OPERATION",
    ("params",): "--params",
    ("result", "exit_code"): "--exit-code",
    ("result", "exitCode"): "--exit-code",
    ("result", "success"): "--exit-code",
    ("result", "duration"): "--duration",
    ("metadata", "gateway"): "--gateway",
    ("metadata", "source"): "--source",
    ("metadata", "task_id"): "--task-id",
    ("metadata", "taskId"): "--task-id",
    ("error",): "--error",
}


def _option_errors(exc: ValidationError) -> str:
    """Every problem pydantic found, on one line, each under the argument that caused it
    (``DOMAIN: ...; OPERATION: ...``): the model checks, the command line is what is named."""
    parts = []
    for error in exc.errors():
        loc = tuple(str(part) for part in error["loc"])
        option = _OPTION_OF_FIELD.get(loc[:2]) or _OPTION_OF_FIELD.get(loc[:1]) or ".".join(loc)
        # A validator's own ValueError already says what is wrong (as format_validation_error).
        parts.append(f"{option}: {str(error['msg']).removeprefix('Value error, ')}")
    return "; ".join(parts)


def _refuse_undecodable(args: argparse.Namespace) -> None:
    """An argument holding bytes the shell passed that are not UTF-8 (Python keeps them as
    lone surrogates) names that argument; the store would refuse it naming the database."""
    texts = (
        ("DOMAIN", args.domain),
        ("OPERATION", args.operation),
        ("--gateway", args.gateway),
        ("--source", args.source),
        ("--task-id", args.task_id),
        ("--error", args.error),
    )
    for option, value in texts:
        if value is None or value.isascii():
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise CommandError(f"cleo-grade: error: {option}: not UTF-8 text") from None


def run_record(args: argparse.Namespace) -> int:
    try:
        return _record(args)
    except (CommandError, CleoGradeError) as exc:
        # The call the shell agent made is not recorded: the graded session must hear of
        # it (as from record() in a child), or its test is graded on the rest and passes.
        from pytest_cleo_grade.capture.audit import active_session, refuse

        if active_session() is not None:
            text = str(exc).removeprefix("cleo-grade: error: ").removeprefix("cleo-grade record: ")
            refuse(f"{args.domain}.{args.operation} (cleo-grade record): {text}")
        raise


def _record(args: argparse.Namespace) -> int:
    params = _params(args.params)
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration >= 0):
        raise CommandError("cleo-grade record: --duration must be a finite number >= 0")
    _refuse_undecodable(args)
    if args.gateway is not None and args.gateway not in _GATEWAYS:
        # make_entry refuses it too, but naming the call, not the option; checked here also
        # without an active session, as the other options are.
        raise CommandError(
            f"cleo-grade: error: --gateway: {args.gateway!r} is not one of "
            "cleo_query, query, cleo_mutate, mutate"
        )
    active = _active_session()
    if active is None:
        unset = [name for name in (ENV_AUDIT_DB, ENV_SESSION_ID) if not os.environ.get(name)]
        why = (
            f"{' and '.join(unset)} {'is' if len(unset) == 1 else 'are'} not set"
            if unset
            else ("its variables name none")
        )
        print(
            f"cleo-grade: warning: no active graded session ({why}); nothing recorded",
            file=sys.stderr,
        )
        return 0
    session_id, path, grade_mode = active
    if not grade_mode and args.gateway not in _MUTATE_GATEWAYS:
        # CLEO audits only mutations outside grade mode; said, never dropped silently.
        print(
            "cleo-grade: warning: not recorded: outside grade mode (CLEO_SESSION_GRADE is not "
            "true) only mutations are recorded, and this call has no --gateway cleo_mutate "
            "or mutate",
            file=sys.stderr,
        )
        return 0
    if _recorded_directly(args, params, session_id, path):
        return 0
    _record_entry(args, params, session_id, path)
    return 0


def _active_session() -> tuple[str, Path, bool] | None:
    """capture.audit.active_session(), without loading the capture layer when it can be."""
    audit = sys.modules.get("pytest_cleo_grade.capture.audit")
    if audit is not None:
        # Loaded: this process may hold graded sessions (main() called inside a test run),
        # which only it knows of.
        found: tuple[str, Path, bool] | None = audit.active_session()
        return found
    # Not loaded, so no session is held in this process: the environment alone names one.
    return _environment_session(os.environ)


def _environment_session(env: Mapping[str, str]) -> tuple[str, Path, bool] | None:
    """The session ``env`` names, by capture.audit._parse_active's rules (a test holds the
    two equal): (session id, store path, grade mode), or None."""
    db = env.get(ENV_AUDIT_DB)
    if not db:
        return None
    grade_mode = (env.get(ENV_GRADE) or "").lower() == "true"
    chosen = (env.get(ENV_GRADE_ID) if grade_mode else None) or env.get(ENV_SESSION_ID)
    if not chosen:
        return None
    return chosen, Path(db).absolute(), grade_mode


def _recorded_directly(
    args: argparse.Namespace, params: dict[str, Any], session_id: str, path: Path
) -> bool:
    """Record the call without the entry model where that is sure to store what the model
    would; False (nothing written) where it is not, or the store is not an existing, current
    one (store._fast_append)."""
    from datetime import UTC, datetime

    from pytest_cleo_grade.store._fast_append import append_to_current
    from pytest_cleo_grade.store._row import (
        NotPlainJSON,
        build_row,
        is_unicode,
        new_row_id,
        plain_json,
    )

    # What the entry model checks beyond the checks above (the duration, the gateway, the
    # arguments' text): non-empty names, an exit code SQLite holds, a session id it can store.
    if not (
        args.domain and args.operation and args.exit_code in _EXIT_CODES and is_unicode(session_id)
    ):
        return False
    try:
        row = build_row(
            new_row_id(),
            datetime.now(UTC),
            session_id,
            args.domain,
            args.operation,
            params,
            args.exit_code == 0,
            args.exit_code,
            0.0 if args.duration is None else args.duration,
            args.source,
            args.gateway,
            args.task_id,
            None,
            None,
            args.error,
            plain_json,
        )
    except (NotPlainJSON, EntryError):
        return False  # the entry model says what is wrong, or pydantic-core writes it
    return append_to_current(path, row, busy_slice=_BUSY_SLICE_S)


def _record_entry(
    args: argparse.Namespace, params: dict[str, Any], session_id: str, path: Path
) -> None:
    """Record the call through the entry model and the store (which creates, migrates and
    checks the store), naming the argument that is wrong."""
    from pydantic import ValidationError

    from pytest_cleo_grade.capture.audit import make_entry
    from pytest_cleo_grade.store import AuditStore

    try:
        entry = make_entry(
            session_id,
            args.domain,
            args.operation,
            params,
            success=args.exit_code == 0,
            exit_code=args.exit_code,
            duration=args.duration,
            gateway=args.gateway,
            source=args.source,
            task_id=args.task_id,
            error=args.error,
        )
    except EntryError as exc:
        if not isinstance(exc.__cause__, ValidationError):
            raise  # its own one line already
        raise CommandError(f"cleo-grade: error: {_option_errors(exc.__cause__)}") from exc
    # Unlike audit.record(), a store that cannot be written is an error here (exit 2): the
    # shell caller asked for exactly this one write.
    # Waiting for another writer in slices: Ctrl-C or SIGTERM during the wait stops the
    # command before it writes, rather than after a write it then reports as failed.
    with AuditStore(path, busy_slice=_BUSY_SLICE_S) as store:
        store.append(entry)
