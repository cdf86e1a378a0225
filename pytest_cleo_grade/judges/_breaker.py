"""The run-level circuit breaker: a judge that keeps failing is not asked again in this process.

A hung or misconfigured endpoint would otherwise cost every judged test its full timeout and
retries. Each (endpoint, model) pair counts its failed requests in a row; once the count
reaches the rubric file's ``judge.max_consecutive_failures``, requests fail at once with the
last failure. A success resets the count. The state is per process on purpose: a pytest run
(each xdist worker) or one CLI command is one process, and a judge rebuilt for the next test
must still see the failures of the previous ones.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final

from pytest_cleo_grade.core.errors import JudgeError

__all__ = ["RUN_BREAKERS", "CircuitBreakers", "JudgeStopped"]


class JudgeStopped(JudgeError):
    """The judge was not asked: it failed too many times in a row in this process."""


@dataclass
class _Streak:
    failures: int = 0
    last: str = ""


class CircuitBreakers:
    """Consecutive failures per judge key (endpoint and model), safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streaks: dict[tuple[str, str], _Streak] = {}

    def check(self, key: tuple[str, str], limit: int) -> None:
        """Raise JudgeStopped when ``key`` has failed ``limit`` times in a row."""
        with self._lock:
            streak = self._streaks.get(key)
            if streak is None or streak.failures < limit:
                return
            failures, last = streak.failures, streak.last
        endpoint, model = key
        raise JudgeStopped(
            f"judge {endpoint} (model {model}) not asked: it failed {failures} times in a row "
            f"in this run (judge.max_consecutive_failures = {limit}); last failure: {last}"
        )

    def failed(self, key: tuple[str, str], reason: str) -> None:
        """Count one more failure in a row of ``key``."""
        with self._lock:
            streak = self._streaks.setdefault(key, _Streak())
            streak.failures += 1
            streak.last = reason

    def succeeded(self, key: tuple[str, str]) -> None:
        """``key`` answered: its streak of failures is over."""
        with self._lock:
            self._streaks.pop(key, None)

    def failures(self, key: tuple[str, str]) -> int:
        """Failures in a row of ``key`` so far."""
        with self._lock:
            streak = self._streaks.get(key)
            return 0 if streak is None else streak.failures


#: The process's breakers, shared by every HTTP judge built in it.
RUN_BREAKERS: Final = CircuitBreakers()
