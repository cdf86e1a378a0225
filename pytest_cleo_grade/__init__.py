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

from pytest_cleo_grade.core.errors import (
    CleoGradeError,
    CleoGradeWarning,
    EntryError,
    HistoryError,
    RubricError,
    StoreError,
)

if TYPE_CHECKING:
    from pytest_cleo_grade.capture.audit import AuditedDispatcher, audited, record
    from pytest_cleo_grade.core.models import (
        AuditEntry,
        AuditMetadata,
        AuditResult,
        DimensionScore,
        GradeResult,
        letter_for,
    )
    from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
    from pytest_cleo_grade.rubrics.cleo import grade_entries
    from pytest_cleo_grade.store.history import append_grade, read_grades
    from pytest_cleo_grade.store.sources import load_entries_file

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
    "append_grade": "pytest_cleo_grade.store.history",
    "read_grades": "pytest_cleo_grade.store.history",
    "AuditEntry": "pytest_cleo_grade.core.models",
    "AuditMetadata": "pytest_cleo_grade.core.models",
    "AuditResult": "pytest_cleo_grade.core.models",
    "DimensionScore": "pytest_cleo_grade.core.models",
    "GradeResult": "pytest_cleo_grade.core.models",
    "letter_for": "pytest_cleo_grade.core.models",
    "grade_entries": "pytest_cleo_grade.rubrics.cleo",
    "GradeSession": "pytest_cleo_grade.grading.session",
    "SessionSettings": "pytest_cleo_grade.grading.session",
    "load_entries_file": "pytest_cleo_grade.store.sources",
    "record": "pytest_cleo_grade.capture.audit",
    "audited": "pytest_cleo_grade.capture.audit",
    "AuditedDispatcher": "pytest_cleo_grade.capture.audit",
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
    "AuditedDispatcher",
    "CleoGradeError",
    "CleoGradeWarning",
    "DimensionScore",
    "EntryError",
    "GradeResult",
    "GradeSession",
    "HistoryError",
    "RubricError",
    "SessionSettings",
    "StoreError",
    "__version__",
    "append_grade",
    "audited",
    "grade_entries",
    "letter_for",
    "load_entries_file",
    "read_grades",
    "record",
]
