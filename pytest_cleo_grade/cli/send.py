"""``cleo-grade export langfuse``: the grade history as Langfuse scores (the langfuse extra)."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.cli._latest import latest_by_session
from pytest_cleo_grade.cli.common import (
    CommandError,
    add_history_option,
    existing_history,
    session_id_arg,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult

__all__ = ["register"]

KEYS_HINT = (
    "set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY (and LANGFUSE_HOST for a self-hosted Langfuse)"
)


def register(subparsers: Any) -> None:
    export = subparsers.add_parser(
        "export",
        help="send the grade history to Langfuse as scores",
        description="Create the rubric's score configs in Langfuse (once), then send one score "
        "per dimension and the overall score of each graded session (its latest grade). Keys "
        "come from LANGFUSE_PUBLIC_KEY, LANGFUSE_SECRET_KEY and LANGFUSE_HOST.",
    )
    export.add_argument("target", choices=("langfuse",), help="where to send the grades")
    export.add_argument(
        "--session-id", dest="session_id", type=session_id_arg, metavar="ID", help="only this one"
    )
    export.add_argument(
        "--all", action="store_true", help="every grade, not only each session's latest"
    )
    export.add_argument(
        "--deadline",
        type=positive_seconds,
        default=None,
        metavar="SECONDS",
        help="stop the whole export after SECONDS (default: 60)",
    )
    add_history_option(export)
    export.set_defaults(handler=run_export)


def positive_seconds(text: str) -> float:
    """--deadline: a finite number of seconds above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def run_export(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.reports.langfuse import keys_from

    keys = keys_from(os.environ)
    if keys is None:
        raise CommandError(f"cleo-grade export langfuse: {KEYS_HINT}")
    history = existing_history(args, where="cleo-grade export langfuse")
    with warnings_to_stderr():
        grades = _grades(history, args.session_id, latest=not args.all)
    if not grades:
        what = "no grades" if args.session_id is None else f"no grades of {args.session_id!r}"
        print(terminal_text(f"langfuse: {what} in {history}: nothing sent"))
        return 0
    from pytest_cleo_grade.reports.langfuse import DEADLINE, export_grades, require_langfuse

    try:
        require_langfuse()
    except ImportError as exc:
        raise CommandError(f"cleo-grade export langfuse: {exc}") from None

    public, secret, base = keys
    deadline = DEADLINE if args.deadline is None else args.deadline
    # The rejected scores' warnings: one stderr line each, after the summary line.
    with warnings_to_stderr():
        try:
            summary = export_grades(
                grades, public_key=public, secret_key=secret, base_url=base, deadline=deadline
            )
        except Exception as exc:  # the SDK's HTTP and API errors: one line, never a traceback
            from pytest_cleo_grade.reports.langfuse import failure_line

            raise CommandError(
                f"cleo-grade: {failure_line(exc, base, secret, public)}", status=1
            ) from None
        sessions = len({grade.session_id for grade in grades})
        print(terminal_text(summary.line(sessions, base)))
    return 1 if summary.rejected else 0


def _grades(history: Path, session_id: str | None, *, latest: bool) -> list[GradeResult]:
    """The history's grades, one session's, the latest of each session when ``latest``:
    through the history's index only those lines are read."""
    from pytest_cleo_grade.cli._latest import latest_by_session_file
    from pytest_cleo_grade.store._history_index import grades_where
    from pytest_cleo_grade.store.history import read_grades

    if session_id is None:
        return latest_by_session_file(history) if latest else read_grades(history)
    found = grades_where(history, "session_id = ?", (session_id,))
    grades = read_grades(history, session_id=session_id) if found is None else found
    return latest_by_session(grades) if latest else grades
