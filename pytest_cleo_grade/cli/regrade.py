"""``cleo-grade regrade``: a run's stored sessions graded again, under the current rubric,
into a new run (after a rule file's version bump, to compare like with like)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.cli._rubric_args import add_rubric_options
from pytest_cleo_grade.cli.common import (
    CommandError,
    add_db_option,
    add_history_option,
    db_path,
    history_path,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from pathlib import Path

    from pytest_cleo_grade.core.models import GradeResult

__all__ = ["register"]

WHERE = "cleo-grade regrade"

#: What a regraded line keeps of the line it regrades: which test it is and how its run
#: decided it; the grade itself, the rubric and the status are the new grading's.
_KEPT = ("testId", "position", "cleoThreshold", "cleoMode", "run", "runs", "excluded")


def register(subparsers: Any) -> None:
    regrade = subparsers.add_parser(
        "regrade",
        help="grade a run's stored sessions again under the current rubric, into a new run",
        description="Grade every session of a run (default: the history's latest) again from "
        "the audit store, with the rubric the options name, and append the grades to the "
        "history as a new run (its id: --new-run-id, $CLEO_GRADE_RUN_ID, else a fresh one).",
    )
    regrade.add_argument(
        "--run-id", dest="run_id", metavar="ID", help="the run to regrade (default: the latest)"
    )
    regrade.add_argument(
        "--new-run-id", dest="new_run_id", metavar="ID", help="the run id of the new grades"
    )
    add_db_option(regrade)
    add_history_option(regrade)
    add_rubric_options(regrade)
    regrade.set_defaults(handler=run_regrade)


def run_regrade(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.cli._grading import grade_with_args, save_grades
    from pytest_cleo_grade.grading._run_ids import (
        RUN_ID_KEY,
        STATUS_KEY,
        of_run,
        parse_run_id,
        resolve_run_id,
    )
    from pytest_cleo_grade.grading._verdict import passes
    from pytest_cleo_grade.store import AuditStore

    history = history_path(args)
    store = db_path(args)
    if not history.is_file():
        raise CommandError(f"{WHERE}: {history}: no grade history there")
    if not store.is_file():
        raise CommandError(f"{WHERE}: no audit store at {store} (pass --db PATH)")
    try:
        given = parse_run_id(args.run_id) if args.run_id else None
        new_run = resolve_run_id(args.new_run_id, os.environ)
    except ValueError as exc:
        raise CommandError(f"{WHERE}: {exc}") from None
    with warnings_to_stderr():
        run_id, results = _run_lines(history, given)
    if run_id is None:
        raise CommandError(f"{WHERE}: {history}: its last line carries no run id (pass --run-id)")
    lines = [line for line in of_run(results, run_id) if line.entry_count]
    if not lines:
        from pytest_cleo_grade.cli._archived import archived_run_hint

        hint = archived_run_hint(args, run_id)
        raise CommandError(
            terminal_text(f"{WHERE}: {hint or f'no graded sessions of run {run_id}'}")
        )
    regraded: list[GradeResult] = []
    with AuditStore(store, read_only=True) as audit:
        for line in lines:
            entries = audit.session_entries(line.session_id)
            if not entries:
                raise CommandError(
                    terminal_text(
                        f"{WHERE}: session {line.session_id} of run {run_id} has no entries in "
                        f"{store}: nothing regraded"
                    )
                )
            result = grade_with_args(args, entries, line.session_id, store)
            extra = line.model_extra or {}
            update: dict[str, object] = {k: extra[k] for k in _KEPT if k in extra}
            threshold = extra.get("cleoThreshold")
            below = isinstance(threshold, int | float) and not passes(result.percent, threshold)
            update.update(
                {
                    RUN_ID_KEY: new_run,
                    "regradedFrom": run_id,
                    STATUS_KEY: "below" if below else "passed",
                }
            )
            regraded.append(result.model_copy(update=update))
    save_grades(regraded, history=history, store=store)
    count = len(regraded)
    print(
        terminal_text(
            f"cleo-grade: regraded {count} session{'' if count == 1 else 's'} of run {run_id} "
            f"with rubric {args.rubric} into run {new_run}"
        )
    )
    return 0


def _run_lines(history: Path, given: str | None) -> tuple[str | None, list[GradeResult]]:
    """(the run re-graded: ``given``, else the last line's run id; the lines to pick it
    from): through the history's index only that run's lines, else every line."""
    from pytest_cleo_grade.grading._run_ids import latest_run_id
    from pytest_cleo_grade.store._history_index import StaleIndex, open_index
    from pytest_cleo_grade.store.history import read_grades

    index = open_index(history)
    if index is not None:
        with index:
            run_id = given
            if run_id is None:
                last = index.query(
                    "SELECT run_id FROM lines WHERE problem IS NULL ORDER BY number DESC LIMIT 1"
                ).fetchone()
                run_id = None if last is None else last[0]
            try:
                found = (
                    []
                    if run_id is None
                    else [grade for _, grade in index.grades(index.lines("run_id = ?", (run_id,)))]
                )
            except StaleIndex:
                index.forget()
            else:
                index.warn_skipped()
                return run_id, found
    results = read_grades(history)
    return (given if given is not None else latest_run_id(results)), results
