"""The store's schema: CLEO's ``audit_log`` column layout and row mapping (its migrations:
``_migrations``)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from typing import Any, Final

from pydantic_core import to_json

from pytest_cleo_grade.core._not_found import E_NOT_FOUND, says_not_found
from pytest_cleo_grade.core.models import AuditEntry, GradeResult
from pytest_cleo_grade.store._row import (
    INSERT_ENTRY,
    PLACEHOLDER_TASK_IDS,
    ROW_COLUMNS,
    build_row,
    new_row_id,
)

__all__ = [
    "AUDIT_COLUMNS",
    "CLEO_COLUMNS",
    "INSERT_ENTRY",
    "PLACEHOLDER_TASK_IDS",
    "ROW_COLUMNS",
    "entry_row",
    "entry_rows",
    "grade_row",
    "task_id_sql",
]

#: CLEO's audit_log columns, in CLEO's order, then the two it lacks.
CLEO_COLUMNS: Final = (
    "id",
    "timestamp",
    "action",
    "task_id",
    "actor",
    "details_json",
    "before_json",
    "after_json",
    "domain",
    "operation",
    "session_id",
    "request_id",
    "duration_ms",
    "success",
    "source",
    "gateway",
    "error_message",
    "project_hash",
    "idempotency_key",
)
AUDIT_COLUMNS: Final = (*CLEO_COLUMNS, "exit_code", "metadata_json")


#: The SQL function :func:`register_functions` adds: 1 when an error text says not found.
_SAYS_NOT_FOUND: Final = "cleo_grade_says_not_found"


def _says_not_found(text: object) -> int:
    # Passed as a BLOB: Python cannot hand a function text that is not UTF-8 (the reader
    # then names that row, see AuditStore._undecodable_row), and an error must not hide it.
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return int(isinstance(text, str) and says_not_found(text))


def register_functions(conn: sqlite3.Connection) -> None:
    """Add the Python rules the readers' SQL calls (see :func:`exit_code_sql`)."""
    conn.create_function(_SAYS_NOT_FOUND, 1, _says_not_found, deterministic=True)


def exit_code_sql(columns: tuple[str, ...]) -> str:
    """SQL for a row's exit code, alike for the entry and the calls reading.

    Our rows carry theirs. CLEO's layout has no such column (CLEO rebuilds 0/1 on read, so
    its own E_NOT_FOUND rule never fires on real data): a success is 0, a failure whose
    ``error_message`` says not found by the rule every adapter shares (``not_found``) is
    E_NOT_FOUND, any other failure 1. Needs :func:`register_functions` on the connection.
    """
    derived = (
        "CASE WHEN success = 0 THEN CASE WHEN "
        f"{_SAYS_NOT_FOUND}(CAST(error_message AS BLOB)) THEN {E_NOT_FOUND} ELSE 1 END ELSE 0 END"
    )
    if "exit_code" in columns:
        return f"coalesce(exit_code, {derived})"
    return derived


def task_id_sql(columns: tuple[str, ...]) -> str:
    """SQL for a row's ``taskId`` (NULL for none), alike for the entry and the calls reading.

    A placeholder in ``task_id`` means no task on CLEO's rows; on ours ``metadata_json``
    holds the entry's own value when it had one that looks like a placeholder (see _row).
    Rows written before that, and CLEO's, have none there: they read as no task, as before.
    """
    placeholder = "NULL"
    if "metadata_json" in columns:
        placeholder = "json_extract(metadata_json, '$.taskId')"
    return f"CASE WHEN task_id IN ('system', 'unknown') THEN {placeholder} ELSE task_id END"


def entry_row(entry: AuditEntry, entry_id: str | None = None) -> tuple[Any, ...]:
    """The ``audit_log`` row of an entry, in ROW_COLUMNS order (CLEO's conventions)."""
    return _row(entry, entry_id or new_row_id(), entry_id)


def entry_rows(entries: Iterable[AuditEntry]) -> list[tuple[Any, ...]]:
    """The rows of entries under new ids, in ROW_COLUMNS order (one import batch)."""
    new = new_row_id
    return [_row(entry, new(), None) for entry in entries]


def _to_json(value: object) -> str:
    # pydantic-core's serializer is several times faster than json.dumps; fallback=str
    # keeps a call with an odd parameter (a Path, a set) recordable.
    return to_json(value, fallback=str).decode()


def _row(entry: AuditEntry, row_id: str, named: str | None) -> tuple[Any, ...]:
    meta = entry.metadata
    result = entry.result
    return build_row(
        row_id,
        entry.timestamp,
        entry.session_id,
        entry.domain,
        entry.operation,
        entry.params,
        result.success,
        result.exit_code,
        result.duration,
        meta.source,
        meta.gateway,
        meta.task_id,
        meta.user_id,
        meta.model_extra,
        entry.error,
        _to_json,
        named,
    )


def grade_row(result: GradeResult) -> tuple[Any, ...]:
    data = result.to_json_dict()
    return (
        result.session_id,
        data["timestamp"],
        result.total_score,
        result.max_score,
        result.letter,
        result.entry_count,
        len(result.flags),
        json.dumps(data, ensure_ascii=False, separators=(",", ":")),
    )
