"""Statistics over repeated runs of one graded test: pass^k, pass@k, intervals, the verdict.

Pure functions over numbers (standard library only), so every figure can be checked by hand.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

__all__ = [
    "BOOTSTRAP_RESAMPLES",
    "BOOTSTRAP_SEED",
    "RepeatPolicy",
    "RepeatStats",
    "Verdict",
    "bootstrap_mean_interval",
    "pass_at_k",
    "pass_hat_k",
    "repeat_stats",
    "verdict_for",
    "wilson_interval",
]

Verdict = Literal["stable pass", "flaky", "stable fail"]

#: z for a two-sided 95 % interval.
_Z95: Final = 1.959963984540054
#: Fixed so that the same percentages always print the same interval.
BOOTSTRAP_SEED: Final = 20240615
BOOTSTRAP_RESAMPLES: Final = 2000


def _check_counts(n: int, c: int, k: int) -> None:
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need 0 <= passed ({c}) <= runs ({n}) and runs >= 1")
    if not 1 <= k <= n:
        raise ValueError(f"k must be between 1 and the number of runs ({n}), got {k}")


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k, unbiased: the chance that k runs drawn without replacement all pass,
    ``C(c, k) / C(n, k)`` (0 when fewer than k runs passed)."""
    _check_counts(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def pass_at_k(n: int, c: int, k: int) -> float:
    """pass@k, unbiased: the chance that at least one of k runs drawn passes,
    ``1 - C(n - c, k) / C(n, k)``."""
    _check_counts(n, c, k)
    return 1 - math.comb(n - c, k) / math.comb(n, k)


def wilson_interval(c: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of a pass rate c/n (95 % by default)."""
    if n < 1 or not 0 <= c <= n:
        raise ValueError(f"need 0 <= passed ({c}) <= runs ({n}) and runs >= 1")
    p = c / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    # Clamp the float noise at the ends: 0/n must give exactly 0 as its lower bound.
    return max(0.0, centre - half), min(1.0, centre + half)


def bootstrap_mean_interval(
    values: Sequence[float],
    *,
    seed: int = BOOTSTRAP_SEED,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> tuple[float, float]:
    """A 95 % percentile-bootstrap interval of the mean; one value gives a point.

    The values are sorted first: the draws are fixed by ``seed``, so the same grades in
    another order (xdist hands runs over in the order they finish) gave another interval.
    """
    if not values:
        raise ValueError("a bootstrap interval needs at least one value")
    values = sorted(values)
    if len(set(values)) == 1:
        return values[0], values[0]
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    low = math.floor(0.025 * resamples)
    high = max(low, math.ceil(0.975 * resamples) - 1)
    return means[low], means[high]


def verdict_for(passed: int, runs: int) -> Verdict:
    """``stable pass`` when every run passed, ``stable fail`` when none did, else ``flaky``."""
    if passed == runs:
        return "stable pass"
    if passed == 0:
        return "stable fail"
    return "flaky"


@dataclass(frozen=True, slots=True)
class RepeatPolicy:
    """What decides a repeated test: the mean (default), the pass rate, or pass^k."""

    min_pass_rate: float | None = None
    pass_k: tuple[int, float] | None = None

    @property
    def kind(self) -> str:
        if self.pass_k is not None:
            return "pass^k"
        if self.min_pass_rate is not None:
            return "pass rate"
        return "mean"


@dataclass(frozen=True, slots=True)
class RepeatStats:
    """The figures of one test's runs against its threshold."""

    runs: int
    passed: int
    #: None when no run could be graded (each such run counts as a failed run).
    mean: float | None
    stdev: float | None
    mean_interval: tuple[float, float] | None
    pass_rate_interval: tuple[float, float]
    k: int
    pass_hat_k: float
    pass_at_k: float
    threshold: float | None
    policy: RepeatPolicy

    @property
    def pass_rate(self) -> float:
        return self.passed / self.runs

    @property
    def verdict(self) -> Verdict:
        return verdict_for(self.passed, self.runs)

    @property
    def decided_pass(self) -> bool:
        """The one predicate deciding the test over all its runs (and its printed verdict)."""
        policy = self.policy
        if policy.pass_k is not None:
            return self.pass_hat_k >= policy.pass_k[1]
        if policy.min_pass_rate is not None:
            return self.pass_rate >= policy.min_pass_rate
        return self.mean is not None and (self.threshold is None or self.mean >= self.threshold)


def repeat_stats(
    percents: Sequence[float],
    passed: Sequence[bool],
    *,
    threshold: float | None,
    policy: RepeatPolicy,
) -> RepeatStats:
    """The statistics of one test's runs: ``passed`` has one flag per run, ``percents`` one
    percentage per run that could be graded (a run that could not be graded has no
    percentage and counts as failed).

    k is the policy's k, or the number of runs (pass^n: every run passes). A policy asking
    for more runs than were made is decided on k = runs.
    """
    if not passed or len(percents) > len(passed):
        raise ValueError("repeat statistics need one pass flag per run")
    n = len(passed)
    c = sum(passed)
    k = min(policy.pass_k[0], n) if policy.pass_k is not None else n
    values = list(percents)
    return RepeatStats(
        runs=n,
        passed=c,
        mean=statistics.fmean(values) if values else None,
        stdev=statistics.stdev(values) if len(values) > 1 else None,
        mean_interval=bootstrap_mean_interval(values) if values else None,
        pass_rate_interval=wilson_interval(c, n),
        k=k,
        pass_hat_k=pass_hat_k(n, c, k),
        pass_at_k=pass_at_k(n, c, k),
        threshold=threshold,
        policy=policy,
    )
