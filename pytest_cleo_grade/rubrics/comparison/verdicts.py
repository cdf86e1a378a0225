"""Per-query verdicts and the go/no-go matrix as pure functions, with a total precedence."""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from pytest_cleo_grade.rubrics.comparison.scores import ComparisonError, Mode

__all__ = [
    "DECISION_LABELS",
    "FOLLOW_UP_QUERIES",
    "OK_VERDICTS",
    "VERDICT_LABELS",
    "VERDICT_ORDER",
    "Decision",
    "DecisionKind",
    "QueryVerdict",
    "Round",
    "Verdict",
    "decide",
    "decide_matrix",
    "decision_exit_status",
    "verdict_for",
    "verdict_from_difference",
]

Verdict = Literal["equivalent", "acceptable", "degraded", "superior"]
DecisionKind = Literal["GO", "GO_MONITOR", "CONDITIONAL", "NO_GO"]
#: Which queries a decision rests on: the original round only, both rounds, or the follow-up
#: round (the additional queries that settle a CONDITIONAL).
Round = Literal["original", "original + follow-up", "follow-up"]

#: "If CONDITIONAL, run 3 additional queries before final decision."
FOLLOW_UP_QUERIES: Final = 3

VERDICT_LABELS: Final[dict[Verdict, str]] = {
    "equivalent": "Equivalent",
    "acceptable": "Candidate Acceptable",
    "degraded": "Candidate Degraded",
    "superior": "Candidate Superior",
}
#: Verdicts from worst to best: the verdict is monotone in both the difference and the
#: candidate's average, which is what makes "unstable" (stats.py) well defined.
VERDICT_ORDER: Final[tuple[Verdict, ...]] = ("degraded", "acceptable", "equivalent", "superior")
OK_VERDICTS: Final = frozenset({"equivalent", "acceptable", "superior"})

DECISION_LABELS: Final[dict[DecisionKind, str]] = {
    "GO": "GO",
    "GO_MONITOR": "GO (with monitoring note)",
    "CONDITIONAL": "CONDITIONAL",
    "NO_GO": "NO-GO",
}
_ACTIONS: Final[dict[DecisionKind, str]] = {
    "GO": "Keep the candidate as the production model.",
    "GO_MONITOR": "Keep the candidate, add a monitoring note.",
    "CONDITIONAL": "Keep the candidate but evaluate hybrid routing (option C); run 3 more "
    "queries before the final decision.",
    "NO_GO": "Revert to the baseline immediately.",
}
#: Exit statuses of `cleo-grade compare` (2 is taken by usage and input errors).
_EXIT: Final[dict[DecisionKind, int]] = {"GO": 0, "GO_MONITOR": 0, "NO_GO": 1, "CONDITIONAL": 3}

FLOOR: Final = Fraction(3)  # a candidate average below 3.0 is Degraded whatever the difference
SMALL: Final = Fraction(1, 2)  # the 0.5-point step between Equivalent and the other verdicts
LARGE: Final = Fraction(3, 2)  # 1.5 points below the baseline is Degraded

# The comparison rubric row shares, generalised from 5 queries: GO with monitoring needs 4/5 OK,
# CONDITIONAL 3/5 OK. Counts never scale up with more queries (that would loosen the gate);
# the shares make fewer than 5 queries stricter, never looser.
_MONITOR_OK_SHARE: Final = Fraction(4, 5)
_CONDITIONAL_OK_SHARE: Final = Fraction(3, 5)


def verdict_for(baseline_average: Fraction, candidate_average: Fraction) -> Verdict:
    """The comparison rubric's verdict for one query from the two variants' exact Q averages."""
    return verdict_from_difference(
        Fraction(candidate_average) - Fraction(baseline_average), Fraction(candidate_average)
    )


