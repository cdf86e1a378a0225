"""Importing audit entries into the store: JSON/JSONL files and CLEO project databases."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from pydantic import TypeAdapter, ValidationError

from pytest_cleo_grade.bulk import collector_paused
from pytest_cleo_grade.entryfile import SURROGATE_ESCAPE, load_entries_file, parse_entries_text
from pytest_cleo_grade.errors import EntryError, StoreError
from pytest_cleo_grade.models import AuditEntry
from pytest_cleo_grade.store import AuditStore, entry_row

__all__ = [
    "CLEO_DB_CANDIDATES",
    "find_cleo_db",
    "import_cleo_db",
    "import_cleo_rows",
    "import_entries_file",
    "is_sqlite_file",
    "read_cleo_db",
    "read_entries_file",
    "select_session",
]

#: Where a CLEO project keeps its database: ``cleo.db`` now, ``tasks.db`` in older releases.
CLEO_DB_CANDIDATES: Final = (Path(".cleo") / "cleo.db", Path(".cleo") / "tasks.db")

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_ENTRIES: Final = TypeAdapter(list[AuditEntry])


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with SQLite's header (a database, not an entries file)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False


def find_cleo_db(project: str | os.PathLike[str]) -> Path:
    """The CLEO database of a project directory (or the path itself if it is a file)."""
    root = Path(project)
    if root.is_file():
        return root
    for candidate in CLEO_DB_CANDIDATES:
        if (root / candidate).is_file():
            return root / candidate
    names = " or ".join(str(c) for c in CLEO_DB_CANDIDATES)
    raise StoreError(f"{root}: no CLEO database ({names})")


def read_entries_file(path: str | os.PathLike[str]) -> list[AuditEntry]:
    """Every entry of a JSON array or JSONL file; EntryError names the file and line.

    A well-formed JSONL file is validated in one pydantic call from its text (the fast
    path); anything the fast path rejects, or text that might carry NaN/Infinity or a lone
    surrogate (which pydantic's parser would accept), is parsed line by line for the exact
    error.
    """
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8-sig")  # a BOM (Windows tools) is no entry
    except (OSError, UnicodeDecodeError):
        return load_entries_file(target)  # raises EntryError with the reason
    stripped = text.strip()
    if (
        stripped
        and not stripped.startswith("[")
        and "NaN" not in text
        and "Infinity" not in text
        and not SURROGATE_ESCAPE.search(text)
    ):
        lines = [line for line in text.splitlines() if line.strip()]
        try:
            with collector_paused():
                entries = _ENTRIES.validate_json("[" + ",".join(lines) + "]")
        except (ValidationError, ValueError):
            pass
        else:
            # Joined with commas, a line holding two objects ("{...},{...}") would pass as
            # two entries; it is malformed JSONL, so only one entry per line is accepted.
            if len(entries) == len(lines):
                return entries
    return parse_entries_text(text, str(target))


def select_session(
    entries: list[AuditEntry], session_id: str | None, where: str
) -> list[AuditEntry]:
    """All entries, or only ``session_id``'s (exact match) plus those carrying no id."""
    if session_id is None:
        return entries
    # Entries without a session id join the named session; others must match it exactly.
    chosen = [
        e if e.session_id == session_id else e.model_copy(update={"session_id": session_id})
        for e in entries
        if e.session_id in (None, session_id)
    ]
    if not chosen:
        raise EntryError(f"{where}: no entries for session {session_id}")
    return chosen


def import_entries_file(
    store: AuditStore, path: str | os.PathLike[str], *, session_id: str | None = None
) -> list[AuditEntry]:
    """Import a JSON/JSONL file into the store, all or nothing; returns the entries added.

    With ``session_id``, only that session's entries (and entries carrying none) are
    imported, under that id.
    """
    entries = select_session(read_entries_file(path), session_id, str(path))
    store.append_many(entries)
    return entries


def read_cleo_db(
    cleo_db: str | os.PathLike[str], *, session_id: str | None = None
) -> list[tuple[str, AuditEntry]]:
    """(row id, entry) of every audit row of a CLEO database (one session's, or all).

    The database is opened read-only. StoreError names a row that does not load, or says
    that there is nothing to import.
    """
    with AuditStore(cleo_db, read_only=True) as source:
        sessions = source.session_ids() if session_id is None else [session_id]
        items = [item for sid in sessions for item in source.session_items(sid)]
    if not items:
        which = f"session {session_id}" if session_id else "any session"
        raise StoreError(f"{cleo_db}: no audit entries for {which}")
    return items


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
