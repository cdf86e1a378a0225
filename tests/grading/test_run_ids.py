"""Run ids, shards and statuses (pure): which run a grade belongs to, and how it counts."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._run_ids import (
    ci_run_id,
    fresh_run_id,
    parse_run_id,
    parse_shard,
    resolve_run_id,
)
from pytest_cleo_grade.grading._verdict import GradedTest, RunGrade, ungradable_result
from pytest_cleo_grade.reports._display import junit_properties, markdown_summary, summary_lines
from pytest_cleo_grade.reports._html import latest_run

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def grade(test: str, score: float, **extra: object) -> GradeResult:
    return GradeResult(
        session_id=f"s-{test}",
        total_score=score,
        dimensions={"d": DimensionScore(score=score, max=100, evidence=[])},
        timestamp=NOW,
        entry_count=3,
        testId=test,
        **extra,
    )


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"GITHUB_RUN_ID": "123", "GITHUB_RUN_ATTEMPT": "2"}, "github-123-2"),
        ({"GITHUB_RUN_ID": "123"}, "github-123-1"),
        ({"CI_PIPELINE_ID": "77"}, "gitlab-77"),
        ({"BUILDKITE_BUILD_ID": "b-1"}, "buildkite-b-1"),
        ({}, None),
        ({"GITHUB_RUN_ID": "has space"}, None),
    ],
    ids=["github", "github-no-attempt", "gitlab", "buildkite", "none", "odd-value"],
)
def test_the_ci_run_id_comes_from_the_cis_own_variables(
    environ: dict[str, str], expected: str | None
) -> None:
    assert ci_run_id(environ) == expected


def test_the_option_beats_the_variable_which_beats_the_ci() -> None:
    environ = {"CLEO_GRADE_RUN_ID": "mine", "GITHUB_RUN_ID": "9"}
    assert resolve_run_id("given", environ) == "given"
    assert resolve_run_id(None, environ) == "mine"
    assert resolve_run_id(None, {"GITHUB_RUN_ID": "9"}) == "github-9-1"
    fresh = resolve_run_id(None, {})
    assert fresh.startswith("local-") and fresh != fresh_run_id()


def test_a_bad_run_id_or_shard_says_what_a_good_one_is() -> None:
    with pytest.raises(ValueError, match="1 to 128 letters"):
        parse_run_id("a b")
    with pytest.raises(ValueError, match="expected I/N"):
        parse_shard("2 of 3")
    with pytest.raises(ValueError, match="I must be 1 to N"):
        parse_shard("4/3")
    assert parse_shard("2/3").label == "2/3"


def test_the_latest_run_is_every_line_of_the_last_run_id_so_a_deleted_test_drops_out() -> None:
    history = [
        grade("t::old", 10, runId="r1"),
        grade("t::a", 50, runId="r1"),
        grade("t::a", 100, runId="r2", position=1),
        grade("t::b", 80, runId="r2", position=0),
    ]
    run = latest_run(history, threshold=None, gate=90)
    # In the whole suite's order (position), not the order the shards were combined in.
    assert [test.nodeid for test in run.tests] == ["t::b", "t::a"]
    assert run.mean == 90
    assert latest_run(history, threshold=None, gate=None, run_id="r1").mean == 30
    # Lines without run ids (written before): each test's latest grade, as before.
    old = [grade("t::x", 10), grade("t::x", 20), grade("t::y", 40)]
    assert latest_run(old, threshold=None, gate=None).mean == 30


def ungradable(test: str) -> GradedTest:
    result = ungradable_result(
        f"s-{test}",
        reason=f"cleo-grade: {test}: cannot grade with rubric weighted: judge unreachable",
        timestamp=NOW,
        entry_count=2,
        test_id=test,
    )
    return GradedTest(test, result, 75.0, "--cleo-grade-fail-under", "fail")


def test_an_ungradable_test_is_counted_apart_out_of_the_mean_and_fails_the_gate() -> None:
    tests = (
        GradedTest("t::good", grade("t::good", 90), 75.0, "x", "fail"),
        GradedTest("t::low", grade("t::low", 50), 75.0, "x", "fail"),
        GradedTest("t::low2", grade("t::low2", 60), 75.0, "x", "report"),
        ungradable("t::judge"),
    )
    run = RunGrade(tests, 50.0)
    assert [test.status for test in tests] == ["passed", "below", "below", "ungradable"]
    assert run.mean == pytest.approx(200 / 3)
    assert run.gate_failed
    assert run.run_line() == (
        "run grade C: mean 66.67% over 3 graded tests (2 below, 1 could not be graded)"
    )
    assert run.verdict() == "gate FAILED: 1 test could not be graded (mean 66.67%)"
    lines = summary_lines(run)
    assert lines[4].split() == ["t::judge", "-", "-", "-", "-", "ungradable", "not", "graded"]
    assert (
        "could not be graded: t::judge: cannot grade with rubric weighted: judge unreachable"
        in (lines)
    )
    markdown = markdown_summary(run)
    assert "| `t::judge` | - | - | - | - | ungradable | not graded |" in markdown
    assert "#### Could not be graded" in markdown
    assert junit_properties(tests[3].result, "ungradable") == [
        ("cleo_status", "ungradable"),
        (
            "cleo_reason",
            "cleo-grade: t::judge: cannot grade with rubric weighted: judge unreachable",
        ),
        ("cleo_entry_count", 2),
        ("cleo_session", "s-t::judge"),
    ]


def test_a_shard_defers_its_gate() -> None:
    tests = (GradedTest("t::low", grade("t::low", 10), None, None, "fail"),)
    run = RunGrade(tests, 90.0, parse_shard("2/3", "--cleo-grade-shard"))
    assert not run.gate_failed
    verdict = run.verdict()
    assert verdict is not None
    assert verdict.startswith("gate 90% (A): deferred, this is shard 2/3 (--cleo-grade-shard)")
