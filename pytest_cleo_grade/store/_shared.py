"""One audit store connection per process, shared by the sessions of a test run."""

from __future__ import annotations

from pathlib import Path

from pytest_cleo_grade.store._store import AuditStore

__all__ = ["SharedStore"]


class SharedStore:
    """One audit store connection per process, opened on first use and closed at the end.

    Keeping a connection open stops SQLite from checkpointing and removing the WAL each time
    a test's session closes its own connection, which would otherwise dominate the cost of a
    graded test; the controller also writes the grades table through it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._store: AuditStore | None = None

    def get(self) -> AuditStore:
        if self._store is not None and self._store.replaced():
            # Deleted or replaced since (a fixture clearing .cleo/ between tests): every
            # process records into the file the path names now, so this one must too.
            self._store.close()
            self._store = None
        if self._store is None:
            self._store = AuditStore(self.path)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
