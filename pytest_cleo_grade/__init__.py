"""pytest-cleo-grade: grade AI agents' behaviour against CLEO's rubric inside pytest runs.

The package root imports neither pytest nor sqlite_utils, so the CLI and third-party rubrics
can use it without the pytest glue (which lives in ``pytest_cleo_grade.plugin``).
"""

from __future__ import annotations

from pytest_cleo_grade.errors import (
    CleoGradeError,
    CleoGradeWarning,
    EntryError,
    HistoryError,
    RubricError,
    StoreError,
)
from pytest_cleo_grade.history import append_grade, read_grades
from pytest_cleo_grade.models import (
    AuditEntry,
    AuditMetadata,
    AuditResult,
    DimensionScore,
    GradeResult,
    letter_for,
)
from pytest_cleo_grade.rubrics.cleo import grade_entries

__version__ = "0.1.0"

__all__ = [
    "AuditEntry",
    "AuditMetadata",
    "AuditResult",
    "CleoGradeError",
    "CleoGradeWarning",
    "DimensionScore",
    "EntryError",
    "GradeResult",
    "HistoryError",
    "RubricError",
    "StoreError",
    "__version__",
    "append_grade",
    "grade_entries",
    "letter_for",
    "read_grades",
]
