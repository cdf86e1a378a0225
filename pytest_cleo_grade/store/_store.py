"""AuditStore: one SQLite audit store file, opened, migrated, appended to and read."""

from __future__ import annotations

import contextlib
import fcntl
import os
import sqlite3
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar

from pydantic import TypeAdapter, ValidationError

from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core._files import (
    NotRegularFileError,
    check_nesting,
    interrupts_held,
    kind_of,
    refuse_symlink,
)
from pytest_cleo_grade.core.errors import CleoGradeWarning, StoreError
from pytest_cleo_grade.core.models import (
    AuditEntry,
    GradedCall,
    GradeResult,
    collector_paused,
    format_validation_error,
    order_entries,
)
from pytest_cleo_grade.core.settings import DEFAULT_DB
from pytest_cleo_grade.store._calls import read_calls
from pytest_cleo_grade.store._conversation import insert_conversation, read_conversation
from pytest_cleo_grade.store._schema import (
    AUDIT_COLUMNS,
    INSERT_ENTRY,
    entry_row,
    entry_rows,
    exit_code_sql,
    grade_row,
    register_functions,
    task_id_sql,
)
from pytest_cleo_grade.store._sqlite import (
    BUSY_TIMEOUT_S,
    CURRENT_MIGRATIONS,
    MIGRATIONS_TABLE,
    WRITE_FAILURES,
    applied_migrations,
    write_error,
)
from pytest_cleo_grade.store._sqlite import describe as _describe
from pytest_cleo_grade.store._sqlite import retry_while_locked as _retry_while_locked
from pytest_cleo_grade.store._sqlite import same_file as _same_file

__all__ = ["BUSY_TIMEOUT_S", "DEFAULT_DB", "AuditStore", "remove_if_unused"]

_T = TypeVar("_T")


