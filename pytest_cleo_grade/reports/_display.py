"""How grades read: the failure message, JUnit properties, the terminal and Markdown summaries,
and the CLI's report of one grade. Shared by the plugin, the CLI and the reports.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from pydantic import ValidationError

from pytest_cleo_grade.core._text import (
    markdown_cell,
    markdown_code_cell,
    needs_escape_but_newline,
    terminal_text,
)
from pytest_cleo_grade.core.models import POINT_ENTRY_LIMIT, GradeResult, Point, format_timestamp
from pytest_cleo_grade.grading._run_ids import REASON_KEY, status_of
from pytest_cleo_grade.grading._runs import QUARANTINED
from pytest_cleo_grade.grading._verdict import (
    GradedTest,
    RunGrade,
    describe_threshold,
    percent_below,
)
from pytest_cleo_grade.judges.protocol import judge_usage_totals

__all__ = [
    "calls_counted",
    "clipped",
    "failure_message",
    "grade_headline",
    "grade_section",
    "item_line",
    "judge_line",
    "junit_properties",
    "lost_point_lines",
    "markdown_summary",
    "number_text",
    "points_of",
    "reason_line",
    "render_grade",
    "score_text",
    "signed_text",
    "summary_line",
    "summary_lines",
    "trajectory_diff_lines",
]


def number_text(value: float) -> str:
    """A score as written: ``85`` for integers, ``67.17`` (``:g``) for fractional scores."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def score_text(result: GradeResult) -> str:
    """``85/100``."""
    return scores_text(result.total_score, result.max_score)


def scores_text(total: float, most: float) -> str:
    """:func:`score_text` of a total and a maximum (as an index row keeps them)."""
    return f"{number_text(total)}/{number_text(most)}"


def dimension_lines(result: GradeResult, indent: str = "  ") -> list[str]:
    width = max((len(terminal_text(name)) for name in result.dimensions), default=0)
    return [
        f"{indent}{terminal_text(name):<{width}}  "
        f"{number_text(dim.score):>3}/{number_text(dim.max)}"
        for name, dim in result.dimensions.items()
    ]


def _grade_details(result: GradeResult) -> list[str]:
    lines = [
        f"session {terminal_text(result.session_id)}, {result.entry_count} audit entries",
        "dimensions:",
        *dimension_lines(result),
    ]
    if result.flags:
        lines.append(f"flags ({len(result.flags)}):")
        lines.extend("  - " + flag for flag in map(terminal_text, result.flags))
    else:
        lines.append("flags: none")
    return lines


def grade_headline(result: GradeResult) -> str:
    """``45/100 (45%, grade D)``."""
    return f"{score_text(result)} ({result.display_percent}%, grade {result.letter})"


#: The most lost-point lines a failure message shows; the rest are counted.
LOST_LINES: Final = 8


def points_of(result: GradeResult) -> list[Point]:
    """The result's ``points`` items; none when a rubric wrote them malformed."""
    try:
        return result.points
    except ValidationError:
        return []


def signed_text(points: float) -> str:
    return f"{'+' if points > 0 else ''}{number_text(points)}"


def calls_counted(entries: Sequence[int]) -> str:
    """How many calls a point's ``entries`` are: a full list may have been cut at the limit
    (the sentence has the count), and is "100 or more"."""
    count = len(entries)
    return f"{count} or more" if count >= POINT_ENTRY_LIMIT else str(count)


def _where(entries: Sequence[int]) -> str:
    if not entries:
        return ""
    shown = ", ".join(f"#{i}" for i in entries[:5])
    if len(entries) >= POINT_ENTRY_LIMIT:
        more = " and more"  # cut at the limit: how many more, the sentence says
    else:
        more = f" and {len(entries) - 5} more" if len(entries) > 5 else ""
    return f" [{shown}{more}]"


def item_line(item: Point, *, dimension: bool = True) -> str:
    """``  -5 taskHygiene hygiene.description: sentence [#4]`` (without the dimension when
    the lines are grouped by it)."""
    where = f"{terminal_text(item.dimension)} " if dimension else ""
    return (
        f"{signed_text(item.points):>4} {where}{terminal_text(item.rule)}:"
        f" {terminal_text(item.text)}{_where(item.entries)}"
    )


