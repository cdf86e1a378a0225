"""Several rubrics grading one session, weighted: ``cleo:0.7,trajectory:0.3``.

The combined result keeps every part's dimensions (prefixed ``cleo.``, ``trajectory.``) at
their own scale, so each still reads as its rubric meant it; its total is the weighted mean
of the parts' percentages out of 100, which thresholds and the gate use. Each part's whole
result is kept in the ``parts`` extra, its flags are prefixed with its rubric's name, and its
``points`` items with its dimensions' prefix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.core.models import AuditEntry, DimensionScore, GradeResult, coerce_entries
from pytest_cleo_grade.core.settings import relative_weights, rubric_weights_text
from pytest_cleo_grade.rubrics._document import read_document
from pytest_cleo_grade.rubrics._identity import HASH_KEY, settings_hash
from pytest_cleo_grade.rubrics.protocol import (
    ConfigurableRubric,
    GradeContext,
    Rubric,
    RubricConfig,
    stamp_rubric,
)
from pytest_cleo_grade.rubrics.rules import RULES_RUBRIC, is_rule_document

__all__ = ["CombinedRubric"]

#: Rubrics that cannot be a part: a comparison grades a variant's output, not a session.
_NOT_COMBINABLE = frozenset({"comparison"})


class CombinedRubric:
    """Parts ``{name: (rubric, weight)}``; weights are relative (normalised to sum to 1)."""

    def __init__(self, parts: Mapping[str, tuple[Rubric, float]]) -> None:
        for name in parts:
            if name in _NOT_COMBINABLE:
                raise RubricError(f"rubric {name!r} cannot be combined with others")
        weights = {name: weight for name, (_, weight) in parts.items()}
        shares = relative_weights(weights)
        self.parts = {name: (rubric, shares[name]) for name, (rubric, _) in parts.items()}
        self.name = rubric_weights_text(weights)

    @property
    def version(self) -> str:
        return " + ".join(f"{name} {rubric.version}" for name, (rubric, _) in self.parts.items())

    @property
    def dimensions(self) -> Mapping[str, float]:
        return {
            f"{name}.{dimension}": maximum
            for name, (rubric, _) in self.parts.items()
            for dimension, maximum in rubric.dimensions.items()
        }

    def configure(self, config: RubricConfig) -> CombinedRubric:
        """Each configurable part configured by ``config``; the rubric file goes to the part
        it is written for (a rule file to ``rules``, any other to the other parts)."""
        rule_file = config.rubric_file is not None and is_rule_document(
            read_document(config.rubric_file)[0]
        )
        parts = {}
        taken = False
        for name, (rubric, weight) in self.parts.items():
            if isinstance(rubric, ConfigurableRubric):
                mine = config.rubric_file is not None and rule_file == (name == RULES_RUBRIC)
                taken = taken or mine
                part_config = config if mine else replace(config, rubric_file=None)
                rubric = rubric.configure(part_config)
            parts[name] = (rubric, weight)
        if config.rubric_file is not None and not taken:
            # Graded as if it were not given, the user would believe their file applied.
            kind = "a rule file" if rule_file else "not a rule file"
            raise RubricError(
                f"{config.rubric_file}: no part of rubric {self.name!r} reads it ({kind}: it "
                f"is for {'rules' if rule_file else 'weighted or trajectory'})"
            )
        return CombinedRubric(parts)

    def grade(
        self,
        entries: Iterable[AuditEntry | Mapping[str, Any]],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        """Grade with every part (the same entries, the same clock) and weigh the results."""
        validated = coerce_entries(entries)
        timestamp = now or datetime.now(UTC)
        dimensions: dict[str, DimensionScore] = {}
        flags: list[str] = []
        points: list[dict[str, Any]] = []
        parts: dict[str, Any] = {}
        total = 0.0
        entry_count = 0
        identities: dict[str, list[Any]] = {}
        for name, (rubric, weight) in self.parts.items():
            result = stamp_rubric(
                rubric.grade(validated, session_id=session_id, now=timestamp, context=context),
                rubric,
            )
            part_extra = result.model_extra or {}
            identities[name] = [weight, rubric.version, part_extra.get(HASH_KEY)]
            total += weight * result.percent
            entry_count = max(entry_count, result.entry_count)
            dimensions.update({f"{name}.{d}": score for d, score in result.dimensions.items()})
            flags.extend(f"{name}: {flag}" for flag in result.flags)
            points.extend(
                {**item.model_dump(), "dimension": f"{name}.{item.dimension}"}
                for item in result.points
            )
            # The part's points are already in the combined list: not stored twice.
            part = {k: v for k, v in result.to_json_dict().items() if k != "points"}
            parts[name] = {"weight": round(weight, 6), "result": part}
        return GradeResult(
            session_id=session_id,
            task_id=context.task_id if context is not None else None,
            # Rounded so that 0.7 x 100% + 0.3 x 50% is exactly 85, not 84.99999999999999.
            total_score=round(total, 6),
            max_score=100,
            dimensions=dimensions,
            flags=flags,
            timestamp=timestamp,
            entry_count=entry_count,
            points=points,
            parts=parts,
            # The parts' weights, versions and settings: any of them changed is another rubric.
            rubricHash=settings_hash(identities),
        )
