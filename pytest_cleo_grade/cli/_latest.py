"""Each session's latest grade in the history, in the order sessions were first graded:
what ``cleo-grade junit`` and ``cleo-grade export`` (Langfuse) send."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult
    from pytest_cleo_grade.store._history_index import HistoryIndex

__all__ = ["latest_by_session", "latest_by_session_file", "latest_by_session_indexed"]


def latest_by_session(grades: list[GradeResult]) -> list[GradeResult]:
    """The last grade of each session, in the order sessions were first graded."""
    latest: dict[str, GradeResult] = {}
    for grade in grades:
        latest[grade.session_id] = grade
    return list(latest.values())


def latest_by_session_file(history: Path) -> list[GradeResult]:
    """:func:`latest_by_session` of the history, through its index when it has one (only
    those lines are read)."""
    from pytest_cleo_grade.store._history_index import through_index
    from pytest_cleo_grade.store.history import read_grades

    grades = through_index(history, lambda index: list(latest_by_session_indexed(index)))
    if grades is not None:
        return grades
    return latest_by_session(read_grades(history))


def latest_by_session_indexed(index: HistoryIndex) -> Iterator[GradeResult]:
    """Each session's latest line, in the order sessions were first graded, one at a time
    (StaleIndex when a line is not where the index says)."""
    from pytest_cleo_grade.store._history_index import Line

    rows = index.query(
        "SELECT l.number, l.offset, l.length, l.session_id FROM (SELECT min(number) "
        "AS first, max(number) AS last FROM lines WHERE problem IS NULL "
        "GROUP BY session_id) AS s JOIN lines AS l ON l.number = s.last ORDER BY s.first"
    )
    for _, grade in index.grades(Line(*row) for row in rows):
        yield grade
