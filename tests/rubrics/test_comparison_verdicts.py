"""Seed 002's per-query verdicts, their precedence at every boundary, and the go/no-go matrix."""

from __future__ import annotations

from fractions import Fraction
from typing import Final

import pytest

from pytest_cleo_grade.rubrics.comparison import (
    ComparisonError,
    QueryVerdict,
    decide,
    decision_exit_status,
    verdict_for,
)
from pytest_cleo_grade.rubrics.comparison.scores import Mode
from pytest_cleo_grade.rubrics.comparison.verdicts import Verdict, verdict_from_difference


def avg(total: int) -> Fraction:
    """A Q average from six integer scores summing to ``total``."""
    return Fraction(total, 6)


@pytest.mark.parametrize(
    ("baseline", "candidate", "expected"),
    [
        pytest.param(24, 24, "equivalent", id="same-average"),
        pytest.param(24, 22, "equivalent", id="a-third-below-is-equivalent"),
        pytest.param(24, 21, "acceptable", id="exactly-0.5-below-is-acceptable-not-equivalent"),
        pytest.param(24, 20, "acceptable", id="two-thirds-below-is-acceptable"),
        pytest.param(27, 19, "acceptable", id="four-thirds-below-is-acceptable"),
        pytest.param(27, 18, "degraded", id="exactly-1.5-below-is-degraded-not-acceptable"),
        pytest.param(30, 18, "degraded", id="two-below-is-degraded"),
        pytest.param(18, 21, "equivalent", id="exactly-0.5-above-is-equivalent-not-superior"),
        pytest.param(18, 22, "superior", id="two-thirds-above-is-superior"),
        pytest.param(21, 18, "acceptable", id="candidate-exactly-3.0-is-not-floored"),
        pytest.param(18, 18, "equivalent", id="both-exactly-3.0-is-equivalent"),
        pytest.param(18, 17, "degraded", id="candidate-below-3.0-with-small-diff-is-degraded"),
        pytest.param(12, 17, "degraded", id="candidate-below-3.0-though-above-baseline"),
        pytest.param(6, 6, "degraded", id="both-poor-is-degraded"),
    ],
)
def test_verdict_follows_seed_thresholds_with_conservative_precedence(
    baseline: int, candidate: int, expected: Verdict
) -> None:
    assert verdict_for(avg(baseline), avg(candidate)) == expected


@pytest.mark.parametrize(
    ("difference", "candidate", "expected"),
    [
        pytest.param(Fraction(-3, 2), Fraction(3), "degraded", id="minus-1.5"),
        pytest.param(Fraction(-149, 100), Fraction(3), "acceptable", id="just-above-minus-1.5"),
        pytest.param(Fraction(-1, 2), Fraction(3), "acceptable", id="minus-0.5"),
        pytest.param(Fraction(-49, 100), Fraction(3), "equivalent", id="just-above-minus-0.5"),
        pytest.param(Fraction(1, 2), Fraction(4), "equivalent", id="plus-0.5"),
        pytest.param(Fraction(51, 100), Fraction(4), "superior", id="just-above-plus-0.5"),
        pytest.param(Fraction(0), Fraction(299, 100), "degraded", id="just-below-3.0"),
    ],
)
def test_verdict_boundaries_are_exact_not_float_fuzzy(
    difference: Fraction, candidate: Fraction, expected: Verdict
) -> None:
    assert verdict_from_difference(difference, candidate) == expected


def test_a_difference_of_exactly_one_and_a_half_is_not_blurred_by_floats() -> None:
    # 20/6 - 29/6 is exactly -1.5; in floats it is -1.4999999999999996, which would read as
    # Acceptable.
    assert float(avg(20)) - float(avg(29)) > -1.5
    assert verdict_for(avg(29), avg(20)) == "degraded"


def verdicts(*specs: tuple[Mode, Verdict]) -> list[QueryVerdict]:
    return [
        QueryVerdict(
            query=f"TQ-{index}",
            mode=mode,
            baseline_average=Fraction(4),
            candidate_average=Fraction(4),
            verdict=verdict,
        )
        for index, (mode, verdict) in enumerate(specs, start=1)
    ]


Q: Final = "quick"
M: Final = "medium"
T: Final = "thorough"
EQ: Final = "equivalent"
AC: Final = "acceptable"
DG: Final = "degraded"
SU: Final = "superior"


