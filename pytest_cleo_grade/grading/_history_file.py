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
from collections.abc import Iterable
from typing import Any, Final

from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.grading._baseline import TestGrades, latest_from_history, short_in_history
from pytest_cleo_grade.grading._run_ids import RUN_ID_KEY, STATUS_KEY, run_id_of, status_of
from pytest_cleo_grade.grading._runs import (
    SERIES_KEY,
    latest_series,
    latest_whole_series,
    short_series,
)
from pytest_cleo_grade.store._history_index import (
    HistoryIndex,
    ScoredLine,
    StaleIndex,
    open_index,
    through_index,
)
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
    # The picked lines as their rows score them, each line checked unchanged: a baseline
    # reads a grade's percentages and extras only, which its row holds exactly.
    picked = None if candidate else _latest_run_scored(index, whole=whole)
    if picked is None:
        lines = _indexed_lines(index, "problem IS NULL", ())
        wanted = _picked(lines)
        del lines
        picked = _scored_numbers(index, wanted)
    index.warn_skipped()
    short = short_in_history(picked) if candidate else {}
    return latest_from_history(picked, whole=whole), short, index.count()


def _scored_numbers(index: HistoryIndex, numbers: Iterable[int]) -> list[ScoredLine]:
    """These lines, scored, in file order."""
    index.query("CREATE TEMP TABLE IF NOT EXISTS picked (number INTEGER PRIMARY KEY)")
    index.query("DELETE FROM picked")
    index.query_many("INSERT INTO picked VALUES (?)", ((number,) for number in numbers))
    return index.scored("number IN (SELECT number FROM picked)")


def _indexed_lines(index: HistoryIndex, where: str, params: tuple[object, ...]) -> list[_Line]:
    """The index's rows as the first pass's lines, in file order."""
    shared: dict[object, object] = {}
    lines: list[_Line] = []
    rows = index.query(
        f"SELECT number, session_id, extras FROM lines WHERE {where} ORDER BY number",
        params,
    )
    for number, session, extras in rows:
        kept = {}
        if extras:
            for key, value in json.loads(extras).items():
                if key in _PICK_KEYS:
                    kept[key] = shared.setdefault(value, value) if isinstance(value, str) else value
        session = str(shared.setdefault(session, session))
        lines.append(_Line(number, session, kept))
    return lines


def _latest_run_scored(index: HistoryIndex, *, whole: bool) -> list[ScoredLine] | None:
    """The lines a baseline of the latest run's tests reads, scored, from the newest of
    those tests' lines only: a suffix, doubled until every test's pick lies within it (the
    picks scan from the end, and a settled one reads nothing older). None: no line carries
    a run id."""
    last = index.query(
        "SELECT run_id FROM lines WHERE problem IS NULL AND run_id IS NOT NULL "
        "ORDER BY number DESC LIMIT 1"
    ).fetchone()
    if last is None:
        return None
    run = [
        number
        for (number,) in index.query(
            "SELECT number FROM lines WHERE problem IS NULL AND run_id = ?", (last[0],)
        )
    ]
    index.query("CREATE TEMP TABLE IF NOT EXISTS run_tests (key TEXT PRIMARY KEY)")
    index.query("DELETE FROM run_tests")
    index.query(
        "INSERT OR IGNORE INTO run_tests SELECT coalesce(test_id, session_id) FROM lines "
        "WHERE problem IS NULL AND run_id = ?",
        (last[0],),
    )
    members = {key for (key,) in index.query("SELECT key FROM run_tests")}
    of_members = "problem IS NULL AND coalesce(test_id, session_id) IN (SELECT key FROM run_tests)"
    # The latest run's own lines first: without repeats reaching further back (a series of
    # a test that only part of its runs ran in the latest), they settle every pick.
    size = max(len(run), len(members), 1)
    while True:
        lines = index.scored(
            f"number IN (SELECT number FROM lines WHERE {of_members} ORDER BY number DESC LIMIT ?)",
            (size,),
        )
        gradable = [line for line in lines if status_of(line) != "ungradable"]
        pick = latest_whole_series if whole else latest_series
        series = pick(gradable, _test_of)
        # A suffix shorter than asked for is every line of theirs (no count of them first:
        # over a history of years that count alone was most of the read).
        if len(lines) < size or _settled(series, members, whole=whole):
            wanted = {line.number for found in series.values() for line in found}
            wanted.update(run)
            have = {line.number: line for line in lines}
            # The run's lines are in the suffix but for those of a test's later line that
            # carries no run id (a grade by hand): read those too.
            missing = wanted - have.keys()
            if missing:
                have.update((line.number, line) for line in _scored_numbers(index, missing))
            return [have[number] for number in sorted(wanted)]
        size *= 2


def _settled(series: dict[str, list[ScoredLine]], members: set[str], *, whole: bool) -> bool:
    """Whether no older line can change any member's pick: each has a complete series (all
    the runs its latest line asked, or a single grade), whole ones when ``whole``."""
    for member in members:
        found = series.get(member)
        if not found:
            return False
        if len(found) < int(found[0].model_extra.get("runs") or 1):
            return False  # an older line may still join the series
        if whole and short_series(found) is not None:
            return False
    return True


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
    indexed = through_index(path, lambda index: run_lines_indexed(index, run_id))
    if indexed is not None:
        return indexed
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
