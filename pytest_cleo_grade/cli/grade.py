"""``cleo-grade grade`` and ``cleo-grade list``: grade a session, show the history."""

from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.cli._grading import (
    grade_entries_file,
    grade_from_store,
    grade_with_args,
    refuse_a_database,
    refuse_unused_rubric_file,
    report,
    session_id_of,
    session_source,
)
from pytest_cleo_grade.cli._rubric_args import add_rubric_options
from pytest_cleo_grade.cli.common import (
    CommandError,
    add_db_option,
    add_history_option,
    history_path,
    parse_threshold,
    print_json_list,
    session_id_arg,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._defaults import DEFAULT_RUBRIC
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult

# What grading a session takes (its sources, the rubric, saving, printing) is in _grading,
# which the other commands that grade share; the grading stack is imported where it grades.

__all__ = ["register"]


def register(subparsers: Any) -> None:
    grade = subparsers.add_parser(
        "grade",
        help="grade one session",
        description="Grade one session's audit entries and append the grade to the history.",
    )
    grade.add_argument(
        "session",
        nargs="?",
        type=session_id_arg,
        metavar="SESSION_ID",
        help="the session to grade",
    )
    grade.add_argument("--entries", metavar="FILE", help="read entries from a JSON or JSONL file")
    grade.add_argument(
        "--session-id",
        dest="session_id",
        type=session_id_arg,
        metavar="ID",
        help="session to grade (as SESSION_ID)",
    )
    grade.add_argument("--json", action="store_true", help="print the GradeResult as JSON")
    grade.add_argument(
        "--list",
        action="store_true",
        help="list the history instead (as `cleo-grade grade` with no session does)",
    )
    grade.add_argument("--no-save", action="store_true", help="do not append to the history")
    grade.add_argument(
        "--allow-empty",
        dest="allow_empty",
        action="store_true",
        help="grade a session without entries 0/100, as the CLEO Grade Specification does "
        "(without it: exit status 4, nothing saved)",
    )
    grade.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 4 (saving nothing) when the session has no entries "
        "(the default; kept for scripts that pass it)",
    )
    grade.add_argument(
        "--fail-under",
        type=parse_threshold,
        metavar="GRADE",
        help="exit with status 1 when the grade is below GRADE (a letter or a percentage)",
    )
    grade.add_argument(
        "--cleo-db",
        dest="cleo_db",
        metavar="PATH",
        help="grade from a CLEO database (.cleo/cleo.db, .cleo/tasks.db or a project directory), "
        "opened read-only",
    )
    add_db_option(grade)
    add_history_option(grade)
    add_rubric_options(grade)
    grade.set_defaults(handler=run_grade)

    listing = subparsers.add_parser(
        "list", help="list graded sessions", description="List the grade history."
    )
    listing.add_argument(
        "--session-id",
        dest="session_id",
        type=session_id_arg,
        metavar="ID",
        help="only this session",
    )
    which = listing.add_mutually_exclusive_group()
    which.add_argument(
        "--run-id", dest="run_id", metavar="ID", help="only this run's grades (its runId)"
    )
    which.add_argument(
        "--latest-run",
        action="store_true",
        help="only the latest run's grades (the run cleo-grade report shows)",
    )
    listing.add_argument("--json", action="store_true", help="print GradeResults as JSON")
    add_history_option(listing)
    listing.add_argument(
        "--db", metavar="PATH", help="list the grades table of this audit store instead"
    )
    listing.set_defaults(handler=run_list)


def _grading_options(args: argparse.Namespace) -> list[str]:
    """The options given that only grading takes: with them and no session, listing would
    drop them silently (a CI gate ``--fail-under B`` on an empty ``$ID`` passing)."""
    given = [
        option
        for option, value in (
            ("--fail-under", args.fail_under is not None),
            ("--strict", args.strict),
            ("--no-save", args.no_save),
            ("--rubric", args.rubric != DEFAULT_RUBRIC),
            ("--rubric-file", bool(args.rubric_file)),
            ("--entries", bool(args.entries)),
            ("--cleo-db", bool(args.cleo_db)),
        )
        if value
    ]
    return given


def run_grade(args: argparse.Namespace) -> int:
    grading = _grading_options(args)
    if args.list and grading:
        raise CommandError(f"cleo-grade grade: --list cannot be combined with {grading[0]}")
    if args.list or (session_id_of(args) is None and not grading):
        # CLEO's `cleo grade` and `cleo grade --list` list: a session named filters.
        args.session_id = session_id_of(args)
        return run_list(args)
    refuse_unused_rubric_file(args)
    if args.entries and args.rubric == DEFAULT_RUBRIC and not (args.cleo_db or args.db):
        # CLEO's rubric needs no entry objects: stream the file (see grade_entries_file).
        refuse_a_database(args.entries, "cleo-grade grade")
        return report(args, grade_entries_file(args.entries, session_id_of(args)))
    session_id, entries, store = session_source(args)
    if entries is not None:
        return report(args, grade_with_args(args, entries, session_id, store))
    assert store is not None
    if args.rubric == DEFAULT_RUBRIC:
        return report(args, grade_from_store(store, session_id), store=store)
    from pytest_cleo_grade.store import AuditStore

    with AuditStore(store, read_only=True) as audit:
        entries = audit.session_entries(session_id)
        conversation = audit.session_conversation(session_id)
    result = grade_with_args(args, entries, session_id, store, conversation=conversation)
    return report(args, result, store=store)


