"""The store's schema: CLEO's ``audit_log`` column layout, migrations, and row mapping."""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from typing import Any, Final

from pydantic_core import to_json
from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from pytest_cleo_grade.errors import EntryError
from pytest_cleo_grade.files import check_nesting
from pytest_cleo_grade.models import AuditEntry, GradeResult, format_timestamp

__all__ = [
    "AUDIT_COLUMNS",
    "CLEO_COLUMNS",
    "INSERT_ENTRY",
    "KNOWN_MIGRATIONS",
    "MIGRATIONS",
    "entry_row",
    "grade_row",
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

INSERT_ENTRY: Final = (
    f"INSERT OR IGNORE INTO audit_log ({', '.join(AUDIT_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(AUDIT_COLUMNS))})"
)

MIGRATIONS: Final = Migrations("pytest_cleo_grade")


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


def _json(value: object) -> str:
    # pydantic-core's serializer is several times faster than json.dumps on the record()
    # path; fallback=str keeps a call with an odd parameter (a Path, a set) recordable.
    return to_json(value, fallback=str).decode()


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


def _new_id() -> str:
    return _IDS.new()


def entry_row(entry: AuditEntry, entry_id: str | None = None) -> tuple[Any, ...]:
    """The ``audit_log`` row of an entry, in AUDIT_COLUMNS order (CLEO's conventions)."""
    meta = entry.metadata
    extra = dict(meta.model_extra or {})
    if meta.user_id is not None:
        extra["userId"] = meta.user_id
    result = entry.result
    try:
        params = _json(entry.params)
        metadata = _json(extra) if extra else None
        # Deeper values could be written but never read back for grading (see MAX_NESTING).
        check_nesting(params)
        if metadata is not None:
            check_nesting(metadata)
        # pydantic-core writes a non-finite float as the bare word Infinity or NaN, which
        # no JSON reader (SQLite's included) accepts back: the row would be unreadable.
        _check_finite(params, entry.params)
        if metadata is not None:
            _check_finite(metadata, extra)
    except ValueError as exc:  # a circular structure, a lone surrogate, absurd nesting
        which = f"row {entry_id} " if entry_id else ""
        raise EntryError(f"{which}{entry.domain}.{entry.operation}: cannot store: {exc}") from exc
    return (
        entry_id or _new_id(),
        format_timestamp(entry.timestamp),
        f"{entry.domain}.{entry.operation}",
        meta.task_id or "system",
        "agent",
        params,
        None,
        None,
        entry.domain,
        entry.operation,
        entry.session_id,
        None,
        result.duration,
        1 if result.success else 0,
        meta.source,
        meta.gateway,
        entry.error,
        None,
        None,
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
