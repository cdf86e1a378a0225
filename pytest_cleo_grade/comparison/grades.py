"""A comparison run as a GradeResult: structural and substantive dimensions plus the extras."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Final, Literal

from pydantic import ValidationError

from pytest_cleo_grade.comparison.metrics import (
    METRICS,
    ComparisonError,
    Judge,
    Mode,
    SubstantiveScores,
    measure_operational,
    scores_from_judge,
)
from pytest_cleo_grade.comparison.structural import (
    StructuralConfig,
    check_structure,
    count_dispatches,
)
from pytest_cleo_grade.models import (
    AuditEntry,
    DimensionScore,
    GradeResult,
    format_validation_error,
)
from pytest_cleo_grade.rubrics.cleo import coerce_entries, order_entries

__all__ = ["COMPARISON_DIMENSIONS", "RUBRIC_NAME", "comparison_grade", "comparison_properties"]

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
) -> GradeResult:
    """Grade one variant's run on one query with seed 002's rubric.

    ``scores`` are the six Q scores, a ``{"Q-01": 4, ...}`` mapping, or a judge callable
    (prompt in, JSON text out). The GradeResult has two dimensions, ``structural`` (checks
    passed of 6) and ``substantive`` (Q total of 30), so its total is out of 36; failed checks
    become flags. The extras ``rubric``, ``variant``, ``query``, ``mode``, ``substantive``,
    ``structural`` and ``operational`` are what ``cleo-grade compare`` reads back.
    """
    if mode not in ("quick", "medium", "thorough"):
        raise ComparisonError(f"mode must be quick, medium or thorough, not {mode!r}")
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
        }
    )


def comparison_properties(result: GradeResult) -> list[tuple[str, str]]:
    """JUnit properties of a comparison grade, beside the plugin's usual ``cleo_*`` ones.

    ``cleo_variant``, ``cleo_query``, ``cleo_mode``, ``cleo_q_average`` (two decimals, half
    up), one ``cleo_Q-0N`` per metric and one ``cleo_S-0N`` (``pass``/``fail``) per check.
    Empty for a grade without the comparison extras.
    """
    extra = result.model_extra or {}
    if "variant" not in extra or not isinstance(extra.get("substantive"), Mapping):
        return []
    scores: Mapping[str, Any] = extra["substantive"]
    values = [value for value in scores.values() if isinstance(value, int)]
    properties = [
        ("cleo_variant", str(extra["variant"])),
        ("cleo_query", str(extra.get("query", ""))),
        ("cleo_mode", str(extra.get("mode", ""))),
    ]
    if values:
        average = Decimal(sum(values)) / Decimal(len(values))
        rounded = average.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        properties.append(("cleo_q_average", str(rounded)))
    properties += [(f"cleo_{metric}", str(value)) for metric, value in scores.items()]
    structural = extra.get("structural")
    if isinstance(structural, Mapping):
        properties += [
            (f"cleo_{check}", "pass" if passed else "fail") for check, passed in structural.items()
        ]
    return properties