def lost_point_lines(result: GradeResult, *, limit: int = LOST_LINES) -> list[str]:
    """``where points were lost:`` and one line per deduction or missed award (0 points), and
    per partial award: the award of a dimension below its maximum that lists neither (a
    judge's 6.5 of 10)."""
    items = points_of(result)
    dimensions = result.dimensions
    explained = {item.dimension for item in items if item.points <= 0}
    partial = {
        name
        for name, dimension in dimensions.items()
        if dimension.score < dimension.max and name not in explained
    }
    lost = [item for item in items if item.points <= 0 or item.dimension in partial]
    if not lost:
        return []
    lines = ["where points were lost (entry #: position in the session):"]
    lines.extend(f"  {item_line(item)}" for item in lost[:limit])
    if len(lost) > limit:
        lines.append(
            f"  ... {len(lost) - limit} more: cleo-grade show {terminal_text(result.session_id)}"
        )
    return lines


def _diffs(extra: Mapping[str, Any]) -> list[list[str]]:
    """The trajectory diffs of a result's extras (its own, or its combined parts')."""
    found = []
    trajectory = extra.get("trajectory")
    if isinstance(trajectory, Mapping) and isinstance(trajectory.get("diff"), list):
        found.append([str(line) for line in trajectory["diff"]])
    parts = extra.get("parts")
    if isinstance(parts, Mapping):
        for part in parts.values():
            result = part.get("result") if isinstance(part, Mapping) else None
            if isinstance(result, Mapping):
                found.extend(_diffs(result))
    return found


def trajectory_diff_lines(result: GradeResult) -> list[str]:
    """``expected vs actual calls:`` and the trajectory rubric's aligned diff, if any."""
    lines = []
    for diff in _diffs(result.model_extra or {}):
        skipped = any(line.startswith("?") for line in diff)
        lines.append(
            "expected vs actual calls (= matched, ~ out of order, - missing, + unexpected, "
            f". not counted{', ? optional not made' if skipped else ''}):"
        )
        lines.extend(f"  {terminal_text(line)}" for line in diff)
    return lines


def failure_message(test: GradedTest, show: str | None = None) -> str:
    """The message of a test failed for its grade: score, percent, letter, threshold, table,
    and last the ``cleo-grade show`` command (``show``) that explains it call by call."""
    result = test.result
    assert test.threshold is not None  # only a threshold can fail a test
    shown = percent_below(result.percent, test.threshold)
    headline = (
        f"cleo-grade: {score_text(result)} ({shown}, grade {result.letter}) is below the"
        f" threshold {describe_threshold(test.threshold)} set by {test.threshold_source}"
    )
    details = [*_grade_details(result), *trajectory_diff_lines(result), *lost_point_lines(result)]
    if show is not None:
        details.append(f"every call and its points: {terminal_text(show)}")
    return "\n".join([headline, *details])


def grade_section(test: GradedTest) -> str:
    """The grade shown beside the own failure of a test that failed for another reason."""
    return "\n".join([f"grade {grade_headline(test.result)}", *_grade_details(test.result)])


