"""The store's history archive: the lines ``cleo-grade history compact`` moved out of a
GRADES.jsonl, batch by batch, byte for byte, with the place each one held."""

from __future__ import annotations

import os
import sqlite3
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pytest_cleo_grade.core.errors import StoreError
from pytest_cleo_grade.store._sqlite import describe
from pytest_cleo_grade.store._store import AuditStore, _roll_back

__all__ = [
    "ArchivedLine",
    "Batch",
    "BatchFacts",
    "add_batch",
    "archived_run_lines",
    "batch_lines",
    "batches",
    "counted",
    "drop_batches",
    "history_key",
    "set_state",
]

#: A batch's life: ``pending`` from the archive's commit until the history's replace is
#: known to have happened (``done``); ``restoring`` from the commit of a restore's intent
#: until its replace is known to have happened (the batch is then dropped).
State = Literal["pending", "done", "restoring"]

#: How many archived lines one INSERT statement carries.
_INSERT_CHUNK: Final = 1000
#: How a line's bytes are kept. Compressed: grade lines shrink to about 40 % one by one,
#: and a 2 kB line, alone on a 4 kB page uncompressed, shares it with four others, so the
#: store a CI cache carries grows by a fifth of what the history loses rather than twice it.
_ENCODING: Final = "zlib"
#: zlib's fastest level: within a few percent of the default's size, in two thirds the time.
_LEVEL: Final = 1


@dataclass(frozen=True, slots=True)
class BatchFacts:
    """What one compaction knew of the file it rewrote: its size, line count and hash
    before, and those of the lines it kept (the new file's start, whatever follows)."""

    original_lines: int
    original_bytes: int
    original_sha256: str
    kept_lines: int
    kept_bytes: int
    kept_sha256: str


@dataclass(frozen=True, slots=True)
class Batch:
    """One compaction's record (a row of ``history_archive_batches``)."""

    id: int
    archived_at: str
    state: State
    facts: BatchFacts
    restored_bytes: int | None
    restored_sha256: str | None


@dataclass(frozen=True, slots=True)
class ArchivedLine:
    """One archived line: its 1-based number in the file of its batch, the keys readers
    pick lines by (None where the line has none), and its bytes with the newline."""

    line_number: int
    run_id: str | None
    test_id: str | None
    session_id: str | None
    timestamp: str | None
    raw: bytes


def history_key(store: Path, history: Path) -> str:
    """How the archive names a history: its path from the store's directory, so that a CI
    cache restoring ``.cleo/`` in another workspace still finds its lines."""
    return os.path.relpath(history.absolute(), store.absolute().parent)


def batches(store: AuditStore, key: str) -> list[Batch]:
    """The history's batches, oldest first (none in a store opened read-only that predates
    the archive)."""
    try:
        rows = _select(
            store,
            "SELECT id, archived_at, state, original_lines, original_bytes, original_sha256, "
            "kept_lines, kept_bytes, kept_sha256, restored_bytes, restored_sha256 "
            "FROM history_archive_batches WHERE history = ? ORDER BY id",
            (key,),
        )
    except _NoArchive:
        return []
    return [
        Batch(
            id=row[0],
            archived_at=row[1],
            state=row[2],
            facts=BatchFacts(*row[3:9]),
            restored_bytes=row[9],
            restored_sha256=row[10],
        )
        for row in rows
    ]


def add_batch(
    store: AuditStore,
    key: str,
    archived_at: str,
    facts: BatchFacts,
    lines: Iterable[ArchivedLine],
) -> int:
    """Archive ``lines`` as a new ``pending`` batch in one transaction (all or none); its id.

    ``lines`` is iterated inside the transaction (a history's worth is not held at once);
    a retry after a lock starts it again, so it must be an iterable that can be.
    """

    def insert(conn: sqlite3.Connection) -> int:
        conn.execute("BEGIN IMMEDIATE")
        try:
            cursor = conn.execute(
                "INSERT INTO history_archive_batches (history, archived_at, state, "
                "original_lines, original_bytes, original_sha256, kept_lines, kept_bytes, "
                "kept_sha256) VALUES (?, ?, 'pending', ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    archived_at,
                    facts.original_lines,
                    facts.original_bytes,
                    facts.original_sha256,
                    facts.kept_lines,
                    facts.kept_bytes,
                    facts.kept_sha256,
                ),
            )
            batch = cursor.lastrowid
            assert batch is not None
            chunk: list[tuple[Any, ...]] = []
            for line in lines:
                chunk.append(
                    (
                        batch,
                        line.line_number,
                        line.run_id,
                        line.test_id,
                        line.session_id,
                        line.timestamp,
                        _ENCODING,
                        zlib.compress(line.raw, _LEVEL),
                    )
                )
                if len(chunk) >= _INSERT_CHUNK:
                    _insert_lines(conn, chunk)
                    chunk = []
            _insert_lines(conn, chunk)
            conn.execute("COMMIT")
        except BaseException:
            _roll_back(conn)
            raise
        return batch

    return store._write(insert)


