"""The object the ``graded_session`` fixture yields, and the per-process store it shares."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

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
    #: What :meth:`set_output` handed over for the comparison rubric (None: nothing yet).
    output: str | None = None
    scores: Mapping[str, Any] | None = None
    run_facts: Mapping[str, Any] | None = None

    def set_output(
        self,
        text: str,
        scores: Mapping[str, Any] | None = None,
        *,
        latency_seconds: float | None = None,
        tokens: int | None = None,
        note: str | None = None,
    ) -> None:
        """Hand over the agent's output text for a comparison test (marker ``variant=``).

        ``scores`` are the six substantive scores (``{"Q-01": 4, ..., "Q-06": 3}``); without
        them the configured judge scores the output when the test ends. ``latency_seconds``,
        ``tokens`` and ``note`` become the operational metrics OP-01, OP-04 and OP-05. A
        later call replaces an earlier one.
        """
        if not isinstance(text, str):
            raise TypeError(f"set_output() takes the output text, not {type(text).__name__}")
        self.output = text
        self.scores = dict(scores) if scores is not None else None
        self.run_facts = {
            key: value
            for key, value in (
                ("latency_seconds", latency_seconds),
                ("tokens", tokens),
                ("note", note),
            )
            if value is not None
        }

    #: Set by the plugin: grades with the test's own rubric (marker or option). Without it,
    #: ``grade()`` uses CLEO's rubric.
    grader: Callable[[], GradeResult] | None = None

    def grade(self, *, now: datetime | None = None) -> GradeResult:
        """Grade now, with the rubric the test is graded by; writes nothing."""
        if self.grader is not None and now is None:
            self.result = self.grader()
        else:
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