def verdict_from_difference(difference: Fraction, candidate_average: Fraction) -> Verdict:
    """The verdict for ``difference`` = candidate - baseline; first matching rule wins.

    1. candidate average < 3.0            -> degraded (the floor beats any difference)
    2. difference <= -1.5                 -> degraded (at exactly -1.5, not acceptable)
    3. difference <= -0.5                 -> acceptable (at exactly -0.5, not equivalent)
    4. difference <= +0.5                 -> equivalent (at exactly +0.5, not superior)
    5. difference >  +0.5                 -> superior

    Where the rubric's rows overlap (a difference of exactly 0.5 or 1.5, a small difference
    with a candidate below 3.0), the more conservative verdict wins, as the rubric asks. The
    verdict never gets worse when the difference or the candidate's average grows.
    """
    if candidate_average < FLOOR or difference <= -LARGE:
        return "degraded"
    if difference <= -SMALL:
        return "acceptable"
    if difference <= SMALL:
        return "equivalent"
    return "superior"


class QueryVerdict(BaseModel):
    """One query's verdict with the averages it came from."""

    model_config = ConfigDict(frozen=True)

    query: str = Field(description="The query (e.g. TQ-1).")
    mode: Mode = Field(description="The query's thoroughness mode.")
    baseline_average: Fraction = Field(description="Baseline's mean Q average (exact).")
    candidate_average: Fraction = Field(description="Candidate's mean Q average (exact).")
    verdict: Verdict = Field(description="The model-comparison rubric's verdict for the query.")
    unstable: bool = Field(
        False, description="Repeated runs: the interval of the difference crosses a threshold."
    )
    follow_up: bool = Field(
        False, description="One of the additional queries run after a CONDITIONAL decision."
    )

    @property
    def difference(self) -> Fraction:
        return self.candidate_average - self.baseline_average

    @property
    def label(self) -> str:
        return VERDICT_LABELS[self.verdict]


class Decision(BaseModel):
    """The go/no-go decision over all queries, with the matrix row and a reason."""

    model_config = ConfigDict(frozen=True)

    kind: DecisionKind = Field(description="GO, GO_MONITOR, CONDITIONAL or NO_GO.")
    rule: str = Field(
        description="The matrix row that decided (M1..M7), or the follow-up rule (F1, F2)."
    )
    reason: str = Field(description="Why, in one sentence.")
    action: str = Field(description="The model-comparison rubric's action for the decision.")
    round: Round = Field(
        "original", description="Which queries the decision rests on (see docs: follow-up)."
    )

    @property
    def label(self) -> str:
        return DECISION_LABELS[self.kind]


def decision_exit_status(decision: Decision | DecisionKind) -> int:
    """0 for GO (with or without the monitoring note), 1 for NO-GO, 3 for CONDITIONAL."""
    kind = decision.kind if isinstance(decision, Decision) else decision
    return _EXIT[kind]


def _names(verdicts: Sequence[QueryVerdict]) -> str:
    return ", ".join(f"{v.query} ({v.mode})" for v in verdicts)


def decide(verdicts: Sequence[QueryVerdict]) -> Decision:
    """The go/no-go decision: the matrix (:func:`decide_matrix`) over the queries, and, when
    some are follow-up queries (``follow_up``), the final decision over both rounds.

    Without follow-up queries this is the matrix over the original round: a CONDITIONAL asks
    for 3 additional queries. With them (the rubric's "If CONDITIONAL, run 3 additional
    queries before final decision"), the matrix decides over original + follow-up queries:

    - NO-GO, GO or GO with monitoring over both rounds stands (``round`` "original +
      follow-up").
    - CONDITIONAL again, with fewer than 3 follow-up queries: still CONDITIONAL, asking for the
      rest (no final decision on part of the round).
    - CONDITIONAL again, with 3 or more follow-up queries, is settled by the follow-up round
      (``round`` "follow-up"): F1 no follow-up query Degraded -> GO with monitoring (the
      original Degraded queries were not confirmed, and stay noted); F2 any follow-up query
      Degraded -> NO-GO (the degradation repeats: the conservative tie-break).
    """
    if not verdicts:
        raise ComparisonError("no queries to decide on")
    follow_up = [v for v in verdicts if v.follow_up]
    matrix = decide_matrix(verdicts)
    if not follow_up:
        return matrix
    original = len(verdicts) - len(follow_up)
    rounds = f"{original} original + {len(follow_up)} follow-up queries"
    if matrix.kind != "CONDITIONAL":
        return matrix.model_copy(
            update={"round": "original + follow-up", "reason": f"{rounds}: {matrix.reason}"}
        )
    if len(follow_up) < FOLLOW_UP_QUERIES:
        missing = FOLLOW_UP_QUERIES - len(follow_up)
        return matrix.model_copy(
            update={
                "round": "original + follow-up",
                "reason": f"{rounds}: {matrix.reason}",
                "action": "Keep the candidate but evaluate hybrid routing (option C); run "
                f"{missing} more follow-up quer{'y' if missing == 1 else 'ies'} before the "
                "final decision.",
            }
        )
    degraded = [v for v in follow_up if v.verdict == "degraded"]
    unstable = [v for v in verdicts if v.unstable]
    tail = f"; unstable over repeated runs: {_names(unstable)}" if unstable else ""
    if degraded:
        return Decision(
            kind="NO_GO",
            rule="F2",
            reason=f"{rounds}: CONDITIONAL over both rounds ({matrix.reason}); the follow-up "
            f"round has {len(degraded)} Degraded: {_names(degraded)}{tail}",
            action=_ACTIONS["NO_GO"],
            round="follow-up",
        )
    return Decision(
        kind="GO_MONITOR",
        rule="F1",
        reason=f"{rounds}: CONDITIONAL over both rounds ({matrix.reason}); the follow-up "
        f"round has no Degraded query{tail}",
        action=_ACTIONS["GO_MONITOR"],
        round="follow-up",
    )


