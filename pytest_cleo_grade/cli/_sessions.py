"""Graded sessions started and ended outside pytest: ``cleo-grade session`` and the MCP server.

Starting one picks an id, creates the store and notes the start in ``<store>.sessions`` (one
JSON line per start, appended with O_APPEND as the refusals file is): a session that was
started but made no call is still a session, graded as CLEO grades an empty one, while an id
nobody started and nothing recorded into is not found. The store's tables stay CLEO's layout.
Nothing here sets the environment of the process it runs in: the variables are handed to the
caller (shell exports, the MCP result), so the caller's own calls are never the agent's.
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pytest_cleo_grade.cli.common import (
    ENV_AUDIT_DB,
    ENV_GRADE,
    ENV_GRADE_ID,
    ENV_SESSION_ID,
    CommandError,
)
from pytest_cleo_grade.core.errors import CleoGradeError

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult

__all__ = [
    "StartedSession",
    "grade_known_session",
    "is_known",
    "sessions_path",
    "start_session",
]

#: The longest scope or name kept (a line of the sessions file stays short).
_TEXT_LIMIT: Final = 500


def sessions_path(db: Path) -> Path:
    return db.with_name(f"{db.name}.sessions")


@dataclass(frozen=True)
class StartedSession:
    """A session just started: its id, where it records, and what a child needs."""

    session_id: str
    db: Path
    grade: bool
    scope: str | None
    name: str | None

    @property
    def env(self) -> dict[str, str]:
        """The variables to set: CLEO's four in grade mode, else the session id and store."""
        if self.grade:
            return {
                ENV_GRADE: "true",
                ENV_GRADE_ID: self.session_id,
                ENV_SESSION_ID: self.session_id,
                ENV_AUDIT_DB: str(self.db),
            }
        return {ENV_SESSION_ID: self.session_id, ENV_AUDIT_DB: str(self.db)}

    @property
    def unset(self) -> list[str]:
        """The variables to clear: a session without grade mode must not leave an earlier
        graded session's id in charge (``cleo-grade record`` prefers it in grade mode)."""
        return [] if self.grade else [ENV_GRADE, ENV_GRADE_ID]

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "sessionId": self.session_id,
            "grade": self.grade,
            "db": str(self.db),
            "env": self.env,
        }
        if self.unset:
            data["unset"] = self.unset
        if self.scope is not None:
            data["scope"] = self.scope
        if self.name is not None:
            data["name"] = self.name
        return data


def checked_text(value: object, what: str) -> str | None:
    """A scope or name: text of a sane length, or None; ValueError saying what is wrong."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{what} is empty")
    if len(value) > _TEXT_LIMIT:
        raise ValueError(f"{what} is longer than {_TEXT_LIMIT} characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} is not UTF-8 text") from None
    return value


def start_session(
    db: Path, *, grade: bool = True, scope: str | None = None, name: str | None = None
) -> StartedSession:
    """Create the store if needed, pick a new id and note the start; raises StoreError (the
    store or its sessions file cannot be written)."""
    from pytest_cleo_grade.core._files import open_append_no_follow
    from pytest_cleo_grade.core.errors import StoreError
    from pytest_cleo_grade.core.models import format_timestamp
    from pytest_cleo_grade.grading.session import new_session_id
    from pytest_cleo_grade.store import AuditStore

    db = db.absolute()
    AuditStore(db).close()  # creates it (and its directory), or says why it cannot
    started = StartedSession(new_session_id(), db, grade, scope, name)
    line: dict[str, Any] = {
        "sessionId": started.session_id,
        "startedAt": format_timestamp(datetime.now(UTC)),
        "grade": grade,
    }
    if scope is not None:
        line["scope"] = scope
    if name is not None:
        line["name"] = name
    path = sessions_path(db)
    data = (json.dumps(line, ensure_ascii=False) + "\n").encode("utf-8")
    try:
        fd = open_append_no_follow(path)
        try:
            os.write(fd, data)  # one short write with O_APPEND: starts never interleave
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from exc
    return started


def _started_here(db: Path, session_id: str) -> bool:
    from pytest_cleo_grade.core._files import open_regular

    path = sessions_path(db)
    needle = json.dumps(session_id, ensure_ascii=False).encode("utf-8")
    try:
        if not path.is_file():
            return False
        with open_regular(path) as handle:
            for raw in handle:
                if needle not in raw:
                    continue
                try:
                    found = json.loads(raw)
                except ValueError:
                    continue  # a torn line (a full disk): the others still count
                if isinstance(found, dict) and found.get("sessionId") == session_id:
                    return True
    except OSError:
        return False
    return False


def is_known(db: Path, session_id: str) -> bool:
    """Whether the session was started here, recorded into, or graded before."""
    from pytest_cleo_grade.store import AuditStore

    if _started_here(db, session_id):
        return True
    with AuditStore(db, read_only=True) as store:
        return store.count(session_id) > 0 or bool(store.grades(session_id))


def grade_known_session(
    args: argparse.Namespace, db: Path, session_id: str, *, where: str
) -> GradeResult:
    """Grade a session of the store: with ``--rubric`` when given, else with the rubric its
    latest stored grade names (a test's own, graded by the plugin), else CLEO's.

    Raises CommandError with status 4 for a session nobody started or recorded into.
    """
    from pytest_cleo_grade.cli._grading import grade_from_store, grade_with_args
    from pytest_cleo_grade.core.settings import DEFAULT_RUBRIC
    from pytest_cleo_grade.store import AuditStore

    if not db.is_file():
        raise CommandError(
            f"{where}: session {session_id} not found: no audit store at {db} "
            f"(pass --db PATH or set {ENV_AUDIT_DB})",
            status=4,
        )
    if not is_known(db, session_id):
        raise CommandError(
            f"{where}: session {session_id} not found in {db} (nothing saved)", status=4
        )
    rubric: str | None = getattr(args, "rubric", None)
    stored: GradeResult | None = None
    if rubric is None:
        with AuditStore(db, read_only=True) as store:
            grades = store.grades(session_id)
        stored = grades[-1] if grades else None
        named = (stored.model_extra or {}).get("rubric") if stored is not None else None
        rubric = named if isinstance(named, str) else DEFAULT_RUBRIC
    if rubric == DEFAULT_RUBRIC and not getattr(args, "rubric_file", None):
        return grade_from_store(db, session_id, where=where)
    with AuditStore(db, read_only=True) as store:
        entries = store.session_entries(session_id)
    chosen = argparse.Namespace(**{**vars(args), "rubric": rubric})
    try:
        return grade_with_args(chosen, entries, session_id, db)
    except CleoGradeError:
        # The test's rubric may need what only its test had (a trajectory marker's expected
        # calls, a judge): its stored grade stands while it covers every entry still.
        if stored is not None and stored.entry_count == len(entries):
            return stored
        raise
