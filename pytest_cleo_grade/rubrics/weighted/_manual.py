"""A person's scores for a weighted rubric's dimensions, as a grade (``evaluator: "manual"``).

The scores go through the same validation and the same normalisation and weights as a
judge's, so a manual grade and a judged one of the same session compare dimension by
dimension (``cleo-grade calibrate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, Final

from pydantic import ValidationError

from pytest_cleo_grade.core._scale import hundredths_half_up
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.rubrics._points import point
from pytest_cleo_grade.rubrics.weighted.rubric import (
    DIMENSIONS_KEY,
    _DimensionReply,
    _exact,
    _max_points,
    _verdict,
    dimension_shapes,
    normalise,
)
from pytest_cleo_grade.rubrics.weighted.spec import RubricSpec

__all__ = ["MANUAL_SCORES_KEY", "manual_grade", "parse_score"]

#: The history key of a manual grade's scores (a judged grade's are ``judgeScores``).
MANUAL_SCORES_KEY: Final = "manualScores"


def parse_score(spec: RubricSpec, name: str, value: object) -> str | float:
    """One dimension's score as the judge's reply would give it: a category's label (or its
    number), or a number in the dimension's range; ValueError says what is wrong."""
    dimension = next((d for d in spec.dimensions if d.name == name), None)
    if dimension is None:
        names = ", ".join(d.name for d in spec.dimensions)
        raise ValueError(f"{name}: not a dimension of rubric {spec.name} ({names})")
    try:
        reply = _DimensionReply.model_validate({"score": value})
        verdict = _verdict(dimension, reply)
    except ValidationError as exc:
        raise ValueError(f"{name}: {exc.errors()[0]['msg']}") from None
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return verdict.raw


def manual_grade(
    spec: RubricSpec,
    scores: Mapping[str, object],
    *,
    session_id: str,
    entry_count: int,
    reviewer: str | None = None,
    now: datetime | None = None,
) -> GradeResult:
    """The grade ``scores`` (every dimension of ``spec``) give, scored as the rubric scores."""
    unknown = [name for name in scores if name not in {d.name for d in spec.dimensions}]
    if unknown:
        parse_score(spec, unknown[0], scores[unknown[0]])  # raises, naming the dimension
    missing = [d.name for d in spec.dimensions if d.name not in scores]
    if missing:
        raise ValueError(f"{missing[0]}: missing (every dimension needs a score)")
    raw: dict[str, str | float] = {}
    dimensions: dict[str, DimensionScore] = {}
    shares: list[Fraction] = []
    for dimension in spec.dimensions:
        value = parse_score(spec, dimension.name, scores[dimension.name])
        raw[dimension.name] = value
        verdict = _verdict(dimension, _DimensionReply.model_validate({"score": value}))
        share = _exact(dimension.weight) * normalise(dimension, verdict.value)
        shares.append(share)
        dimensions[dimension.name] = DimensionScore(
            score=hundredths_half_up(share * 100), max=_max_points(dimension)
        )
    extra: dict[str, Any] = {MANUAL_SCORES_KEY: raw, DIMENSIONS_KEY: dimension_shapes(spec)}
    if reviewer:
        extra["reviewer"] = reviewer
    return GradeResult.model_validate(
        {
            "sessionId": session_id,
            "totalScore": hundredths_half_up(sum(shares, Fraction(0)) * 100),
            "maxScore": 100,
            "dimensions": dimensions,
            "flags": [],
            "timestamp": now or datetime.now(UTC),
            "entryCount": entry_count,
            "evaluator": "manual",
            "rubric": spec.name,
            "rubricVersion": spec.version,
            "points": [
                point(
                    name, dimension.score, f"{name}.manual", f"A person scored {name} {raw[name]!r}"
                )
                for name, dimension in dimensions.items()
            ],
            **extra,
        }
    )