def run_list(args: argparse.Namespace) -> int:
    path = history_path(args)
    run_id, one_run = _run_option(args)
    from_db = bool(args.db and not args.history)
    with warnings_to_stderr():
        # The index's rows hold the listing's cells: no line parsed, no pydantic loaded.
        rows = (
            None if args.json or from_db else _indexed_rows(path, args.session_id, run_id, one_run)
        )
        if rows is None:
            grades = _list_grades(args, path, run_id, one_run)
            if args.json:
                print_json_list(g.to_report_dict() for g in grades)
                return 0
            rows = [_list_row(g) for g in grades]
        if from_db:
            path = Path(args.db)
    if not rows:
        of = "" if args.session_id is None else f" of session {args.session_id}"
        if run_id is not None:
            of += f" of run {run_id}"
        print(terminal_text(f"No grades{of} in {path}"))
        return 0
    header = ("SESSION", "SCORE", "PERCENT", "GRADE", "TIMESTAMP", "FLAGS")
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    for row in (header, *rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return 0


def _run_option(args: argparse.Namespace) -> tuple[str | None, bool]:
    """(--run-id, whether one run is listed): ``--latest-run`` is the run id None."""
    from pytest_cleo_grade.grading._run_ids import parse_run_id

    given: str | None = getattr(args, "run_id", None)
    latest: bool = getattr(args, "latest_run", False)
    if given is None and not latest:
        return None, False
    if args.db and not args.history:
        raise CommandError(
            "cleo-grade list: --run-id and --latest-run read the grade history, not --db's "
            "grades table (name --history, or leave --db out)"
        )
    if given is None:
        return None, True
    try:
        return parse_run_id(given), True
    except ValueError as exc:
        raise CommandError(f"cleo-grade list: --run-id: {exc}") from None


def _run_grades(path: Path, run_id: str | None, session_id: str | None) -> list[GradeResult]:
    """The lines of one run (``run_id``, else the latest), read through the history's index
    when it has one: a history of years costs the run's lines, not the file."""
    from pytest_cleo_grade.grading._history_file import run_lines_file

    results, _count = run_lines_file(path, run_id)
    return [r for r in results if session_id is None or r.session_id == session_id]


def _list_grades(
    args: argparse.Namespace, path: Path, run_id: str | None, one_run: bool
) -> Iterable[GradeResult]:
    if one_run:
        return _run_grades(path, run_id, args.session_id)
    if args.db and not args.history:
        from pytest_cleo_grade.store import AuditStore

        with AuditStore(Path(args.db), read_only=True) as store:
            return list(store.grades(args.session_id))
    from pytest_cleo_grade.store.history import iter_grades

    # A line at a time: a history of years keeps only the rows' cells in memory.
    return iter_grades(path, session_id=args.session_id)


def _indexed_rows(
    path: Path, session_id: str | None, run_id: str | None, one_run: bool
) -> list[tuple[str, str, str, str, str, str]] | None:
    """The rows from the history's index (no line parsed), or None: read the history."""
    from pytest_cleo_grade.store._history_index import open_index

    index = open_index(path)
    if index is None:
        return None
    with index:
        index.warn_skipped()
        where, params = ["problem IS NULL"], []
        if one_run:
            chosen = run_id
            if chosen is None:  # the latest run, as cleo-grade report chooses it
                last = index.query(
                    "SELECT run_id FROM lines WHERE problem IS NULL AND evaluator != 'manual' "
                    "ORDER BY number DESC LIMIT 1"
                ).fetchone()
                chosen = None if last is None else last[0]
            if chosen is not None:
                where.append("run_id = ?")
                params.append(chosen)
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        cursor = index.query(
            "SELECT session_id, total, max, percent, letter, timestamp, flags FROM lines "
            f"WHERE {' AND '.join(where)} ORDER BY number",
            params,
        )
        return [
            (terminal_text(s), f"{t:g}/{m:g}", f"{p}%", letter, when, str(flags))
            for s, t, m, p, letter, when, flags in cursor
        ]


def _list_row(g: GradeResult) -> tuple[str, str, str, str, str, str]:
    from pytest_cleo_grade.core.models import format_timestamp

    return (
        terminal_text(g.session_id),
        f"{g.total_score:g}/{g.max_score:g}",
        f"{g.display_percent}%",
        g.letter,
        format_timestamp(g.timestamp),
        str(len(g.flags)),
    )