def junit_properties(result: GradeResult, status: str | None = None) -> list[tuple[str, object]]:
    """DESIGN section 6's per-test JUnit properties, in a stable order.

    A grade of another rubric than CLEO adds ``cleo_rubric``; a comparison grade adds its own
    (``rubrics.comparison.render.comparison_properties``) at the end; ``status`` (passed,
    below) comes last. A test that could not be graded carries ``cleo_status`` =
    ``ungradable`` and ``cleo_reason`` (with its session and entry count), never a score that
    would read as the agent's.
    """
    if status_of(result) == "ungradable":
        reason = (result.model_extra or {}).get(REASON_KEY)
        return [
            ("cleo_status", "ungradable"),
            ("cleo_reason", reason if isinstance(reason, str) else ""),
            ("cleo_entry_count", result.entry_count),
            ("cleo_session", result.session_id),
        ]
    # The names and the short texts repeat from test to test (five dimensions, a few scores,
    # a rubric's flag texts): one shared copy of each, as a run keeps every test's properties
    # (on its item and its reports) until it ends.
    shared = sys.intern
    properties: list[tuple[str, object]] = [
        ("cleo_grade", result.letter),
        ("cleo_score", shared(score_text(result))),
        ("cleo_percent", result.display_percent),
        ("cleo_entry_count", result.entry_count),
        # The session a CI failure leads to: `cleo-grade show SESSION` explains every point.
        ("cleo_session", result.session_id),
        ("cleo_flags", len(result.flags)),
    ]
    rubric = (result.model_extra or {}).get("rubric")
    if isinstance(rubric, str):
        properties.append(("cleo_rubric", rubric))
    properties.extend(("cleo_flag", shared(flag)) for flag in result.flags)
    properties.extend(
        (shared(f"cleo_dim_{name}"), shared(f"{number_text(dim.score)}/{number_text(dim.max)}"))
        for name, dim in result.dimensions.items()
    )
    if "variant" in (result.model_extra or {}):
        # Only a comparison grade has these: the comparison's modules cost a process (an xdist
        # worker, a CLI command) about 50 ms to import, which every other grade did without.
        from pytest_cleo_grade.rubrics.comparison.render import comparison_properties

        properties.extend(comparison_properties(result))
    if status is not None:
        properties.append(("cleo_status", status))
    return properties


def _verdict_cells(run: RunGrade) -> list[str]:
    """Each test's threshold cell, in the order of ``run.tests``: "not counted" from the rule
    of the run's mean (an xpassed run of a repeated test counted whole is counted)."""
    counted = {id(test) for test in run.counted}
    return [_verdict_cell(test, counted=id(test) in counted) for test in run.tests]


def _verdict_cell(test: GradedTest, *, counted: bool) -> str:
    if test.excluded == QUARANTINED and test.threshold is not None:
        mark = "ok" if test.passed else "below"
        return f"quarantined: {mark} {describe_threshold(test.threshold)}, not counted"
    if not counted:
        return f"{test.excluded}, not counted"
    if test.ungradable:
        return "not graded"
    if test.threshold is None:
        return "-"
    mark = "ok" if test.passed else ("below" if test.mode == "fail" else "below (report)")
    return f"{mark} {describe_threshold(test.threshold)}"


def _rows(run: RunGrade) -> list[tuple[str, str, str, str, str]]:
    return [_row(test) for test in run.tests]


def _row(test: GradedTest) -> tuple[str, str, str, str, str]:
    # The node id is escaped by the terminal table only: Markdown shows it as code.
    if test.ungradable:
        return (test.nodeid, "-", "-", "-", "-")
    return (
        test.nodeid,
        score_text(test.result),
        # Below its threshold, never shown as the threshold's own figure (82.5 vs 83).
        f"{test.result.display_percent}%"
        if test.passed or test.threshold is None
        else percent_below(test.result.percent, test.threshold),
        test.result.letter,
        str(len(test.result.flags)),
    )


def reason_line(test: GradedTest) -> str:
    """Why a test could not be graded, on one line: its reason's first line, without the
    ``cleo-grade: NODEID:`` the failure message starts with (the row names the test)."""
    text = (test.reason or "no reason recorded").split("\n", 1)[0]
    prefix = f"cleo-grade: {test.nodeid}: "
    return text[len(prefix) :] if text.startswith(prefix) else text


