"""Compatibility: the rubric protocol's earlier home; import from ``rubrics.protocol``."""

from __future__ import annotations

from pytest_cleo_grade.rubrics.protocol import (
    DEFAULT_RUBRIC,
    CacheMode,
    ConfigurableRubric,
    GradeContext,
    Rubric,
    RubricConfig,
    stamp_rubric,
)

__all__ = [
    "DEFAULT_RUBRIC",
    "CacheMode",
    "ConfigurableRubric",
    "GradeContext",
    "Rubric",
    "RubricConfig",
    "stamp_rubric",
]
