"""Pair two variants' scored runs per query into verdicts, stability and the decision."""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from fractions import Fraction
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pytest_cleo_grade.core.models import GradeResult, format_validation_error
from pytest_cleo_grade.rubrics.comparison.scores import (
    METRIC_IDS,
    ComparisonError,
    ComparisonRecord,
    Mode,
)
from pytest_cleo_grade.rubrics.comparison.stats import (
    DEFAULT_LEVEL,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    RunSummary,
    Stability,
    stability,
    summarize,
)
from pytest_cleo_grade.rubrics.comparison.verdicts import (
    VERDICT_LABELS,
    Decision,
    QueryVerdict,
    decide,
    verdict_for,
)

__all__ = [
    "COMPARISON_KEYS",
    "MEANINGFUL_GAP",
    "BadComparisonGrade",
    "Comparison",
    "DecideOn",
    "MetricGap",
    "QueryComparison",
    "compare_grades",
    "compare_records",
    "records_from_grades",
]

DecideOn = Literal["mean", "worst"]

#: Extra keys a comparison grade carries in GRADES.jsonl (besides rubric = "comparison").
COMPARISON_KEYS = (
    "variant",
    "query",
    "mode",
    "substantive",
    "structural",
    "operational",
    "round",
)


#: The Scoring Rubric's non-determinism mitigation: "Require 2+ point differences for
#: 'meaningful' gaps".
MEANINGFUL_GAP: Final = Fraction(2)


class MetricGap(BaseModel):
    """One substantive metric of one query: both variants' mean scores and their gap."""

    model_config = ConfigDict(frozen=True)

    metric: str = Field(description="Q-01..Q-06.")
    baseline: Fraction = Field(description="The baseline's mean score of the metric (exact).")
    candidate: Fraction = Field(description="The candidate's mean score of the metric (exact).")

    @property
    def difference(self) -> Fraction:
        return self.candidate - self.baseline


class QueryComparison(BaseModel):
    """One query: both variants' runs, the verdict, and its stability over repeated runs."""

    model_config = ConfigDict(frozen=True)

    verdict: QueryVerdict
    baseline: RunSummary
    candidate: RunSummary
    stability: Stability | None = Field(
        description="Null unless both variants have 2+ runs (single runs are directional)."
    )
    metrics: tuple[MetricGap, ...] = Field(
        (), description="Per-metric mean scores of both variants, Q-01..Q-06."
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
    meaningful_gap: Fraction | None = Field(
        None,
        description="With a value, per-metric differences under it are marked not meaningful "
        "in the report (the rubric's 2+ points); the decision does not change.",
    )

    def meaningful(self, gap: MetricGap) -> bool:
        """Whether a per-metric difference is a meaningful gap (|difference| >= the option)."""
        return self.meaningful_gap is not None and abs(gap.difference) >= self.meaningful_gap

    def meaningful_gaps(self) -> list[tuple[str, MetricGap]]:
        """(query, gap) of every meaningful per-metric gap, in query then metric order."""
        return [
            (item.verdict.query, gap)
            for item in self.queries
            for gap in item.metrics
            if self.meaningful(gap)
        ]

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
                "round": "follow-up" if verdict.follow_up else "original",
                "unstable": verdict.unstable,
                "interval": None,
            }
            if self.meaningful_gap is not None:
                entry["metrics"] = {
                    gap.metric: {
                        "baseline": number(gap.baseline),
                        "candidate": number(gap.candidate),
                        "difference": number(gap.difference),
                        "meaningful": self.meaningful(gap),
                    }
                    for gap in item.metrics
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
                "round": self.decision.round,
                "final": self.decision.kind != "CONDITIONAL",
            },
            "unstable": self.unstable,
            **(
                {"meaningfulGap": number(self.meaningful_gap)}
                if self.meaningful_gap is not None
                else {}
            ),
            "decideOn": self.decide_on,
            "worstCase": None
            if self.worst_case is None
            else {
                "decision": self.worst_case.label,
                "kind": self.worst_case.kind,
                "rule": self.worst_case.rule,
                "reason": self.worst_case.reason,
                "round": self.worst_case.round,
            },
        }


class BadComparisonGrade(ComparisonError):
    """A stored comparison grade that does not validate; ``grade`` is it, so that a reader
    of the history can name its line."""

    def __init__(self, message: str, grade: GradeResult) -> None:
        super().__init__(message)
        self.grade = grade


def records_from_grades(
    grades: Iterable[GradeResult], variants: Collection[str] | None = None
) -> list[ComparisonRecord]:
    """The comparison records among stored grades: those carrying a ``variant`` extra.

    Other grades (plain CLEO grades) are ignored; a comparison grade with a bad or missing
    extra key is an error naming its session and the field. With ``variants``, that is so
    only for the grades of those variants: a broken grade of a variant that is not compared
    is left out, and never blocks a comparison.
    """
    records: list[ComparisonRecord] = []
    for grade in grades:
        extra = grade.model_extra or {}
        if "variant" not in extra:
            continue
        variant = extra["variant"]
        ours = variants is None or (isinstance(variant, str) and variant.strip() in variants)
        data = {key: extra[key] for key in COMPARISON_KEYS if key in extra}
        try:
            record = ComparisonRecord.model_validate(data)
        except ValidationError as exc:
            if not ours:
                continue
            raise BadComparisonGrade(
                format_validation_error(exc, f"grade of session {grade.session_id}"), grade
            ) from exc
        update: dict[str, Any] = {"source": f"session {grade.session_id}"}
        # The test id and run index order repeated runs for pairing (see _pairing_key): the
        # history's line order is completion order, which pytest-xdist shuffles.
        test_id, run = extra.get("testId"), extra.get("run")
        if isinstance(test_id, str):
            update["test_id"] = test_id
        if isinstance(run, int) and not isinstance(run, bool):
            update["run"] = run
        records.append(record.model_copy(update=update))
    return records