def summary_lines(run: RunGrade) -> list[str]:
    """The terminal section: one row per graded test, the run's grade and the gate verdict."""
    header = ("test", "score", "percent", "grade", "flags", "status", "threshold")
    rows = [
        (terminal_text(row[0]), *row[1:], test.status, cell)
        for row, cell, test in zip(_rows(run), _verdict_cells(run), run.tests, strict=True)
    ]
    widths = [max([len(header[i]), *(len(row[i]) for row in rows)]) for i in range(len(header))]
    right = {1, 2, 4}

    def fmt(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    lines = [fmt(header), *(fmt(row) for row in rows)] if rows else []
    lines.extend(report_mode_reasons(run))
    lines.extend(
        terminal_text(f"could not be graded: {test.nodeid}: {clipped(reason_line(test), 500)}")
        for test in run.tests
        if test.ungradable
    )
    lines.append(run.run_line())
    quarantine = quarantine_line(run)
    if quarantine is not None:
        lines.append(terminal_text(quarantine))
    judge = judge_line(run)
    if judge is not None:
        lines.append(judge)
    verdict = run.verdict()
    if verdict is not None:
        lines.append(verdict)
    return lines


#: The width a report-mode reason line keeps to (a terminal of 100 columns).
REASON_WIDTH: Final = 100


def report_mode_reasons(run: RunGrade) -> list[str]:
    """Why each report-mode test below its threshold is below (it did not fail, so no
    failure message says it): its dimensions short of their maximum, lowest share first, as
    many as one line of ``REASON_WIDTH`` columns holds."""
    below = [
        test
        for test in run.counted
        if test.mode == "report" and test.threshold is not None and not test.passed
    ]
    if not below:
        return []
    lines = ["below the threshold in report mode (annotated, not failed), where points were lost:"]
    for test in below:
        short = sorted(
            (d for d in test.result.dimensions.items() if d[1].score < d[1].max),
            key=lambda item: item[1].score / item[1].max if item[1].max else 0.0,
        )
        line = f"  {terminal_text(test.nodeid)}:"
        for count, (name, dimension) in enumerate(short):
            cell = f" {terminal_text(name)} {dimension.score:g}/{dimension.max:g}"
            cell = cell if count == 0 else "," + cell
            if count and len(line) + len(cell) > REASON_WIDTH:
                break
            line += cell
        lines.append(line)
    return lines


def summary_line(run: RunGrade) -> str:
    """The ``-q`` form: everything on one line."""
    parts = [f"cleo-grade: {run.run_line()}"]
    quarantine = quarantine_line(run)
    if quarantine is not None:
        parts.append(terminal_text(quarantine))
    judge = judge_line(run)
    if judge is not None:
        parts.append(judge)
    verdict = run.verdict()
    if verdict is not None:
        parts.append(verdict)
    return "; ".join(parts)


#: The most flag texts the step summary lists for one test below its threshold.
SUMMARY_FLAGS: Final = 10
#: The longest agent-written string (a flag, a test id) the step summary shows whole; a
#: longer one is cut and ends in "…".
SUMMARY_TEXT: Final = 200
#: The most bytes the grades' step-summary block takes. GitHub drops a step's whole summary
#: (gate verdict and other tools' blocks included) beyond 1 MiB: half of it leaves room for
#: the baseline's and the repeats' blocks and other steps of the job.
SUMMARY_BYTES: Final = 512 * 1024
#: Kept back for what is always written: the "... and N more" lines and the section heading.
_SUMMARY_RESERVE: Final = 1024


def clipped(text: str, limit: int = SUMMARY_TEXT) -> str:
    """``text`` cut to ``limit`` characters, the last one an ellipsis when it was longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Budget:
    """The bytes a Markdown block may still take. Once a line does not fit, nothing more
    does: a list never skips one item to show a later, shorter one."""

    def __init__(self, size: int) -> None:
        self.left = size

    def take(self, line: str, *, then: str = "") -> bool:
        """Whether ``line`` fits, and with it ``then``, a line that may follow it unasked."""
        size = len(line.encode("utf-8")) + 1  # and its line break
        if then:
            size += len(then.encode("utf-8")) + 1
        if size > self.left:
            self.left = 0
            return False
        self.left -= size
        return True


def _below(run: RunGrade) -> list[GradedTest]:
    return [t for t in run.counted if t.threshold is not None and t.status == "below"]


def _below_threshold(run: RunGrade, budget: _Budget) -> list[str]:
    """The step summary's flag texts of the tests below their threshold, as many as
    ``budget`` holds (a test's line before its flags; the rest counted)."""
    below = _below(run)
    if not below:
        return []
    lines = ["", "#### Below the threshold", ""]
    for shown, test in enumerate(below):
        result = test.result
        assert test.threshold is not None
        line = (
            f"- {markdown_code_cell(clipped(test.nodeid), in_table=False)}: "
            f"{percent_below(result.percent, test.threshold)} ({result.letter}), below "
            f"{describe_threshold(test.threshold)}"
        )
        # The line counting the flags not listed is paid for with the test's own line: at
        # its longest (none of them listed), whether it is written or not.
        if not budget.take(line, then=_more_flags(len(result.flags))):
            lines.append(f"- ... and {len(below) - shown} more tests below the threshold")
            break
        lines.append(line)
        flags = [f"  - {markdown_cell(clipped(flag))}" for flag in result.flags[:SUMMARY_FLAGS]]
        listed = [flag for flag in flags if budget.take(flag)]  # stops at the first too long
        lines.extend(listed)
        if len(result.flags) > len(listed):
            lines.append(_more_flags(len(result.flags) - len(listed)))
    return lines


def _not_graded(run: RunGrade, budget: _Budget) -> list[str]:
    """The step summary's tests that could not be graded, each with its reason: first, as
    the infrastructure that broke is not the agent's doing."""
    tests = [test for test in run.tests if test.ungradable]
    if not tests:
        return []
    lines = ["", "#### Could not be graded", ""]
    for shown, test in enumerate(tests):
        line = (
            f"- {markdown_code_cell(clipped(test.nodeid), in_table=False)}: "
            f"{markdown_cell(clipped(reason_line(test)))}"
        )
        if not budget.take(line):
            lines.append(f"- ... and {len(tests) - shown} more tests that could not be graded")
            break
        lines.append(line)
    return lines


def _more_flags(count: int) -> str:
    return f"  - ... and {count} more flags"


def _table(run: RunGrade, budget: _Budget) -> list[str]:
    """The step summary's grade table, as many rows as ``budget`` holds (the rest counted)."""
    lines = [
        "| Test | Score | Percent | Grade | Flags | Status | Threshold |",
        "| --- | ---: | ---: | :---: | ---: | --- | --- |",
    ]
    # Row by row, as they fit: the rows past the budget are counted, never formatted.
    counted = {id(test) for test in run.counted}
    for shown, test in enumerate(run.tests):
        nodeid, score, percent, letter, flags = _row(test)
        verdict = _verdict_cell(test, counted=id(test) in counted)
        cells = [markdown_code_cell(clipped(nodeid)), score, percent, letter, flags]
        line = "| " + " | ".join([*cells, test.status, verdict]) + " |"
        if not budget.take(line):
            lines.append(f"| ... and {len(run.tests) - shown} more tests | | | | | | |")
            break
        lines.append(line)
    return lines


def markdown_summary(run: RunGrade, size: int = SUMMARY_BYTES) -> str:
    """The same summary as a GitHub step-summary Markdown block of at most ``size`` bytes.

    The heading, the run's grade and the gate verdict are always there; the table's rows and
    the flags of the tests below their threshold fill what is left, the table taking at
    most half of it while some test is below its threshold. Agent text is cut to
    :data:`SUMMARY_TEXT` characters.
    """
    head = ["### cleo-grade", ""]
    tail = [f"**{run.run_line()[0].upper()}{run.run_line()[1:]}**"]
    quarantine = quarantine_line(run)
    if quarantine is not None:
        tail += ["", markdown_cell(clipped(quarantine, 4 * SUMMARY_TEXT))]
    judge = judge_line(run)
    if judge is not None:
        tail += ["", judge[0].upper() + judge[1:]]
    verdict = run.verdict()
    if verdict is not None:
        tail += ["", f"**{verdict[0].upper()}{verdict[1:]}**"]
    lines = list(head)
    if run.tests:
        fixed = len("\n".join([*head, *tail]).encode("utf-8")) + 2
        room = max(0, size - fixed - _SUMMARY_RESERVE)
        # Half for the table while some test is below its threshold: their flags explain it.
        table = _table(run, _Budget(room // 2 if _below(run) else room))
        lines += table
        used = len("\n".join(table).encode("utf-8"))
        budget = _Budget(room - used)
        lines += _not_graded(run, budget)
        lines += _below_threshold(run, budget)
        lines.append("")
    return "\n".join([*lines, *tail]) + "\n"


def quarantine_line(run: RunGrade) -> str | None:
    """``quarantined (report only, not in the gate): 2 tests, 1 below: a, b``, or None."""
    tests: dict[str, bool] = {}
    for test in run.tests:
        if test.excluded == QUARANTINED:
            key = str((test.result.model_extra or {}).get("testId") or test.nodeid)
            tests[key] = tests.get(key, True) and test.passed
    if not tests:
        return None
    below = sum(not passed for passed in tests.values())
    count = f"{len(tests)} test{'' if len(tests) == 1 else 's'}"
    names = ", ".join(f"{key}{'' if ok else ' (below)'}" for key, ok in tests.items())
    return f"quarantined (report only, not in the gate): {count}, {below} below: {names}"


def judge_line(run: RunGrade) -> str | None:
    """What the judges cost this run (None when no grade asked a judge)."""
    judged = [t.result for t in run.tests if "judgeUsage" in (t.result.model_extra or {})]
    if not judged:
        return None
    totals = judge_usage_totals(judged)

    def count(number: int, one: str, many: str) -> str:
        return f"{number} {one if number == 1 else many}"

    return (
        f"judge usage: {totals['totalTokens']} tokens ({totals['promptTokens']} prompt + "
        f"{totals['completionTokens']} completion) in "
        f"{count(totals['requests'], 'request', 'requests')}, "
        f"{count(totals['cachedReplies'], 'cached reply', 'cached replies')}, over "
        f"{count(totals['grades'], 'judged grade', 'judged grades')}"
    )


def render_grade(result: GradeResult) -> str:
    """The human-readable report of one grade (the CLEO Grade Specification's CLI fields)."""
    lines = _report_lines(result, str)
    plain = "\n".join(lines)
    # Agent text holding nothing to escape (as almost all does) reads the same escaped: one
    # search of the whole report tells, not one per line (a report has dozens). A line
    # break inside a piece is the only escape the search cannot see: there is none when the
    # report has just the breaks that join its lines.
    if plain.count("\n") == len(lines) - 1 and not needs_escape_but_newline(plain):
        return plain
    return _render(result, terminal_text)


def _render(result: GradeResult, escape: Callable[[str], str]) -> str:
    """:func:`render_grade`'s report with agent text passed through ``escape``."""
    return "\n".join(_report_lines(result, escape))


def _report_lines(result: GradeResult, escape: Callable[[str], str]) -> list[str]:
    """The lines of :func:`render_grade`'s report, agent text passed through ``escape``."""
    lines = [
        f"Session:    {escape(result.session_id)}",
        *([f"Task:       {escape(result.task_id)}"] if result.task_id else []),
        f"Score:      {score_text(result)}  ({result.display_percent}%, grade {result.letter})",
        f"Entries:    {result.entry_count}",
        f"Graded at:  {format_timestamp(result.timestamp)}",
        "",
        "Dimensions:",
    ]
    names = {name: escape(name) for name in result.dimensions}
    width = max(map(len, names.values()), default=0)
    evidence = f"  {'':<{width}}    - "
    for name, dim in result.dimensions.items():
        score = f"{number_text(dim.score):>3}/{number_text(dim.max)}"
        lines.append(f"  {names[name]:<{width}}  {score}")
        lines.extend(evidence + text for text in map(escape, dim.evidence))
    lines.append("")
    if result.flags:
        lines.append(f"Flags ({len(result.flags)}):")
        lines.extend("  - " + flag for flag in map(escape, result.flags))
    else:
        lines.append("Flags: none")
    return lines
