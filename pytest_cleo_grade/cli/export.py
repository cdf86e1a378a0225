"""``cleo-grade junit`` (history to JUnit XML) and ``cleo-grade query`` (the MCP read gateway)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pytest_cleo_grade.cli._grading import (
    grade_from_store,
    refuse_empty,
    save_grade,
    warn_no_entries,
)
from pytest_cleo_grade.cli._junit import xml_text
from pytest_cleo_grade.cli._latest import latest_by_session
from pytest_cleo_grade.cli.common import (
    CommandError,
    add_db_option,
    add_history_option,
    db_path,
    existing_history,
    history_path,
    parse_threshold,
    print_json,
    print_json_list,
    refuse_replacing,
    warnings_to_stderr,
    write_replacing,
)
from pytest_cleo_grade.core._files import (
    parse_json_strict,
)
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from collections.abc import Iterator

    from junit_xml import TestCase

    from pytest_cleo_grade.cli._junit import Counts
    from pytest_cleo_grade.core.models import GradeResult
    from pytest_cleo_grade.store._history_index import HistoryIndex

# The history's models, the display and junit-xml are imported where a command reads or
# writes grades: `--help` starts without them.

__all__ = ["register"]


def register(subparsers: Any) -> None:
    junit = subparsers.add_parser(
        "junit",
        help="write the grade history as JUnit XML",
        description=(
            "Write one <testcase> per graded session (its latest grade) to OUT.xml, with a "
            "<failure> for each session below --fail-under, so any CI can show the grades. "
            "A failing session's case holds its whole report; a passing one's its score "
            "line (--reports: every session's report; without --fail-under no session fails)."
        ),
    )
    junit.add_argument("output", metavar="OUT.xml", help="where to write the XML ('-' for stdout)")
    junit.add_argument(
        "--fail-under",
        type=parse_threshold,
        metavar="GRADE",
        help="sessions below GRADE (a letter or a percentage) become failures; exit status 1",
    )
    junit.add_argument("--suite-name", default="cleo-grade", help="the <testsuite> name")
    junit.add_argument(
        "--reports",
        action="store_true",
        help=(
            "every session's whole report in its <system-out>, not only a failing one's "
            "(without --fail-under none fails: the cases hold their score lines alone)"
        ),
    )
    add_history_option(junit)
    junit.set_defaults(handler=run_junit)

    query = subparsers.add_parser(
        "query",
        help="the MCP-style read gateway: admin grade / admin grade.list",
        description=(
            "CLEO's cleo_query gateway for grades: 'query admin grade {\"sessionId\": ID}' "
            "grades a session from the audit store (and appends it to the history, as CLEO "
            "does); 'query admin grade.list' prints the history. Output is JSON."
        ),
    )
    query.add_argument("domain", metavar="DOMAIN")
    query.add_argument("operation", metavar="OPERATION")
    query.add_argument("params", nargs="?", default="{}", metavar="PARAMS", help="a JSON object")
    query.add_argument("--no-save", action="store_true", help="do not append to the history")
    query.add_argument(
        "--strict", action="store_true", help="exit with status 4 when the session has no entries"
    )
    add_db_option(query)
    add_history_option(query)
    query.set_defaults(handler=run_query)


def _agent_text(text: str) -> str:
    """Agent text in a test's name or failure: also what a terminal or a CI's test list acts
    on (C1 controls such as CSI, bidirectional overrides) escaped, as in every other output
    (``junit -`` writes to the terminal)."""
    return terminal_text(xml_text(text))


def _summary(
    score: str, percent: float, shown: int, letter: str, flags: int, threshold: float | None
) -> str:
    """``85/100 (85%, grade B), 2 flag(s)``: a case's score line (its failure's message)."""
    from pytest_cleo_grade.grading._verdict import passes, percent_below

    text = (
        f"{shown}%"
        if threshold is None or passes(percent, threshold)
        else percent_below(percent, threshold)
    )
    return f"{score} ({text}, grade {letter}), {flags} flag(s)"


def _case(session_id: str, stdout: str, timestamp: str) -> TestCase:
    """A session's ``<testcase>``, its agent-made id escaped as every output escapes it."""
    from junit_xml import TestCase

    return TestCase(
        name=_agent_text(session_id), classname="cleo_grade", stdout=stdout, timestamp=timestamp
    )


def _testcase(grade: GradeResult, threshold: float | None, *, report: bool = True) -> TestCase:
    """The session's case from its parsed grade: its whole report in ``<system-out>`` when
    ``report`` or when it fails, else its score line."""
    from pytest_cleo_grade.core.models import format_timestamp
    from pytest_cleo_grade.grading._verdict import describe_threshold, passes
    from pytest_cleo_grade.reports._display import render_grade, score_text

    summary = _summary(
        score_text(grade),
        grade.percent,
        grade.display_percent,
        grade.letter,
        len(grade.flags),
        threshold,
    )
    failing = not passes(grade.percent, threshold)
    case = _case(
        grade.session_id,
        xml_text(render_grade(grade)) if report or failing else summary,
        format_timestamp(grade.timestamp),
    )
    if failing:
        assert threshold is not None
        case.add_failure_info(
            message=f"{summary}: below {describe_threshold(threshold)}",
            output="\n".join(map(_agent_text, grade.flags)),
            failure_type="cleo_grade",
        )
    return case


