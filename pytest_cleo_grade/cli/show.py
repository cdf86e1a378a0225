"""``cleo-grade show``: a session's calls, each with the rules it triggered, and every point.

The way to answer "why this grade": the session is graded again (nothing is saved) with the
rubric the options name, and each call is printed beside the ``points`` items naming it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.cli._grading import (
    grade_with_args,
    refuse_empty,
    session_source,
    warn_no_entries,
)
from pytest_cleo_grade.cli._rubric_args import add_rubric_options
from pytest_cleo_grade.cli.common import add_db_option, print_json, session_id_arg
from pytest_cleo_grade.core._defaults import DEFAULT_RUBRIC
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult

__all__ = ["register"]


def register(subparsers: Any) -> None:
    show = subparsers.add_parser(
        "show",
        help="show a session's calls and the points each one earned or lost",
        description="Grade a session again (saving nothing) and print its calls, one per line, "
        "each with the rules it triggered and their points, then every dimension's points.",
    )
    show.add_argument(
        "session", nargs="?", type=session_id_arg, metavar="SESSION_ID", help="the session"
    )
    show.add_argument("--entries", metavar="FILE", help="read entries from a JSON or JSONL file")
    show.add_argument(
        "--session-id", dest="session_id", type=session_id_arg, metavar="ID", help="as SESSION_ID"
    )
    show.add_argument(
        "--cleo-db", dest="cleo_db", metavar="PATH", help="read a CLEO database, read-only"
    )
    show.add_argument("--json", action="store_true", help="print the grade and calls as JSON")
    show.add_argument(
        "--strict",
        action="store_true",
        help="exit with status 4 when the session has no entries (a mistyped id, say)",
    )
    add_db_option(show)
    add_rubric_options(
        show,
        default=None,
        default_text="default: the session's latest stored grade, as it was graded, else cleo",
    )
    show.set_defaults(handler=run_show)


def _stored_grade(args: argparse.Namespace, store: Path, session_id: str) -> GradeResult | None:
    """The grade a test failure pointed here for: the session's latest stored one, with its
    own rubric and expectations (a trajectory marker's are in no file to grade again with).
    None when a rubric was asked for, or no stored grade explains its points."""
    if args.rubric is not None or args.rubric_file:
        return None
    from pytest_cleo_grade.store import AuditStore

    with AuditStore(store, read_only=True) as audit:
        grades = audit.grades(session_id)
    latest = grades[-1] if grades else None
    return latest if latest is not None and "points" in (latest.model_extra or {}) else None


def run_show(args: argparse.Namespace) -> int:
    # The grading stack is imported once a session is shown, not for --help.
    from pytest_cleo_grade.core.models import order_entries
    from pytest_cleo_grade.reports._points import render_session, session_json
    from pytest_cleo_grade.store import AuditStore

    session_id, entries, store = session_source(args, "cleo-grade show")
    conversation = None
    if entries is None:
        assert store is not None
        with AuditStore(store, read_only=True) as audit:
            entries = audit.session_entries(session_id)
            conversation = audit.session_conversation(session_id)
        stored = _stored_grade(args, store, session_id)
    else:
        stored = None
    # The order every rubric grades in, so the points' entry indices name these lines.
    ordered = order_entries([e for e in entries if e.session_id in (None, session_id)])
    if stored is not None and stored.entry_count != len(ordered):
        # Calls recorded or imported after the grade: its points' positions would name
        # other calls than the ones that earned them.
        print(
            f"cleo-grade: warning: the stored grade of session {terminal_text(session_id)} "
            f"covers {stored.entry_count} entries and the session now holds {len(ordered)}: "
            "graded again",
            file=sys.stderr,
        )
        stored = None
    if stored is not None:
        result = stored
    else:
        args.rubric = args.rubric or DEFAULT_RUBRIC
        result = grade_with_args(args, ordered, session_id, store, conversation=conversation)
    if not ordered:
        # A mistyped id grades as an empty session: an F that explains nothing, said so.
        refuse_empty(result, strict=args.strict, where="cleo-grade show")
        warn_no_entries(session_id)
    if args.json:
        print_json(session_json(result, ordered, conversation))
    else:
        print(render_session(result, ordered, conversation))
    return 0
