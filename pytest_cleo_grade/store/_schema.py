"""The store's schema: CLEO's ``audit_log`` column layout, migrations, and row mapping."""

from __future__ import annotations

import itertools
import json
import math
import os
import sqlite3
import time
from collections.abc import Iterable
from datetime import UTC
from typing import Any, Final

from pydantic_core import to_json
from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from pytest_cleo_grade.core._files import check_nesting
from pytest_cleo_grade.core._not_found import E_NOT_FOUND, says_not_found
from pytest_cleo_grade.core.errors import EntryError
from pytest_cleo_grade.core.models import AuditEntry, GradeResult, format_timestamp

__all__ = [
    "AUDIT_COLUMNS",
    "CLEO_COLUMNS",
    "INSERT_ENTRY",
    "KNOWN_MIGRATIONS",
    "MIGRATIONS",
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

#: The columns an entry row carries, in order. CLEO's columns the store never fills from an
#: entry (before/after_json, request_id, project_hash, idempotency_key) are left to their
#: NULL default and ``actor`` is a constant of the statement: each bound value costs SQLite
#: and Python time (a third of an import's insert went to the six constant columns).
ROW_COLUMNS: Final = (
    "id",
    "timestamp",
    "action",
    "task_id",
    "details_json",
    "domain",
    "operation",
    "session_id",
    "duration_ms",
    "success",
    "source",
    "gateway",
    "error_message",
    "exit_code",
    "metadata_json",
)

INSERT_ENTRY: Final = (
    f"INSERT OR IGNORE INTO audit_log ({', '.join(ROW_COLUMNS)}, actor) "
    f"VALUES ({', '.join('?' * len(ROW_COLUMNS))}, 'agent')"
)

MIGRATIONS: Final = Migrations("pytest_cleo_grade")

#: Task ids the NOT NULL ``task_id`` column cannot tell from "no task": CLEO writes ``system``
#: (and older CLEO ``unknown``) as its placeholder, and an empty id is written as ``system``
#: too. An entry carrying one of them keeps it in ``metadata_json`` as ``taskId``, which the
#: readers prefer over a placeholder (store.core._entry_json, store.calls._select).
PLACEHOLDER_TASK_IDS: Final = frozenset({"system", "unknown", ""})


@MIGRATIONS(name="0001_audit_log_and_grades")
def _create_tables(db: Database) -> None:
    # Column types and defaults follow CLEO's drizzle schema so either side reads the other.
    db.execute(
        """
        CREATE TABLE audit_log (
            id TEXT PRIMARY KEY NOT NULL,
            timestamp TEXT NOT NULL DEFAULT (datetime('now')),
            action TEXT NOT NULL,
            task_id TEXT NOT NULL,
            actor TEXT NOT NULL DEFAULT 'system',
            details_json TEXT DEFAULT '{}',
            before_json TEXT,
            after_json TEXT,
            domain TEXT,
            operation TEXT,
            session_id TEXT,
            request_id TEXT,
            duration_ms INTEGER,
            success INTEGER,
            source TEXT,
            gateway TEXT,
            error_message TEXT,
            project_hash TEXT,
            idempotency_key TEXT,
            exit_code INTEGER,
            metadata_json TEXT
        )
        """
    )
    db.execute("CREATE INDEX idx_audit_log_session_time ON audit_log (session_id, timestamp)")
    db.execute(
        """
        CREATE TABLE grades (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            total_score REAL NOT NULL,
            max_score REAL NOT NULL,
            letter TEXT NOT NULL,
            entry_count INTEGER NOT NULL,
            flag_count INTEGER NOT NULL,
            result_json TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_grades_session ON grades (session_id, timestamp)")


KNOWN_MIGRATIONS: Final = frozenset(m.name for m in MIGRATIONS._migrations)


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


class _Ids:
    """Row ids: 32 hex digits like CLEO's ``crypto.randomUUID()``, cheap to make.

    The time in milliseconds comes first (as in a UUIDv7), so ids that grow with time insert
    at the end of the primary key's B-tree instead of at random pages; then 48 random bits
    drawn once per process (again in a forked child) and a counter, so no two ids of one
    process collide (within 2**32 rows a millisecond) and two processes share a prefix with
    odds of 2**-48. One urandom() call per
    row cost more than the rest of the row under load.
    """

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self.prefix = os.urandom(6).hex()
        self.counter = itertools.count(int.from_bytes(os.urandom(4), "big"))
        self.millis = -1
        self.head = ""

    def new(self) -> str:
        millis = time.time_ns() // 1_000_000
        if millis != self.millis:
            # Rows written together share the millisecond: format the head once for them.
            self.millis = millis
            self.head = f"{millis:012x}{self.prefix}"
        return "%s%08x" % (self.head, next(self.counter) & 0xFFFFFFFF)  # noqa: UP031 (faster)


_IDS: Final = _Ids()


def entry_row(entry: AuditEntry, entry_id: str | None = None) -> tuple[Any, ...]:
    """The ``audit_log`` row of an entry, in ROW_COLUMNS order (CLEO's conventions)."""
    return _row(entry, entry_id or _IDS.new(), entry_id)


def entry_rows(entries: Iterable[AuditEntry]) -> list[tuple[Any, ...]]:
    """The rows of entries under new ids, in ROW_COLUMNS order (one import batch)."""
    new = _IDS.new
    return [_row(entry, new(), None) for entry in entries]


def _row(entry: AuditEntry, row_id: str, named: str | None) -> tuple[Any, ...]:
    meta = entry.metadata
    result = entry.result
    extra = meta.model_extra
    task_id = meta.task_id
    if meta.user_id is not None:
        extra = {**(extra or {}), "userId": meta.user_id}
    if task_id in PLACEHOLDER_TASK_IDS:
        # The column keeps CLEO's placeholder (CLEO's readers expect one); the real value
        # goes where our readers look first, so it is not read back as "no task".
        extra = {**(extra or {}), "taskId": task_id}
    try:
        # pydantic-core's serializer is several times faster than json.dumps; fallback=str
        # keeps a call with an odd parameter (a Path, a set) recordable.
        params = to_json(entry.params, fallback=str).decode()
        metadata = to_json(extra, fallback=str).decode() if extra else None
        # Deeper values could be written but never read back for grading (see MAX_NESTING).
        check_nesting(params)
        # pydantic-core writes a non-finite float as the bare word Infinity or NaN, which
        # no JSON reader (SQLite's included) accepts back: the row would be unreadable.
        _check_finite(params, entry.params)
        if metadata is not None:
            check_nesting(metadata)
            _check_finite(metadata, extra)
    except ValueError as exc:  # a circular structure, a lone surrogate, absurd nesting
        which = f"row {named} " if named else ""
        raise EntryError(f"{which}{entry.domain}.{entry.operation}: cannot store: {exc}") from exc
    stamp = entry.timestamp
    domain = entry.domain
    operation = entry.operation
    return (
        row_id,
        # Validated entries hold UTC already, whose isoformat ends "+00:00"; positional
        # arguments are a third cheaper than timespec= (a million rows per import).
        stamp.isoformat("T", "milliseconds")[:-6] + "Z"
        if stamp.tzinfo is UTC
        else format_timestamp(stamp),
        f"{domain}.{operation}",
        task_id or "system",
        params,
        domain,
        operation,
        entry.session_id,
        result.duration,
        1 if result.success else 0,
        meta.source,
        meta.gateway,
        entry.error,
        result.exit_code,
        metadata,
    )


def _check_finite(text: str, value: object) -> None:
    if ("Infinity" in text or "NaN" in text) and not _all_finite(value):
        raise ValueError("holds a non-finite number (NaN or Infinity), which JSON cannot carry")


def _all_finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return all(_all_finite(item) for item in value)
    return True


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
