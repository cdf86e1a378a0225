"""pytest-cleo-grade: grade AI agents' behaviour against CLEO's rubric inside pytest runs.

The package root imports neither pytest nor sqlite_utils, so the CLI and third-party rubrics
can use it without the pytest glue (which lives in ``pytest_cleo_grade.plugin``).

PYTEST_DONT_REWRITE: this module holds no assertions; the marker stops pytest from warning, in
every in-process pytester run, that the already imported plugin package cannot be rewritten.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.errors import (
    CleoGradeError,
    CleoGradeWarning,
    EntryError,
    HistoryError,
    RubricError,
    StoreError,
)

if TYPE_CHECKING:
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
    from pytest_cleo_grade.session import GradeSession

# The audit store's writers lock files with fcntl; say so once, here, rather than let a bare
# "No module named 'fcntl'" surface later from deep inside the store.
if importlib.util.find_spec("fcntl") is None:
    raise ImportError(
        "pytest-cleo-grade runs on POSIX systems only (Linux, macOS, BSD): its audit store "
        f"locks files with fcntl, which this platform ({sys.platform}) does not have"
    )

# The one place the version is written: pyproject.toml reads it from here at build time.
__version__ = "0.1.0"

# pytest imports this package in every run wherever it is installed (the plugin is an entry
# point), so the names below, which pull in pydantic, load on first use rather than here.
_LAZY: dict[str, str] = {
    "append_grade": "pytest_cleo_grade.history",
    "read_grades": "pytest_cleo_grade.history",
    "AuditEntry": "pytest_cleo_grade.models",
    "AuditMetadata": "pytest_cleo_grade.models",
    "AuditResult": "pytest_cleo_grade.models",
    "DimensionScore": "pytest_cleo_grade.models",
    "GradeResult": "pytest_cleo_grade.models",
    "letter_for": "pytest_cleo_grade.models",
    "grade_entries": "pytest_cleo_grade.rubrics.cleo",
    "GradeSession": "pytest_cleo_grade.session",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AuditEntry",
    "AuditMetadata",
    "AuditResult",
    "CleoGradeError",
    "CleoGradeWarning",
    "DimensionScore",
    "EntryError",
    "GradeResult",
    "GradeSession",
    "HistoryError",
    "RubricError",
    "StoreError",
    "__version__",
    "append_grade",
    "grade_entries",
    "letter_for",
    "read_grades",
]
