"""Grading one session from a command's arguments: where its entries come from, the rubric
the options name, saving the grade, and printing it with ``--fail-under``'s exit status.

Shared by ``grade``, ``show``, ``junit``, ``regrade``, ``review``, ``session end`` and the MCP
server, so that none of them imports another command's module. The grading stack (the
models, the rubrics, the store, the display) is imported by the functions that grade, so a
command's --help starts without it.
"""

from __future__ import annotations

import argparse
import operator
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pytest_cleo_grade.cli._rubric_args import grade_context_from_args, rubric_config_from_args
from pytest_cleo_grade.cli.common import (
    CommandError,
    db_path,
    history_path,
    print_json,
)
from pytest_cleo_grade.core._defaults import DEFAULT_RUBRIC
from pytest_cleo_grade.core._text import terminal_text
from pytest_cleo_grade.core.errors import CleoGradeError

if TYPE_CHECKING:
    from collections.abc import Iterable

    from pytest_cleo_grade.core._conversation import Conversation
    from pytest_cleo_grade.core.models import AuditEntry, GradedCall, GradeResult

__all__ = [
    "existing_store",
    "grade_entries_file",
    "grade_from_store",
    "grade_with_args",
    "refuse_a_database",
    "refuse_empty",
    "refuse_unused_rubric_file",
    "report",
    "save_grade",
    "save_grades",
    "session_id_of",
    "session_source",
    "warn_no_entries",
]


def session_id_of(args: argparse.Namespace) -> str | None:
    positional: str | None = args.session
    option: str | None = args.session_id
    if positional and option and positional != option:
        raise CommandError(
            f"cleo-grade grade: SESSION_ID {positional!r} and --session-id {option!r} differ"
        )
    # An empty id is an id (an imported entry may carry one): only a missing one is absent.
    return positional if positional is not None else option


def _choose_session(path: str, sessions: Iterable[str | None], session_id: str | None) -> str:
    """The session to grade: ``session_id``, else the one session the file holds."""
    if session_id is not None:
        return session_id
    named = sorted(sid for sid in set(sessions) if sid is not None)
    if len(named) > 1:
        raise CommandError(
            f"cleo-grade grade: {path} holds {len(named)} sessions "
            f"({', '.join(named[:5])}{', ...' if len(named) > 5 else ''}); "
            "choose one with --session-id"
        )
    if not named:
        raise CommandError(
            f"cleo-grade grade: entries in {path} carry no sessionId; name it with --session-id"
        )
    return named[0]


def _entries_from_file(path: str, session_id: str | None) -> tuple[str, list[AuditEntry]]:
    from pytest_cleo_grade.store.sources import load_entries_file

    entries = load_entries_file(path)
    session_id = _choose_session(path, (e.session_id for e in entries), session_id)
    return session_id, [e for e in entries if e.session_id in (None, session_id)]


_SESSION_OF: Final = operator.attrgetter("session_id")
_CALL_TIME: Final = operator.itemgetter(0)


def grade_entries_file(path: str, session_id: str | None = None) -> GradeResult:
    """CLEO's rubric over a JSON or JSONL file of entries, read a batch at a time.

    Only each entry's graded call is kept (``rubrics.cleo_calls``), so memory follows the
    calls, not the entries: the same grade as :func:`grade_entries` over the whole file, with
    the session chosen and the errors raised as ``cleo-grade grade --entries`` does.
    """
    from pytest_cleo_grade.core.models import collector_paused
    from pytest_cleo_grade.rubrics._fast_calls import calls_of_lines, reads_strictly
    from pytest_cleo_grade.rubrics.cleo import grade_calls, session_order
    from pytest_cleo_grade.store.sources import map_entry_batches

    calls: list[GradedCall] = []
    owners: list[str | None] = []
    # One string object per session id, not one per entry.
    shared: dict[str | None, str | None] = {}
    # Lines of the usual shape become graded calls without models (rubrics._fast_calls);
    # any other batch is validated entry by entry, its errors named as ever. The collector
    # is paused for the whole read, not batch by batch: each resume let a full collection
    # traverse every call kept so far (a million lines: 0.35 s of such collections).
    with collector_paused():
        for ids, batch_calls in map_entry_batches(
            path,
            _calls_of_entries,
            workers=0,
            fast=calls_of_lines,
            fast_is_strict=reads_strictly(),
        ):
            owners.extend(map(shared.setdefault, ids, ids))
            calls.extend(batch_calls)
    chosen = _choose_session(path, shared, session_id)
    order = session_order(owners, list(map(_CALL_TIME, calls)), chosen)
    if order is not None:
        calls = [calls[i] for i in order]
    return grade_calls(calls, session_id=chosen)


