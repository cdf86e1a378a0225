"""``cleo-grade import`` and ``cleo-grade record``: put audit entries into the store."""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from pytest_cleo_grade.capture.audit import (
    ENV_AUDIT_DB,
    GATEWAYS,
    MUTATE_GATEWAYS,
    active_session,
    make_entry,
    refuse,
)
from pytest_cleo_grade.cli.common import CommandError, session_id_arg
from pytest_cleo_grade.core._text import terminal_text
from pytest_cleo_grade.core.errors import CleoGradeError, EntryError
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.store import DEFAULT_DB, AuditStore
from pytest_cleo_grade.store._imports import import_cleo_rows, stream_entries_file
from pytest_cleo_grade.store.sources import (
    ENTRY_FILE_FORMATS,
    IMPORT_FORMATS,
    find_cleo_db,
    is_sqlite_file,
    read_cleo_db,
)
from pytest_cleo_grade.store.sources import parse_json_strict as strict_json_loads

__all__ = ["add_db_option", "db_path", "register"]


def add_db_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        metavar="PATH",
        help=f"audit store (default: ${ENV_AUDIT_DB}, else ./{DEFAULT_DB})",
    )


def db_path(args: argparse.Namespace) -> Path:
    """--db, else $CLEO_AUDIT_DB, else .cleo/audit.db under the current directory."""
    given: str | None = getattr(args, "db", None)
    if given == "":
        raise CommandError("cleo-grade: error: --db: an empty path (name an audit store file)")
    value = given or os.environ.get(ENV_AUDIT_DB)
    if not value:
        return Path.cwd() / DEFAULT_DB
    path = Path(value)
    if not path.name:  # "." or "/": no last component to open or create
        where = "--db" if given else ENV_AUDIT_DB
        raise CommandError(
            terminal_text(f"cleo-grade: error: {where} {value}: a directory, not an audit store")
        )
    return path


def register(subparsers: Any) -> None:
    importer = subparsers.add_parser(
        "import",
        help="import audit entries into the store",
        description=(
            "Import a JSON/JSONL file of audit entries, or the audit_log of a CLEO database "
            "(a .cleo/cleo.db or .cleo/tasks.db file, or a project directory holding one), "
            "into the audit store. All or nothing: a bad entry aborts with its line number "
            "and nothing is imported. A CLEO database is opened read-only."
        ),
    )
    importer.add_argument("source", metavar="FILE", help="entries file, CLEO database or project")
    importer.add_argument(
        "--format",
        dest="format",
        choices=IMPORT_FORMATS,
        default="auto",
        help=(
            "auto (default): JSON/JSONL audit entries or a CLEO database, told apart by "
            "content; json or jsonl: an audit entries file (a JSON array or JSON lines, "
            "either name reads both); cleo-db: a CLEO database or a project directory "
            "holding one; otlp: OTLP JSON "
            "traces (a Collector's file exporter), one session per gen_ai.conversation.id or "
            "trace id unless --session-id names one; claude-code: a Claude Code session "
            "transcript (~/.claude/projects/*/SESSION.jsonl), its tool calls under its "
            "sessionId unless --session-id names one"
        ),
    )
    importer.add_argument(
        "--session-id",
        dest="session_id",
        type=session_id_arg,
        metavar="ID",
        help="import only this session (exact id); entries without a sessionId join it",
    )
    add_db_option(importer)
    importer.set_defaults(handler=run_import)

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


