"""A graded session's lifecycle: environment, store, grading and persistence (no pytest)."""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from pytest_cleo_grade.audit import (
    ENV_AUDIT_DB,
    ENV_GRADE,
    ENV_GRADE_ID,
    ENV_SESSION_ID,
    AuditedDispatcher,
    make_entry,
)
from pytest_cleo_grade.entryfile import load_entries_file
from pytest_cleo_grade.errors import CleoGradeError
from pytest_cleo_grade.history import append_grade
from pytest_cleo_grade.models import AuditEntry, GradeResult
from pytest_cleo_grade.rubrics.cleo import coerce_entries, grade_ordered
from pytest_cleo_grade.store import AuditStore

__all__ = [
    "ENV_AUDIT_DB",
    "ENV_GRADE",
    "ENV_GRADE_ID",
    "ENV_SESSION_ID",
    "GradeSession",
    "SessionSettings",
    "new_session_id",
]

_ENV_NAMES = (ENV_GRADE, ENV_GRADE_ID, ENV_SESSION_ID, ENV_AUDIT_DB)


_issued_lock = threading.Lock()
_issued: dict[int, set[str]] = {}


def new_session_id() -> str:
    """A new id in CLEO's style, ``session-<epoch ms>-<6 hex>``, never repeated in a process.

    24 random bits on top of the millisecond keep ids from pytest-xdist workers that start
    in the same millisecond apart. Within one process, hundreds of ids in one millisecond
    would collide by the birthday bound (two sessions merged), so the suffixes already
    issued in the current millisecond are drawn again.
    """
    millis = time.time_ns() // 1_000_000
    with _issued_lock:
        taken = _issued.get(millis)
        if taken is None:
            _issued.clear()  # earlier milliseconds can never be issued again
            taken = _issued[millis] = set()
        suffix = secrets.token_hex(3)
        while suffix in taken:
            suffix = secrets.token_hex(3)
        taken.add(suffix)
    return f"session-{millis}-{suffix}"


class SessionSettings(BaseModel):
    """Where a graded session keeps its entries and its grades."""

    model_config = ConfigDict(frozen=True)

    db_path: Path
    history_path: Path | None = None

    @field_validator("db_path", "history_path")
    @classmethod
    def _absolute(cls, value: Path | None) -> Path | None:
        # Subprocesses may run in another directory; the path they inherit must still hold.
        return None if value is None else value.absolute()


class GradeSession:
    """A grade-mode session: start it, let code record into it, grade it, persist, close.

    ``start()`` opens (creating) the store and sets CLEO's grade-mode variables so that code
    under test, in this process or in any child that inherits the environment, records into
    this session; ``close()`` puts the previous environment back exactly.
    """

    def __init__(
        self,
        settings: SessionSettings,
        *,
        session_id: str | None = None,
        store: AuditStore | None = None,
    ) -> None:
        """``store``: an open store of ``settings.db_path`` to borrow (it is not closed).

        Opening a store costs a connection, pragmas and a schema check; a test run that
        starts a session per test shares one instead.
        """
        if store is not None and store.path.absolute() != settings.db_path:
            raise CleoGradeError(f"store {store.path} is not the session's {settings.db_path}")
        self.settings = settings
        self.id = session_id or new_session_id()
        self._borrowed = store
        self._store: AuditStore | None = None
        self._saved_env: dict[str, str | None] | None = None
        self._dispatcher: AuditedDispatcher | None = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> GradeSession:
        """Open the store and enter grade mode; returns self. Raises StoreError."""
        if self._store is None:
            self._store = self._borrowed or AuditStore(self.settings.db_path)
        if self._saved_env is None:
            self._saved_env = {name: os.environ.get(name) for name in _ENV_NAMES}
            os.environ.update(self.env)
        return self

    def close(self) -> None:
        """Restore the environment as it was before start() and close the store."""
        if self._saved_env is not None:
            for name, value in self._saved_env.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            self._saved_env = None
        if self._store is not None and self._store is not self._borrowed:
            self._store.close()
        self._store = None

    def __enter__(self) -> GradeSession:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def env(self) -> dict[str, str]:
        """CLEO's four grade-mode variables for this session (the store path absolute)."""
        return {
            ENV_GRADE: "true",
            ENV_GRADE_ID: self.id,
            ENV_SESSION_ID: self.id,
            ENV_AUDIT_DB: str(self.settings.db_path),
        }

    @property
    def store(self) -> AuditStore:
        if self._store is None:
            raise CleoGradeError(f"session {self.id} is not started")
        return self._store

    # -- recording -----------------------------------------------------------------------

    def record(
        self,
        domain: str,
        operation: str,
        params: Mapping[str, Any] | None = None,
        *,
        success: bool = True,
        exit_code: int = 0,
        duration: float | None = None,
        gateway: str | None = None,
        source: str = "mcp",
        task_id: str | None = None,
        error: str | None = None,
    ) -> AuditEntry:
        """Record one call into this session (always: a graded session records everything).

        Durable when it returns; raises EntryError for invalid arguments and StoreError when
        the store cannot be written.
        """
        entry = make_entry(
            self.id,
            domain,
            operation,
            params,
            success=success,
            exit_code=exit_code,
            duration=duration,
            gateway=gateway,
            source=source,
            task_id=task_id,
            error=error,
        )
        self.store.append(entry)
        return entry

    @property
    def dispatcher(self) -> AuditedDispatcher:
        """An audited dispatcher that records into this session."""
        if self._dispatcher is None:
            self._dispatcher = AuditedDispatcher(recorder=self.record)
        return self._dispatcher

    def ingest(
        self, source: str | os.PathLike[str] | Iterable[AuditEntry | Mapping[str, Any]]
    ) -> int:
        """Add entries from a JSON/JSONL file or an iterable, all tagged with this session.

        All or nothing: an invalid entry raises EntryError and nothing is stored. Returns the
        number of entries added.
        """
        if isinstance(source, str | os.PathLike):
            entries = load_entries_file(source)
        else:
            entries = coerce_entries(source)
        mine = [e.model_copy(update={"session_id": self.id}) for e in entries]
        return self.store.append_many(mine)

    # -- grading -------------------------------------------------------------------------

    @property
    def entries(self) -> list[AuditEntry]:
        """Every entry of this session in the store, in session order (subprocesses too)."""
        return self.store.session_entries(self.id)

    def grade(self, *, now: datetime | None = None) -> GradeResult:
        """Grade the session's entries now; writes nothing."""
        return grade_ordered(self.entries, session_id=self.id, now=now)

    def persist(self, result: GradeResult) -> None:
        """Append a grade to GRADES.jsonl (when configured) and to the store's grades table.

        Raises HistoryError or StoreError; callers in a test run turn these into warnings.
        """
        if self.settings.history_path is not None:
            append_grade(result, self.settings.history_path)
        self.store.add_grade(result)
