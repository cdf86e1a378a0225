"""Repeated runs: mean and spread, the seeded bootstrap interval, and unstable verdicts."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pytest_cleo_grade.rubrics.comparison import ComparisonError, bootstrap
from pytest_cleo_grade.rubrics.comparison.stats import stability, summarize


def test_summary_gives_exact_mean_min_max_and_the_sample_stdev() -> None:
    summary = summarize([24, 18, 21])  # averages 4, 3, 3.5
    assert (summary.runs, summary.mean, summary.minimum, summary.maximum) == (
        3,
        Fraction(7, 2),
        Fraction(3),
        Fraction(4),
    )
    assert summary.stdev == pytest.approx(0.5)


def test_a_single_run_has_no_spread() -> None:
    summary = summarize([23])
    assert (summary.mean, summary.stdev) == (Fraction(23, 6), None)


def test_the_same_seed_gives_the_same_interval_and_another_seed_may_not() -> None:
    baseline, candidate = [24, 24, 24, 24, 24], [21, 24, 18, 24, 21]
    first = bootstrap(baseline, candidate, seed=1)
    assert bootstrap(baseline, candidate, seed=1) == first
    assert (first[0].low, first[0].high) == (Fraction(-7, 10), Fraction(-1, 10))
    assert (first[1].low, first[1].high) == (Fraction(33, 10), Fraction(39, 10))
    assert first[0].paired
    assert bootstrap(baseline, candidate, seed=2, resamples=50) != first


def test_interval_bounds_are_exact_multiples_of_a_sixth_of_a_point_per_run() -> None:
    difference, _ = bootstrap([24, 20, 22], [21, 24, 18], seed=3)
    for bound in (difference.low, difference.high):
        assert (bound * 6 * 3).denominator == 1


def test_identical_paired_differences_give_a_point_interval() -> None:
    difference, candidate = bootstrap([24, 18, 30], [21, 15, 27], seed=0)
    assert (difference.low, difference.high) == (Fraction(-1, 2), Fraction(-1, 2))
    assert candidate.low < candidate.high


def test_unequal_run_counts_are_resampled_apart() -> None:
    difference, _ = bootstrap([24, 24, 24], [21, 24], seed=1)
    assert not difference.paired
    assert (difference.low, difference.high) == (Fraction(-1, 2), Fraction(0))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"resamples": 0}, "resamples", id="no-resamples"),
        pytest.param({"level": Fraction(1)}, "level", id="level-of-one"),
    ],
)
def test_bootstrap_rejects_unusable_settings(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ComparisonError, match=message):
        bootstrap([24, 24], [24, 24], **kwargs)  # type: ignore[arg-type]


def test_stability_needs_two_runs_of_each_variant() -> None:
    assert stability([24], [24, 24], "equivalent") is None
    assert stability([24, 24], [24], "equivalent") is None


def test_runs_that_agree_are_stable() -> None:
    result = stability([24, 24, 24], [24, 24, 24], "equivalent")
    assert result is not None
    assert (result.worst, result.best, result.unstable) == ("equivalent", "equivalent", False)


def test_an_interval_touching_minus_half_a_point_is_unstable() -> None:
    result = stability([24, 24, 24], [21, 24, 27], "equivalent")
    assert result is not None
    assert (result.difference.low, result.difference.high) == (Fraction(-1, 2), Fraction(1, 2))
    assert (result.worst, result.best, result.unstable) == ("acceptable", "equivalent", True)


def test_a_candidate_interval_crossing_the_three_point_floor_is_unstable() -> None:
    result = stability([24, 24, 24], [17, 19, 19], "acceptable")
    assert result is not None
    assert result.candidate.low < 3 < result.candidate.high
    assert (result.worst, result.unstable) == ("degraded", True)


def test_the_worst_corner_is_never_better_than_the_point_verdict() -> None:
    # Baseline 4.00 twice; candidate 2.00 and 3.83 (mean 2.92: Degraded by the floor). One
    # resample that drew the 3.83 run twice gives an interval [-0.17, -0.17] not holding the
    # mean difference (-1.08), whose corner alone would say Equivalent.
    result = stability([24, 24], [12, 23], "degraded", seed=0, resamples=1)
    assert result is not None
    assert (result.difference.low, result.candidate.low) == (Fraction(-1, 6), Fraction(23, 6))
    assert (result.worst, result.best, result.unstable) == ("degraded", "equivalent", True)


def test_the_best_corner_is_never_worse_than_the_point_verdict() -> None:
    # The mirror case: candidate 4.00 and 5.83 vs 4.00 and 4.00 is Superior on the means; a
    # resample of the 4.00 run twice alone would say Equivalent at its best.
    for seed in range(50):
        difference, _ = bootstrap([24, 24], [24, 35], seed=seed, resamples=1)
        if difference.high == 0:
            break
    else:
        pytest.fail("no seed draws the equal run twice")
    result = stability([24, 24], [24, 35], "superior", seed=seed, resamples=1)
    assert result is not None
    assert (result.worst, result.best, result.unstable) == ("equivalent", "superior", True)