def run_import(args: argparse.Namespace) -> int:
    source = Path(args.source)
    if not source.exists():
        raise CommandError(f"cleo-grade import: {source}: no such file")
    target = db_path(args)
    if args.format == "otlp":
        return _import_otlp(source, target, args.session_id)
    if args.format == "claude-code":
        from pytest_cleo_grade.capture.claude_code import load_transcript

        return _import_loaded(load_transcript(source, session_id=args.session_id), target)
    if args.format in ENTRY_FILE_FORMATS:
        cleo = False
        if source.is_dir() or is_sqlite_file(source):
            raise CommandError(
                f"cleo-grade import: {source}: --format {args.format} reads an audit entries "
                "file, and this is a CLEO database or a directory (use --format cleo-db)"
            )
    elif args.format == "cleo-db":
        cleo = True
    else:
        cleo = source.is_dir() or is_sqlite_file(source)
    if cleo:
        cleo_db = find_cleo_db(source)
        if cleo_db.resolve() == target.resolve():
            raise CommandError(f"cleo-grade import: {cleo_db} is the store itself")
    if cleo:
        # Read (and validate) every row before touching the store: a bad row creates nothing.
        items = read_cleo_db(cleo_db, session_id=args.session_id)
        with AuditStore(target) as store:
            read, added = len(items), import_cleo_rows(store, items)
        skipped = f" ({read - added} already there)" if read != added else ""
        print(terminal_text(f"Imported {added} entries from {cleo_db} into {target}{skipped}"))
        return 0
    # Streamed in one transaction: memory holds a batch, a bad line changes nothing.
    summary = stream_entries_file(target, source, session_id=args.session_id)
    shown = ", ".join(summary.sessions) + (", ..." if summary.more_sessions else "")
    print(terminal_text(f"Imported {summary.count} entries into {target} (sessions: {shown})"))
    return 0


def _import_otlp(source: Path, target: Path, session_id: str | None) -> int:
    from pytest_cleo_grade.capture.otlp import load_otlp_file  # only this format needs it

    return _import_loaded(load_otlp_file(source, session_id=session_id), target)


def _import_loaded(entries: list[AuditEntry], target: Path) -> int:
    """Store entries read (and checked) whole first: a bad line changes nothing. A call the
    file names (a transcript's tool use id, a span's trace and span ids) is stored once per
    session, however often the file (a transcript that grows, say) is imported."""
    from pytest_cleo_grade.store._schema import entry_row

    rows = [entry_row(entry, _call_id(entry)) for entry in entries]
    with AuditStore(target) as store:
        added = store.append_rows(rows)
    sessions = sorted({e.session_id or "(no session)" for e in entries})
    shown = ", ".join(sessions[:5]) + (", ..." if len(sessions) > 5 else "")
    skipped = f"; {len(entries) - added} already there" if added != len(entries) else ""
    print(terminal_text(f"Imported {added} entries into {target} (sessions: {shown}{skipped})"))
    return 0


def _call_id(entry: AuditEntry) -> str | None:
    """The row id of a call its file names, else None (a new id)."""
    extra = entry.metadata.model_extra or {}
    session = entry.session_id or ""
    tool_use, trace, span = extra.get("toolUseId"), extra.get("traceId"), extra.get("spanId")
    if isinstance(tool_use, str) and tool_use:
        return f"{entry.metadata.source}:{session}:{tool_use}"
    if isinstance(trace, str) and trace and isinstance(span, str) and span:
        return f"{entry.metadata.source}:{session}:{trace}:{span}"
    return None


def _params(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        # The entry files' parser: NaN, Infinity and absurd nesting are input errors too.
        value = strict_json_loads(text)
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
        if active_session() is not None:
            text = str(exc).removeprefix("cleo-grade: error: ").removeprefix("cleo-grade record: ")
            refuse(f"{args.domain}.{args.operation} (cleo-grade record): {text}")
        raise


def _record(args: argparse.Namespace) -> int:
    params = _params(args.params)
    if args.duration is not None and not (math.isfinite(args.duration) and args.duration >= 0):
        raise CommandError("cleo-grade record: --duration must be a finite number >= 0")
    _refuse_undecodable(args)
    if args.gateway is not None and args.gateway not in GATEWAYS:
        # make_entry refuses it too, but naming the call, not the option; checked here also
        # without an active session, as the other options are.
        raise CommandError(
            f"cleo-grade: error: --gateway: {args.gateway!r} is not one of "
            "cleo_query, query, cleo_mutate, mutate"
        )
    active = active_session()
    if active is None:
        unset = [name for name in ("CLEO_AUDIT_DB", "CLEO_SESSION_ID") if not os.environ.get(name)]
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
    if not grade_mode and args.gateway not in MUTATE_GATEWAYS:
        # CLEO audits only mutations outside grade mode; said, never dropped silently.
        print(
            "cleo-grade: warning: not recorded: outside grade mode (CLEO_SESSION_GRADE is not "
            "true) only mutations are recorded, and this call has no --gateway cleo_mutate "
            "or mutate",
            file=sys.stderr,
        )
        return 0
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
    with AuditStore(path, busy_slice=0.05) as store:
        store.append(entry)
    return 0
