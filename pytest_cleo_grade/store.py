"""The embedded SQLite audit store: CLEO's ``audit_log`` layout plus a ``grades`` table."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

from pydantic import TypeAdapter, ValidationError
from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from pytest_cleo_grade.errors import StoreError
from pytest_cleo_grade.models import AuditEntry, GradeResult, format_validation_error
from pytest_cleo_grade.rubrics.cleo import order_entries

__all__ = [
    "AUDIT_COLUMNS",
    "BUSY_TIMEOUT_S",
    "DEFAULT_DB",
    "AuditStore",
    "entry_row",
    "row_entry_dict",
]

_T = TypeVar("_T")

DEFAULT_DB: Final = Path(".cleo") / "audit.db"

#: How long a writer waits for another one before SQLite reports "database is locked". Long
#: on purpose: concurrent recorders queue on the WAL write lock for milliseconds each.
BUSY_TIMEOUT_S: Final = 60.0

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

# CLEO writes these into task_id when a call concerned no task.
_NO_TASK: Final = frozenset({"system", "unknown"})

_INSERT: Final = (
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


_ENTRIES: Final = TypeAdapter(list[AuditEntry])
_KNOWN_MIGRATIONS: Final = frozenset(m.name for m in MIGRATIONS._migrations)


def _json(value: object) -> str:
    # default=str keeps a call with an odd parameter (a Path, a datetime) recordable.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def _stored_time(value: datetime) -> str:
    # format_timestamp's form (UTC, ms, Z) via isoformat, which is several times faster on
    # the record() path; fixed width, so text order is time order in SQL.
    return value.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def _new_id() -> str:
    # 128 random bits like CLEO's crypto.randomUUID(), without uuid4()'s Python overhead.
    return os.urandom(16).hex()


def entry_row(entry: AuditEntry, entry_id: str | None = None) -> tuple[Any, ...]:
    """The ``audit_log`` row of an entry, in AUDIT_COLUMNS order (CLEO's conventions)."""
    meta = entry.metadata
    extra = dict(meta.model_extra or {})
    if meta.user_id is not None:
        extra["userId"] = meta.user_id
    result = entry.result
    return (
        entry_id or _new_id(),
        _stored_time(entry.timestamp),
        f"{entry.domain}.{entry.operation}",
        meta.task_id or "system",
        "agent",
        _json(entry.params),
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
        _json(extra) if extra else None,
    )


def _parse_time(text: str) -> str:
    # CLEO writes ISO strings with Z; its SQL default (datetime('now')) writes naive UTC.
    if "T" not in text and "+" not in text and not text.endswith("Z"):
        return text.replace(" ", "T") + "Z"
    return text


def row_entry_dict(row: sqlite3.Row | dict[str, Any]) -> dict[str, Any]:
    """An ``audit_log`` row as a CLEO-shaped entry dict, mapping CLEO's conventions.

    ``details_json`` → params, ``operation`` (or ``action``) → operation, null domain →
    ``unknown``, null source → ``cli``, task_id ``system``/``unknown`` → no taskId, and the
    exit code from ``exit_code`` when the row has one, else 0 on success and 1 on failure
    (CLEO stores no exit codes).
    """
    keys = row.keys()
    success_value = row["success"]
    # Legacy CLEO rows predate the success column; they only logged completed mutations.
    success = True if success_value is None else bool(success_value)
    exit_code = row["exit_code"] if "exit_code" in keys else None
    if exit_code is None:
        exit_code = 0 if success else 1
    operation = row["operation"]
    if operation is None:
        operation = row["action"]
    details = row["details_json"]
    params = json.loads(details) if details else {}
    metadata: dict[str, Any] = {}
    raw_meta = row["metadata_json"] if "metadata_json" in keys else None
    if raw_meta:
        metadata.update(json.loads(raw_meta))
    metadata["source"] = row["source"] if row["source"] is not None else "cli"
    metadata["gateway"] = row["gateway"]
    task_id = row["task_id"]
    if task_id is not None and task_id not in _NO_TASK:
        metadata["taskId"] = task_id
    duration = row["duration_ms"]
    return {
        "timestamp": _parse_time(row["timestamp"]),
        "sessionId": row["session_id"],
        "domain": row["domain"] if row["domain"] is not None else "unknown",
        "operation": operation,
        "params": params,
        "result": {
            "success": success,
            "exitCode": exit_code,
            "duration": duration if duration is not None else 0,
        },
        "metadata": metadata,
        "error": row["error_message"],
    }


class AuditStore:
    """One SQLite audit store file: open (creating and migrating it), append, read.

    Writes are safe from several processes at once (WAL, a long busy timeout, one transaction
    per call); every append is committed when it returns. ``read_only=True`` opens someone
    else's database (a CLEO project's) without ever writing to it, and also reads CLEO's
    layout without the two extra columns.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        read_only: bool = False,
        timeout: float = BUSY_TIMEOUT_S,
    ) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self.timeout = timeout
        self._lock = threading.Lock()
        try:
            self._conn = self._connect()
            self.db = Database(self._conn, execute_plugins=False, recursive_triggers=False)
            if read_only:
                self._columns = self._check_readable()
            else:
                self._prepare()
                self._columns = AUDIT_COLUMNS
        except sqlite3.DatabaseError as exc:
            self._close_quietly()
            raise StoreError(f"{self.path}: {_describe(exc)}") from exc
        except StoreError:
            self._close_quietly()
            raise

    def _connect(self) -> sqlite3.Connection:
        if self.read_only:
            if not self.path.is_file():
                raise StoreError(f"{self.path}: no such database file")
            uri = f"{self.path.resolve().as_uri()}?mode=ro"
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"{self.path}: cannot create directory: {exc.strerror or exc}"
                ) from exc
            # Autocommit: every statement outside an explicit transaction commits at once.
            conn = sqlite3.connect(
                self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
            )
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
        return conn

    def _prepare(self) -> None:
        conn = self._conn
        # Reading the header first turns "not a database" into an error before we write.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL syncs at checkpoints only: a commit survives a killed process
        # (the WAL is in the OS cache), not a power cut, at a fraction of FULL's cost.
        conn.execute("PRAGMA synchronous = NORMAL")
        self._check_version()
        if MIGRATIONS.pending(self.db):
            # IMMEDIATE takes the write lock first, so processes that create the store at the
            # same moment migrate it one after another; Migrations nests in savepoints.
            conn.execute("BEGIN IMMEDIATE")
            try:
                self._check_version()
                MIGRATIONS.ensure_migrations_table(self.db)
                MIGRATIONS.apply(self.db)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def _check_version(self) -> None:
        unknown = {m.name for m in MIGRATIONS.applied(self.db)} - _KNOWN_MIGRATIONS
        if unknown:
            raise StoreError(
                f"{self.path}: written by a newer pytest-cleo-grade (unknown schema migration "
                f"{sorted(unknown)[0]}); upgrade pytest-cleo-grade to use it"
            )

    def _check_readable(self) -> tuple[str, ...]:
        self._check_version()
        columns = tuple(row["name"] for row in self._conn.execute("PRAGMA table_info(audit_log)"))
        if not columns:
            raise StoreError(f"{self.path}: no audit_log table (not a CLEO or cleo-grade store)")
        missing = {"timestamp", "action", "details_json", "success", "session_id"} - set(columns)
        if missing:
            raise StoreError(f"{self.path}: audit_log lacks column {sorted(missing)[0]}")
        return columns

    # -- writing ------------------------------------------------------------------------

    def append(self, entry: AuditEntry) -> str:
        """Append one entry and commit; returns the row id."""
        row = entry_row(entry)
        self._write(lambda conn: conn.execute(_INSERT, row))
        return str(row[0])

    def append_many(self, entries: Iterable[AuditEntry]) -> int:
        """Append entries in one transaction: all of them or, on any error, none."""
        return self.append_rows(entry_row(entry) for entry in entries)

    def append_rows(self, rows: Iterable[Sequence[Any]]) -> int:
        """Insert prepared ``audit_log`` rows (AUDIT_COLUMNS order) in one transaction.

        Rows whose id is already stored are skipped (importing a CLEO database twice adds
        nothing); returns the number of rows inserted.
        """
        materialised = list(rows)

        def insert(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                before = conn.total_changes
                conn.executemany(_INSERT, materialised)
                inserted = conn.total_changes - before
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return inserted

        return self._write(insert)

    def add_grade(self, result: GradeResult) -> None:
        """Store a grade in the ``grades`` table."""
        data = result.to_json_dict()
        row = (
            result.session_id,
            data["timestamp"],
            result.total_score,
            result.max_score,
            result.letter,
            result.entry_count,
            len(result.flags),
            json.dumps(data, ensure_ascii=False, separators=(",", ":")),
        )
        self._write(
            lambda conn: conn.execute(
                "INSERT INTO grades (session_id, timestamp, total_score, max_score, letter, "
                "entry_count, flag_count, result_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        )

    def _write(self, action: Callable[[sqlite3.Connection], _T]) -> _T:
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only")
        with self._lock:
            try:
                return action(self._conn)
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot write: {_describe(exc)}") from exc

    # -- reading ------------------------------------------------------------------------

    def session_rows(self, session_id: str) -> list[sqlite3.Row]:
        """The raw rows of one session (exact id match) in session order."""
        # rowid breaks timestamp ties: it grows with insertion order.
        return self._read(
            "SELECT * FROM audit_log WHERE session_id = ? ORDER BY timestamp, rowid",
            (session_id,),
        )

    def session_entries(self, session_id: str) -> list[AuditEntry]:
        """Every entry of one session (exact id match), by timestamp, ties in insertion order.

        SQLite builds each entry's JSON (the mapping of :func:`row_entry_dict`, in SQL) and
        pydantic validates the whole session from JSON in one call: several times faster
        than building dicts in Python. A row the fast path cannot take (malformed
        details_json, an invalid field) is looked up again row by row for a precise error.
        """
        where = "WHERE session_id = ? ORDER BY timestamp, rowid"
        try:
            with self._lock:
                parts = self._conn.execute(
                    f"SELECT {self._entry_json_sql()} FROM audit_log {where}", (session_id,)
                ).fetchall()
            entries = _ENTRIES.validate_json("[" + ",".join(row[0] for row in parts) + "]")
        except (sqlite3.Error, ValidationError):
            entries = self.rows_to_entries(self.session_rows(session_id))
        # Text order is time order for our own rows; CLEO databases mix timestamp forms.
        return order_entries(entries)

    def _entry_json_sql(self) -> str:
        columns = set(self._columns)
        exit_code = "CASE WHEN success = 0 THEN 1 ELSE 0 END"
        if "exit_code" in columns:
            exit_code = f"coalesce(exit_code, {exit_code})"
        metadata = "'{}'"
        if "metadata_json" in columns:
            metadata = "coalesce(metadata_json, '{}')"
        return f"""json_object(
            'timestamp', CASE WHEN instr(timestamp, 'T') OR instr(timestamp, 'Z')
                THEN timestamp ELSE replace(timestamp, ' ', 'T') || 'Z' END,
            'sessionId', session_id,
            'domain', coalesce(domain, 'unknown'),
            'operation', coalesce(operation, action),
            'params', json(coalesce(nullif(details_json, ''), '{{}}')),
            'result', json_object(
                'success', json(CASE WHEN success = 0 THEN 'false' ELSE 'true' END),
                'exitCode', {exit_code},
                'duration', coalesce(duration_ms, 0)),
            'metadata', json_patch({metadata}, json_object(
                'source', coalesce(source, 'cli'),
                'gateway', gateway,
                'taskId', CASE WHEN task_id IN ('system', 'unknown') THEN NULL ELSE task_id END)),
            'error', error_message)"""

    def rows_to_entries(self, rows: Sequence[sqlite3.Row]) -> list[AuditEntry]:
        """Validate rows one by one into entries; a bad row is a StoreError naming its id."""
        entries: list[AuditEntry] = []
        for row in rows:
            where = f"{self.path}: audit_log row {row['id']}"
            try:
                entries.append(AuditEntry.model_validate(row_entry_dict(row)))
            except ValidationError as exc:
                raise StoreError(format_validation_error(exc, where)) from exc
            except (ValueError, TypeError) as exc:
                raise StoreError(f"{where}: {exc}") from exc
        return entries

    def session_ids(self) -> list[str]:
        """Distinct session ids in the store, in order of their first entry."""
        rows = self._read(
            "SELECT session_id, min(timestamp) AS first, min(rowid) AS seq FROM audit_log "
            "WHERE session_id IS NOT NULL GROUP BY session_id ORDER BY first, seq",
            (),
        )
        return [row["session_id"] for row in rows]

    def count(self, session_id: str | None = None) -> int:
        """How many entries the store holds (for one session, or in all)."""
        if session_id is None:
            rows = self._read("SELECT count(*) FROM audit_log", ())
        else:
            rows = self._read("SELECT count(*) FROM audit_log WHERE session_id = ?", (session_id,))
        return int(rows[0][0])

    def grades(self, session_id: str | None = None) -> list[GradeResult]:
        """Stored grades in the order they were added, optionally for one session."""
        if session_id is None:
            rows = self._read("SELECT result_json FROM grades ORDER BY id", ())
        else:
            rows = self._read(
                "SELECT result_json FROM grades WHERE session_id = ? ORDER BY id", (session_id,)
            )
        return [GradeResult.model_validate_json(row[0]) for row in rows]

    def _read(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table: grades" in str(exc):
                    return []
                raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc

    # -- lifecycle ------------------------------------------------------------------------

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` verdict (``ok`` when healthy)."""
        return str(self._read("PRAGMA integrity_check", ())[0][0])

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._close_quietly()

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            self._conn = None  # type: ignore[assignment]

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _describe(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "file is not a database" in text or "malformed" in text:
        return f"not a usable SQLite database ({text})"
    if "locked" in text or "busy" in text:
        return f"database is locked by another process ({text}); try again when it finishes"
    if "readonly" in text or "read-only" in text:
        return f"cannot write ({text}); check the file and directory permissions"
    if "disk" in text and "full" in text:
        return f"disk full ({text})"
    return text
