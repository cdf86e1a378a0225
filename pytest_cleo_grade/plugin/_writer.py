"""The controller's grade writer: each final grade saved at once, or in batches on a thread.

A plain run saves each grade when its test finishes, in the test's own process: a run killed
in the next test keeps it (tests/grading/test_gate_trust.py kills one that way). The
pytest-xdist controller only collects, and one save per test (a locked append to the
history, a transaction in the grades table, each a few system calls) was most of its work:
with two workers it could not keep up, and the workers waited. There the grades go to a
thread of the writer's own, which saves what came in the last ``linger`` seconds (at most
``most`` grades) with one append and one transaction. A grade is then on disk within about
``linger`` seconds of its test's end, also when no further report comes (a long test),
which a batch flushed only from the next report could not promise.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult

__all__ = ["GradeWriter"]

#: Seconds a grade waits for others to share its save (xdist); short enough that a killed
#: controller loses at most the grades of its last fraction of a second.
LINGER_S: Final = 0.2

#: The most grades in one save: one append and one transaction of about a megabyte.
MOST: Final = 512


class GradeWriter:
    """Hands final grades to ``save`` (which reports its own trouble and never raises it):
    one by one as they come, or, ``batched``, in lists from a thread of its own."""

    def __init__(
        self,
        save: Callable[[list[GradeResult]], None],
        *,
        batched: bool,
        linger: float = LINGER_S,
        most: int = MOST,
    ) -> None:
        self._save = save
        self._batched = batched
        self._linger = linger
        self._most = most
        self._ready = threading.Condition()
        self._pending: list[GradeResult] = []
        #: When the oldest pending grade came (its batch is due ``linger`` after).
        self._since = 0.0
        self._closing = False
        self._thread: threading.Thread | None = None
        #: What the thread died of (a bug, never storage trouble): raised again by close().
        self._failure: BaseException | None = None

    def add(self, result: GradeResult) -> None:
        if not self._batched:
            self._save([result])
            return
        with self._ready:
            if self._closing:  # after close(): nothing left to hand it to but this thread
                self._save([result])
                return
            if not self._pending:
                self._since = time.monotonic()
            self._pending.append(result)
            if self._thread is None:
                # Started by the first grade: a run that grades nothing starts no thread.
                self._thread = threading.Thread(
                    target=self._run, name="cleo-grade grade writer", daemon=True
                )
                self._thread.start()
            if len(self._pending) == 1 or len(self._pending) >= self._most:
                self._ready.notify()

    def close(self) -> None:
        """Save what is pending and stop the thread (the end of the run; idempotent)."""
        with self._ready:
            self._closing = True
            self._ready.notify()
            thread = self._thread
        if thread is not None:
            thread.join()
        with self._ready:
            rest, self._pending = self._pending, []
        if rest:  # the thread died before it saved them
            self._save(rest)
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _run(self) -> None:
        try:
            while batch := self._next_batch():
                self._save(batch)
        except BaseException as exc:
            self._failure = exc

    def _next_batch(self) -> list[GradeResult]:
        """The grades due now: once the oldest waited ``linger``, or ``most`` are pending, or
        the writer closes; an empty list once it closed with nothing left."""
        with self._ready:
            while not self._pending and not self._closing:
                self._ready.wait()
            while not self._closing and len(self._pending) < self._most:
                left = self._since + self._linger - time.monotonic()
                if left <= 0:
                    break
                self._ready.wait(left)
            batch = self._pending[: self._most]
            del self._pending[: self._most]
            if self._pending:
                self._since = time.monotonic()
            return batch