@pytest.mark.parametrize(
    ("specs", "kind", "rule"),
    [
        pytest.param(
            [(Q, EQ), (M, SU), (M, EQ), (T, EQ), (T, SU)], "GO", "M3", id="5-of-5-eq-or-superior"
        ),
        pytest.param(
            [(Q, EQ), (M, AC), (M, EQ), (T, EQ), (T, SU)],
            "GO_MONITOR",
            "M4",
            id="no-degraded-but-one-acceptable-gets-monitoring",
        ),
        pytest.param(
            [(Q, EQ), (M, EQ), (M, EQ), (T, EQ), (T, DG)],
            "GO_MONITOR",
            "M5",
            id="4-of-5-ok-one-thorough-degraded",
        ),
        pytest.param(
            [(Q, EQ), (M, DG), (M, EQ), (T, AC), (T, EQ)],
            "GO_MONITOR",
            "M5",
            id="4-of-5-ok-one-medium-degraded",
        ),
        pytest.param(
            [(Q, EQ), (M, EQ), (M, EQ), (T, DG), (T, DG)],
            "CONDITIONAL",
            "M6",
            id="3-of-5-ok-two-thorough-degraded",
        ),
        pytest.param(
            [(Q, EQ), (M, DG), (M, DG), (T, EQ), (T, EQ)],
            "NO_GO",
            "M2",
            id="two-medium-degraded",
        ),
        pytest.param(
            [(Q, DG), (M, EQ), (M, EQ), (T, EQ), (T, EQ)],
            "NO_GO",
            "M1",
            id="any-quick-degraded",
        ),
        pytest.param(
            [(Q, EQ), (M, DG), (M, EQ), (T, DG), (T, EQ)],
            "NO_GO",
            "M7",
            id="seed-tie-break-one-medium-one-thorough-is-conservative",
        ),
        pytest.param(
            [(Q, EQ), (M, EQ), (T, DG), (T, DG), (T, DG)],
            "NO_GO",
            "M7",
            id="three-thorough-degraded-is-conservative-default",
        ),
    ],
)
def test_go_no_go_matrix_rows_for_five_queries(
    specs: list[tuple[Mode, Verdict]], kind: str, rule: str
) -> None:
    decision = decide(verdicts(*specs))
    assert (decision.kind, decision.rule) == (kind, rule)


def test_quick_degradation_beats_every_other_row() -> None:
    decision = decide(verdicts((Q, DG), (M, DG), (M, DG), (T, EQ), (T, EQ)))
    assert decision.rule == "M1"
    assert "TQ-1 (quick)" in decision.reason


@pytest.mark.parametrize(
    ("specs", "kind", "rule"),
    [
        pytest.param(
            [(T, DG)] + [(M, EQ)] * 19, "GO_MONITOR", "M5", id="one-of-20-degraded-monitors"
        ),
        pytest.param(
            [(T, DG), (T, DG)] + [(M, EQ)] * 8,
            "CONDITIONAL",
            "M6",
            id="two-thorough-of-10-is-conditional-counts-do-not-scale-up",
        ),
        pytest.param(
            [(T, DG), (T, DG), (T, DG)] + [(M, EQ)] * 17,
            "NO_GO",
            "M7",
            id="three-thorough-of-20-is-still-no-go",
        ),
        pytest.param(
            [(T, DG), (M, EQ), (M, EQ)],
            "CONDITIONAL",
            "M6",
            id="one-thorough-of-3-fails-the-4-of-5-share-so-conditional",
        ),
        pytest.param(
            [(M, DG), (M, EQ), (T, EQ)],
            "NO_GO",
            "M7",
            id="one-medium-of-3-fails-both-shares",
        ),
        pytest.param(
            [(T, DG), (T, DG), (M, EQ), (M, EQ)],
            "NO_GO",
            "M7",
            id="two-thorough-of-4-fails-the-3-of-5-share",
        ),
        pytest.param([(T, SU)], "GO", "M3", id="a-single-superior-query"),
    ],
)
def test_matrix_generalises_beyond_five_queries_by_counts_and_shares(
    specs: list[tuple[Mode, Verdict]], kind: str, rule: str
) -> None:
    decision = decide(verdicts(*specs))
    assert (decision.kind, decision.rule) == (kind, rule)


def test_deciding_on_no_queries_is_an_error() -> None:
    with pytest.raises(ComparisonError, match="no queries"):
        decide([])


def test_decision_reason_names_the_degraded_queries_and_unstable_ones() -> None:
    items = verdicts((Q, EQ), (M, EQ), (M, EQ), (T, DG), (T, DG))
    items[0] = items[0].model_copy(update={"unstable": True})
    decision = decide(items)
    assert decision.reason == (
        "3/5 OK, 2 Degraded, all in thorough mode: TQ-4 (thorough), TQ-5 (thorough); "
        "unstable over repeated runs: TQ-1 (quick)"
    )
    assert "Option C" in decision.action or "hybrid routing" in decision.action


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        pytest.param("GO", 0, id="go"),
        pytest.param("GO_MONITOR", 0, id="go-with-monitoring"),
        pytest.param("NO_GO", 1, id="no-go"),
        pytest.param("CONDITIONAL", 3, id="conditional"),
    ],
)
def test_exit_status_of_each_decision(kind: str, status: int) -> None:
    table: dict[str, list[tuple[Mode, Verdict]]] = {
        "GO": [(Q, EQ), (M, EQ), (M, EQ), (T, EQ), (T, EQ)],
        "GO_MONITOR": [(Q, EQ), (M, EQ), (M, EQ), (T, EQ), (T, DG)],
        "NO_GO": [(Q, DG), (M, EQ), (M, EQ), (T, EQ), (T, EQ)],
        "CONDITIONAL": [(Q, EQ), (M, EQ), (M, EQ), (T, DG), (T, DG)],
    }
    decision = decide(verdicts(*table[kind]))
    assert decision.kind == kind
    assert decision_exit_status(decision) == status
    assert decision_exit_status(decision.kind) == status
