"""What the pytest plugin shows about grades: failure text, JUnit properties, summaries."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_DOWN, ROUND_HALF_UP, Decimal
from typing import Any

from pytest_cleo_grade.models import GradeResult, letter_for, round_half_up

# The comparison and weighted-rubric helpers are imported where a grade of theirs is shown:
# a run grading with CLEO alone need not load the judge's HTTP client or the comparison code.

__all__ = [
    "GradedTest",
    "RunGrade",
    "decode_graded_test",
    "describe_percent",
    "describe_threshold",
    "encode_graded_test",
    "failure_message",
    "grade_section",
    "junit_properties",
    "markdown_summary",
    "number_text",
    "passes",
    "percent_below",
    "summary_line",
    "summary_lines",
]


def passes(percent: float, threshold: float | None) -> bool:
    """The one predicate behind every verdict: the exact percentage reaches the threshold."""
    return threshold is None or percent >= threshold


def describe_percent(percent: float, *, rounding: str = ROUND_HALF_UP) -> str:
    """A percentage for display with at most two decimals: ``67.5%``, ``85%``."""
    text = str(Decimal(repr(percent)).quantize(Decimal("0.01"), rounding=rounding))
    return text.rstrip("0").rstrip(".") + "%"


def describe_threshold(threshold: float) -> str:
    """A threshold with the letter it corresponds to: ``75% (B)``."""
    return f"{describe_percent(threshold)} ({letter_for(threshold)})"


def percent_below(percent: float, threshold: float) -> str:
    """``percent`` for a message saying it is below ``threshold``, never contradicting it.

    Whole percent, half up, as everywhere else, unless that would show the threshold's own
    figure (74.9 % against 75 %): then two decimals, cut rather than rounded (``74.9%``).
    """
    text = f"{round_half_up(percent)}%"
    if Decimal(text[:-1]) >= Decimal(describe_percent(threshold)[:-1]):
        text = describe_percent(percent, rounding=ROUND_DOWN)
    return text


def number_text(value: float) -> str:
    """A score as written: ``85`` for integers, ``67.17`` (``:g``) for fractional scores."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def score_text(result: GradeResult) -> str:
    """``85/100``."""
    return f"{number_text(result.total_score)}/{number_text(result.max_score)}"


@dataclass(frozen=True, slots=True)
class GradedTest:
    """One graded test as the controller sees it: the final grade and the threshold it met."""

    nodeid: str
    result: GradeResult
    threshold: float | None
    threshold_source: str | None
    mode: str

    @property
    def passed(self) -> bool:
        return passes(self.result.percent, self.threshold)


def encode_graded_test(test: GradedTest) -> str:
    """The JSON that travels on the call report (a plain string survives any serialiser)."""
    return json.dumps(
        {
            "nodeid": test.nodeid,
            "result": test.result.to_json_dict(),
            "threshold": test.threshold,
            "thresholdSource": test.threshold_source,
            "mode": test.mode,
        },
        separators=(",", ":"),
        ensure_ascii=False,
    )


def decode_graded_test(text: str) -> GradedTest:
    """Inverse of :func:`encode_graded_test`."""
    data: dict[str, Any] = json.loads(text)
    threshold = data["threshold"]
    return GradedTest(
        nodeid=data["nodeid"],
        result=GradeResult.model_validate(data["result"]),
        threshold=None if threshold is None else float(threshold),
        threshold_source=data["thresholdSource"],
        mode=data["mode"],
    )


def dimension_lines(result: GradeResult, indent: str = "  ") -> list[str]:
    width = max((len(name) for name in result.dimensions), default=0)
    return [
        f"{indent}{name:<{width}}  {number_text(dim.score):>3}/{number_text(dim.max)}"
        for name, dim in result.dimensions.items()
    ]


def _grade_details(result: GradeResult) -> list[str]:
    lines = [
        f"session {result.session_id}, {result.entry_count} audit entries",
        "dimensions:",
        *dimension_lines(result),
    ]
    if result.flags:
        lines.append(f"flags ({len(result.flags)}):")
        lines.extend(f"  - {flag}" for flag in result.flags)
    else:
        lines.append("flags: none")
    return lines


def grade_headline(result: GradeResult) -> str:
    """``45/100 (45%, grade D)``."""
    return f"{score_text(result)} ({result.display_percent}%, grade {result.letter})"


def failure_message(test: GradedTest) -> str:
    """The message of a test failed for its grade: score, percent, letter, threshold, table."""
    result = test.result
    assert test.threshold is not None  # only a threshold can fail a test
    shown = percent_below(result.percent, test.threshold)
    headline = (
        f"cleo-grade: {score_text(result)} ({shown}, grade {result.letter}) is below the"
        f" threshold {describe_threshold(test.threshold)} set by {test.threshold_source}"
    )
    return "\n".join([headline, *_grade_details(result)])


def grade_section(test: GradedTest) -> str:
    """The grade shown beside the own failure of a test that failed for another reason."""
    return "\n".join([f"grade {grade_headline(test.result)}", *_grade_details(test.result)])