def _calls_of_entries(
    batch: list[AuditEntry],
) -> tuple[list[str | None], list[GradedCall]]:
    from pytest_cleo_grade.rubrics._cleo_calls import graded_call

    return list(map(_SESSION_OF, batch)), list(map(graded_call, batch))


def session_source(
    args: argparse.Namespace, where: str = "cleo-grade grade"
) -> tuple[str, list[AuditEntry] | None, Path | None]:
    """The session a command names, from ``--entries``, ``--cleo-db`` or the audit store.

    Returns the session id, its entries (None: the audit store at the third item holds
    them, to be read by the caller) and the audit store the judge cache may use.
    """
    from pytest_cleo_grade.store import AuditStore
    from pytest_cleo_grade.store.sources import find_cleo_db

    session_id = session_id_of(args)
    sources = [name for name in ("entries", "cleo_db", "db") if getattr(args, name)]
    if len(sources) > 1:
        options = " and ".join(f"--{name.replace('_', '-')}" for name in sources)
        raise CommandError(f"{where}: {options} cannot be combined")
    if args.entries:
        refuse_a_database(args.entries, where)
        session_id, entries = _entries_from_file(args.entries, session_id)
        cache = db_path(args)
        # The judge cache lives in the audit store; use it only if there already is one.
        return session_id, entries, cache if cache.is_file() else None
    if session_id is None:
        raise CommandError(f"{where}: give SESSION_ID (or --entries FILE)")
    if args.cleo_db:
        with AuditStore(find_cleo_db(args.cleo_db), read_only=True) as cleo:
            # Someone else's database is never written to, not even by the judge cache.
            return session_id, cleo.session_entries(session_id), None
    return session_id, None, existing_store(db_path(args), where)


def refuse_a_database(path: str, where: str) -> None:
    """``--entries`` naming a database: say so, and which option reads one, rather than
    report its binary pages as bad JSON at line 1."""
    from pytest_cleo_grade.store.sources import is_sqlite_file

    if is_sqlite_file(path):
        raise CommandError(
            f"{where}: {path} is an SQLite database, not a JSON-lines entries file "
            "(--db reads an audit store, --cleo-db a CLEO database)"
        )


def refuse_unused_rubric_file(args: argparse.Namespace) -> None:
    """CLEO's built-in rubric reads no file: grading without it would look like it applied."""
    if args.rubric == DEFAULT_RUBRIC and args.rubric_file:
        raise CommandError(
            f"cleo-grade: --rubric-file {args.rubric_file}: rubric {DEFAULT_RUBRIC!r} reads no "
            "rubric file; "
            "name the rubric it is for (--rubric rules, weighted or trajectory)"
        )


def existing_store(path: Path, where: str = "cleo-grade grade") -> Path:
    if path.exists() and not path.is_file():
        from pytest_cleo_grade.core._files import kind_of

        kind = kind_of(path.stat().st_mode)
        raise CommandError(f"{where}: {path}: not a regular file ({kind}), so not an audit store")
    if not path.is_file():
        raise CommandError(
            f"{where}: no audit store at {path} (pass --db PATH or set CLEO_AUDIT_DB)"
        )
    return path


def _refuse_a_mistyped_command(result: GradeResult, commands: Sequence[str]) -> None:
    """``cleo-grade sessoins``: a session id with no entries that is a command's near miss
    is taken for the typo it is (grading it saved an F of an empty session to the history)."""
    if result.entry_count:
        return
    import difflib

    close = difflib.get_close_matches(result.session_id, commands, n=1, cutoff=0.75)
    if close:
        raise CommandError(
            f"cleo-grade: no command {result.session_id!r} and no entries for a session of "
            f"that id; did you mean {close[0]!r}? (nothing saved)"
        )


def refuse_empty(
    result: GradeResult, *, strict: bool, where: str = "cleo-grade grade", hint: str = ""
) -> None:
    """``--strict``: a session without entries is not found (exit status 4), saved nowhere."""
    if strict and result.entry_count == 0:
        raise CommandError(
            terminal_text(f"{where}: session {result.session_id} not found{hint}"), status=4
        )