_ENTRIES: Final = TypeAdapter(list[AuditEntry])
_ENTRY_JSON: Final = TypeAdapter(AuditEntry)
#: Tables this package creates outside its migrations, and sqlite-utils' migrations table.
_OWN_TABLES: Final = frozenset({"judge_cache", MIGRATIONS_TABLE})


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
        busy_slice: float | None = None,
    ) -> None:
        """``timeout``: how long a write waits for another writer. ``busy_slice``: wait in
        slices of this many seconds, Python running between them, so that Ctrl-C or SIGTERM
        stops a command at once instead of after the wait (SQLite's own wait runs no signal
        handler); None waits in one piece."""
        self.path = Path(path)
        resolved = self.path.resolve()
        if not resolved.name:  # "/": no file there to open or create
            raise StoreError(f"{self.path}: a directory, not an audit store")
        self.read_only = read_only
        self.timeout = timeout
        #: Whether append_batches() committed, even if an interrupt followed at once.
        self.batches_committed = False
        self._busy_wait = timeout if busy_slice is None else min(busy_slice, timeout)
        self._lock = threading.Lock()
        #: Write mode: a descriptor of the store file holding a shared flock (see _claim_file).
        self._claim: int | None = None
        #: Read-only: the WAL's side files were absent before the open (see close()).
        self._tidy_sides = read_only and not any(
            map(os.path.lexists, _sides(resolved, "-wal", "-shm"))
        )
        try:
            _retry_while_locked(self._open, timeout)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(f"{self.path}: {_describe(exc)}") from exc
        except BaseException:  # a StoreError, or Ctrl-C: the claim is released either way
            self.close()
            raise

    def _open(self) -> None:
        self._close_quietly()  # an earlier attempt that met a lock
        self._conn = self._connect()
        if self.read_only:
            try:
                self._columns = self._check_readable()
            except sqlite3.OperationalError as exc:
                if not _cannot_share_memory(exc):
                    raise
                self._reopen_immutable(exc)
                self._columns = self._check_readable()
        else:
            self._prepare()
            self._columns = AUDIT_COLUMNS

    def _connect(self, *, immutable: bool = False) -> sqlite3.Connection:
        if self.read_only:
            self._check_regular(missing="no such database file")
            uri = f"{self.path.resolve().as_uri()}?mode=ro" + ("&immutable=1" if immutable else "")
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, check_same_thread=False)
        else:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"{self.path}: cannot create directory: {exc.strerror or exc}"
                ) from exc
            self._refuse_links()
            self._check_regular(missing=None)
            while self._claim is None:
                # A signal raised between the file's open and this assignment would leave
                # the descriptor, and its flock, to nobody: a failed import could then never
                # remove the store it created (remove_if_unused needs the exclusive flock).
                with interrupts_held():
                    claim = _claim_file(self.path)
                    if claim != _BUSY:
                        self._claim = claim
                        break
                # Held exclusively elsewhere (an import undoing itself checks the file is
                # unused): waited for here, where Ctrl-C and SIGTERM still end the wait.
                time.sleep(_CLAIM_WAIT_S)
            # nofollow: SQLite itself refuses a link planted between the check and the open.
            # Autocommit: every statement outside an explicit transaction commits at once.
            conn = sqlite3.connect(
                f"{self.path.absolute().as_uri()}?nofollow=1",
                uri=True,
                timeout=self._busy_wait,
                isolation_level=None,
                check_same_thread=False,
            )
        conn.row_factory = sqlite3.Row
        register_functions(conn)
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_wait * 1000)}")
        return conn

    def _reopen_immutable(self, exc: sqlite3.OperationalError) -> None:
        """Read a WAL database whose ``-shm`` cannot be created (a directory we cannot write).

        SQLite needs that file even to read, unless the database is opened as immutable,
        which ignores any write-ahead log: safe only when there is none (no ``-wal`` means
        no connection has it open and every commit is in the file; the same for a rollback
        ``-journal``). Otherwise nothing is read: a grade without the log's newest entries
        would be wrong without saying so. (A writer that opens the database while it is read
        this way, necessarily its owner's, could checkpoint into the file under the read:
        the one case the check cannot cover, for the few milliseconds a session's read lasts.)
        """
        real = self.path.resolve()
        for side in _sides(real, "-wal", "-journal"):
            # An empty log holds no entries: the one the refused open itself left (a full
            # disk lets SQLite create the file but not write to its -shm) changes nothing.
            if os.path.lexists(side) and not _empty_regular(side):
                raise StoreError(
                    f"{self.path}: cannot be read without writing beside it ({exc}), and "
                    f"{side.name} may hold entries not yet in the database; read it where its "
                    "directory is writable, or have its owner open it once to fold them in"
                ) from exc
        self._close_quietly()
        self._tidy_sides = False  # an immutable open creates nothing
        self._conn = self._connect(immutable=True)

    def _refuse_links(self) -> None:
        """The store and its side files are never written through a link (DESIGN section 5)."""
        for suffix in ("", "-wal", "-shm", "-journal"):
            side = self.path.with_name(self.path.name + suffix)
            try:
                refuse_symlink(side)
            except OSError as exc:
                raise StoreError(f"{side}: {exc.strerror}") from None

    def _check_regular(self, *, missing: str | None) -> None:
        """Only a regular file is a database: a device or a FIFO is refused before opening."""
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            if missing is not None:
                raise StoreError(f"{self.path}: {missing}") from None
            return
        except OSError as exc:
            raise StoreError(f"{self.path}: {exc.strerror or exc}") from exc
        if not stat.S_ISREG(mode):
            raise StoreError(
                f"{self.path}: {NotRegularFileError(self.path, kind_of(mode)).strerror}"
            )

    def _prepare(self) -> None:
        conn = self._conn
        # Reading the header first turns "not a database" into an error before we write.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        # Someone else's database (a CLEO project's) is refused before anything changes it:
        # no journal-mode switch, no migrations table.
        self._refuse_foreign()
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            conn.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL syncs at checkpoints only: a commit survives a killed process
        # (the WAL is in the OS cache), not a power cut, at a fraction of FULL's cost.
        conn.execute("PRAGMA synchronous = NORMAL")
        if CURRENT_MIGRATIONS - self._check_version():
            # IMMEDIATE takes the write lock first, so processes that create the store at the
            # same moment migrate it one after another; Migrations nests in savepoints.
            conn.execute("BEGIN IMMEDIATE")
            try:
                # sqlite-utils makes the tables in ``atomic()`` generators: a signal handled
                # right after one yielded, before its ``with`` held it, would leave it open,
                # to be closed at exit on a closed connection (a traceback). The write lock
                # is held by now, so nothing in here waits for another process.
                with interrupts_held():
                    self._check_version()
                    # Loaded here only: sqlite-utils is for creating and upgrading a store.
                    from pytest_cleo_grade.store._migrations import migrate

                    migrate(self._conn)
                conn.execute("COMMIT")
            except BaseException:
                _roll_back(conn)
                raise

    def _refuse_foreign(self) -> None:
        tables = {
            row[0]
            for row in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        }
        # Our own tables may precede the migrations (the judge cache creates its table
        # itself); any other table in an unmigrated file belongs to someone else.
        foreign = tables - _OWN_TABLES
        if not foreign or applied_migrations(self._conn):
            return
        tables = foreign
        shown = ", ".join(sorted(tables)[:4]) + (", ..." if len(tables) > 4 else "")
        cleo = " (a CLEO project database?)" if "audit_log" in tables else ""
        raise StoreError(
            f"{self.path}: not a cleo-grade audit store{cleo}: it holds tables {shown}; "
            "left unchanged (read a CLEO database with --cleo-db or import it)"
        )

    def _check_version(self) -> frozenset[str]:
        """The migrations applied, all known to this version (else StoreError)."""
        applied = applied_migrations(self._conn)
        unknown = applied - CURRENT_MIGRATIONS
        if unknown:
            raise StoreError(
                f"{self.path}: written by a newer pytest-cleo-grade (unknown schema migration "
                f"{sorted(unknown)[0]}); upgrade pytest-cleo-grade to use it"
            )
        return applied

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
        self._write(lambda conn: conn.execute(INSERT_ENTRY, row))
        return str(row[0])

    def append_many(self, entries: Iterable[AuditEntry]) -> int:
        """Append entries in one transaction: all of them or, on any error, none."""
        return self.append_rows(entry_rows(entries))

    def append_rows(self, rows: Iterable[Sequence[Any]]) -> int:
        """Insert prepared ``audit_log`` rows (ROW_COLUMNS order) in one transaction.

        Rows whose id is already stored are skipped (importing a CLEO database twice adds
        nothing); returns the number of rows inserted.
        """
        with collector_paused():
            materialised = list(rows)

        def insert(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                before = conn.total_changes
                conn.executemany(INSERT_ENTRY, materialised)
                inserted = conn.total_changes - before
                conn.execute("COMMIT")
            except BaseException:
                _roll_back(conn)
                raise
            return inserted

        return self._write(insert)

    def append_batches(self, batches: Iterable[Iterable[Sequence[Any]]]) -> int:
        """Insert batches of prepared rows in ONE transaction, consuming them as they come.

        Memory holds one batch at a time; an error from the batches' source (an invalid
        line of an entry file) or from SQLite rolls everything back, so a streamed import
        is still all or nothing. Returns the number of rows inserted.
        """

        def insert(conn: sqlite3.Connection) -> int:
            self.batches_committed = False
            previous = conn.execute("PRAGMA cache_size").fetchone()[0]
            # A large transaction spills pages to the WAL once the default 2 MB cache is
            # full; 64 MB keeps a million-row import in memory until it commits.
            conn.execute("PRAGMA cache_size = -65536")
            conn.execute("BEGIN IMMEDIATE")
            try:
                before = conn.total_changes
                for rows in batches:
                    conn.executemany(INSERT_ENTRY, rows)
                inserted = conn.total_changes - before
                conn.execute("COMMIT")
                self.batches_committed = True
            except BaseException:
                if conn.in_transaction:
                    _roll_back(conn)
                else:
                    # Ctrl-C handled as COMMIT returned (a signal waits for no statement):
                    # the transaction is in, and the caller must not report it undone.
                    self.batches_committed = True
                raise
            finally:
                conn.execute(f"PRAGMA cache_size = {int(previous)}")
            return inserted

        return self._write(insert)

    def add_grade(self, result: GradeResult) -> None:
        """Store a grade in the ``grades`` table."""
        self.add_grades([result])

    def add_grades(self, results: Iterable[GradeResult]) -> None:
        """Store grades in the ``grades`` table in one transaction: all of them or none."""
        rows = [grade_row(result) for result in results]

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
                _roll_back(conn)
                raise

        self._write(insert)

    def append_conversation(self, session_id: str, conversation: Conversation) -> int:
        """Store a session's conversation items (messages, model calls, output) in one
        transaction, the store's cap applied; returns the rows written."""
        if conversation.empty and not conversation.dropped:
            return 0

        def insert(conn: sqlite3.Connection) -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                written = insert_conversation(conn, session_id, conversation)
                conn.execute("COMMIT")
            except BaseException:
                _roll_back(conn)
                raise
            return written

        return self._write(insert)

    def session_conversation(self, session_id: str) -> Conversation:
        """The session's stored conversation (empty if none was captured)."""
        try:
            with self._lock:
                return read_conversation(self._conn, session_id, str(self.path))
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc

    def _write(self, action: Callable[[sqlite3.Connection], _T]) -> _T:
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only")
        with self._lock:
            try:
                return _retry_while_locked(lambda: action(self._conn), self.timeout)
            except WRITE_FAILURES as exc:
                raise write_error(self.path, exc) from exc

    # -- reading ------------------------------------------------------------------------

    def session_entries(self, session_id: str) -> list[AuditEntry]:
        """Every entry of one session (exact id match), by timestamp, ties in insertion order."""
        _, entries = self._load(session_id)
        # Text order is time order for rows we wrote; CLEO databases mix timestamp forms.
        return order_entries(entries)

    def session_calls(self, session_id: str) -> list[GradedCall] | None:
        """The session as graded calls in session order (only what CLEO's rubric reads), or
        None when one of its rows needs :meth:`session_entries` (see ``store.calls``)."""
        try:
            with self._lock:
                return read_calls(self._conn, self._columns, session_id)
        except sqlite3.OperationalError:
            # Malformed JSON or a BLOB in a row: the entry path names the row (and any other
            # failure to read, it reports as its own).
            return None
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc

    def session_items(self, session_id: str) -> list[tuple[str, AuditEntry]]:
        """(row id, entry) pairs of one session in stored order (for copying rows by id)."""
        ids, entries = self._load(session_id)
        return list(zip(ids, entries, strict=True))

    def replaced(self) -> bool:
        """Whether the store's path no longer names the file this store has open: deleted,
        or replaced by another (a ``rm -rf .cleo`` between tests, say). Writes and reads
        would then go to a file nobody else sees, and another process's calls to the new
        one. Always False read-only (no file is held)."""
        if self._claim is None:
            return False
        try:
            held, named = os.fstat(self._claim), os.stat(self.path)
        except OSError:
            return True
        return (held.st_dev, held.st_ino) != (named.st_dev, named.st_ino)

    def data_version(self) -> int:
        """SQLite's ``PRAGMA data_version``: it changes when another connection (another
        process) commits, never for this connection's own writes. A reader that saw the same
        value before knows nobody else wrote meanwhile, without reading anything."""
        with self._lock:
            try:
                return int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc

    def _load(self, session_id: str) -> tuple[list[str], list[AuditEntry]]:
        # SQLite builds each entry's JSON (CLEO's conventions mapped in SQL, see
        # _ENTRY_JSON) and pydantic validates the whole session from that text in one call:
        # several times faster than building dicts row by row in Python.
        # rowid breaks timestamp ties: it grows with insertion order. json_object() prints a
        # REAL with 15 significant digits, so a fractional duration also comes back as the
        # column's own double (NULL for the usual whole number, which JSON carries exactly).
        sql = (
            f"SELECT id, {self._entry_json}, "
            "CASE WHEN typeof(duration_ms) = 'real' THEN duration_ms END FROM audit_log "
            "WHERE session_id = ? ORDER BY timestamp, rowid"
        )
        try:
            with self._lock:
                cursor = self._conn.cursor()
                cursor.row_factory = None  # plain tuples, transposed below at C speed
                rows = cursor.execute(sql, (session_id,)).fetchall()
        except sqlite3.OperationalError as exc:
            if _undecodable(exc):
                raise StoreError(f"{self.path}: {self._undecodable_row(session_id)}") from exc
            if "BLOB" in str(exc):
                raise StoreError(
                    f"{self.path}: audit_log row {self._blob_row(session_id)}: holds binary "
                    "data (a BLOB) where text or a number belongs"
                ) from exc
            if "malformed JSON" not in str(exc):
                raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc
            raise StoreError(
                f"{self.path}: audit_log row {self._malformed_row(session_id)}: "
                "details_json or metadata_json is not valid JSON (or nests too deeply to read)"
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc
        ids, texts, durations = zip(*rows, strict=True) if rows else ((), (), ())
        try:
            with collector_paused():
                entries = _ENTRIES.validate_json("[" + ",".join(texts) + "]")
        except ValidationError as exc:
            raise StoreError(f"{self.path}: {_first_invalid_row(ids, texts, exc)}") from exc
        if durations.count(None) != len(durations):
            # Validated on the 15-digit rendering (same sign, finite alike); kept exactly.
            for entry, duration in zip(entries, durations, strict=True):
                if duration is not None:
                    entry.result.duration = duration
        return list(map(str, ids)), entries

    def _blob_row(self, session_id: str) -> str:
        blob = " OR ".join(f"typeof({column}) = 'blob'" for column in self._columns)
        rows = self._read(
            f"SELECT id FROM audit_log WHERE session_id = ? AND ({blob}) "
            "ORDER BY timestamp, rowid LIMIT 1",
            (session_id,),
        )
        return str(rows[0][0]) if rows else "?"

    def _undecodable_row(self, session_id: str | None) -> str:
        """``audit_log row ID: column COLUMN holds text that is not UTF-8`` for the first such
        row (of a session, or of the table), instead of SQLite's error, which quotes the SQL.

        Python decodes every TEXT value it fetches; read here as bytes, each is decoded in turn.
        """
        where, params = ("WHERE session_id = ?", (session_id,)) if session_id else ("", ())
        columns = ", ".join(f'"{column}"' for column in self._columns)
        with self._lock:
            self._conn.text_factory = bytes
            try:
                cursor = self._conn.cursor()
                cursor.row_factory = None
                rows = cursor.execute(
                    f"SELECT id, {columns} FROM audit_log {where} ORDER BY timestamp, rowid",
                    params,
                )
                for row_id, *values in rows:
                    for column, value in zip(self._columns, values, strict=True):
                        if isinstance(value, bytes) and not _is_utf8(value):
                            return (
                                f"audit_log row {_shown_id(row_id)}: column {column} holds text "
                                "that is not valid UTF-8"
                            )
            except sqlite3.Error:
                pass
            finally:
                self._conn.text_factory = str
        return "a row holds text that is not valid UTF-8"

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
        source → ``cli``, task_id ``system``/``unknown`` → no taskId (unless ``metadata_json``
        keeps the entry's own, see ``schema.task_id_sql``), ``metadata_json`` merged into
        metadata, and SQLite's naive ``YYYY-MM-DD HH:MM:SS`` default read as UTC (any other
        text is left as stored, so that an error quotes what the row holds). A fractional
        ``duration_ms`` prints with 15 digits here; ``_load`` puts back the exact double.
        """
        exit_code = exit_code_sql(self._columns)
        metadata = "'{}'"
        if "metadata_json" in self._columns:
            metadata = "coalesce(metadata_json, '{}')"
        return f"""json_object(
            'timestamp', CASE WHEN instr(timestamp, 'T') OR instr(timestamp, 'Z')
                OR NOT instr(timestamp, ' ') THEN timestamp
                ELSE replace(timestamp, ' ', 'T') || 'Z' END,
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
                'taskId', {task_id_sql(self._columns)})),
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
                if not isinstance(text, str):
                    raise ValueError(f"result_json is {type(text).__name__}, not text")
                check_nesting(text)
                result = GradeResult.model_validate_json(text)
                # What every reader shows must be computable: a 400-digit score overflows.
                result.display_percent  # noqa: B018
            except ValidationError as exc:
                self._skip_grade(row_id, format_validation_error(exc))
            except (ValueError, OverflowError, RecursionError, TypeError) as exc:
                self._skip_grade(row_id, f"not a usable grade: {exc}")
            else:
                results.append(result)
        return results

    def _skip_grade(self, row_id: object, why: str) -> None:
        warnings.warn(
            f"{self.path}: grades row {row_id}: skipped corrupt grade: {why}",
            CleoGradeWarning,
            stacklevel=3,
        )

    def _read(self, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
        try:
            with self._lock:
                return self._conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table: grades" in str(exc):
                return []
            if _undecodable(exc):  # a session id, say: name the row, not the SQL
                raise StoreError(f"{self.path}: {self._undecodable_row(None)}") from exc
            raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path}: cannot read: {_describe(exc)}") from exc

    # -- lifecycle ------------------------------------------------------------------------

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` verdict (``ok`` when healthy)."""
        return str(self._read("PRAGMA integrity_check", ())[0][0])

    def close(self) -> None:
        """Close the connection (idempotent).

        A read-only open of a WAL database creates its ``-wal`` and ``-shm`` files, and a
        read-only connection cannot remove them when it closes: they are removed here when
        they were absent before, as SQLite removes them (see :func:`_remove_unused_sides`).
        """
        self._close_quietly()
        self._release_claim()
        if self._tidy_sides:
            self._tidy_sides = False
            _remove_unused_sides(self.path.resolve())

    def _close_quietly(self) -> None:
        conn = getattr(self, "_conn", None)
        if conn is not None:
            conn.close()
            self._conn = None  # type: ignore[assignment]

    def _release_claim(self) -> None:
        claim, self._claim = getattr(self, "_claim", None), None
        if claim is not None:
            os.close(claim)  # drops its flock

    def __del__(self) -> None:
        # A store dropped unclosed must not keep its file's flock: a failed import could then
        # never remove the store it created. An interrupt raised right as the constructor
        # returns (Python runs signal handlers after a call) drops it before any ``with``
        # or ``try`` holds it.
        with contextlib.suppress(Exception):
            self._close_quietly()
            self._release_claim()

    def __enter__(self) -> AuditStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _first_invalid_row(ids: Sequence[Any], texts: Sequence[str], exc: ValidationError) -> str:
    """``audit_log row ID: field: why`` for the first row of a session that fails to load."""
    error = exc.errors()[0]
    loc = error["loc"]
    if not loc or not isinstance(loc[0], int):
        # The session's JSON did not parse at all: a row nests too deeply for the parser,
        # or SQLite wrote an infinite REAL (a duration_ms of 1e999) as Inf, which is no JSON.
        # Find the row one at a time.
        for row_id, text in zip(ids, texts, strict=True):
            problem = _row_json_problem(text)
            if problem is not None:
                return f"audit_log row {row_id}: {problem}"
        return f"audit_log: {error['msg']}"
    place = ".".join(str(part) for part in loc[1:]) or "entry"
    return f"audit_log row {ids[loc[0]]}: {place}: {error['msg']}"


def _row_json_problem(text: str) -> str | None:
    """Why one row's entry JSON does not parse (None when it does)."""
    try:
        _ENTRY_JSON.validate_json(text)
    except ValidationError as exc:
        error = exc.errors()[0]
        if error["type"] != "json_invalid":
            return None
        if "recursion" in error["msg"]:
            return "details_json or metadata_json is nested too deeply"
        return f"holds a number JSON cannot carry ({error['msg']})"
    return None


def remove_if_unused(path: str | os.PathLike[str]) -> bool:
    """Remove a store file that is provably nobody's: for an import that created the store
    and failed. Returns whether the path is gone (it may have been absent already).

    Whatever the import rolled back, another process (an import, ``record()`` in a worker)
    may have opened the new file since and be about to commit, or have committed and closed.
    The file is removed only when (1) no AuditStore has it open: each holds a shared flock
    on it from before SQLite opens it until it closes (see :func:`_claim_file`), so the exclusive
    one is granted only when none does; (2) no table holds a row; (3) no ``-wal``, ``-shm``
    or ``-journal`` is beside it (SQLite removes them when the last connection of any kind
    closes); and (4) the path still names the file checked. A writer that opens the file
    meanwhile waits for its shared flock, then finds the path gone and creates it anew.
    Any doubt (an error, a busy lock) leaves the file.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        opened = os.fstat(fd)
        if not (stat.S_ISREG(opened.st_mode) and _same_file(opened, path)):
            return False
        if not _holds_no_row(path):
            return False
        if any(map(os.path.lexists, _sides(path, "-wal", "-shm", "-journal"))):
            return False
        if not _same_file(opened, path):
            return False
        path.unlink()
    except OSError:
        return False  # held by another process (BlockingIOError), or not ours to remove
    finally:
        os.close(fd)  # drops the flock: a writer waiting for it finds the path gone
    return True


def _holds_no_row(path: Path) -> bool:
    """Whether every table of the database but the migrations' record is empty.

    The connection may write (a read-only one cannot remove the WAL's side files when it
    closes); it runs nothing that writes. Closing it as the last connection folds in and
    removes an empty ``-wal`` and the ``-shm``.
    """
    try:
        conn = sqlite3.connect(
            f"{path.absolute().as_uri()}?mode=rw&nofollow=1",
            uri=True,
            timeout=0,
            isolation_level=None,
        )
    except sqlite3.Error:
        return False
    try:
        conn.execute("PRAGMA query_only = ON")
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        return not any(
            conn.execute(f'SELECT 1 FROM "{name}" LIMIT 1').fetchone()
            for name in tables
            if name != MIGRATIONS_TABLE
        )
    except sqlite3.Error:
        return False
    finally:
        conn.close()


#: How often a writer reopens a store whose file was removed between its open and its flock.
_CLAIM_ATTEMPTS: Final = 50


#: What :func:`_claim_file` returns while another process holds the exclusive flock.
_BUSY: Final = -1
#: How often a claim waiting for that flock tries again.
_CLAIM_WAIT_S: Final = 0.005


def _claim_file(path: Path) -> int | None:
    """A descriptor of the store file (created if missing) holding a shared flock on it.

    Taken before SQLite opens the file and kept until the store closes: the file a failed
    import may remove (:func:`remove_if_unused`, which needs the exclusive flock) is
    never one a writer has open. The flock is taken on the file the path names *now*; if it
    was removed (or replaced) before the flock was granted, the path is opened again. None
    when the file cannot be opened here: SQLite's own open then reports why; ``_BUSY``
    (without waiting) while another process holds the flock exclusively.
    """
    for _ in range(_CLAIM_ATTEMPTS):
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # a failed import may remove it
            fd = _open_claim(path)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            if _same_file(os.fstat(fd), path):
                return fd
        except BlockingIOError:
            os.close(fd)
            return _BUSY
        except OSError:
            pass
        os.close(fd)
    return None


def _open_claim(path: Path) -> int:
    flags = os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, os.O_RDWR | flags, 0o644)
    except PermissionError:
        fd = os.open(path, os.O_RDONLY | flags)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularFileError(path, "not a regular file")
    return fd


def _undecodable(exc: sqlite3.OperationalError) -> bool:
    """Whether Python could not decode a TEXT value SQLite returned (invalid UTF-8)."""
    return str(exc).startswith("Could not decode to UTF-8")


def _is_utf8(value: bytes) -> bool:
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _shown_id(row_id: object) -> str:
    """A row id as one line of text: undecodable bytes and control characters escaped."""
    text = row_id.decode("utf-8", "backslashreplace") if isinstance(row_id, bytes) else str(row_id)
    return text if text.isprintable() else repr(text)


def _sides(path: Path, *suffixes: str) -> list[Path]:
    return [path.with_name(path.name + suffix) for suffix in suffixes]


#: SQLite's primary result codes SQLITE_READONLY and SQLITE_CANTOPEN: a read-only open of a
#: WAL database that cannot create its ``-shm`` reports one of them on the first read.
_SHM_FAILURES: Final = frozenset({8, 14})
#: SQLITE_IOERR_SHMOPEN, _SHMSIZE and _SHMMAP: the ``-shm`` could be created but not grown
#: (a full disk, a quota): the same open, refused one step later.
_SHM_IO_FAILURES: Final = frozenset({10 | 18 << 8, 10 | 19 << 8, 10 | 21 << 8})


def _cannot_share_memory(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0)
    return code & 0xFF in _SHM_FAILURES or code in _SHM_IO_FAILURES


def _empty_regular(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == 0


def _remove_unused_sides(path: Path) -> None:
    """Remove a WAL database's empty ``-wal`` and its ``-shm`` if no connection uses them.

    A read-only open leaves them behind (SQLite removes them only from a connection that may
    write). Removing them by hand could pull them from under another process that has the
    database open, so SQLite does it: a connection that may write (it runs no statement
    that writes, ``query_only``) closes as the database's last connection only if it gets
    the exclusive lock, which no other connection, of any process, leaves it; and its
    closing checkpoint copies nothing from an empty log. When the file cannot be written,
    SQLite opens it read-only and the files stay: harmless, just untidy.
    """
    wal, shm, journal = _sides(path, "-wal", "-shm", "-journal")
    try:
        log, memory = os.lstat(wal), os.lstat(shm)
        if log.st_size or not (stat.S_ISREG(log.st_mode) and stat.S_ISREG(memory.st_mode)):
            return  # someone has written to the log since, or these are not SQLite's files
        if os.path.lexists(journal):
            return  # a hot rollback journal: a writable connection would roll it back
        conn = sqlite3.connect(
            f"{path.as_uri()}?mode=rw&nofollow=1", uri=True, timeout=0, isolation_level=None
        )
    except (OSError, sqlite3.Error):
        return
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the log
    except sqlite3.Error:
        pass  # busy or unreadable: closing still removes nothing it should not
    finally:
        conn.close()


def _roll_back(conn: sqlite3.Connection) -> None:
    """Roll back the open transaction, if one is still open.

    SQLite rolls back by itself on some errors (a full disk), and a Ctrl-C can land just after
    COMMIT returned: a ROLLBACK then fails with "no transaction is active", which would replace
    the error (or the interrupt) being raised.
    """
    if conn.in_transaction:
        conn.execute("ROLLBACK")
