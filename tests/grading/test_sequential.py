"""The SPRT of adaptive repeats: where it stops, and when it must not."""

from __future__ import annotations

import math

import pytest

from pytest_cleo_grade.grading._sequential import sequential_stop, target_rate
from pytest_cleo_grade.grading._stats import RepeatPolicy

MEAN = RepeatPolicy()


def stop(passed: list[bool], *, rule: bool | None = None, min_runs: int = 3, max_runs: int = 20):
    verdict = (sum(passed) * 2 >= len(passed)) if rule is None else rule
    return sequential_stop(
        passed, policy=MEAN, min_runs=min_runs, max_runs=max_runs, rule_passes=lambda: verdict
    )


def test_a_clear_pass_or_fail_stops_at_four_runs() -> None:
    # H1 p = 0.7 vs H0 p = 0.3: each run moves the log-ratio by log(7/3) = 0.847; the bound
    # log(0.95/0.05) = 2.944 needs 4 runs (3 give 2.54).
    assert 3 * math.log(7 / 3) < math.log(19) < 4 * math.log(7 / 3)
    for n in range(1, 4):
        assert stop([True] * n) is None
        assert stop([False] * n) is None
    passed = stop([True] * 4)
    assert passed is not None and (passed.kind, passed.runs) == ("pass", 4)
    assert passed.reason == (
        "settled after 4 runs: SPRT accepts pass (pass rate 70% vs 30%, alpha = beta = 0.05)"
    )
    failed = stop([False] * 4)
    assert failed is not None and failed.kind == "fail"


def test_min_runs_and_max_runs_bound_the_stop() -> None:
    assert stop([True] * 5, min_runs=6) is None
    late = stop([True] * 6, min_runs=6)
    assert late is not None and late.runs == 6
    alternating = [bool(i % 2) for i in range(20)]
    for n in range(1, 20):
        assert stop(alternating[:n]) is None  # a 50 % agent never settles
    capped = stop(alternating)
    assert capped is not None and capped.kind == "max"
    assert capped.reason == "not settled after max_runs=20: decided over all runs"


def test_it_never_stops_against_the_tests_own_rule() -> None:
    # Four passes settle the SPRT, but a rule that still fails (a mean dragged down by one
    # very low grade) keeps the test running: the verdict printed is the rule's.
    assert stop([True] * 4, rule=False) is None
    assert stop([False] * 4, rule=True) is None


@pytest.mark.parametrize(
    ("policy", "rate"),
    [
        (RepeatPolicy(), 0.5),
        (RepeatPolicy(min_pass_rate=0.8), 0.8),
        (RepeatPolicy(pass_k=(2, 0.81)), 0.9),
    ],
)
def test_the_target_rate_follows_the_tests_rule(policy: RepeatPolicy, rate: float) -> None:
    assert target_rate(policy) == pytest.approx(rate)


def test_a_high_target_needs_more_passes() -> None:
    strict = RepeatPolicy(min_pass_rate=0.8)  # H1 0.99 vs H0 0.6 (clamped)
    runs = next(
        n
        for n in range(1, 21)
        if sequential_stop(
            [True] * n, policy=strict, min_runs=1, max_runs=20, rule_passes=lambda: True
        )
    )
    # log(0.99/0.6) = 0.501 per pass: 2.944 / 0.501 -> 6 passes.
    assert runs == 6