def _indexed_cases(
    index: HistoryIndex, threshold: float | None, reports: bool
) -> Iterator[TestCase]:
    """Each session's latest case through the history's index: a passing one (without
    ``reports``) from its row, its line's bytes checked unchanged but not parsed (as a
    baseline reads its scores); any other from its line, parsed and checked against its row.
    StaleIndex when a line is not the one indexed."""
    from pytest_cleo_grade.cli._latest import latest_rows_indexed
    from pytest_cleo_grade.grading._verdict import passes
    from pytest_cleo_grade.reports._display import scores_text

    for row in latest_rows_indexed(index):
        if reports or not passes(row.percent, threshold):
            ((_, grade),) = index.grades([row.line])
            # The parsed line decides (it may no longer be the grade its row says).
            yield _testcase(grade, threshold, report=reports)
            continue
        index.check_unchanged(row.line, row.crc)  # the history wins over its index
        score = scores_text(row.total, row.max)
        summary = _summary(score, row.percent, row.shown, row.letter, row.flags, threshold)
        yield _case(row.line.session_id, summary, row.timestamp)


def _spooled_cases(
    history: Path, threshold: float | None, reports: bool
) -> tuple[IO[bytes], Counts]:
    """Every session's latest grade as a JUnit case, spooled: through the history's index
    one case at a time, else from the whole history as before."""
    from pytest_cleo_grade.cli._junit import spool_cases
    from pytest_cleo_grade.store._history_index import through_index
    from pytest_cleo_grade.store.history import read_grades

    spooled = through_index(
        history, lambda index: spool_cases(_indexed_cases(index, threshold, reports))
    )
    if spooled is not None:
        return spooled
    grades = latest_by_session(read_grades(history))
    return spool_cases(_testcase(grade, threshold, report=reports) for grade in grades)


def run_junit(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.cli._junit import document_chunks, write_text

    history = history_path(args)
    if args.output != "-":
        refuse_replacing(Path(args.output), history, db_path(args), where="cleo-grade junit")
    existing_history(args, where="cleo-grade junit")
    threshold: float | None = args.fail_under
    with warnings_to_stderr():
        spool, counts = _spooled_cases(history, threshold, args.reports)
    if threshold is not None and not counts.tests:
        _say_not_applied(threshold, history)
    with spool:  # closed even when the target refuses the document before it is read
        chunks = document_chunks(args.suite_name, spool, counts)
        if args.output == "-":
            write_text(sys.stdout.write, chunks)
        else:
            write_replacing(Path(args.output), chunks, where="cleo-grade junit")
    if args.output != "-":
        target = Path(args.output)
        print(
            terminal_text(
                f"{target}: {counts.tests} session(s), {counts.failures} below the threshold"
            )
        )
    return 1 if counts.failures else 0


def _say_not_applied(threshold: float, history: Path) -> None:
    """A gate with nothing to gate says so: exit 0, as the run gate with no graded tests
    (docs/pytest.md), but never a silent pass of an empty JUnit file a CI shows as green."""
    from pytest_cleo_grade.grading._verdict import describe_threshold

    print(
        terminal_text(
            f"cleo-grade: warning: {history}: no grades: --fail-under "
            f"{describe_threshold(threshold)} not applied"
        ),
        file=sys.stderr,
    )


def run_query(args: argparse.Namespace) -> int:
    where = "cleo-grade query"
    try:
        params = parse_json_strict(args.params)
    except ValueError as exc:
        raise CommandError(f"{where}: PARAMS is not valid JSON: {exc}") from exc
    if not isinstance(params, dict):
        raise CommandError(f"{where}: PARAMS must be a JSON object")
    call = f"{args.domain}.{args.operation}"
    if call == "admin.grade.list":
        from pytest_cleo_grade.store.history import iter_grades

        with warnings_to_stderr():
            print_json_list(g.to_json_dict() for g in iter_grades(history_path(args)))
        return 0
    if call != "admin.grade":
        raise CommandError(
            f"{where}: unsupported operation {call!r} (supported: admin grade, admin grade.list)"
        )
    session_id = params.get("sessionId")
    if not isinstance(session_id, str) or not session_id:
        raise CommandError(f'{where}: admin grade needs params {{"sessionId": "<id>"}}')
    path = db_path(args)
    result = grade_from_store(path, session_id, where=where)
    refuse_empty(result, strict=args.strict, where=where)
    if not args.no_save:
        save_grade(result, history=history_path(args), store=path)
    if result.entry_count == 0:
        warn_no_entries(result.session_id)  # as `grade` says it (a mistyped id, say)
    print_json(result.to_json_dict())
    return 0
