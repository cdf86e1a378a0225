"""Adaptive repeats (``runs="auto"``): Wald's sequential probability ratio test on the pass rate.

A run *passes* when its grade reaches the test's threshold (a run that could not be graded or
failed on its own does not). The test's target pass rate r is its ``min_pass_rate``, for
``pass_k=(k, q)`` the per-run rate q^(1/k), else 1/2 (a test decided by its mean: most runs at
or above the threshold, or most below). The SPRT weighs H1: p = r + 0.2 against H0: p = r - 0.2
(clamped to 0.01..0.99) with error rates alpha = beta = 0.05: after each run the log-likelihood
ratio moves by log(p1/p0) for a pass and log((1-p1)/(1-p0)) for a failure; it stops for
"pass" at log((1-beta)/alpha), for "fail" at log(beta/(1-alpha)). So an agent whose true pass
rate is at most p0 is called passing with probability at most alpha, one at least p1 failing
with probability at most beta; between them (the indifference region) either call is allowed
and the test usually runs longer. It stops early only from ``min_runs`` on and only when the
test's own rule (mean, pass rate or pass^k) over the runs so far says the same; else it runs
to ``max_runs``, and the rule decides as for fixed runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from pytest_cleo_grade.grading._stats import RepeatPolicy

__all__ = [
    "ALPHA",
    "BETA",
    "DEFAULT_MAX_RUNS",
    "DEFAULT_MIN_RUNS",
    "HALF_WIDTH",
    "Stop",
    "sequential_stop",
    "target_rate",
]

ALPHA: Final = 0.05
BETA: Final = 0.05
#: The indifference region is the target rate +- this.
HALF_WIDTH: Final = 0.2
DEFAULT_MAX_RUNS: Final = 20
DEFAULT_MIN_RUNS: Final = 3


@dataclass(frozen=True, slots=True)
class Stop:
    """Why an adaptive test stopped: ``pass``/``fail`` (the SPRT settled) or ``max``."""

    kind: str
    runs: int
    reason: str


def target_rate(policy: RepeatPolicy) -> float:
    """The per-run pass rate the test's rule asks for (see the module's docstring)."""
    if policy.min_pass_rate is not None:
        return policy.min_pass_rate
    if policy.pass_k is not None:
        k, q = policy.pass_k
        return float(q ** (1 / k))
    return 0.5


def _bounds(rate: float) -> tuple[float, float]:
    low = min(max(rate - HALF_WIDTH, 0.01), 0.98)
    high = max(min(rate + HALF_WIDTH, 0.99), low + 0.01)
    return low, high


def sequential_stop(
    passed: Sequence[bool],
    *,
    policy: RepeatPolicy,
    min_runs: int,
    max_runs: int,
    rule_passes: Callable[[], bool],
) -> Stop | None:
    """Whether to stop after the runs ``passed`` (in the order they reported), and why."""
    n = len(passed)
    p0, p1 = _bounds(target_rate(policy))
    upper = math.log((1 - BETA) / ALPHA)
    lower = math.log(BETA / (1 - ALPHA))
    llr = sum(math.log(p1 / p0) if ok else math.log((1 - p1) / (1 - p0)) for ok in passed)
    rates = f"pass rate {p1:.0%} vs {p0:.0%}, alpha = beta = {ALPHA:g}"
    if n >= min_runs and llr >= upper and rule_passes():
        return Stop("pass", n, f"settled after {n} runs: SPRT accepts pass ({rates})")
    if n >= min_runs and llr <= lower and not rule_passes():
        return Stop("fail", n, f"settled after {n} runs: SPRT accepts fail ({rates})")
    if n >= max_runs:
        return Stop("max", n, f"not settled after max_runs={max_runs}: decided over all runs")
    return None
