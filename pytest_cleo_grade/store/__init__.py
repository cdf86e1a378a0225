"""The embedded SQLite audit store: CLEO's ``audit_log`` layout plus a ``grades`` table."""

from __future__ import annotations

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
