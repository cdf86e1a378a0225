"""Pair two variants' scored runs per query into verdicts, stability and the decision."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_cleo_grade.comparison.scores import (
    ComparisonError,
    ComparisonRecord,
    Mode,
)
from pytest_cleo_grade.comparison.stats import (
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    RunSummary,
    Stability,
    stability,
    summarize,
)
from pytest_cleo_grade.comparison.verdicts import (
    VERDICT_LABELS,
    Decision,
    QueryVerdict,
    decide,
    verdict_for,
)
from pytest_cleo_grade.models import GradeResult, format_validation_error

__all__ = [
    "COMPARISON_KEYS",
    "Comparison",
    "DecideOn",
    "QueryComparison",
    "compare_grades",
    "compare_records",
    "records_from_grades",
]

DecideOn = Literal["mean", "worst"]

#: Extra keys a comparison grade carries in GRADES.jsonl (besides rubric = "comparison").
COMPARISON_KEYS = ("variant", "query", "mode", "substantive", "structural", "operational")


class QueryComparison(BaseModel):
    """One query: both variants' runs, the verdict, and its stability over repeated runs."""

    model_config = ConfigDict(frozen=True)

    verdict: QueryVerdict
    baseline: RunSummary
    candidate: RunSummary
    stability: Stability | None = Field(
        description="Null unless both variants have 2+ runs (single runs are directional)."
    )


class Comparison(BaseModel):
    """Baseline against candidate over every query both ran, and the go/no-go decision."""

    model_config = ConfigDict(frozen=True)

    baseline: str
    candidate: str
    queries: tuple[QueryComparison, ...]
    decision: Decision = Field(description="The decision the gate uses (per ``decide_on``).")
    decide_on: DecideOn = Field(
        "mean", description="mean: verdicts of the mean averages; worst: unstable ones at worst."
    )
    worst_case: Decision | None = Field(
        None,
        description="The decision with every unstable verdict at its worst; null when none is.",
    )

    @property
    def unstable(self) -> list[str]:
        """Queries whose verdict is unstable over repeated runs."""
        return [q.verdict.query for q in self.queries if q.verdict.unstable]

    def to_json_dict(self) -> dict[str, Any]:
        """JSON form: averages as exact strings ("23/6") and as rounded floats."""

        def number(value: Fraction) -> dict[str, Any]:
            return {"exact": str(value), "value": round(float(value), 4)}

        def runs(summary: RunSummary) -> dict[str, Any]:
            return {
                "runs": summary.runs,
                "mean": number(summary.mean),
                "stdev": None if summary.stdev is None else round(summary.stdev, 4),
                "min": number(summary.minimum),
                "max": number(summary.maximum),
            }

        queries = []
        for item in self.queries:
            verdict = item.verdict
            entry: dict[str, Any] = {
                "query": verdict.query,
                "mode": verdict.mode,
                "baseline": runs(item.baseline),
                "candidate": runs(item.candidate),
                "difference": number(verdict.difference),
                "verdict": verdict.label,
                "unstable": verdict.unstable,
                "interval": None,
            }
            if item.stability is not None:
                interval = item.stability.difference
                entry["interval"] = {
                    "low": number(interval.low),
                    "high": number(interval.high),
                    "level": float(interval.level),
                    "paired": interval.paired,
                    "resamples": interval.resamples,
                    "seed": interval.seed,
                    "worstVerdict": VERDICT_LABELS[item.stability.worst],
                    "bestVerdict": VERDICT_LABELS[item.stability.best],
                }
            queries.append(entry)
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "queries": queries,
            "decision": {
                "decision": self.decision.label,
                "kind": self.decision.kind,
                "rule": self.decision.rule,
                "reason": self.decision.reason,
                "action": self.decision.action,
            },
            "unstable": self.unstable,
            "decideOn": self.decide_on,
            "worstCase": None
            if self.worst_case is None
            else {
                "decision": self.worst_case.label,
                "kind": self.worst_case.kind,
                "rule": self.worst_case.rule,
                "reason": self.worst_case.reason,
            },
        }


