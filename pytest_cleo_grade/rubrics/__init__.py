"""Rubrics: pure functions that turn a session's audit entries into a GradeResult."""

from __future__ import annotations

from pytest_cleo_grade.rubrics.cleo import CLEO_DIMENSIONS, EMPTY_SESSION_FLAG, grade_entries

__all__ = ["CLEO_DIMENSIONS", "EMPTY_SESSION_FLAG", "grade_entries"]
