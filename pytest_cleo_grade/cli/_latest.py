"""Each session's latest grade in the history, in the order sessions were first graded:
what ``cleo-grade junit`` and ``cleo-grade export`` (Langfuse) send."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult
    from pytest_cleo_grade.store._history_index import HistoryIndex, Line

__all__ = [
    "LatestRow",
    "latest_by_session",
    "latest_by_session_file",
    "latest_by_session_indexed",
    "latest_rows_indexed",
]


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


#: Each session's latest valid line, in the order sessions were first graded.
_LATEST: Final = (
    "FROM (SELECT min(number) AS first, max(number) AS last FROM lines WHERE problem IS NULL "
    "GROUP BY session_id) AS s JOIN lines AS l ON l.number = s.last ORDER BY s.first"
)


def latest_by_session_indexed(index: HistoryIndex) -> Iterator[GradeResult]:
    """Each session's latest line, in the order sessions were first graded, one at a time
    (StaleIndex when a line is not where the index says)."""
    from pytest_cleo_grade.store._history_index import Line

    rows = index.query(f"SELECT l.number, l.offset, l.length, l.session_id {_LATEST}")
    for _, grade in index.grades(Line(*row) for row in rows):
        yield grade


class LatestRow(NamedTuple):
    """A session's latest grade as its index row has it: where its line is, its scores
    (exact, as the line has them) and what the row derived from them when it was indexed."""

    line: Line
    timestamp: str  # format_timestamp's spelling
    total: int | float
    max: int | float
    percent: float  # exact
    shown: int  # rounded half up
    letter: str
    flags: int
    crc: int  # the line's, when it was validated


def latest_rows_indexed(index: HistoryIndex) -> Iterator[LatestRow]:
    """:func:`latest_by_session_indexed`'s grades as their rows, no line parsed."""
    from pytest_cleo_grade.core._scale import percent_of
    from pytest_cleo_grade.store._history_index import Line

    rows = index.query(
        "SELECT l.number, l.offset, l.length, l.session_id, l.timestamp, l.scores, l.percent, "
        f"l.letter, l.flags, l.crc {_LATEST}"
    )
    for number, offset, length, session, at, scores, shown, letter, flags, crc in rows:
        total, most, _dimensions = json.loads(scores)
        yield LatestRow(
            Line(number, offset, length, session),
            at,
            total,
            most,
            percent_of(total, most),
            shown,
            letter,
            flags,
            crc,
        )