def records_from_grades(grades: Iterable[GradeResult]) -> list[ComparisonRecord]:
    """The comparison records among stored grades: those carrying a ``variant`` extra.

    Other grades (plain CLEO grades) are ignored; a comparison grade with a bad or missing
    extra key is an error naming its session and the field.
    """
    records: list[ComparisonRecord] = []
    for grade in grades:
        extra = grade.model_extra or {}
        if "variant" not in extra:
            continue
        data = {key: extra[key] for key in COMPARISON_KEYS if key in extra}
        try:
            record = ComparisonRecord.model_validate(data)
        except ValidationError as exc:
            raise ComparisonError(
                format_validation_error(exc, f"grade of session {grade.session_id}")
            ) from exc
        records.append(record.model_copy(update={"source": f"session {grade.session_id}"}))
    return records


def compare_records(
    records: Sequence[ComparisonRecord],
    baseline: str,
    candidate: str,
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    level: Fraction = DEFAULT_LEVEL,
    decide_on: DecideOn = "mean",
) -> Comparison:
    """Compare ``candidate`` with ``baseline`` over the queries both were scored on.

    Several records of one variant and query are repeated runs (in record order; with equal
    counts, run i of one side pairs with run i of the other). Every query must have runs of
    both variants and one mode, or ComparisonError names it: leaving a query out would let a
    candidate skip the hard ones.

    ``decide_on="worst"`` makes the decision treat each unstable verdict as the worst verdict
    within its intervals (the conservative gate); the default decides on the means and
    reports that worst case beside it.
    """
    if baseline == candidate:
        raise ComparisonError(f"baseline and candidate are the same variant ({baseline!r})")
    known = sorted({record.variant for record in records})
    for name, role in ((baseline, "baseline"), (candidate, "candidate")):
        if name not in known:
            listed = ", ".join(known) if known else "none"
            raise ComparisonError(
                f"no scored runs of {role} variant {name!r} (variants found: {listed})"
            )
    runs: dict[str, dict[str, list[int]]] = {}
    modes: dict[str, Mode] = {}
    for record in records:
        if record.variant not in (baseline, candidate):
            continue
        mode = modes.setdefault(record.query, record.mode)
        if mode != record.mode:
            raise ComparisonError(
                f"query {record.query!r} is scored in both {mode} and {record.mode} mode"
                + (f" ({record.source})" if record.source else "")
            )
        sides = runs.setdefault(record.query, {baseline: [], candidate: []})
        sides[record.variant].append(record.substantive.total)
    queries: list[QueryComparison] = []
    for query, sides in runs.items():
        for name, role in ((baseline, "baseline"), (candidate, "candidate")):
            if not sides[name]:
                raise ComparisonError(f"query {query!r} has no runs of {role} variant {name!r}")
        base = summarize(sides[baseline])
        cand = summarize(sides[candidate])
        point = verdict_for(base.mean, cand.mean)
        stable = stability(
            sides[baseline], sides[candidate], point, seed=seed, resamples=resamples, level=level
        )
        verdict = QueryVerdict(
            query=query,
            mode=modes[query],
            baseline_average=base.mean,
            candidate_average=cand.mean,
            verdict=point,
            unstable=stable is not None and stable.unstable,
        )
        queries.append(
            QueryComparison(verdict=verdict, baseline=base, candidate=cand, stability=stable)
        )
    by_mean = decide([q.verdict for q in queries])
    worst_case = None
    if any(q.verdict.unstable for q in queries):
        worst_case = decide([_at_worst(q) for q in queries])
    return Comparison(
        baseline=baseline,
        candidate=candidate,
        queries=tuple(queries),
        decision=worst_case if decide_on == "worst" and worst_case is not None else by_mean,
        decide_on=decide_on,
        worst_case=worst_case,
    )


def _at_worst(item: QueryComparison) -> QueryVerdict:
    if item.stability is None or not item.verdict.unstable:
        return item.verdict
    return item.verdict.model_copy(update={"verdict": item.stability.worst})


def compare_grades(
    grades: Iterable[GradeResult],
    baseline: str,
    candidate: str,
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    level: Fraction = DEFAULT_LEVEL,
    decide_on: DecideOn = "mean",
) -> Comparison:
    """:func:`compare_records` over the comparison grades of a history (``read_grades``)."""
    return compare_records(
        records_from_grades(grades),
        baseline,
        candidate,
        seed=seed,
        resamples=resamples,
        level=level,
        decide_on=decide_on,
    )
