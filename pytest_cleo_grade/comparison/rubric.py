"""Seed 002's comparison rubric behind the package's Rubric protocol (name ``comparison``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from pytest_cleo_grade.comparison.grades import RUBRIC_NAME, comparison_grade
from pytest_cleo_grade.comparison.metrics import MODES, ComparisonError, Judge, Mode
from pytest_cleo_grade.comparison.structural import CHECKS, StructuralConfig
from pytest_cleo_grade.models import AuditEntry, GradeResult
from pytest_cleo_grade.rubrics.base import GradeContext, RubricConfig

__all__ = ["ComparisonRubric"]

RUBRIC_VERSION: Final = "1.0.0"
_REQUIRED: Final = ("output", "mode", "variant", "query")


class ComparisonRubric:
    """Grades one run for a model comparison; what it needs comes in ``context.extra``.

    Required keys: ``output`` (the agent's output text), ``mode`` (quick/medium/thorough),
    ``variant`` and ``query``. Optional: ``scores`` (``{"Q-01": 4, ...}``; without them the
    configured judge is asked), ``latency_seconds``, ``tokens``, ``note``.
    """

    def __init__(
        self, *, judge: Judge | None = None, config: StructuralConfig | None = None
    ) -> None:
        self.judge = judge
        self.config = config

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
        """A copy that asks ``config.judge`` for the scores a test does not give."""
        return ComparisonRubric(judge=config.judge or self.judge, config=self.config)

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
        result = comparison_grade(
            list(entries),
            str(extra["output"]),
            checked_mode,
            scores,
            session_id=session_id,
            variant=str(extra["variant"]),
            query=str(extra["query"]),
            config=self.config,
            latency_seconds=extra.get("latency_seconds"),
            tokens=extra.get("tokens"),
            note=extra.get("note"),
            now=now,
        )
        if context is not None and context.task_id and result.task_id is None:
            result = result.model_copy(update={"task_id": context.task_id})
        return result.model_copy(update={"rubricVersion": RUBRIC_VERSION})