def _pairing_key(record: ComparisonRecord) -> tuple[Any, ...]:
    """Where a run stands among its variant's runs of one query, for pairing.

    Stored grades sort by their test id, numbers compared as numbers (``[2]`` before
    ``[10]``, as parametrize and runs=N number them), then by run index: a key the history
    line carries, so the controller of a pytest run (serial or xdist) and ``cleo-grade
    compare`` afterwards pair the same runs, whatever order the tests finished in. Score-sheet
    rows (no test id) follow, in the order written.
    """
    if not record.test_id:
        return (1,)
    parts = re.split(r"(\d+)", record.test_id)
    natural = tuple((0, int(part), "") if i % 2 else (1, 0, part) for i, part in enumerate(parts))
    return (0, natural, -1 if record.run is None else record.run)


def compare_records(
    records: Sequence[ComparisonRecord],
    baseline: str,
    candidate: str,
    *,
    seed: int = DEFAULT_SEED,
    resamples: int = DEFAULT_RESAMPLES,
    level: Fraction = DEFAULT_LEVEL,
    decide_on: DecideOn = "mean",
    meaningful_gap: Fraction | int | None = None,
) -> Comparison:
    """Compare ``candidate`` with ``baseline`` over the queries both were scored on.

    Several records of one variant and query are repeated runs; with equal counts, run i of
    one side pairs with run i of the other, runs ordered by test id and run index (stored
    grades, see ``_pairing_key``), then in record order (score-sheet rows). Every query must
    have runs of both variants and one mode, or ComparisonError names it: leaving a query out
    would let a candidate skip the hard ones.

    ``decide_on="worst"`` makes the decision treat each unstable verdict as the worst verdict
    within its intervals (the conservative gate); the default decides on the means and
    reports that worst case beside it.

    ``meaningful_gap`` (the rubric's 2 points: :data:`MEANINGFUL_GAP`) marks per-metric
    differences smaller than it as not meaningful in the report; verdicts and the decision
    stay on the averages, as the rubric's verdict scale says.
    """
    if meaningful_gap is not None and Fraction(meaningful_gap) <= 0:
        raise ComparisonError(f"meaningful_gap must be positive, not {meaningful_gap}")
    if baseline == candidate:
        raise ComparisonError(f"baseline and candidate are the same variant ({baseline!r})")
    known = sorted({record.variant for record in records})
    for name, role in ((baseline, "baseline"), (candidate, "candidate")):
        if name not in known:
            listed = ", ".join(known) if known else "none"
            raise ComparisonError(
                f"no scored runs of {role} variant {name!r} (variants found: {listed})"
            )
    runs: dict[str, dict[str, list[ComparisonRecord]]] = {}
    modes: dict[str, Mode] = {}
    rounds: dict[str, str] = {}
    for record in records:
        if record.variant not in (baseline, candidate):
            continue
        mode = modes.setdefault(record.query, record.mode)
        if mode != record.mode:
            raise ComparisonError(
                f"query {record.query!r} is scored in both {mode} and {record.mode} mode"
                + (f" ({record.source})" if record.source else "")
            )
        # A query belongs to one round: counted in both, it would settle its own CONDITIONAL.
        round_ = rounds.setdefault(record.query, record.round)
        if round_ != record.round:
            raise ComparisonError(
                f"query {record.query!r} is in both the {round_} and the {record.round} round"
                + (f" ({record.source})" if record.source else "")
            )
        runs.setdefault(record.query, {baseline: [], candidate: []})[record.variant].append(record)
    queries: list[QueryComparison] = []
    for query, by_variant in runs.items():
        for name, role in ((baseline, "baseline"), (candidate, "candidate")):
            if not by_variant[name]:
                raise ComparisonError(f"query {query!r} has no runs of {role} variant {name!r}")
        # sorted() is stable: runs with equal keys (sheet rows) keep their record order.
        sides = {
            name: [r.substantive.total for r in sorted(side, key=_pairing_key)]
            for name, side in by_variant.items()
        }
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
            follow_up=rounds[query] == "follow-up",
        )
        queries.append(
            QueryComparison(
                verdict=verdict,
                baseline=base,
                candidate=cand,
                stability=stable,
                metrics=_metric_gaps(by_variant[baseline], by_variant[candidate]),
            )
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
        meaningful_gap=None if meaningful_gap is None else Fraction(meaningful_gap),
    )


def _metric_gaps(
    baseline: Sequence[ComparisonRecord], candidate: Sequence[ComparisonRecord]
) -> tuple[MetricGap, ...]:
    def mean(side: Sequence[ComparisonRecord], metric: str) -> Fraction:
        return Fraction(sum(r.substantive.as_dict()[metric] for r in side), len(side))

    return tuple(
        MetricGap(metric=metric, baseline=mean(baseline, metric), candidate=mean(candidate, metric))
        for metric in METRIC_IDS
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
    meaningful_gap: Fraction | int | None = None,
) -> Comparison:
    """:func:`compare_records` over the comparison grades of a history (``read_grades``)."""
    return compare_records(
        records_from_grades(grades, (baseline, candidate)),
        baseline,
        candidate,
        seed=seed,
        resamples=resamples,
        level=level,
        decide_on=decide_on,
        meaningful_gap=meaningful_gap,
    )
