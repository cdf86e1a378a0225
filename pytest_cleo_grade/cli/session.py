"""``cleo-grade session start`` and ``session end``: a graded session for a shell-driven agent.

``eval "$(cleo-grade session start --grade)"`` sets CLEO's grade-mode variables in the shell,
every ``cleo-grade record`` (or any process inheriting them) records into the session, and
``cleo-grade session end`` grades it into the history, with ``--fail-under`` as the gate.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pytest_cleo_grade.cli._rubric_args import add_rubric_options
from pytest_cleo_grade.cli.common import (
    ENV_GRADE_ID,
    ENV_SESSION_ID,
    CommandError,
    add_db_option,
    add_history_option,
    db_path,
    parse_threshold,
    print_json,
    session_id_arg,
)

__all__ = ["register"]


def register(subparsers: Any) -> None:
    session = subparsers.add_parser(
        "session",
        help="start and end a graded session outside pytest (for shell agents)",
        description=(
            'Start a graded session (`eval "$(cleo-grade session start --grade)"` sets '
            "its variables in the shell) and end it, grading it into the history."
        ),
    )
    actions = session.add_subparsers(dest="session_command", metavar="ACTION")
    session.set_defaults(handler=_needs_action(session))

    start = actions.add_parser(
        "start",
        help="start a session and print its variables as shell exports",
        description=(
            "Start a session: create the audit store if needed and print the variables a "
            "process needs to record into it, as `export` lines for "
            '`eval "$(cleo-grade session start --grade)"` (bash, zsh, sh), or as JSON.'
        ),
    )
    start.add_argument(
        "--grade",
        action="store_true",
        help="grade mode: every call is recorded, queries too (CLEO records only mutations "
        "without it)",
    )
    start.add_argument("--scope", metavar="SCOPE", help="what the session works on (epic:T001)")
    start.add_argument("--name", metavar="NAME", help="a name for the session")
    start.add_argument("--json", action="store_true", help="print JSON instead of exports")
    add_db_option(start)
    start.set_defaults(handler=run_start)

    end = actions.add_parser(
        "end",
        help="grade a session into the history (the current one by default)",
        description=(
            f"Grade the session SESSION_ID (default: ${ENV_GRADE_ID}, else ${ENV_SESSION_ID}) "
            "from the audit store, append the grade to the history and print it as "
            "`cleo-grade grade` does; exit status 1 below --fail-under, 4 for a session "
            "nobody started or recorded into."
        ),
    )
    end.add_argument(
        "session", nargs="?", type=session_id_arg, metavar="SESSION_ID", help="the session"
    )
    end.add_argument("--json", action="store_true", help="print the GradeResult as JSON")
    end.add_argument("--no-save", action="store_true", help="do not append to the history")
    end.add_argument(
        "--fail-under",
        type=parse_threshold,
        metavar="GRADE",
        help="exit with status 1 when the grade is below GRADE (a letter or a percentage)",
    )
    add_db_option(end)
    add_history_option(end)
    add_rubric_options(
        end,
        default=None,
        default_text="default: the rubric of the session's latest stored grade, else cleo",
    )
    end.set_defaults(handler=run_end)


def _needs_action(parser: argparse.ArgumentParser) -> Any:
    def run(args: argparse.Namespace) -> int:
        raise CommandError(f"{parser.prog}: choose an action: start or end")

    return run


def _checked(value: str | None, option: str) -> str | None:
    from pytest_cleo_grade.cli._sessions import checked_text

    try:
        return checked_text(value, option)
    except ValueError as exc:
        raise CommandError(f"cleo-grade session start: {exc}") from None


def run_start(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.cli._sessions import start_session
    from pytest_cleo_grade.core._text import terminal_text

    scope = _checked(args.scope, "--scope")
    name = _checked(args.name, "--name")
    db = db_path(args)
    try:
        str(db).encode("utf-8")
    except UnicodeEncodeError:
        raise CommandError(f"cleo-grade session start: {db!r}: not UTF-8 text") from None
    started = start_session(db, grade=args.grade, scope=scope, name=name)
    if args.json:
        print_json(started.to_json())
    else:
        # shlex.quote's single quotes read the same in bash, zsh, dash and ksh.
        for variable, value in started.env.items():
            print(f"export {variable}={shlex.quote(value)}")
        if started.unset:
            print(f"unset {' '.join(started.unset)}")
    mode = "graded session" if started.grade else "session (not graded: mutations only)"
    print(
        terminal_text(f"cleo-grade: {mode} {started.session_id} started (store {started.db})"),
        file=sys.stderr,
    )
    return 0


def current_session(env: Mapping[str, str]) -> str | None:
    """The session the environment names: the graded one, else the plain one."""
    return env.get(ENV_GRADE_ID) or env.get(ENV_SESSION_ID) or None


def run_end(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.cli._grading import report
    from pytest_cleo_grade.cli._sessions import grade_known_session

    where = "cleo-grade session end"
    session_id: str | None = args.session
    if session_id is None:
        session_id = current_session(os.environ)
        if session_id is None:
            raise CommandError(
                f"{where}: no SESSION_ID given and ${ENV_GRADE_ID} is not set "
                '(start one with eval "$(cleo-grade session start --grade)")'
            )
        try:
            session_id_arg(session_id)
        except argparse.ArgumentTypeError as exc:
            raise CommandError(f"{where}: ${ENV_GRADE_ID}: {exc}") from None
    db = Path(db_path(args)).absolute()
    result = grade_known_session(args, db, session_id, where=where)
    # A session nobody started was refused above (status 4); one started and left without
    # a call is graded 0/100, as the specification grades an empty session.
    args.strict = False
    args.allow_empty = True
    return report(args, result, store=db)
