"""``cleo-grade report``: a grade history's latest run (shards combined) as the pytest run
shows it: the table, the run's grade and the gate verdict, with ``--gate`` as the exit status,
and as an HTML report, a step summary and JUnit XML."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult
    from pytest_cleo_grade.grading._verdict import RunGrade
    from pytest_cleo_grade.reports._html_page import GradeLine

__all__ = ["register"]


def register(subparsers: Any) -> None:
    report = subparsers.add_parser(
        "report",
        help="write the HTML report of the history's latest grades",
        description="Show the history's latest run (every line of its run id: shards "
        "combined are one run) as the pytest run shows it: the table, the run's grade and the "
        "gate verdict, with --gate as the exit status. --html writes one self-contained HTML "
        "file (the gate verdict, each test's grade and its change since the grade before, a "
        "radar of its dimensions, its trend over the history, its flags and every point with "
        "the entries behind it), --step-summary the Markdown summary, --junit JUnit XML.",
    )
    report.add_argument("--html", metavar="PATH", help="write the HTML report to PATH")
    report.add_argument(
        "--step-summary",
        dest="step_summary",
        nargs="?",
        const="",
        metavar="PATH",
        help="append the Markdown summary pytest writes to $GITHUB_STEP_SUMMARY (default) "
        "or to PATH",
    )
    report.add_argument(
        "--junit", metavar="PATH", help="write the run's tests as JUnit XML (cleo_* properties)"
    )
    report.add_argument(
        "--run-id",
        dest="run_id",
        metavar="ID",
        help="report this run (default: the run of the history's last line)",
    )
    add_history_option(report)
    add_db_option(report)
    report.add_argument(
        "--gate",
        type=parse_threshold,
        metavar="GRADE",
        help="the run's minimum mean grade: exit status 1 below it (or when a test could not "
        "be graded or failed its own threshold), 0 at or above it",
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
    from pytest_cleo_grade.grading._history_file import run_lines_file
    from pytest_cleo_grade.reports._display import summary_lines
    from pytest_cleo_grade.reports._html import latest_run

    where = "cleo-grade report"
    history = history_path(args)
    if not history.is_file():
        raise CommandError(f"{where}: {history}: no grade history there")
    step_summary = _step_summary_path(args.step_summary)
    baseline = None
    if args.baseline is not None:
        from pytest_cleo_grade.grading._baseline import read_baseline

        try:
            grades = read_baseline(Path(args.baseline))
        except OSError as exc:
            raise CommandError(f"{where}: {args.baseline}: {exc.strerror or exc}") from None
        baseline = {key: grades[key].totals for key in grades}
    with warnings_to_stderr():
        if args.html is None:
            # Only the run reported is kept: a history of years is read a line at a time.
            results, count = run_lines_file(history, _given_run_id(args.run_id))
        else:
            results, page, calibration, count = _page_lines(history, args.run_id)
    if not count:
        raise CommandError(f"{where}: {history}: no grades in the history")
    run_id = _run_id(args.run_id, results, args)
    run = latest_run(results, threshold=args.fail_under, gate=args.gate, run_id=run_id)
    if args.html is not None:
        _write_html(args, run, page, calibration, history, baseline)
    if args.junit is not None:
        _write_junit(Path(args.junit), run, history, db_path(args))
    if step_summary is not None:
        from pytest_cleo_grade.core._files import append_markdown
        from pytest_cleo_grade.reports._display import markdown_summary

        try:
            append_markdown(step_summary, markdown_summary(run))
        except OSError as exc:
            raise CommandError(f"{where}: {step_summary}: {exc.strerror or exc}") from None
    for line in summary_lines(run):
        print(line)
    if args.gate is None:
        return 0
    failed = [test for test in run.counted if test.status == "below" and test.mode == "fail"]
    if failed:
        count = len(failed)
        tests, its = ("test", "its") if count == 1 else ("tests", "their")
        print(f"cleo-grade: {count} {tests} below {its} threshold failed", file=sys.stderr)
    return 1 if run.gate_failed or failed else 0


def _page_lines(
    history: Path, run_id: str | None
) -> tuple[list[GradeResult], Sequence[GradeLine], Sequence[GradeResult] | None, int]:
    """(the run's lines, the page's history, the calibration's grades, the history's count):
    through the history's index only the run and its tests' rows, else every line."""
    from pytest_cleo_grade.reports._html_history import page_lines_file
    from pytest_cleo_grade.store.history import read_grades

    lines = page_lines_file(history, _given_run_id(run_id))
    if lines is not None:
        return lines.run, lines.history, lines.calibration, lines.count
    results = read_grades(history)  # the page's trend shows every run
    return results, results, None, len(results)


def _given_run_id(given: str | None) -> str | None:
    """``--run-id`` when valid (None: not given, or :func:`_run_id` says what is wrong with
    it once the history is known to hold grades, as before it was read a run at a time)."""
    from pytest_cleo_grade.grading._run_ids import parse_run_id

    try:
        return None if given is None else parse_run_id(given)
    except ValueError:
        return None


def _run_id(
    given: str | None, results: Sequence[GradeResult], args: argparse.Namespace
) -> str | None:
    if given is None:
        return None
    from pytest_cleo_grade.grading._run_ids import of_run, parse_run_id

    try:
        run_id = parse_run_id(given)
    except ValueError as exc:
        raise CommandError(f"cleo-grade report: --run-id: {exc}") from None
    if not of_run(results, run_id):
        from pytest_cleo_grade.cli._archived import archived_run_hint

        hint = archived_run_hint(args, run_id)
        raise CommandError(
            terminal_text(
                f"cleo-grade report: --run-id: {hint}"
                if hint
                else f"cleo-grade report: --run-id: no grades of run {run_id} in the history"
            )
        )
    return run_id


def _step_summary_path(given: str | None) -> Path | None:
    if given is None:
        return None
    if given:
        return Path(given)
    variable = os.environ.get("GITHUB_STEP_SUMMARY", "")
    if not variable:
        raise CommandError(
            "cleo-grade report: --step-summary: GITHUB_STEP_SUMMARY is not set (name a file: "
            "--step-summary PATH)"
        )
    return Path(variable)


def _write_html(
    args: argparse.Namespace,
    run: RunGrade,
    results: Sequence[GradeLine],
    calibration: Sequence[GradeResult] | None,
    history: Path,
    baseline: dict[str, tuple[float, ...]] | None,
) -> None:
    from pytest_cleo_grade.core._files import inputs_of
    from pytest_cleo_grade.reports._html import write_html_report

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
        calibration=calibration,
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


def _write_junit(target: Path, run: RunGrade, history: Path, db: Path) -> None:
    """The run's tests as pytest's JUnit XML has them: one ``<testcase>`` per test with the
    same ``cleo_*`` properties, a ``<failure>`` where the run failed the test for its grade."""
    from xml.etree import ElementTree as ET

    from pytest_cleo_grade.cli.common import refuse_replacing, write_replacing
    from pytest_cleo_grade.reports._display import failure_message, junit_properties

    refuse_replacing(target, history, db, where="cleo-grade report")
    suite = ET.Element("testsuite", name="cleo-grade", tests=str(len(run.tests)))
    failures = 0
    for test in run.tests:
        module, _, name = test.nodeid.rpartition("::")
        case = ET.SubElement(suite, "testcase", classname=_xml(module), name=_xml(name or module))
        props = ET.SubElement(case, "properties")
        for key, value in junit_properties(test.result, test.status):
            ET.SubElement(props, "property", name=key, value=_xml(str(value)))
        message = None
        if test.ungradable:
            message = test.reason or "could not be graded"
        elif test.status == "below" and test.mode == "fail" and test.excluded is None:
            message = failure_message(test)
        if message is not None:
            failures += 1
            failure = ET.SubElement(case, "failure", message=_xml(message.split("\n", 1)[0]))
            failure.text = _xml(message)
    suite.set("failures", str(failures))
    data = ET.tostring(suite, encoding="utf-8", xml_declaration=True)
    write_replacing(target, data, where="cleo-grade report")


def _xml(text: str) -> str:
    from pytest_cleo_grade.cli._junit import xml_text

    return xml_text(text)