def decide_matrix(verdicts: Sequence[QueryVerdict]) -> Decision:
    """The comparison rubric's go/no-go matrix over any number of queries; first matching row wins.

    M1 any Degraded in quick mode -> NO-GO. M2 two or more Degraded in medium mode -> NO-GO.
    M3 every query Equivalent or Superior -> GO. M4 no Degraded but some Acceptable -> GO with
    monitoring (no row of the matrix matches; one step more conservative than GO). M5 exactly one
    Degraded and at least 4/5 of the queries OK -> GO with monitoring. M6 one or two Degraded,
    all in thorough mode, and at least 3/5 OK -> CONDITIONAL. M7 anything else -> NO-GO (the
    rubric's conservative default, e.g. one medium and one thorough Degraded).
    """
    if not verdicts:
        raise ComparisonError("no queries to decide on")
    total = len(verdicts)
    degraded = [v for v in verdicts if v.verdict == "degraded"]
    ok_share = Fraction(total - len(degraded), total)
    quick = [v for v in degraded if v.mode == "quick"]
    medium = [v for v in degraded if v.mode == "medium"]
    acceptable = [v for v in verdicts if v.verdict == "acceptable"]
    summary = f"{total - len(degraded)}/{total} OK, {len(degraded)} Degraded"

    unstable = [v for v in verdicts if v.unstable]

    def made(kind: DecisionKind, rule: str, reason: str) -> Decision:
        if unstable:
            # Repeated runs did not pin these verdicts down; the decision stands on the means
            # but the reader must know it is directional.
            reason += f"; unstable over repeated runs: {_names(unstable)}"
        return Decision(kind=kind, rule=rule, reason=reason, action=_ACTIONS[kind])

    if quick:
        return made("NO_GO", "M1", f"{summary}; Degraded in quick mode: {_names(quick)}")
    if len(medium) >= 2:
        return made("NO_GO", "M2", f"{summary}; 2+ Degraded in medium mode: {_names(medium)}")
    if not degraded and not acceptable:
        return made("GO", "M3", f"{total}/{total} Equivalent or Superior")
    if not degraded:
        return made(
            "GO_MONITOR",
            "M4",
            f"{total}/{total} OK, {len(acceptable)} only Acceptable: {_names(acceptable)}",
        )
    if len(degraded) == 1 and ok_share >= _MONITOR_OK_SHARE:
        return made("GO_MONITOR", "M5", f"{summary}: {_names(degraded)}")
    if (
        len(degraded) <= 2
        and all(v.mode == "thorough" for v in degraded)
        and ok_share >= _CONDITIONAL_OK_SHARE
    ):
        return made("CONDITIONAL", "M6", f"{summary}, all in thorough mode: {_names(degraded)}")
    return made(
        "NO_GO",
        "M7",
        f"{summary} ({_names(degraded)}): no GO or CONDITIONAL row matches; "
        "the conservative default applies",
    )
