"""pass^k, pass@k, the intervals and the verdict of repeated runs, against hand-computed values."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pytest_cleo_grade.grading._stats import (
    RepeatPolicy,
    bootstrap_mean_interval,
    pass_at_k,
    pass_hat_k,
    repeat_stats,
    verdict_for,
    wilson_interval,
)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (8, 6, 2, Fraction(15, 28)),  # C(6,2)/C(8,2)
        (8, 6, 1, Fraction(6, 8)),  # k = 1 is the pass rate
        (5, 5, 5, Fraction(1)),  # k = n, every run passed
        (5, 4, 5, Fraction(0)),  # k = n, one failure is enough
        (4, 0, 1, Fraction(0)),  # c = 0
        (10, 3, 4, Fraction(0)),  # fewer passes than k
        (10, 7, 3, Fraction(35, 120)),  # C(7,3)/C(10,3)
    ],
)
def test_pass_hat_k_is_the_unbiased_estimator(n: int, c: int, k: int, expected: Fraction) -> None:
    assert pass_hat_k(n, c, k) == pytest.approx(float(expected), abs=1e-12)


@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (8, 6, 2, Fraction(27, 28)),  # 1 - C(2,2)/C(8,2)
        (8, 6, 1, Fraction(6, 8)),
        (5, 1, 5, Fraction(1)),  # k = n: one pass among all runs
        (4, 0, 4, Fraction(0)),  # c = 0
        (10, 3, 4, Fraction(1) - Fraction(35, 210)),  # 1 - C(7,4)/C(10,4)
    ],
)
def test_pass_at_k_is_the_unbiased_estimator(n: int, c: int, k: int, expected: Fraction) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(float(expected), abs=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(4, 1, 0), (4, 1, 5), (4, 5, 1), (0, 0, 1)])
def test_impossible_counts_are_refused(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="runs"):
        pass_hat_k(n, c, k)


def test_wilson_interval_matches_the_textbook_values() -> None:
    low, high = wilson_interval(8, 10)
    assert (round(low, 4), round(high, 4)) == (0.4902, 0.9433)
    low, high = wilson_interval(0, 10)
    assert low == 0.0
    assert round(high, 4) == 0.2775


def test_bootstrap_interval_is_reproducible_and_brackets_the_mean() -> None:
    values = [70.0, 80.0, 90.0, 85.0, 75.0]
    first = bootstrap_mean_interval(values)
    assert first == bootstrap_mean_interval(values)
    assert first[0] < 80.0 < first[1]
    assert first[0] >= 70.0 and first[1] <= 90.0
    assert bootstrap_mean_interval([60.0, 60.0]) == (60.0, 60.0)


@pytest.mark.parametrize(
    ("passed", "runs", "verdict"),
    [
        (8, 8, "stable pass"),
        (7, 8, "flaky"),
        (1, 8, "flaky"),
        (0, 8, "stable fail"),
        (1, 1, "stable pass"),
    ],
)
def test_verdict_boundaries(passed: int, runs: int, verdict: str) -> None:
    assert verdict_for(passed, runs) == verdict


def test_the_mean_policy_decides_on_the_mean_against_the_threshold() -> None:
    stats = repeat_stats([90.0, 60.0], [True, False], threshold=75.0, policy=RepeatPolicy())
    assert stats.mean == 75.0
    assert stats.decided_pass
    assert stats.verdict == "flaky"
    below = repeat_stats([90.0, 59.0], [True, False], threshold=75.0, policy=RepeatPolicy())
    assert not below.decided_pass


def test_the_pass_rate_policy_is_inclusive_at_its_boundary() -> None:
    flags = [True] * 4 + [False]
    policy = RepeatPolicy(min_pass_rate=0.8)
    assert repeat_stats([80.0] * 5, flags, threshold=75.0, policy=policy).decided_pass
    policy = RepeatPolicy(min_pass_rate=0.81)
    assert not repeat_stats([80.0] * 5, flags, threshold=75.0, policy=policy).decided_pass


def test_the_pass_k_policy_uses_its_k() -> None:
    flags = [True] * 7 + [False]
    stats = repeat_stats([80.0] * 8, flags, threshold=75.0, policy=RepeatPolicy(pass_k=(2, 0.75)))
    assert stats.k == 2
    assert stats.pass_hat_k == pytest.approx(21 / 28)
    assert stats.decided_pass
    strict = repeat_stats([80.0] * 8, flags, threshold=75.0, policy=RepeatPolicy(pass_k=(2, 0.76)))
    assert not strict.decided_pass
    # More runs asked than made: decided on k = runs.
    short = repeat_stats(
        [80.0] * 3, [True] * 3, threshold=None, policy=RepeatPolicy(pass_k=(8, 0.9))
    )
    assert short.k == 3
    assert short.decided_pass


def test_a_run_that_could_not_be_graded_counts_as_failed_and_has_no_percentage() -> None:
    stats = repeat_stats([90.0], [True, False], threshold=75.0, policy=RepeatPolicy())
    assert (stats.runs, stats.passed, stats.mean) == (2, 1, 90.0)
    assert stats.verdict == "flaky"
    nothing = repeat_stats([], [False, False], threshold=None, policy=RepeatPolicy())
    assert nothing.mean is None
    assert not nothing.decided_pass
    assert nothing.verdict == "stable fail"
