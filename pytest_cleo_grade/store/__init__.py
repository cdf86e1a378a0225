"""The embedded SQLite audit store: CLEO's ``audit_log`` layout plus a ``grades`` table."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_cleo_grade.store._schema import (
        AUDIT_COLUMNS,
        CLEO_COLUMNS,
        ROW_COLUMNS,
        entry_row,
        entry_rows,
    )
    from pytest_cleo_grade.store._store import BUSY_TIMEOUT_S, DEFAULT_DB, AuditStore

__all__ = [
    "AUDIT_COLUMNS",
    "BUSY_TIMEOUT_S",
    "CLEO_COLUMNS",
    "DEFAULT_DB",
    "ROW_COLUMNS",
    "AuditStore",
    "entry_row",
    "entry_rows",
]

# `cleo-grade record` writes through store._fast_append, which needs neither pydantic nor
# sqlite-utils: importing it (any module of this package) must not load the store itself, so
# these names load on first use.
_LAZY: dict[str, str] = {
    "AUDIT_COLUMNS": "pytest_cleo_grade.store._schema",
    "CLEO_COLUMNS": "pytest_cleo_grade.store._schema",
    "ROW_COLUMNS": "pytest_cleo_grade.store._schema",
    "entry_row": "pytest_cleo_grade.store._schema",
    "entry_rows": "pytest_cleo_grade.store._schema",
    "BUSY_TIMEOUT_S": "pytest_cleo_grade.store._store",
    "DEFAULT_DB": "pytest_cleo_grade.store._store",
    "AuditStore": "pytest_cleo_grade.store._store",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
