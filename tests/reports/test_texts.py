"""The plugin's pure report layer: the pass predicate, displayed figures and Markdown."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pytest_cleo_grade.core._text import markdown_cell, markdown_code_cell
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._verdict import (
    GradedTest,
    RunGrade,
    decode_graded_test,
    describe_percent,
    describe_threshold,
    encode_graded_test,
    passes,
    percent_below,
    shown_percent,
)
from pytest_cleo_grade.reports._display import failure_message, markdown_summary


def graded(
    score: float, nodeid: str = "t.py::test_x", threshold: float | None = None
) -> GradedTest:
    result = GradeResult(
        session_id="s1",
        total_score=score,
        max_score=100,
        dimensions={"only": DimensionScore(score=score, max=100)},
        flags=["a flag"],
        timestamp=datetime(2026, 3, 1, tzinfo=UTC),
        entry_count=3,
    )
    return GradedTest(nodeid, result, threshold, "--cleo-grade-fail-under", "fail")


@pytest.mark.parametrize(
    ("percent", "threshold", "expected"),
    [
        pytest.param(75.0, 75.0, True, id="equal-passes"),
        pytest.param(74.999, 75.0, False, id="just-below-fails"),
        pytest.param(0.0, None, True, id="no-threshold"),
        pytest.param(0.0, 0.0, True, id="F-no-minimum"),
    ],
)
def test_a_percentage_passes_when_it_reaches_the_threshold(
    percent: float, threshold: float | None, expected: bool
) -> None:
    assert passes(percent, threshold) is expected


@pytest.mark.parametrize(
    ("percent", "text"),
    [
        *[(85.0, "85%"), (67.5, "67.5%"), (71.665, "71.67%"), (71.66666, "71.67%"), (0.0, "0%")],
        # A history may hold any finite percentage: more digits than Decimal's default 28.
        (1e30, "1" + "0" * 30 + "%"),
        (1.5e300, "15" + "0" * 299 + "%"),
    ],
)
def test_percentages_show_at_most_two_decimals_rounded_half_up(percent: float, text: str) -> None:
    assert describe_percent(percent) == text


@pytest.mark.parametrize(
    ("scores", "gate", "verdict"),
    [
        pytest.param([74.999], 75.0, "gate FAILED: mean 74.99% is below 75% (B)", id="cut"),
        pytest.param([70.0], 75.0, "gate FAILED: mean 70% is below 75% (B)", id="plain-fail"),
        pytest.param([75.0], 75.0, "gate passed: mean 75% reaches 75% (B)", id="equal"),
        pytest.param([75.004], 75.0, "gate passed: mean 75% reaches 75% (B)", id="just-above"),
    ],
)
def test_the_displayed_mean_never_contradicts_the_gate_verdict(
    scores: list[float], gate: float, verdict: str
) -> None:
    run = RunGrade(tuple(graded(score) for score in scores), gate)
    assert run.verdict() == verdict


def test_a_graded_test_survives_its_trip_to_the_controller_unchanged() -> None:
    test = graded(82.5, threshold=75.0)
    test = GradedTest(
        test.nodeid,
        test.result.model_copy(update={"testId": test.nodeid}),
        test.threshold,
        test.threshold_source,
        test.mode,
    )
    back = decode_graded_test(encode_graded_test(test))
    assert back == test
    assert back.result.to_json_dict()["testId"] == "t.py::test_x"


def test_markdown_cells_keep_pipes_backticks_and_backslashes_of_test_ids_exact() -> None:
    nodeid = "t.py::test_x[a|`b`-\\u00e9]"
    text = markdown_summary(RunGrade((graded(90.0, nodeid=nodeid),), None))
    # A code span shows backslashes as written; the fence outruns the id's own backticks.
    assert "| ``t.py::test_x[a\\|`b`-\\u00e9]`` | 90/100 | 90% | A | 1 | passed | - |" in text


@pytest.mark.parametrize(
    ("text", "cell"),
    [
        ("plain", "plain"),
        ("a|b", "a\\|b"),
        ("`tick`", "\\`tick\\`"),
        ("two\nlines", "two lines"),
        ("<script>", "\\<script\\>"),
        ("back\\slash", "back\\\\slash"),
    ],
)
def test_a_plain_markdown_cell_escapes_what_would_leave_or_restyle_it(text: str, cell: str) -> None:
    assert markdown_cell(text) == cell


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("x", "`x`"),
        ("`x`", "`` `x` ``"),
        ("a``b|c", "```a``b\\|c```"),
        ("l1\nl2", "`l1 l2`"),
    ],
)
def test_a_markdown_code_cell_fences_backticks_and_escapes_only_pipes(text: str, span: str) -> None:
    assert markdown_code_cell(text) == span


@pytest.mark.parametrize(
    ("percent", "threshold", "shown"),
    [
        pytest.param(45, 60, "45%", id="whole percent when clearly below"),
        pytest.param(74.9, 75, "74.9%", id="cut to decimals when it would show the threshold"),
        pytest.param(88.889, 89, "88.88%", id="cut, not rounded up"),
        pytest.param(74.5, 74.75, "74.5%", id="a fractional threshold"),
    ],
)
def test_a_percent_below_the_threshold_never_displays_as_reaching_it(
    percent: float, threshold: float, shown: str
) -> None:
    assert percent_below(percent, threshold) == shown


@pytest.mark.parametrize(
    ("threshold", "shown"),
    [
        pytest.param(75, "75% (B)", id="whole"),
        pytest.param(74.75, "74.75% (C)", id="two decimals"),
        # Rounded, these read "75% (C)" (a letter beside the wrong figure) and "60% (C)"
        # (a threshold a 60/100 score seems to reach).
        pytest.param(74.999, "74.999% (C)", id="more decimals shown exactly"),
        pytest.param(60.0001, "60.0001% (C)", id="just above a whole percent"),
    ],
)
def test_a_threshold_is_shown_exactly_beside_its_own_letter(threshold: float, shown: str) -> None:
    assert describe_threshold(threshold) == shown
    message = failure_message(graded(60, threshold=threshold)).splitlines()[0]
    assert f"is below the threshold {shown}" in message


def test_the_failure_message_of_a_fractional_grade_does_not_contradict_itself() -> None:
    headline = failure_message(graded(74.9, threshold=75)).splitlines()[0]
    assert headline.startswith(
        "cleo-grade: 74.9/100 (74.9%, grade C) is below the threshold 75% (B)"
    )


def test_the_summary_rows_of_a_fractional_grade_do_not_contradict_their_verdict() -> None:
    from pytest_cleo_grade.reports._display import summary_lines

    run = RunGrade((graded(82.5, threshold=83), graded(82.5, "t.py::test_y")), None)
    below, unset = summary_lines(run)[1:3]
    assert below.split()[2:3] == ["82.5%"] and below.endswith("below 83% (B)")
    assert unset.split()[2] == "83%"  # no threshold: half up, as everywhere else
    table = markdown_summary(run)
    assert "| 82.5% |" in table and "| 83% |" in table


@pytest.mark.parametrize(
    ("percent", "threshold", "exact", "shown"),
    [
        pytest.param(82.996, None, False, "83%", id="no threshold: rounded"),
        pytest.param(82.996, 80.0, True, "83%", id="passing: rounded"),
        pytest.param(82.996, 83.0, False, "82.99%", id="failing: cut"),
        pytest.param(82.996, 83.0, True, "82.99%", id="failing, exact: cut"),
        pytest.param(74.5, 80.0, False, "75%", id="failing far below: whole"),
        pytest.param(74.555, 80.0, True, "74.56%", id="failing far below, exact: rounded"),
    ],
)
def test_a_shown_percent_never_reaches_the_threshold_it_fails(
    percent: float, threshold: float | None, exact: bool, shown: str
) -> None:
    assert shown_percent(percent, threshold, exact=exact) == shown
