"""The object the ``graded_session`` fixture yields, and the per-process store it shares."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from pytest_cleo_grade.models import GradeResult
from pytest_cleo_grade.session import GradeSession
from pytest_cleo_grade.store import AuditStore

__all__ = ["GradedSession", "SharedStore"]


class GradedSession(GradeSession):
    """A GradeSession that remembers its latest grade (the ``graded_session`` fixture).

    ``result`` is None until the test grades explicitly or the plugin grades the finished
    test body; afterwards it is the latest GradeResult.
    """

    result: GradeResult | None = None

    def grade(self, *, now: datetime | None = None) -> GradeResult:
        self.result = super().grade(now=now)
        return self.result


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
        if self._store is None:
            self._store = AuditStore(self.path)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None
