"""The embedded SQLite audit store: CLEO's ``audit_log`` layout plus a ``grades`` table."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

from pydantic import TypeAdapter, ValidationError
from pydantic_core import to_json
from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from pytest_cleo_grade.bulk import collector_paused
from pytest_cleo_grade.errors import CleoGradeWarning, EntryError, StoreError
from pytest_cleo_grade.models import (
    AuditEntry,
    GradeResult,
    format_timestamp,
    format_validation_error,
)
from pytest_cleo_grade.rubrics.cleo import order_entries

__all__ = [
    "AUDIT_COLUMNS",
    "BUSY_TIMEOUT_S",
    "DEFAULT_DB",
    "AuditStore",
    "entry_row",
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
    # pydantic-core's serializer is several times faster than json.dumps on the record()
    # path; fallback=str keeps a call with an odd parameter (a Path, a set) recordable.
    return to_json(value, fallback=str).decode()


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
    try:
        params = _json(entry.params)
        metadata = _json(extra) if extra else None
    except ValueError as exc:  # a circular structure, a lone surrogate
        raise EntryError(f"{entry.domain}.{entry.operation}: cannot store: {exc}") from exc
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


def _grade_row(result: GradeResult) -> tuple[Any, ...]:
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
        with collector_paused():
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
        self.add_grades([result])

    def add_grades(self, results: Iterable[GradeResult]) -> None:
        """Store grades in the ``grades`` table in one transaction: all of them or none."""
        rows = [_grade_row(result) for result in results]

        def insert(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(
                    "INSERT INTO grades (session_id, timestamp, total_score, max_score, letter, "
                    "entry_count, flag_count, result_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

        self._write(insert)

    def _write(self, action: Callable[[sqlite3.Connection], _T]) -> _T:
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only")
        with self._lock:
            try:
                return action(self._conn)
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot write: {_describe(exc)}") from exc
            except OverflowError as exc:  # an integer beyond SQLite's 64 bits (an exit code)
                raise StoreError(f"{self.path}: cannot write: {exc}") from exc
            except UnicodeEncodeError as exc:  # a lone surrogate in a text column
                raise EntryError(
                    f"{self.path}: cannot store text that is not Unicode: {exc}"
                ) from exc

    # -- reading ------------------------------------------------------------------------

    def session_entries(self, session_id: str) -> list[AuditEntry]:
        """Every entry of one session (exact id match), by timestamp, ties in insertion order."""
        _, entries = self._load(session_id)
        # Text order is time order for rows we wrote; CLEO databases mix timestamp forms.
        return order_entries(entries)

    def session_items(self, session_id: str) -> list[tuple[str, AuditEntry]]:
        """(row id, entry) pairs of one session in stored order (for copying rows by id)."""
        ids, entries = self._load(session_id)
        return list(zip(ids, entries, strict=True))

    def _load(self, session_id: str) -> tuple[list[str], list[AuditEntry]]:
        # SQLite builds each entry's JSON (CLEO's conventions mapped in SQL, see
        # _ENTRY_JSON) and pydantic validates the whole session from that text in one call:
        # several times faster than building dicts row by row in Python.
        # rowid breaks timestamp ties: it grows with insertion order.
        sql = (
            f"SELECT id, {self._entry_json} FROM audit_log "
            "WHERE session_id = ? ORDER BY timestamp, rowid"
        )
        try:
            with self._lock:
                rows = self._conn.execute(sql, (session_id,)).fetchall()
        except sqlite3.OperationalError as exc:
            if "malformed JSON" not in str(exc):
                raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc
            raise StoreError(
                f"{self.path}: audit_log row {self._malformed_row(session_id)}: "
                "details_json or metadata_json is not valid JSON"
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc
        try:
            with collector_paused():
                entries = _ENTRIES.validate_json("[" + ",".join(row[1] for row in rows) + "]")
        except ValidationError as exc:
            raise StoreError(f"{self.path}: {_first_invalid_row(rows, exc)}") from exc
        return [str(row[0]) for row in rows], entries

    def _malformed_row(self, session_id: str) -> str:
        check = "json_valid(coalesce(nullif(details_json, ''), '{}'))"
        if "metadata_json" in self._columns:
            check += " AND json_valid(coalesce(metadata_json, '{}'))"
        rows = self._read(
            f"SELECT id FROM audit_log WHERE session_id = ? AND NOT ({check}) "
            "ORDER BY timestamp, rowid LIMIT 1",
            (session_id,),
        )
        return str(rows[0][0]) if rows else "?"

    @property
    def _entry_json(self) -> str:
        """The SQL expression of one row as a CLEO-shaped entry (AuditEntry JSON).

        ``details_json`` → params, ``operation`` (or ``action`` when null) → operation, null
        domain → ``unknown``, ``success`` 1/0 (null on legacy rows: true), ``exit_code`` when
        the row has one, else 0 on success and 1 on failure (CLEO stores no exit codes), null
        source → ``cli``, task_id ``system``/``unknown`` → no taskId, ``metadata_json`` merged
        into metadata, and SQLite's naive ``YYYY-MM-DD HH:MM:SS`` default read as UTC.
        """
        exit_code = "CASE WHEN success = 0 THEN 1 ELSE 0 END"
        metadata = "'{}'"
        if "exit_code" in self._columns:
            exit_code = f"coalesce(exit_code, {exit_code})"
        if "metadata_json" in self._columns:
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
        """Stored grades in the order they were added, optionally for one session.

        Like a corrupt GRADES.jsonl line, a row that is not a valid grade is skipped with a
        CleoGradeWarning naming its id, so it never hides the others.
        """
        if session_id is None:
            rows = self._read("SELECT id, result_json FROM grades ORDER BY id", ())
        else:
            rows = self._read(
                "SELECT id, result_json FROM grades WHERE session_id = ? ORDER BY id",
                (session_id,),
            )
        results: list[GradeResult] = []
        for row_id, text in rows:
            try:
                results.append(GradeResult.model_validate_json(text))
            except ValidationError as exc:
                warnings.warn(
                    f"{self.path}: grades row {row_id}: skipped corrupt grade: "
                    f"{format_validation_error(exc)}",
                    CleoGradeWarning,
                    stacklevel=2,
                )
        return results

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


def _first_invalid_row(rows: Sequence[sqlite3.Row], exc: ValidationError) -> str:
    """``audit_log row ID: field: why`` for the first row of a session that fails to load."""
    error = exc.errors()[0]
    loc = error["loc"]
    if not loc or not isinstance(loc[0], int):
        # The session's JSON did not parse at all: SQLite writes an infinite REAL (a
        # duration_ms of 1e999) as Inf, which is no JSON. Find the row one at a time.
        bad = next((row[0] for row in rows if not _is_json(row[1])), "?")
        return f"audit_log row {bad}: holds a number JSON cannot carry ({error['msg']})"
    place = ".".join(str(part) for part in loc[1:]) or "entry"
    return f"audit_log row {rows[loc[0]][0]}: {place}: {error['msg']}"


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


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
