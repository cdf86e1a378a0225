"""Flip rates over a grade history: which tests change verdict from run to run.

A *run* of a test is one history line: one pytest run of a single test, or one repetition of
a repeated test (``runs=N``). The window is the test's last K pytest runs, told apart by the
line's run id (``runId``) where the history has one, else its ``series`` (the runs of one
pytest run of a repeated test), else each line on its own, in the history's order. A flip is
two consecutive runs of the window with different verdicts; the flip rate is flips over
(runs - 1). A run passes when its line says so (``cleoStatus``: ``passed``; ``below`` and
``ungradable`` fail), else when its percentage reaches the line's ``cleoThreshold`` or the
threshold given.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from pytest_cleo_grade.grading._run_ids import RUN_ID_KEY, STATUS_KEY, THRESHOLD_KEY
from pytest_cleo_grade.grading._runs import SERIES_KEY
from pytest_cleo_grade.grading._verdict import passes

__all__ = [
    "DEFAULT_WINDOW",
    "FlakyTest",
    "NoThreshold",
    "flip_table",
    "stable_runs",
    "test_key",
]

#: The pytest runs of a test ``cleo-grade flaky`` looks at, unless ``--runs`` says.
DEFAULT_WINDOW: Final = 10


class NoThreshold(ValueError):
    """A run's verdict cannot be told: its line has no status or threshold, none was given."""


@dataclass(frozen=True, slots=True)
class FlakyTest:
    """One test's runs in the window: verdicts, flips and the spread of its percentages."""

    test_id: str
    verdicts: tuple[bool, ...]
    percents: tuple[float, ...]
    flips: int
    #: The timestamp and 1-based position (in the window) of the latest flip, if any.
    last_flip: str | None
    last_flip_at: int | None

    @property
    def runs(self) -> int:
        return len(self.verdicts)

    @property
    def passed(self) -> int:
        return sum(self.verdicts)

    @property
    def flip_rate(self) -> float:
        return self.flips / (self.runs - 1) if self.runs > 1 else 0.0

    @property
    def mean(self) -> float:
        return sum(self.percents) / len(self.percents) if self.percents else 0.0

    @property
    def spread(self) -> float:
        """The sample standard deviation of the percentages (0 for one run)."""
        if len(self.percents) < 2:
            return 0.0
        mean = self.mean
        return math.sqrt(sum((p - mean) ** 2 for p in self.percents) / (len(self.percents) - 1))

    def stable_for(self) -> int:
        """How many of the latest runs share the last run's verdict."""
        count = 0
        for verdict in reversed(self.verdicts):
            if verdict != self.verdicts[-1]:
                break
            count += 1
        return count


class FlakyLine(Protocol):
    """What a flip reads of a history line: a FlakyLine, or the history index's point."""

    @property
    def session_id(self) -> str: ...
    @property
    def evaluator(self) -> str: ...
    @property
    def timestamp(self) -> datetime: ...
    @property
    def percent(self) -> float: ...
    @property
    def model_extra(self) -> dict[str, Any] | None: ...


def test_key(result: FlakyLine) -> str:
    """The test a line belongs to: its ``testId`` (a repeated test's, without the run)."""
    extra = result.model_extra or {}
    test_id = extra.get("testId")
    return test_id if isinstance(test_id, str) and test_id else result.session_id


def _extra(result: FlakyLine) -> dict[str, Any]:
    return result.model_extra or {}


def _group(result: FlakyLine, number: int) -> tuple[str, object]:
    extra = _extra(result)
    run = extra.get(RUN_ID_KEY)
    if isinstance(run, str) and run:
        return ("run", run)
    if extra.get(SERIES_KEY) is not None and extra.get("run") is not None:
        return ("series", extra[SERIES_KEY])
    return ("line", number)


def verdict_of(result: FlakyLine, threshold: float | None) -> bool:
    """Whether one run passed (see the module's docstring); NoThreshold when it cannot say."""
    extra = _extra(result)
    status = extra.get(STATUS_KEY)
    if status in ("passed", "below", "ungradable"):
        return bool(status == "passed")
    own = extra.get(THRESHOLD_KEY)
    if isinstance(own, int | float) and not isinstance(own, bool):
        return passes(result.percent, float(own))
    if threshold is None:
        raise NoThreshold(
            f"{test_key(result)}: its history lines carry no status or threshold; "
            "pass --fail-under GRADE"
        )
    return passes(result.percent, threshold)


def _windows(history: Iterable[FlakyLine], runs: int) -> dict[str, list[FlakyLine]]:
    """Each test's lines of its last ``runs`` pytest runs, in history order."""
    by_test: dict[str, list[tuple[tuple[str, object], FlakyLine]]] = {}
    for number, result in enumerate(history):
        if result.evaluator == "manual":
            continue  # a person's labels for judge calibration, not a run of a test
        by_test.setdefault(test_key(result), []).append((_group(result, number), result))
    windows: dict[str, list[FlakyLine]] = {}
    for test, lines in by_test.items():
        wanted: set[tuple[str, object]] = set()
        for group, _ in reversed(lines):
            if group not in wanted:
                if len(wanted) == runs:
                    break
                wanted.add(group)
        chosen = [(g, r) for g, r in lines if g in wanted]
        # Within one pytest run, the repetitions in their run order.
        order = {g: i for i, (g, _) in enumerate(chosen)}
        chosen.sort(key=lambda gr: (order[gr[0]], _run_index(gr[1])))
        windows[test] = [r for _, r in chosen]
    return windows


def _run_index(result: FlakyLine) -> int:
    run = _extra(result).get("run")
    return run if isinstance(run, int) and not isinstance(run, bool) else 0


def flip_table(
    history: Sequence[FlakyLine], *, runs: int = DEFAULT_WINDOW, threshold: float | None
) -> list[FlakyTest]:
    """Every test's window, in the order the tests first appear in the history."""
    table = []
    for test, lines in _windows(history, runs).items():
        verdicts = tuple(verdict_of(line, threshold) for line in lines)
        flips = 0
        last_flip = None
        last_flip_at = None
        for position in range(1, len(verdicts)):
            if verdicts[position] != verdicts[position - 1]:
                flips += 1
                last_flip = lines[position].timestamp.isoformat().replace("+00:00", "Z")
                last_flip_at = position + 1
        percents = tuple(line.percent for line in lines)
        table.append(FlakyTest(test, verdicts, percents, flips, last_flip, last_flip_at))
    return table


def stable_runs(table: Iterable[FlakyTest]) -> dict[str, int]:
    """Each test's count of latest runs with one verdict (quarantine release)."""
    return {test.test_id: test.stable_for() for test in table}
