"""The model-comparison rubric (name ``comparison``): one run as a GradeResult.

Structural checks and substantive scores become the two dimensions; the comparison extras
(variant, query, mode, metrics) ride along for ``compare_grades`` in comparison/decision.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import ValidationError

from pytest_cleo_grade.core.models import (
    AuditEntry,
    DimensionScore,
    GradeResult,
    coerce_entries,
    format_validation_error,
    order_entries,
)
from pytest_cleo_grade.judges.protocol import ReplyCache, UsageMeter
from pytest_cleo_grade.rubrics._points import point
from pytest_cleo_grade.rubrics.comparison.scores import (
    METRICS,
    MODES,
    ComparisonError,
    Judge,
    Mode,
    SubstantiveScores,
    measure_operational,
    scores_from_judge,
)
from pytest_cleo_grade.rubrics.comparison.structural import (
    CHECKS,
    StructuralConfig,
    check_structure,
    count_dispatches,
)
from pytest_cleo_grade.rubrics.protocol import GradeContext, RubricConfig

__all__ = ["COMPARISON_DIMENSIONS", "RUBRIC_NAME", "ComparisonRubric", "comparison_grade"]

RUBRIC_NAME: Final = "comparison"
#: The dimensions of a comparison grade, in order: 6 checks (1 point each), 6 metrics (5 each).
COMPARISON_DIMENSIONS: Final = ("structural", "substantive")


def _scores(
    scores: SubstantiveScores | Mapping[str, Any] | Judge,
    *,
    query: str,
    output_text: str,
    mode: Mode,
) -> SubstantiveScores:
    if isinstance(scores, SubstantiveScores):
        return scores
    if isinstance(scores, Mapping):
        try:
            return SubstantiveScores.model_validate(dict(scores))
        except ValidationError as exc:
            raise ComparisonError(format_validation_error(exc, "substantive scores")) from exc
    return scores_from_judge(scores, query=query, output_text=output_text, mode=mode)


def comparison_grade(
    entries: Sequence[AuditEntry | Mapping[str, Any]],
    output_text: str,
    mode: Mode,
    scores: SubstantiveScores | Mapping[str, Any] | Judge,
    *,
    session_id: str,
    variant: str,
    query: str,
    config: StructuralConfig | None = None,
    latency_seconds: float | None = None,
    tokens: int | None = None,
    note: str | None = None,
    now: datetime | None = None,
    evaluator: Literal["auto", "manual"] = "auto",
    round: Literal["original", "follow-up"] = "original",
) -> GradeResult:
    """Grade one variant's run on one query with the model-comparison rubric's rubric.

    ``scores`` are the six Q scores, a ``{"Q-01": 4, ...}`` mapping, or a judge callable
    (prompt in, JSON text out). The GradeResult has two dimensions, ``structural`` (checks
    passed of 6) and ``substantive`` (Q total of 30), so its total is out of 36; failed checks
    become flags. The extras ``rubric``, ``variant``, ``query``, ``mode``, ``substantive``,
    ``structural`` and ``operational`` are what ``cleo-grade compare`` reads back, and
    ``round`` = ``"follow-up"`` for one of the additional queries run after a CONDITIONAL
    decision (absent for the original round).
    """
    if round not in ("original", "follow-up"):
        raise ComparisonError(f"round must be 'original' or 'follow-up', not {round!r}")
    if mode not in ("quick", "medium", "thorough"):
        raise ComparisonError(f"mode must be quick, medium or thorough, not {mode!r}")
    # What cleo-grade compare reads back must validate there: refuse here what it would refuse.
    for name, value in (("variant", variant), ("query", query)):
        if not isinstance(value, str) or not value.strip():
            raise ComparisonError(f"{name} must be a non-blank string, not {value!r}")
    cfg = config or StructuralConfig()
    ordered = order_entries(coerce_entries(entries))
    checks = check_structure(ordered, output_text, mode, cfg)
    substantive = _scores(scores, query=query, output_text=output_text, mode=mode)
    operational = measure_operational(
        ordered,
        dispatches=count_dispatches(ordered, cfg),
        latency_seconds=latency_seconds,
        tokens=tokens,
        note=note,
    )
    passed = sum(check.passed for check in checks)
    values = substantive.as_dict()
    dimensions = {
        "structural": DimensionScore(
            score=passed,
            max=len(checks),
            evidence=[
                f"{check.label}: {'PASS' if check.passed else 'FAIL'} ({'; '.join(check.evidence)})"
                for check in checks
            ],
        ),
        "substantive": DimensionScore(
            score=substantive.total,
            max=5 * len(values),
            evidence=[f"{metric} {name}: {values[metric]}/5" for metric, name in METRICS]
            + [f"average {float(substantive.average):.2f} (exactly {substantive.average})"],
        ),
    }
    return GradeResult.model_validate(
        {
            "sessionId": session_id,
            "totalScore": passed + substantive.total,
            "maxScore": len(checks) + 5 * len(values),
            "dimensions": dimensions,
            "flags": [
                f"{check.label} failed: {check.evidence[0]}" for check in checks if not check.passed
            ],
            "timestamp": now or datetime.now(UTC),
            "entryCount": len(ordered),
            "evaluator": evaluator,
            "rubric": RUBRIC_NAME,
            "variant": variant,
            "query": query,
            "mode": mode,
            "substantive": values,
            "structural": {check.id: check.passed for check in checks},
            "operational": operational.as_dict(),
            **({"round": round} if round == "follow-up" else {}),
            "points": [
                *(
                    point(
                        "structural",
                        1 if check.passed else 0,
                        f"structural.{check.id}",
                        f"{check.label}: {'PASS' if check.passed else 'FAIL'}",
                    )
                    for check in checks
                ),
                *(
                    point(
                        "substantive",
                        values[metric],
                        f"substantive.{metric}",
                        f"{name}: {values[metric]}/5",
                    )
                    for metric, name in METRICS
                ),
            ],
        }
    )


RUBRIC_VERSION: Final = "1.0.0"
_REQUIRED: Final = ("output", "mode", "variant", "query")


class ComparisonRubric:
    """Grades one run for a model comparison; what it needs comes in ``context.extra``.

    Required keys: ``output`` (the agent's output text), ``mode`` (quick/medium/thorough),
    ``variant`` and ``query``. Optional: ``scores`` (``{"Q-01": 4, ...}``; without them the
    configured judge is asked), ``latency_seconds``, ``tokens``, ``note``, ``round``
    (``"follow-up"`` for an additional query after a CONDITIONAL decision).
    """

    def __init__(
        self,
        *,
        judge: Judge | None = None,
        config: StructuralConfig | None = None,
        cache: ReplyCache | None = None,
    ) -> None:
        self.judge = judge
        self.config = config
        self.cache = cache

    @property
    def name(self) -> str:
        return RUBRIC_NAME

    @property
    def version(self) -> str:
        return RUBRIC_VERSION

    @property
    def dimensions(self) -> Mapping[str, float]:
        return {"structural": len(CHECKS), "substantive": 30}

    def configure(self, config: RubricConfig) -> ComparisonRubric:
        """A copy that asks ``config.judge`` for the scores a test does not give, keeping its
        replies in ``config``'s judge cache (``cache_path``, ``cache_mode``) as the weighted
        rubric does."""
        cache = self.cache
        if config.cache_path is not None and config.connector is not None:
            cache = config.connector.cache(Path(config.cache_path), config.cache_mode)
        return ComparisonRubric(judge=config.judge or self.judge, config=self.config, cache=cache)

    def grade(
        self,
        entries: Iterable[AuditEntry | Mapping[str, Any]],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        extra = dict(context.extra) if context is not None else {}
        missing = [key for key in _REQUIRED if key not in extra]
        if missing:
            raise ComparisonError(
                f"comparison rubric: the graded test must give {', '.join(missing)} "
                "(e.g. marker arguments variant=, query=, mode= and the output text)"
            )
        mode = extra["mode"]
        if mode not in MODES:
            raise ComparisonError(f"mode must be quick, medium or thorough, not {mode!r}")
        scores = extra.get("scores") or self.judge
        if scores is None:
            raise ComparisonError(
                "comparison rubric: no Q-01..Q-06 scores given and no judge configured"
            )
        checked_mode: Mode = mode
        meter = None
        if not isinstance(scores, (SubstantiveScores, Mapping)):
            # Judged here rather than in comparison_grade, to use the cache and count usage.
            meter = UsageMeter()
            scores = scores_from_judge(
                scores,
                query=str(extra["query"]),
                output_text=str(extra["output"]),
                mode=checked_mode,
                cache=self.cache,
                cache_scope=extra.get("cacheScope") or None,
                rubric_version=RUBRIC_VERSION,
                meter=meter,
            )
        listed = list(entries)
        latency, tokens, measured = _captured(listed, context, extra)
        result = comparison_grade(
            listed,
            str(extra["output"]),
            checked_mode,
            scores,
            session_id=session_id,
            variant=str(extra["variant"]),
            query=str(extra["query"]),
            config=self.config,
            latency_seconds=latency,
            tokens=tokens,
            note=extra.get("note"),
            now=now,
            round=extra.get("round") or "original",
        )
        if context is not None and context.task_id and result.task_id is None:
            result = result.model_copy(update={"task_id": context.task_id})
        update: dict[str, Any] = {"rubricVersion": RUBRIC_VERSION}
        if measured:
            update["operationalMeasured"] = measured
        if meter is not None:
            # The judge's cost, in the weighted rubric's keys: the run's judge usage sums it.
            update["judgeUsage"] = meter.as_extra()
        return result.model_copy(update=update)


def _captured(
    entries: list[AuditEntry | Mapping[str, Any]],
    context: GradeContext | None,
    extra: Mapping[str, Any],
) -> tuple[float | None, int | None, dict[str, str]]:
    """OP-01 and OP-04 from what the session captured, unless the test gave them: latency
    from the first user message to the final output (else the first to the last call, named
    a fallback), tokens summed over the model calls. Also how each was measured."""
    from pytest_cleo_grade.rubrics._session_metrics import session_metrics

    latency, tokens = extra.get("latency_seconds"), extra.get("tokens")
    measured: dict[str, str] = {}
    if latency is not None:
        measured["OP-01"] = "given by the test"
    if tokens is not None:
        measured["OP-04"] = "given by the test"
    if latency is not None and tokens is not None:
        return latency, tokens, measured
    metrics = session_metrics(
        order_entries(coerce_entries(entries)),
        context.conversation if context is not None else None,
    )
    if latency is None and metrics.latency_seconds is not None:
        latency = metrics.latency_seconds
        measured["OP-01"] = metrics.latency_text
    if tokens is None and metrics.tokens is not None:
        tokens = metrics.tokens
        measured["OP-04"] = f"summed over {metrics.model_calls} model calls"
    return latency, tokens, measured
