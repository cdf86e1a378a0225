"""What every writer of the store shares, standard library only: lock waits, error wording."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final, TypeVar

from pytest_cleo_grade.core.errors import CleoGradeError, EntryError, StoreError

__all__ = [
    "BUSY_TIMEOUT_S",
    "CURRENT_MIGRATIONS",
    "MIGRATIONS_TABLE",
    "MIGRATION_SET",
    "WRITE_FAILURES",
    "applied_migrations",
    "describe",
    "locked",
    "retry_while_locked",
    "same_file",
    "write_error",
]

# AuditStore (store._store) and `cleo-grade record`'s writer (store._fast_append) both use
# these; the writer must not import sqlite-utils or pydantic, so they live here.

_T = TypeVar("_T")

#: How long a writer waits for another one before SQLite reports "database is locked". Long
#: on purpose: concurrent recorders queue on the WAL write lock for milliseconds each.
BUSY_TIMEOUT_S: Final = 60.0

#: sqlite-utils' record of applied migrations (``Migrations.migrations_table``) and the
#: store's migration set in it.
MIGRATIONS_TABLE: Final = "_sqlite_migrations"
MIGRATION_SET: Final = "pytest_cleo_grade"
#: Every migration the store has (``store._schema.KNOWN_MIGRATIONS``, which a test holds equal):
#: a store that applied exactly these is current.
CURRENT_MIGRATIONS: Final = frozenset(
    {"0001_audit_log_and_grades", "0002_conversation", "0004_history_archive"}
)


def applied_migrations(conn: sqlite3.Connection) -> frozenset[str]:
    """The store's migrations the database records as applied (none before the first)."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone():
        return frozenset()
    return frozenset(
        row[0]
        for row in conn.execute(
            f"SELECT name FROM {MIGRATIONS_TABLE} WHERE migration_set = ?", (MIGRATION_SET,)
        )
    )


def same_file(opened: os.stat_result, path: Path) -> bool:
    """Whether ``path`` (not followed) names the file ``opened`` describes."""
    try:
        now = os.lstat(path)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (opened.st_dev, opened.st_ino)


def locked(exc: sqlite3.Error) -> bool:
    text = str(exc)
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def retry_while_locked(action: Callable[[], _T], timeout: float) -> _T:
    """Run ``action`` again while SQLite says the database is locked, until ``timeout``.

    The busy timeout covers most waits, but SQLite reports SQLITE_BUSY at once in a few
    places (switching a new file to WAL, WAL recovery while another process creates the
    store): without this, processes creating a store together would drop entries.
    """
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        try:
            return action()
        except sqlite3.Error as exc:
            if not locked(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.1)


def describe(exc: sqlite3.Error) -> str:
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


#: What a write can fail with, beyond an interrupt: see :func:`write_error`.
WRITE_FAILURES: Final = (sqlite3.Error, OverflowError, UnicodeEncodeError)


def write_error(
    path: Path, exc: sqlite3.Error | OverflowError | UnicodeEncodeError
) -> CleoGradeError:
    """The error a failed write into the store at ``path`` is reported as."""
    if isinstance(exc, OverflowError):  # an integer beyond SQLite's 64 bits (an exit code)
        return StoreError(f"{path}: cannot write: {exc}")
    if isinstance(exc, UnicodeEncodeError):  # a lone surrogate in a text column
        return EntryError(f"{path}: cannot store text that is not Unicode: {exc}")
    described = describe(exc)
    if not described.startswith("cannot write"):
        described = f"cannot write: {described}"
    return StoreError(f"{path}: {described}")