def _insert_lines(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> None:
    conn.executemany(
        "INSERT INTO history_archive (batch, line_number, run_id, test_id, session_id, "
        "timestamp, encoding, raw) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        rows,
    )


def set_state(
    store: AuditStore,
    ids: Sequence[int],
    state: State,
    restored: tuple[int, str] | None = None,
) -> None:
    """Move batches to ``state`` in one transaction; ``restored``: the size and hash of the
    file a restore is about to put in place (``restoring``)."""
    size, digest = restored if restored is not None else (None, None)

    def update(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany(
                "UPDATE history_archive_batches SET state = ?, restored_bytes = ?, "
                "restored_sha256 = ? WHERE id = ?",
                [(state, size, digest, batch) for batch in ids],
            )
            conn.execute("COMMIT")
        except BaseException:
            _roll_back(conn)
            raise

    store._write(update)


def drop_batches(store: AuditStore, ids: Sequence[int]) -> None:
    """Remove batches and their lines in one transaction (their lines are back in the file,
    or never left it)."""

    def delete(conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.executemany("DELETE FROM history_archive WHERE batch = ?", [(i,) for i in ids])
            conn.executemany(
                "DELETE FROM history_archive_batches WHERE id = ?", [(i,) for i in ids]
            )
            conn.execute("COMMIT")
        except BaseException:
            _roll_back(conn)
            raise

    store._write(delete)


def batch_lines(store: AuditStore, batch: int) -> Iterator[ArchivedLine]:
    """A batch's lines by line number, read a few at a time (not the batch at once)."""
    try:
        cursor = store._conn.execute(
            "SELECT line_number, run_id, test_id, session_id, timestamp, encoding, raw "
            "FROM history_archive WHERE batch = ? ORDER BY line_number",
            (batch,),
        )
        while rows := cursor.fetchmany(_INSERT_CHUNK):
            for row in rows:
                raw = _decoded(row[5], row[6], store.path, row[0])
                yield ArchivedLine(row[0], row[1], row[2], row[3], row[4], raw)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: cannot read the history archive: {describe(exc)}") from exc


def _decoded(encoding: object, raw: object, path: Path, number: int) -> bytes:
    """An archived line's bytes; StoreError for one the archive cannot give back whole
    (a restore writes nothing rather than a file missing a line)."""
    try:
        if encoding == _ENCODING and isinstance(raw, bytes):
            return zlib.decompress(raw)
    except zlib.error as exc:
        raise StoreError(
            f"{path}: history archive line {number}: corrupt ({exc}): nothing restored"
        ) from exc
    raise StoreError(
        f"{path}: history archive line {number}: unknown encoding {encoding!r}: nothing restored"
    )


def counted(store: AuditStore, ids: Sequence[int]) -> tuple[int, int]:
    """How many lines, and of how many runs (lines without a run id: one), the batches hold."""
    marks = ", ".join("?" * len(ids))
    rows = _select(
        store,
        f"SELECT count(*), count(DISTINCT coalesce(run_id, '')) FROM history_archive "
        f"WHERE batch IN ({marks})",
        list(ids),
    )
    return int(rows[0][0]), int(rows[0][1])


def archived_run_lines(store: AuditStore, key: str, run_id: str) -> int:
    """How many lines of run ``run_id`` the archive holds for the history ``key`` (0 for
    none, and for a store that never archived: no such table in it)."""
    try:
        rows = _select(
            store,
            "SELECT count(*) FROM history_archive JOIN history_archive_batches b "
            "ON b.id = history_archive.batch WHERE b.history = ? AND b.state != 'pending' "
            "AND history_archive.run_id = ?",
            (key, run_id),
        )
    except _NoArchive:
        return 0
    return int(rows[0][0])


class _NoArchive(Exception):
    """The store predates the archive (opened read-only, never migrated)."""


def _select(store: AuditStore, sql: str, params: Sequence[Any]) -> list[sqlite3.Row]:
    try:
        with store._lock:
            return store._conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            raise _NoArchive from exc
        raise StoreError(f"{store.path}: cannot read the history archive: {describe(exc)}") from exc
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{store.path}: cannot read the history archive: {describe(exc)}") from exc
