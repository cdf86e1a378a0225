"""The baseline file and the regression gate: tolerances, noise, new and missing tests."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.grading._baseline import (
    BaselineError,
    TestGrades,
    Tolerance,
    compare_baseline,
    grades_from_results,
    parse_tolerances,
    read_baseline,
    write_baseline,
)
from pytest_cleo_grade.reports._baseline import baseline_markdown, change_text


def grades(test_id: str, totals: list[float], **dims: list[float]) -> TestGrades:
    return TestGrades(test_id, tuple(totals), {k: tuple(v) for k, v in dims.items()})


def test_tolerance_expressions_parse_points_and_relative_percentages() -> None:
    assert parse_tolerances("total:5") == {"total": Tolerance(5.0)}
    assert parse_tolerances("total:5%, sessionDiscipline:10") == {
        "total": Tolerance(5.0, relative=True),
        "sessionDiscipline": Tolerance(10.0),
    }
    assert Tolerance(5.0, relative=True).allowed(80.0) == 4.0


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("total", "invalid regression tolerance 'total'"),
        ("total:-5", "invalid regression tolerance 'total:-5'"),
        ("total:5,", "invalid regression tolerance ''"),
        ("total:5,total:3", "given twice"),
        ("total:five", "METRIC:POINTS or METRIC:PERCENT%"),
    ],
)
def test_bad_tolerance_expressions_are_named(expression: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_tolerances(expression)


def test_a_drop_beyond_the_tolerance_is_a_regression_and_one_within_is_not() -> None:
    base = {"a": grades("a", [80.0]), "b": grades("b", [80.0])}
    now = {"a": grades("a", [74.0]), "b": grades("b", [75.0])}
    result = compare_baseline(base, now, parse_tolerances("total:5"))
    assert [(c.test_id, c.regressed) for c in result.changes] == [("a", True), ("b", False)]
    assert result.failed
    relative = compare_baseline(base, now, parse_tolerances("total:7.5%"))
    # 7.5 % of 80 is 6 points: a drop of 6 is not beyond it.
    assert not relative.failed


def test_dimensions_are_gated_on_their_own_tolerance() -> None:
    base = {"a": grades("a", [80.0], sessionDiscipline=[100.0], queryEfficiency=[50.0])}
    now = {"a": grades("a", [79.0], sessionDiscipline=[50.0], queryEfficiency=[0.0])}
    result = compare_baseline(base, now, parse_tolerances("total:5,sessionDiscipline:10"))
    assert [(c.metric, c.regressed) for c in result.regressions] == [("sessionDiscipline", True)]
    # No tolerance for queryEfficiency: its drop is shown, never a regression.
    drop = next(c for c in result.changes if c.metric == "queryEfficiency")
    assert (drop.delta, drop.regressed) == (-50.0, False)


def test_a_combined_rubrics_dotted_dimensions_can_be_gated() -> None:
    # `cleo.sessionDiscipline` (a combined rubric's dimension) was no METRIC: only `total`
    # could be gated for such a rubric.
    dims = {"cleo.sessionDiscipline": [100.0], "trajectory.trajectory": [100.0]}
    base = {"a": TestGrades("a", (90.0,), {k: tuple(v) for k, v in dims.items()})}
    now = {
        "a": TestGrades(
            "a", (88.0,), {"cleo.sessionDiscipline": (50.0,), "trajectory.trajectory": (100.0,)}
        )
    }
    tolerances = parse_tolerances("total:5, cleo.sessionDiscipline:10")
    assert set(tolerances) == {"total", "cleo.sessionDiscipline"}
    result = compare_baseline(base, now, tolerances)
    assert [(c.metric, c.regressed) for c in result.regressions] == [
        ("cleo.sessionDiscipline", True)
    ]


def test_with_repeats_on_both_sides_a_drop_inside_the_noise_does_not_count() -> None:
    base = {"a": grades("a", [90.0, 60.0, 90.0, 60.0])}
    noisy = {"a": grades("a", [60.0, 90.0, 60.0, 60.0])}
    result = compare_baseline(base, noisy, parse_tolerances("total:5"))
    assert not result.failed
    assert result.changes[0].note is not None
    assert result.changes[0].note.startswith("within noise")
    clear = {"a": grades("a", [40.0, 42.0, 41.0, 40.0])}
    assert compare_baseline(base, clear, parse_tolerances("total:5")).failed


def test_new_and_missing_tests_are_listed() -> None:
    base = {"kept": grades("kept", [80.0]), "gone": grades("gone", [80.0])}
    now = {"kept": grades("kept", [80.0]), "added": grades("added", [10.0])}
    result = compare_baseline(base, now, parse_tolerances("total:5"))
    assert (result.new_tests, result.missing_tests) == (("added",), ("gone",))
    assert not result.failed


def test_a_tolerance_for_a_dimension_no_test_has_cannot_pass() -> None:
    base = {"a": grades("a", [80.0], sessionDiscipline=[100.0])}
    result = compare_baseline(base, dict(base), parse_tolerances("sesionDiscipline:5"))
    assert result.failed
    assert result.problems == (
        "tolerance for 'sesionDiscipline': no test compared has this dimension",
    )


@pytest.mark.parametrize("baseline", [{"old": grades("old", [95.0])}, {}], ids=["renamed", "empty"])
def test_a_gate_that_compared_no_test_cannot_pass(baseline: dict[str, TestGrades]) -> None:
    now = {"new": grades("new", [10.0])}
    result = compare_baseline(baseline, now, parse_tolerances("total:5"))
    assert result.failed
    assert result.problems == (
        "no test graded in this run is in the baseline, so nothing was compared "
        "(renamed or moved tests? save a new baseline)",
    )
    # Without a tolerance nothing is gated; with no graded test there is nothing to gate.
    assert not compare_baseline(baseline, now, {}).failed
    assert not compare_baseline(baseline, {}, parse_tolerances("total:5")).failed


def test_a_baseline_file_round_trips(tmp_path: Path) -> None:
    original = {"t::a": grades("t::a", [87.5, 75.0], sessionDiscipline=[100.0, 50.0])}
    path = tmp_path / "baseline.json"
    write_baseline(path, original, source="test")
    assert read_baseline(path) == original
    data = json.loads(path.read_text())
    assert data["format"] == "cleo-grade-baseline"
    assert data["tests"]["t::a"]["percents"] == [87.5, 75.0]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", r"baseline.json:1: invalid JSON"),
        # Python's own text points at sys.set_int_max_str_digits(), of no use here.
        ('{"format": ' + "9" * 5000 + "}", r"invalid JSON: a number with more than 4300 digits$"),
        ("[" * 100_000 + "]" * 100_000, r"baseline.json: invalid JSON: nested too deeply"),
        ('{"format": "other"}', "not a cleo-grade baseline"),
        ('{"format": "cleo-grade-baseline", "version": 9, "tests": {}}', "unsupported"),
        (
            '{"format": "cleo-grade-baseline", "version": 1, "tests": {"a": {"percents": [101]}}}',
            r"tests\['a'\]\.percents: expected a non-empty list of percentages",
        ),
        (
            '{"format": "cleo-grade-baseline", "version": 1, "tests": '
            '{"a": {"percents": [50], "dimensions": {"x": "high"}}}}',
            r"tests\['a'\]\.dimensions\.x",
        ),
    ],
)
def test_a_bad_baseline_file_is_named_with_its_field(
    tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "baseline.json"
    path.write_text(content)
    with pytest.raises(BaselineError, match=message):
        read_baseline(path)


def test_figures_round_half_up_and_a_regression_never_looks_within_its_tolerance() -> None:
    tolerances = parse_tolerances("total:5")
    # A 5.04-point drop against 5 points: one decimal ("-5.0") would look within it.
    drop = compare_baseline(
        {"a": grades("a", [81.29])}, {"a": grades("a", [76.25])}, tolerances
    ).changes[0]
    assert drop.regressed
    assert change_text(drop) == "a total: 81.29% -> 76.25% (-5.04, tolerance 5 points)"
    # Beyond the tolerance by less than two decimals show: rounded apart, away from it.
    tiny = compare_baseline(
        {"a": grades("a", [80.0])}, {"a": grades("a", [74.999])}, tolerances
    ).changes[0]
    assert change_text(tiny) == "a total: 80.00% -> 74.99% (-5.01, tolerance 5 points)"
    # Means of four runs end in .x5: halves round up (Python's round() gave "81.2").
    halves = compare_baseline(
        {"a": grades("a", [95.0, 95.0, 95.0, 40.0])},
        {"a": grades("a", [95.0, 95.0, 95.0, 40.0])},
        tolerances,
    ).changes[0]
    assert change_text(halves) == "a total: 81.3% -> 81.3% (+0.0, tolerance 5 points)"
    markdown = baseline_markdown(
        compare_baseline({"a": grades("a", [81.29])}, {"a": grades("a", [76.25])}, tolerances),
        gated=True,
    )
    assert "| 81.29% | 76.25% | -5.04 | **REGRESSION** |" in markdown


def test_the_noise_note_rounds_half_up() -> None:
    base = {"a": grades("a", [90.0, 60.0, 90.0, 60.0])}
    noisy = {"a": grades("a", [60.0, 60.0, 60.0, 91.0])}
    note = compare_baseline(base, noisy, parse_tolerances("total:5")).changes[0].note
    # The current interval's top is 83.25 (half-even printed it "83.2").
    assert note == "within noise: 95% intervals overlap (now up to 83.3%, baseline from 60.0%)"


def test_the_noise_verdict_does_not_depend_on_the_order_of_the_runs() -> None:
    # The bootstrap's draws are fixed by a seed: the same grades in another order (xdist
    # hands runs over as they finish) gave opposite verdicts.
    base = {"a": grades("a", [80.0, 80.0])}
    tolerances = parse_tolerances("total:5")
    verdicts = {
        compare_baseline(base, {"a": grades("a", list(order))}, tolerances).failed
        for order in (
            (40.0, 80.0, 85.0, 55.0, 80.0, 70.0),
            (80.0, 55.0, 85.0, 70.0, 80.0, 40.0),
            (85.0, 80.0, 80.0, 70.0, 55.0, 40.0),
        )
    }
    assert len(verdicts) == 1


def test_a_repeated_tests_runs_are_kept_in_run_order_whatever_order_they_arrive_in() -> None:
    def run(index: int, percent: float) -> GradeResult:
        return GradeResult(
            session_id=f"s{index}",
            total_score=percent,
            max_score=100,
            dimensions={},
            flags=[],
            timestamp=datetime(2026, 3, 1, tzinfo=UTC),
            entry_count=1,
            testId="t::a",
            run=index,
        )

    arrived = [run(2, 95.0), run(4, 45.0), run(1, 95.0), run(3, 45.0)]
    assert grades_from_results(arrived)["t::a"].totals == (95.0, 95.0, 45.0, 45.0)


def test_grades_of_another_rubric_are_not_compared_and_say_why(tmp_path: Path) -> None:
    # The baseline file had no rubric: a test moved to the trajectory rubric "gained" 5
    # points on its CLEO baseline, and a real drop could pass.
    base = {"a": TestGrades("a", (95.0,), {}, "cleo"), "b": TestGrades("b", (80.0,), {}, "cleo")}
    path = tmp_path / "b.json"
    write_baseline(path, base, source="test")
    assert json.loads(path.read_text())["tests"]["a"]["rubric"] == "cleo"
    saved = read_baseline(path)
    now = {
        "a": TestGrades("a", (100.0,), {}, "trajectory"),
        "b": TestGrades("b", (80.0,), {}, "cleo"),
    }
    result = compare_baseline(saved, now, parse_tolerances("total:5"))
    # Not compared, never a regression, and no failure: the rubric changed, not the agent.
    assert not result.failed
    assert result.rubric_changed == (("a", "cleo -> trajectory"),)
    assert [c.test_id for c in result.changes] == ["b"]
    # A baseline saved before baselines named their rubric is compared as before.
    old = {"a": TestGrades("a", (95.0,), {})}
    assert not compare_baseline(old, now, parse_tolerances("total:5")).failed


def test_a_drop_of_exactly_the_tolerance_passes_live_and_from_a_saved_file(
    tmp_path: Path,
) -> None:
    # 11/20 read as 11 / 20 * 100 = 55.00000000000001, and a saved 26/30 as 86.6667 against a
    # live 66.666...: each drop of exactly its tolerance was a regression, printed as -5.01.
    from pytest_cleo_grade.core.models import DimensionScore

    def graded(session: str, discovery: int, workflow: int) -> GradeResult:
        return GradeResult(
            session_id=session,
            total_score=discovery + workflow,
            max_score=50,
            dimensions={
                "discovery": DimensionScore(score=discovery, max=20, evidence=[]),
                "workflow": DimensionScore(score=workflow, max=30, evidence=[]),
            },
            flags=[],
            timestamp=datetime(2026, 3, 1, tzinfo=UTC),
            entry_count=1,
            testId="t::a",
        )

    before = grades_from_results([graded("s1", 11, 26)])
    now = grades_from_results([graded("s2", 10, 20)])
    tolerances = parse_tolerances("discovery:5,workflow:20")
    live = compare_baseline(before, now, tolerances)
    assert not live.failed
    assert {c.metric: change_text(c) for c in live.changes if c.metric != "total"} == {
        "discovery": "t::a discovery: 55.0% -> 50.0% (-5.0, tolerance 5 points)",
        "workflow": "t::a workflow: 86.7% -> 66.7% (-20.0, tolerance 20 points)",
    }
    path = tmp_path / "b.json"
    write_baseline(path, before, source="test")
    assert not compare_baseline(read_baseline(path), now, tolerances).failed
    assert compare_baseline(read_baseline(path), now, parse_tolerances("workflow:19.99")).failed


def test_a_dimension_without_a_tolerance_that_moved_is_shown_and_not_gated() -> None:
    # Only totals were listed: sessionDiscipline falling from 100 % to 0 % showed nowhere.
    from pytest_cleo_grade.reports._baseline import baseline_lines

    before = {"t::a": grades("t::a", [95.0], sessionDiscipline=[100.0], taskHygiene=[100.0])}
    now = {"t::a": grades("t::a", [93.0], sessionDiscipline=[0.0], taskHygiene=[100.0])}
    comparison = compare_baseline(before, now, parse_tolerances("total:5"))
    assert not comparison.failed
    lines = baseline_lines(comparison, gated=True)
    assert "  t::a sessionDiscipline: 100.0% -> 0.0% (-100.0)" in lines
    assert not any("taskHygiene" in line for line in lines)  # unchanged: no line
    markdown = baseline_markdown(comparison, gated=True)
    assert "| `t::a` | sessionDiscipline | 100.0% | 0.0% | -100.0 | ok |" in markdown


def test_a_rule_files_new_version_is_never_a_regression(tmp_path: Path) -> None:
    from pytest_cleo_grade.core.models import DimensionScore, GradeResult
    from pytest_cleo_grade.grading._baseline import grades_from_results
    from pytest_cleo_grade.reports._baseline import baseline_lines

    def graded(score: float, version: str) -> GradeResult:
        return GradeResult.model_validate(
            {
                "sessionId": f"s{version}",
                "totalScore": score,
                "dimensions": {"d": DimensionScore(score=score, max=100, evidence=[])},
                "timestamp": "2026-01-01T00:00:00Z",
                "entryCount": 1,
                "testId": "t::a",
                "rubric": "rules",
                "rubricVersion": version,
            }
        )

    path = tmp_path / "b.json"
    write_baseline(path, grades_from_results([graded(100, "1.0.0")]), source="test")
    assert json.loads(path.read_text())["tests"]["t::a"]["rubricVersion"] == "1.0.0"
    now = grades_from_results([graded(0, "1.1.0")])
    result = compare_baseline(read_baseline(path), now, parse_tolerances("total:5"))
    assert not result.failed and result.regressions == ()
    assert baseline_lines(result, gated=True) == [
        "baseline gate not applied: the rubric changed since the baseline (save a new one)",
        "not compared: rubric changed (rules 1.0.0 -> rules 1.1.0): t::a",
    ]
    same = grades_from_results([graded(0, "1.0.0")])
    assert compare_baseline(read_baseline(path), same, parse_tolerances("total:5")).failed