def junit_properties(result: GradeResult) -> list[tuple[str, object]]:
    """DESIGN section 6's per-test JUnit properties, in a stable order.

    A grade of another rubric than CLEO adds ``cleo_rubric``; a comparison grade adds
    :func:`~pytest_cleo_grade.comparison.grades.comparison_properties` at the end.
    """
    properties: list[tuple[str, object]] = [
        ("cleo_grade", result.letter),
        ("cleo_score", score_text(result)),
        ("cleo_percent", result.display_percent),
        ("cleo_entry_count", result.entry_count),
        ("cleo_flags", len(result.flags)),
    ]
    rubric = (result.model_extra or {}).get("rubric")
    if isinstance(rubric, str):
        properties.append(("cleo_rubric", rubric))
    properties.extend(("cleo_flag", flag) for flag in result.flags)
    properties.extend(
        (f"cleo_dim_{name}", f"{number_text(dim.score)}/{number_text(dim.max)}")
        for name, dim in result.dimensions.items()
    )
    if "variant" in (result.model_extra or {}):
        from pytest_cleo_grade.comparison.grades import comparison_properties

        properties.extend(comparison_properties(result))
    return properties


@dataclass(frozen=True, slots=True)
class RunGrade:
    """The run's grade: the mean of the graded tests' exact percentages, and the gate verdict."""

    tests: tuple[GradedTest, ...]
    gate: float | None

    @property
    def mean(self) -> float | None:
        if not self.tests:
            return None
        return sum(test.result.percent for test in self.tests) / len(self.tests)

    @property
    def letter(self) -> str | None:
        mean = self.mean
        return None if mean is None else letter_for(mean)

    @property
    def gate_failed(self) -> bool:
        """Whether the gate turns the exit status to 1 (never without graded tests)."""
        mean = self.mean
        return mean is not None and not passes(mean, self.gate)

    def mean_text(self) -> str:
        """The mean for display (two decimals, half up), never contradicting the verdict.

        Below the gate, a mean that would round up to the gate's figure is cut instead:
        74.999 % shows as 74.99 %, not as a 75 % that a 75 % gate would call "below".
        """
        mean = self.mean
        if mean is None:
            return "-"
        text = describe_percent(mean)
        if self.gate is not None and self.gate_failed:
            shown_gate = describe_percent(self.gate)
            if Decimal(text.rstrip("%")) >= Decimal(shown_gate.rstrip("%")):
                text = describe_percent(mean, rounding=ROUND_DOWN)
        return text

    def verdict(self) -> str | None:
        """The gate line, or None when no gate is set."""
        if self.gate is None:
            return None
        gate = describe_threshold(self.gate)
        if self.mean is None:
            return f"gate {gate}: not applied, no graded tests"
        if self.gate_failed:
            return f"gate FAILED: mean {self.mean_text()} is below {gate}"
        return f"gate passed: mean {self.mean_text()} reaches {gate}"

    def judge_line(self) -> str | None:
        """What the judges cost this run (None when no grade asked a judge)."""
        judged = [t.result for t in self.tests if "judgeUsage" in (t.result.model_extra or {})]
        if not judged:
            return None
        from pytest_cleo_grade.rubrics.weighted import judge_usage_totals

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

    def run_line(self) -> str:
        count = len(self.tests)
        noun = "test" if count == 1 else "tests"
        if self.mean is None:
            return "no graded tests"
        return f"run grade {self.letter}: mean {self.mean_text()} over {count} graded {noun}"


def _verdict_cell(test: GradedTest) -> str:
    if test.threshold is None:
        return "-"
    mark = "ok" if test.passed else ("below" if test.mode == "fail" else "below (report)")
    return f"{mark} {describe_threshold(test.threshold)}"


def _rows(run: RunGrade) -> list[tuple[str, str, str, str, str]]:
    return [
        (
            test.nodeid,
            score_text(test.result),
            f"{test.result.display_percent}%",
            test.result.letter,
            str(len(test.result.flags)),
        )
        for test in run.tests
    ]


def summary_lines(run: RunGrade) -> list[str]:
    """The terminal section: one row per graded test, the run's grade and the gate verdict."""
    header = ("test", "score", "percent", "grade", "flags", "threshold")
    rows = [(*row, _verdict_cell(test)) for row, test in zip(_rows(run), run.tests, strict=True)]
    widths = [max([len(header[i]), *(len(row[i]) for row in rows)]) for i in range(len(header))]
    right = {1, 2, 4}

    def fmt(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    lines = [fmt(header), *(fmt(row) for row in rows)] if rows else []
    lines.append(run.run_line())
    judge = run.judge_line()
    if judge is not None:
        lines.append(judge)
    verdict = run.verdict()
    if verdict is not None:
        lines.append(verdict)
    return lines


def summary_line(run: RunGrade) -> str:
    """The ``-q`` form: everything on one line."""
    parts = [f"cleo-grade: {run.run_line()}"]
    judge = run.judge_line()
    if judge is not None:
        parts.append(judge)
    verdict = run.verdict()
    if verdict is not None:
        parts.append(verdict)
    return "; ".join(parts)


def _md(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("`", "'")


def markdown_summary(run: RunGrade) -> str:
    """The same summary as a GitHub step-summary Markdown block."""
    lines = ["### cleo-grade", ""]
    if run.tests:
        lines.append("| Test | Score | Percent | Grade | Flags | Threshold |")
        lines.append("| --- | ---: | ---: | :---: | ---: | --- |")
        for row, test in zip(_rows(run), run.tests, strict=True):
            nodeid, score, percent, letter, flags = row
            cells = [f"`{_md(nodeid)}`", score, percent, letter, flags, _verdict_cell(test)]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(f"**{run.run_line()[0].upper()}{run.run_line()[1:]}**")
    judge = run.judge_line()
    if judge is not None:
        lines += ["", judge[0].upper() + judge[1:]]
    verdict = run.verdict()
    if verdict is not None:
        lines.append("")
        lines.append(f"**{verdict[0].upper()}{verdict[1:]}**")
    return "\n".join(lines) + "\n"
