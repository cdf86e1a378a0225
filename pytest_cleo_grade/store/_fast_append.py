"""One row into an existing, current store, standard library only (`cleo-grade record`)."""

from __future__ import annotations

import fcntl
import os
import sqlite3
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_cleo_grade.core._files import interrupts_held
from pytest_cleo_grade.store._row import INSERT_ENTRY
from pytest_cleo_grade.store._sqlite import (
    BUSY_TIMEOUT_S,
    CURRENT_MIGRATIONS,
    WRITE_FAILURES,
    applied_migrations,
    retry_while_locked,
    same_file,
    write_error,
)

__all__ = ["append_to_current"]


def append_to_current(path: Path, row: Sequence[Any], *, busy_slice: float) -> bool:
    """Insert one prepared row (``store._row``) into the store at ``path`` and commit, as
    ``AuditStore(path, busy_slice=busy_slice).append()`` does; False, with nothing written
    and the file as it was, wherever that store would do more than insert or would say why
    it cannot: no such file, a link, no current schema (a store to create or migrate), not
    in WAL mode, a lock taken while it opens, any SQLite error before the insert. The
    caller then goes through AuditStore, which does that and says it.

    As AuditStore's, the wait for another writer runs in ``busy_slice`` pieces, so that
    Ctrl-C or SIGTERM ends it before anything is written; the file carries a shared flock
    from before SQLite opens it until it is closed (see ``store._store.remove_if_unused``).
    A failed insert is the store's error (StoreError, in its words).
    """
    if not path.name or not _plain_file(path):
        return False
    claim: int | None = None
    conn: sqlite3.Connection | None = None
    try:
        # A signal between the open and the assignment would leave the descriptor, and its
        # flock, to nobody (as in AuditStore._connect).
        with interrupts_held():
            claim = _claim_existing(path)
        if claim is None:
            return False
        try:
            # nofollow and autocommit, as AuditStore's connection.
            conn = opened = sqlite3.connect(
                f"{path.absolute().as_uri()}?nofollow=1",
                uri=True,
                timeout=busy_slice,
                isolation_level=None,
                check_same_thread=False,
            )
            if not _current(opened):
                return False
            # As AuditStore: in WAL mode a commit survives a killed process, not a power cut.
            opened.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error:
            return False
        try:
            retry_while_locked(lambda: opened.execute(INSERT_ENTRY, row), BUSY_TIMEOUT_S)
        except WRITE_FAILURES as exc:
            raise write_error(path, exc) from exc
        return True
    finally:
        if conn is not None:
            conn.close()
        if claim is not None:
            os.close(claim)  # drops its flock, once SQLite has closed the file


def _plain_file(path: Path) -> bool:
    """Whether the store is a regular file and neither it nor a side file is a link
    (AuditStore refuses links, naming the file)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
    except OSError:
        return False
    for suffix in ("-wal", "-shm", "-journal"):
        try:
            mode = os.lstat(path.with_name(path.name + suffix)).st_mode
        except FileNotFoundError:
            continue
        except OSError:
            return False
        if stat.S_ISLNK(mode):
            return False
    return True


def _claim_existing(path: Path) -> int | None:
    """A descriptor of the store file holding a shared flock, as AuditStore's claim; None
    when the file cannot be opened as a regular file, or another process holds the flock
    exclusively (an import undoing itself, which may remove the file: AuditStore waits)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        opened = os.fstat(fd)
        if stat.S_ISREG(opened.st_mode):
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            if same_file(opened, path):  # not removed or replaced before the flock
                return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _current(conn: sqlite3.Connection) -> bool:
    """Whether the database is a store with exactly the known migrations applied, in WAL
    mode: AuditStore would open it without changing anything."""
    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
        return False
    return applied_migrations(conn) == CURRENT_MIGRATIONS
