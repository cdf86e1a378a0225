"""Repeated runs: mean and spread per variant, a bootstrap interval, and unstable verdicts."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from fractions import Fraction
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from pytest_cleo_grade.rubrics.comparison.scores import METRIC_IDS, ComparisonError
from pytest_cleo_grade.rubrics.comparison.verdicts import (
    VERDICT_ORDER,
    Verdict,
    verdict_from_difference,
)

__all__ = [
    "DEFAULT_LEVEL",
    "DEFAULT_RESAMPLES",
    "DEFAULT_SEED",
    "MIN_RESAMPLES",
    "Interval",
    "RunSummary",
    "Stability",
    "bootstrap",
    "stability",
    "summarize",
]

DEFAULT_SEED: Final = 0
DEFAULT_RESAMPLES: Final = 2000
#: The fewest resamples ``cleo-grade compare --resamples`` accepts: below about a thousand, the
#: 2.5th and 97.5th percentiles rest on a handful of resamples and the interval is noise.
MIN_RESAMPLES: Final = 1000
DEFAULT_LEVEL: Final = Fraction(95, 100)
_PER_RUN: Final = len(METRIC_IDS)  # a run's average is its Q total over 6


class RunSummary(BaseModel):
    """One variant's runs on one query: count, mean and spread of the Q averages."""

    model_config = ConfigDict(frozen=True)

    runs: int = Field(ge=1, description="Number of scored runs.")
    mean: Fraction = Field(description="Mean of the runs' Q averages (exact).")
    stdev: float | None = Field(description="Sample standard deviation; null for one run.")
    minimum: Fraction = Field(description="Lowest run average.")
    maximum: Fraction = Field(description="Highest run average.")


class Interval(BaseModel):
    """A percentile-bootstrap confidence interval (exact bounds: run averages are k/6)."""

    model_config = ConfigDict(frozen=True)

    low: Fraction
    high: Fraction
    level: Fraction = Field(description="Confidence level, e.g. 95/100.")
    paired: bool = Field(description="Runs paired by index (equal run counts) or resampled apart.")
    resamples: int
    seed: int


class Stability(BaseModel):
    """Whether repeated runs pin the verdict down: the verdict at both ends of the intervals."""

    model_config = ConfigDict(frozen=True)

    difference: Interval = Field(description="Interval of candidate - baseline mean average.")
    candidate: Interval = Field(description="Interval of the candidate's mean average.")
    worst: Verdict = Field(description="Verdict at the low ends of both intervals.")
    best: Verdict = Field(description="Verdict at the high ends of both intervals.")
    unstable: bool = Field(description="The verdict changes within the intervals.")


def summarize(totals: Sequence[int]) -> RunSummary:
    """Summarise runs given as Q totals (6..30); each run's average is total / 6."""
    if not totals:
        raise ComparisonError("no runs to summarise")
    averages = [Fraction(total, _PER_RUN) for total in totals]
    return RunSummary(
        runs=len(averages),
        mean=sum(averages, Fraction(0)) / len(averages),
        stdev=statistics.stdev(averages) if len(averages) > 1 else None,
        minimum=min(averages),
        maximum=max(averages),
    )


def _percentiles(values: list[int], level: Fraction, denominator: int) -> tuple[Fraction, Fraction]:
    values.sort()
    alpha = (1 - level) / 2
    low = math.floor(alpha * len(values))
    high = max(low, math.ceil((1 - alpha) * len(values)) - 1)
    return Fraction(values[low], denominator), Fraction(values[high], denominator)


def bootstrap(
    baseline_totals: Sequence[int],
    candidate_totals: Sequence[int],
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    level: Fraction = DEFAULT_LEVEL,
) -> tuple[Interval, Interval]:
    """Percentile-bootstrap intervals of the mean difference and of the candidate's mean.

    With equal run counts, run i of the baseline is paired with run i of the candidate and
    pairs are resampled together (the paired difference); otherwise each side is resampled on
    its own. ``random.Random(seed)`` makes the interval reproducible. Every resampled mean is
    an integer over a common denominator, so the bounds are exact fractions (a bound of
    exactly -0.5 is -0.5) and the loop stays in fast integer arithmetic.
    """
    if not baseline_totals or not candidate_totals:
        raise ComparisonError("bootstrap needs at least one run of each variant")
    if resamples < 1 or not 0 < level < 1:
        raise ComparisonError("bootstrap needs resamples >= 1 and 0 < level < 1")
    rng = random.Random(seed)
    nb, nc = len(baseline_totals), len(candidate_totals)
    paired = nb == nc
    # difference = cand/(6 nc) - base/(6 nb) = (cand nb - base nc) / (6 nb nc)
    differences: list[int] = []
    candidates: list[int] = []
    for _ in range(resamples):
        if paired:
            picks = [rng.randrange(nc) for _ in range(nc)]
            cand = sum(candidate_totals[i] for i in picks)
            base = sum(baseline_totals[i] for i in picks)
        else:
            base = sum(baseline_totals[rng.randrange(nb)] for _ in range(nb))
            cand = sum(candidate_totals[rng.randrange(nc)] for _ in range(nc))
        candidates.append(cand)
        differences.append(cand * nb - base * nc)
    common = {"level": level, "paired": paired, "resamples": resamples, "seed": seed}
    d_low, d_high = _percentiles(differences, level, _PER_RUN * nb * nc)
    c_low, c_high = _percentiles(candidates, level, _PER_RUN * nc)
    return (
        Interval(low=d_low, high=d_high, **common),
        Interval(low=c_low, high=c_high, **common),
    )


def stability(
    baseline_totals: Sequence[int],
    candidate_totals: Sequence[int],
    point: Verdict,
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    level: Fraction = DEFAULT_LEVEL,
) -> Stability | None:
    """The verdict's stability over repeated runs; None unless both variants ran twice or more.

    The verdict is monotone in the difference and in the candidate's average, so its range
    over the intervals is given by their two corners (bounded by ``point``: a worst corner
    better than the point verdict counts as the point verdict). It is unstable when the worst
    corner, the point estimate and the best corner do not all agree, i.e. an interval crosses
    (or touches, since boundaries are inclusive) -1.5, -0.5, +0.5 or the 3.0 floor.
    """
    if len(baseline_totals) < 2 or len(candidate_totals) < 2:
        return None
    difference, candidate = bootstrap(
        baseline_totals, candidate_totals, seed=seed, resamples=resamples, level=level
    )
    # A percentile interval need not contain the mean (few resamples, skewed runs), so the
    # corners are bounded by the point verdict: the worst case is never better than the mean
    # verdict, the best never worse; otherwise --decide-on worst could turn NO-GO into GO.
    rank = VERDICT_ORDER.index
    worst = min(verdict_from_difference(difference.low, candidate.low), point, key=rank)
    best = max(verdict_from_difference(difference.high, candidate.high), point, key=rank)
    return Stability(
        difference=difference,
        candidate=candidate,
        worst=worst,
        best=best,
        unstable=len({worst, point, best}) > 1,
    )
