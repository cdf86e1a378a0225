"""Importing audit entries into the store: entry files and CLEO project databases."""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, NamedTuple

from pytest_cleo_grade.core.errors import EntryError
from pytest_cleo_grade.core.models import AuditEntry, collector_paused
from pytest_cleo_grade.store._schema import entry_row, entry_rows
from pytest_cleo_grade.store._store import AuditStore, remove_if_unused
from pytest_cleo_grade.store._workers import worker_count
from pytest_cleo_grade.store.sources import (
    load_entries_file,
    map_entry_batches,
    read_cleo_db,
    select_session,
)

__all__ = [
    "ImportSummary",
    "import_cleo_db",
    "import_cleo_rows",
    "import_entries_file",
    "import_workers",
    "stream_entries_file",
]

_SESSION = operator.attrgetter("session_id")
#: From this size on (about 20,000 entries) an import hands its batches to worker processes.
_PARALLEL_BYTES: Final = 4 * 1024 * 1024


@dataclass
class ImportSummary:
    """What a streamed import added: a count and the first few sessions (memory stays flat)."""

    count: int = 0
    sessions: list[str] = field(default_factory=list)
    more_sessions: bool = False

    def saw(self, session_id: str) -> None:
        if session_id in self.sessions:
            return
        if len(self.sessions) < 5:
            self.sessions.append(session_id)
        else:
            self.more_sessions = True


def stream_entries_file(
    target: str | os.PathLike[str],
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
) -> ImportSummary:
    """Import an entry file into the store at ``target`` as a stream, all or nothing.

    Memory is bounded by a batch, not by the file. The first line is read and validated
    before the store is opened, so a file that is bad from its first line creates nothing;
    a bad line further on (or Ctrl-C, SIGTERM) rolls the one transaction back, and a store
    this call created is removed again, only if it is still this call's alone: another
    process (an import, ``record()`` from a worker) may have opened the new file meanwhile,
    and then it stays, its rows intact (see :func:`remove_if_unused`). A large
    JSON lines file is validated by worker processes while this one writes (see
    :func:`worker_count`).
    """
    store_path = Path(target)
    where = str(path)
    convert = functools.partial(_batch_rows, session_id=session_id, where=where)
    batches = map_entry_batches(path, convert, workers=import_workers(path))
    summary = ImportSummary()

    def selected(first: _Rows) -> Iterator[list[tuple[object, ...]]]:
        for rows, sessions, entries in _chain(first, batches):
            summary.count += entries
            for session in sessions:
                summary.saw(session or "(no session)")
            yield rows

    # Memory is bounded by a batch, and nothing built here forms a cycle: the collector
    # would only traverse each batch's new objects again (10-20 % of an import's time).
    with collector_paused():
        try:
            # The first entry's error surfaces here, before the store exists; so does the
            # end of a file whose entries all belong to other sessions.
            first = next((ready for ready in batches if ready.entries), None)
            if first is None:
                raise EntryError(f"{where}: no entries for session {session_id}")
            created = _missing_parts(store_path)
            store: AuditStore | None = None
            try:
                with AuditStore(store_path) as store:
                    store.append_batches(selected(first))
            except BaseException as exc:
                if (
                    isinstance(exc, KeyboardInterrupt)
                    and store is not None
                    and store.batches_committed
                ):
                    # Ctrl-C or SIGTERM while the store closed (a large import's checkpoint
                    # takes a moment): every row is in, nothing is left to undo, and the
                    # import reports what it did rather than an interruption it survived.
                    return summary
                if store_path in created and remove_if_unused(store_path):
                    _remove_directories(created[1:])
                raise
        finally:
            batches.close()  # stops the workers, whatever happened
    return summary


class _Rows(NamedTuple):
    """A batch made ready for the store: its rows, its distinct sessions, how many entries."""

    rows: list[tuple[object, ...]]
    sessions: list[str | None]
    entries: int


def _batch_rows(batch: list[AuditEntry], session_id: str | None, where: str) -> _Rows:
    if session_id is not None:
        if not any(e.session_id in (None, session_id) for e in batch):
            return _Rows([], [], 0)
        batch = select_session(batch, session_id, where)
    # The batch's distinct sessions in first-seen order, found at C speed.
    return _Rows(entry_rows(batch), list(dict.fromkeys(map(_SESSION, batch))), len(batch))


def import_workers(path: str | os.PathLike[str]) -> int:
    """Worker processes an import of ``path`` uses: none for a small file (not worth a fork)."""
    workers = worker_count()  # a bad setting is an error whatever the file's size
    try:
        size = os.stat(path).st_size
    except OSError:
        return 0  # the reader names the problem
    return workers if size >= _PARALLEL_BYTES else 0


def _chain(first: _Rows, rest: Iterator[_Rows]) -> Iterator[_Rows]:
    yield first
    yield from rest


def _missing_parts(path: Path) -> list[Path]:
    """The store file and the directories above it that do not exist yet (deepest first)."""
    missing: list[Path] = []
    current = path
    while not os.path.lexists(current):
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    return missing


def _remove_directories(created: list[Path]) -> None:
    """Remove the directories a failed import created, deepest first, while they are empty
    (rmdir never removes one another process has put a file in meanwhile)."""
    for directory in created:
        try:
            directory.rmdir()
        except OSError:
            return


def import_entries_file(
    store: AuditStore, path: str | os.PathLike[str], *, session_id: str | None = None
) -> list[AuditEntry]:
    """Import a JSON/JSONL file into the store, all or nothing; returns the entries added.

    With ``session_id``, only that session's entries (and entries carrying none) are
    imported, under that id.
    """
    entries = select_session(load_entries_file(path), session_id, str(path))
    store.append_many(entries)
    return entries


def import_cleo_rows(store: AuditStore, items: list[tuple[str, AuditEntry]]) -> int:
    """Add rows read by :func:`read_cleo_db` under their CLEO ids; returns how many were new."""
    return store.append_rows(entry_row(entry, row_id) for row_id, entry in items)


def import_cleo_db(
    store: AuditStore, cleo_db: str | os.PathLike[str], *, session_id: str | None = None
) -> tuple[int, int]:
    """Copy a CLEO database's audit rows (one session's, or all) into the store.

    The CLEO database is opened read-only and never modified. Rows keep their CLEO ids, so
    importing the same database again adds nothing. Returns (rows read, rows added).
    """
    items = read_cleo_db(cleo_db, session_id=session_id)
    return len(items), import_cleo_rows(store, items)
