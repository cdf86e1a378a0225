"""Baselines and the latest run from a history file of any size: two passes, never every
grade at once.

The first pass validates every line (the same lines skipped with the same warnings as
``read_grades``) but keeps of each only what picks a test's latest grade or series: its number
and a few extras. The second pass parses the lines picked, and the baseline is made from them
by :func:`latest_from_history` itself, so it is the one a whole-history read would give: the
lines kept are every line each test's pick (and its latest whole series), the latest run and
:func:`short_in_history` can take, and each of those picks reads a test's own lines only.
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any, Final

from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.grading._baseline import TestGrades, latest_from_history, short_in_history
from pytest_cleo_grade.grading._run_ids import RUN_ID_KEY, STATUS_KEY, run_id_of, status_of
from pytest_cleo_grade.grading._runs import SERIES_KEY, latest_series, latest_whole_series
from pytest_cleo_grade.store._history_index import HistoryIndex, Line, StaleIndex, open_index
from pytest_cleo_grade.store.history import iter_numbered_grades

__all__ = ["latest_from_history_file", "run_lines_file", "run_lines_indexed"]

#: The extras the picks read (latest_series, latest_whole_series, short_series, the run id).
_PICK_KEYS: Final = ("testId", RUN_ID_KEY, "run", "runs", SERIES_KEY, "adaptive", STATUS_KEY)


class _Line:
    """What a pick reads of one history line: a few extras, not its flags and dimensions."""

    __slots__ = ("model_extra", "number", "session_id")

    def __init__(self, number: int, session_id: str, model_extra: dict[str, Any]) -> None:
        self.number = number
        self.session_id = session_id
        self.model_extra = model_extra


def _test_of(line: Any) -> str:
    return str((line.model_extra or {}).get("testId") or line.session_id)


def latest_from_history_file(
    path: str | os.PathLike[str], *, whole: bool = True, candidate: bool = False
) -> tuple[dict[str, TestGrades], dict[str, str], int]:
    """:func:`latest_from_history` of the history at ``path`` (``whole`` as there), with
    ``candidate`` :func:`short_in_history` of it (else ``{}``), and how many grades it holds
    (0: none, or no history there). Lines skipped with read_grades's warnings.

    Through the history's index when it has one (store._history_index): the first pass is
    then the index's rows, and only the lines picked are read from the file."""
    index = open_index(path)
    if index is not None:
        with index:
            try:
                return _latest_indexed(index, whole=whole, candidate=candidate)
            except StaleIndex:
                index.forget()
    # One string per distinct value (run ids, test ids): 200,000 lines hold few.
    shared: dict[object, object] = {}
    lines: list[_Line] = []
    for number, result in iter_numbered_grades(path):
        extra = result.model_extra or {}
        kept = {}
        for key in _PICK_KEYS:
            if key in extra:
                value = extra[key]
                kept[key] = shared.setdefault(value, value) if isinstance(value, str) else value
        session = result.session_id
        lines.append(_Line(number, str(shared.setdefault(session, session)), kept))
    wanted, count = _picked(lines), len(lines)
    del lines
    with warnings.catch_warnings():
        # Every line the first pass skipped was said then; the picked lines parsed before.
        warnings.simplefilter("ignore")
        picked = [result for _, result in iter_numbered_grades(path, only=wanted)]
    short = short_in_history(picked) if candidate else {}
    return latest_from_history(picked, whole=whole), short, count


def _latest_indexed(
    index: HistoryIndex, *, whole: bool, candidate: bool
) -> tuple[dict[str, TestGrades], dict[str, str], int]:
    shared: dict[object, object] = {}
    lines: list[_Line] = []
    where: dict[int, Line] = {}
    rows = index.query(
        "SELECT number, offset, length, session_id, extras FROM lines "
        "WHERE problem IS NULL ORDER BY number"
    )
    for number, offset, length, session, extras in rows:
        kept = {}
        if extras:
            for key, value in json.loads(extras).items():
                if key in _PICK_KEYS:
                    kept[key] = shared.setdefault(value, value) if isinstance(value, str) else value
        session = str(shared.setdefault(session, session))
        lines.append(_Line(number, session, kept))
        where[number] = Line(number, offset, length, session)
    wanted, count = _picked(lines), len(lines)
    del lines
    picked = [result for _, result in index.grades(where[n] for n in sorted(wanted))]
    del where
    index.warn_skipped()
    short = short_in_history(picked) if candidate else {}
    return latest_from_history(picked, whole=whole), short, count


def _picked(lines: list[_Line]) -> set[int]:
    """The numbers of every line a baseline of these lines can read."""
    wanted: set[int] = set()
    gradable = [line for line in lines if status_of(line) != "ungradable"]
    for pick, among in (
        (latest_whole_series, gradable),
        (latest_series, gradable),
        (latest_series, lines),  # short_in_history's, ungradable lines included
    ):
        for series in pick(among, _test_of).values():
            wanted.update(line.number for line in series)
    # The latest run: its last line carrying a run id, and every line of that run.
    latest = next((run_id_of(line) for line in reversed(lines) if run_id_of(line)), None)
    if latest is not None:
        wanted.update(line.number for line in lines if run_id_of(line) == latest)
    return wanted


def run_lines_file(
    path: str | os.PathLike[str], run_id: str | None = None
) -> tuple[list[GradeResult], int]:
    """The lines ``latest_run`` reads of the history at ``path``: every line of ``run_id``,
    else of the run id of the last line not graded by hand, in file order (every line when
    that line carries none: a history written before lines did); and how many grades the
    history holds. Through the history's index when it has one (only the run's lines are
    read), else two passes: the first keeps each line's number under its run id only."""
    index = open_index(path)
    if index is not None:
        with index:
            try:
                results, count = run_lines_indexed(index, run_id)
            except StaleIndex:
                index.forget()
            else:
                index.warn_skipped()
                return results, count
    numbers: dict[str | None, list[int]] = {}
    last: str | None = None
    count = 0
    for number, result in iter_numbered_grades(path):
        count += 1
        line_run = run_id_of(result)
        numbers.setdefault(line_run, []).append(number)
        if result.evaluator != "manual":
            last = line_run
    chosen = run_id if run_id is not None else last
    wanted = None if chosen is None else set(numbers.get(chosen, ()))
    del numbers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # said in the first pass
        return [result for _, result in iter_numbered_grades(path, only=wanted)], count


def run_lines_indexed(index: HistoryIndex, run_id: str | None) -> tuple[list[GradeResult], int]:
    """:func:`run_lines_file` through an open index (its skipped lines not warned of yet):
    StaleIndex when a line is not where the index says."""
    chosen = run_id
    if chosen is None:
        last = index.query(
            "SELECT run_id FROM lines WHERE problem IS NULL AND evaluator != 'manual' "
            "ORDER BY number DESC LIMIT 1"
        ).fetchone()
        chosen = None if last is None else last[0]
    lines = index.lines() if chosen is None else index.lines("run_id = ?", (chosen,))
    return [result for _, result in index.grades(lines)], index.count()
