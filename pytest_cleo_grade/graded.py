"""Compatibility: the fixture's session type under its earlier name; see ``session``."""

from __future__ import annotations

from pytest_cleo_grade.session import GradeSession

#: The object the ``graded_session`` fixture yields (``GradeSession``).
GradedSession = GradeSession

__all__ = ["GradedSession"]