def grade_from_store(
    path: Path, session_id: str, *, where: str = "cleo-grade grade"
) -> GradeResult:
    """Grade a session of the audit store with the CLEO rubric (the store opened read-only).

    Reads only the columns the rubric needs (``AuditStore.session_calls``); a session with a
    row that needs the full entry reading (mixed timestamp forms, a bad row) takes it.
    """
    from pytest_cleo_grade.rubrics.cleo import grade_calls, grade_entries
    from pytest_cleo_grade.store import AuditStore

    with AuditStore(existing_store(path, where), read_only=True) as audit:
        calls = audit.session_calls(session_id)
        if calls is not None:
            return grade_calls(calls, session_id=session_id)
        return grade_entries(audit.session_entries(session_id), session_id=session_id)


def save_grade(result: GradeResult, *, history: Path, store: Path | None) -> None:
    """Save a grade with the one :func:`~pytest_cleo_grade.store._persist.persist`: the history,
    then the grades table of the store it came from, all or nothing. A ``--history`` that
    cannot be written fails before the store is touched, and a grades table that cannot be
    written takes the history's line back, so an exit status 2 never leaves it saved in one
    place.
    """
    from pytest_cleo_grade.store import AuditStore
    from pytest_cleo_grade.store._persist import persist

    if store is None:
        persist([result], history=history, store=None)
        return
    with AuditStore(store) as audit:
        persist([result], history=history, store=audit)


def save_grades(results: list[GradeResult], *, history: Path, store: Path) -> None:
    """Several grades saved as :func:`save_grade` saves one: all of them or none."""
    from pytest_cleo_grade.store import AuditStore
    from pytest_cleo_grade.store._persist import persist

    with AuditStore(store) as audit:
        persist(results, history=history, store=audit)


def grade_with_args(
    args: argparse.Namespace,
    entries: list[AuditEntry],
    session_id: str,
    cache: Path | None,
    *,
    conversation: Conversation | None = None,
) -> GradeResult:
    """Grade ``entries`` with the ``--rubric`` (and its options) of ``args``; ``conversation``
    is the session's, when the store holds one (the weighted judge reads it)."""
    from dataclasses import replace

    from pytest_cleo_grade.rubrics.cleo import grade_entries
    from pytest_cleo_grade.rubrics.registry import grade_with_rubric

    refuse_unused_rubric_file(args)
    if args.rubric == DEFAULT_RUBRIC:
        # Entries from a file or a store are validated already: skip the generic path.
        return grade_entries(entries, session_id=session_id)
    return grade_with_rubric(
        args.rubric,
        entries,
        session_id=session_id,
        config=rubric_config_from_args(args, cache_path=cache),
        context=replace(grade_context_from_args(args), conversation=conversation),
    )


def report(args: argparse.Namespace, result: GradeResult, *, store: Path | None = None) -> int:
    """Print a grade, save it unless --no-save, and turn --fail-under into the exit status.

    ``store``: the audit store the grade came from, whose grades table gets it too. A grade
    that cannot be saved is still printed before the error (exit status 2, saved nowhere).
    """
    from pytest_cleo_grade.grading._verdict import describe_threshold, passes, percent_below

    _refuse_a_mistyped_command(result, getattr(args, "command_names", ()))
    # A session the store never saw is a typo or a lost session, not an agent that did
    # nothing: its 0/100 would drag the history's run grade down and land in a baseline.
    refuse_empty(
        result,
        strict=not getattr(args, "allow_empty", False),
        hint=": no audit entries for it (nothing saved; --allow-empty grades it 0/100)",
    )
    unsaved: CleoGradeError | None = None
    if not args.no_save:
        try:
            save_grade(result, history=history_path(args), store=store)
        except CleoGradeError as exc:
            unsaved = exc
    _print_grade(args, result)
    if unsaved is not None:
        raise unsaved
    threshold: float | None = args.fail_under
    if not passes(result.percent, threshold):
        assert threshold is not None
        print(
            f"cleo-grade: FAIL: {percent_below(result.percent, threshold)} ({result.letter}) "
            f"is below {describe_threshold(threshold)}",
            file=sys.stderr,
        )
        return 1
    return 0


def warn_no_entries(session_id: str) -> None:
    """The warning of a session graded without entries (a mistyped id, say)."""
    print(
        "cleo-grade: warning: no audit entries found for session " + terminal_text(session_id),
        file=sys.stderr,
    )


def _print_grade(args: argparse.Namespace, result: GradeResult) -> None:
    from pytest_cleo_grade.reports._display import render_grade

    if result.entry_count == 0:
        warn_no_entries(result.session_id)
    if args.json:
        print_json(result.to_report_dict())
    else:
        print(render_grade(result))
