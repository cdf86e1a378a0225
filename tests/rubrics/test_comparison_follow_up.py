"""The final decision over the original and the follow-up round (pure: decide())."""

from __future__ import annotations

from fractions import Fraction

import pytest

from pytest_cleo_grade.rubrics.comparison import QueryVerdict, decide, decision_exit_status
from pytest_cleo_grade.rubrics.comparison.scores import Mode
from pytest_cleo_grade.rubrics.comparison.verdicts import Verdict

ORIGINAL: list[tuple[Mode, Verdict]] = [
    ("quick", "equivalent"),
    ("medium", "equivalent"),
    ("medium", "equivalent"),
    ("thorough", "degraded"),
    ("thorough", "degraded"),
]


def verdicts(
    original: list[tuple[Mode, Verdict]], follow_up: list[tuple[Mode, Verdict]]
) -> list[QueryVerdict]:
    rows = [(mode, v, False) for mode, v in original] + [(mode, v, True) for mode, v in follow_up]
    return [
        QueryVerdict(
            query=f"TQ-{i}",
            mode=mode,
            baseline_average=Fraction(4),
            candidate_average=Fraction(4),
            verdict=verdict,
            follow_up=later,
        )
        for i, (mode, verdict, later) in enumerate(rows, start=1)
    ]


def test_without_follow_up_the_decision_is_the_matrix_over_the_original_round() -> None:
    decision = decide(verdicts(ORIGINAL, []))
    assert (decision.kind, decision.rule, decision.round) == ("CONDITIONAL", "M6", "original")
    assert decision_exit_status(decision) == 3


@pytest.mark.parametrize(
    ("follow_up", "kind", "rule", "round_"),
    [
        pytest.param([("quick", "equivalent")] * 3, "GO_MONITOR", "F1", "follow-up", id="F1-clean"),
        pytest.param(
            [("quick", "equivalent"), ("medium", "superior"), ("thorough", "acceptable")],
            "GO_MONITOR",
            "F1",
            "follow-up",
            id="F1-ok-verdicts",
        ),
        pytest.param(
            [("quick", "degraded"), ("medium", "equivalent"), ("thorough", "equivalent")],
            "NO_GO",
            "M1",
            "original + follow-up",
            id="matrix-quick-degraded",
        ),
        pytest.param(
            [("thorough", "degraded"), ("medium", "equivalent"), ("quick", "equivalent")],
            "NO_GO",
            "M7",
            "original + follow-up",
            id="matrix-three-degraded",
        ),
    ],
)
def test_three_follow_up_queries_give_a_final_go_or_no_go(
    follow_up: list[tuple[Mode, Verdict]], kind: str, rule: str, round_: str
) -> None:
    decision = decide(verdicts(ORIGINAL, follow_up))
    assert (decision.kind, decision.rule, decision.round) == (kind, rule, round_)
    assert decision_exit_status(decision) in (0, 1)


def test_a_conditional_the_follow_up_round_repeats_is_no_go_the_conservative_tie_break() -> None:
    original: list[tuple[Mode, Verdict]] = [*ORIGINAL[:4], ("thorough", "equivalent")]
    follow_up: list[tuple[Mode, Verdict]] = [
        ("quick", "equivalent"),
        ("medium", "equivalent"),
        ("thorough", "degraded"),
    ]
    decision = decide(verdicts(original, follow_up))
    assert (decision.kind, decision.rule, decision.round) == ("NO_GO", "F2", "follow-up")
    assert decision.reason.endswith("the follow-up round has 1 Degraded: TQ-8 (thorough)")


def test_an_incomplete_follow_up_round_is_not_final() -> None:
    decision = decide(verdicts(ORIGINAL, [("quick", "equivalent"), ("medium", "equivalent")]))
    assert decision.kind == "CONDITIONAL"
    assert decision.action.endswith("run 1 more follow-up query before the final decision.")
