"""What ``cleo-grade report --html`` reads of a history of any size, through its index.

The page shows one run (its lines read whole), each of its tests' trend and previous grade
(a light point per line of those tests: the index's row, no line parsed), and the judge
calibration (every line of the sessions graded by hand). Without an index, None: the
caller reads the history whole, as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.grading._history_file import run_lines_indexed
from pytest_cleo_grade.reports._html_page import GradeLine, grade_test_id
from pytest_cleo_grade.store._history_index import BY_HAND, HistoryIndex, through_index

__all__ = ["PageLines", "page_lines_file", "test_lines_file"]


@dataclass(frozen=True, slots=True)
class PageLines:
    """The run's lines, the page's history, the calibration's grades, the history's count."""

    run: list[GradeResult]
    history: list[GradeLine]
    calibration: list[GradeResult]
    count: int


def page_lines_file(path: str | os.PathLike[str], run_id: str | None) -> PageLines | None:
    """The lines the page of ``run_id`` (else the latest run) shows, or None: no index."""
    return through_index(path, lambda index: _page_lines(index, run_id))


def test_lines_file(
    path: str | os.PathLike[str], tests: set[str]
) -> tuple[list[GradeLine], list[GradeResult]] | None:
    """The page's history of these tests (a point per line) and the calibration's grades,
    or None: no index (the plugin's page of the run it just graded)."""
    return through_index(path, lambda index: _test_lines(index, tests))


def _page_lines(index: HistoryIndex, run_id: str | None) -> PageLines:
    run, count = run_lines_indexed(index, run_id)
    history, calibration = _test_lines(index, {grade_test_id(result) for result in run})
    return PageLines(run, history, calibration, count)


def _test_lines(index: HistoryIndex, tests: set[str]) -> tuple[list[GradeLine], list[GradeResult]]:
    index.query("CREATE TEMP TABLE IF NOT EXISTS page_tests (key TEXT PRIMARY KEY)")
    index.query("DELETE FROM page_tests")
    for key in tests:
        index.query("INSERT INTO page_tests VALUES (?)", (key,))
    history: list[GradeLine] = list(
        index.points("coalesce(test_id, session_id) IN (SELECT key FROM page_tests)")
    )
    by_hand = index.lines(BY_HAND)
    return history, [result for _, result in index.grades(by_hand)]
