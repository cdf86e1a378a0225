"""``cleo-grade report --html PATH``: the HTML report of a grade history's latest run."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from pytest_cleo_grade.cli.common import (
    CommandError,
    add_db_option,
    add_history_option,
    db_path,
    history_path,
    parse_threshold,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._text import terminal_text

__all__ = ["register"]


def register(subparsers: Any) -> None:
    report = subparsers.add_parser(
        "report",
        help="write the HTML report of the history's latest grades",
        description="Write one self-contained HTML file: the gate verdict, each test's latest "
        "grade and its change since the grade before, a radar of its dimensions, its trend "
        "over the history, its flags and every point with the entries behind it.",
    )
    report.add_argument("--html", required=True, metavar="PATH", help="the HTML file to write")
    add_history_option(report)
    add_db_option(report)
    report.add_argument(
        "--gate", type=parse_threshold, metavar="GRADE", help="the run's minimum mean grade"
    )
    report.add_argument(
        "--fail-under",
        dest="fail_under",
        type=parse_threshold,
        metavar="GRADE",
        help="each test's threshold (decides a repeated test's flaky verdict)",
    )
    report.add_argument(
        "--baseline",
        metavar="FILE",
        help="compare with this baseline file (cleo-grade baseline save) instead of the "
        "grades before the latest",
    )
    report.set_defaults(handler=run_report)


def run_report(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.reports._html import inputs_of, latest_run, write_html_report
    from pytest_cleo_grade.store.history import read_grades

    where = "cleo-grade report"
    history = history_path(args)
    if not history.is_file():
        raise CommandError(f"{where}: {history}: no grade history there")
    baseline = None
    if args.baseline is not None:
        from pytest_cleo_grade.grading._baseline import read_baseline

        try:
            grades = read_baseline(Path(args.baseline))
        except OSError as exc:
            raise CommandError(f"{where}: {args.baseline}: {exc.strerror or exc}") from None
        baseline = {key: grades[key].totals for key in grades}
    with warnings_to_stderr():
        results = read_grades(history)
    if not results:
        raise CommandError(f"{where}: {history}: no grades in the history")
    run = latest_run(results, threshold=args.fail_under, gate=args.gate)
    target = Path(args.html)
    # The page may not replace what it is made from (the store is checked with ``db``).
    reads = inputs_of(
        history=history, baseline=None if args.baseline is None else Path(args.baseline)
    )
    write_html_report(
        target,
        run,
        results,
        db=db_path(args),
        baseline=baseline,
        source=str(history),
        reads=reads,
        # A store named on the command line that cannot be read is an error, as a bad
        # --history is; the default one may well be absent (a history copied from CI).
        db_required=args.db is not None,
    )
    count = len(run.tests)
    print(terminal_text(f"cleo-grade: wrote {target} ({count} grade{'' if count == 1 else 's'})"))
    if not db_path(args).is_file():
        print(
            terminal_text(
                f"cleo-grade: no audit store at {db_path(args)}: the report names entries by "
                "their position only (#N); --db PATH names the calls"
            )
        )
    return 0
