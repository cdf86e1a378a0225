"""The controller's grade writer: at once in a plain run; in batches on its own thread under
pytest-xdist, each batch saved once it is full or its oldest grade waited long enough, and
everything pending saved when the run ends."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from pytest_cleo_grade.plugin._writer import GradeWriter

DEADLINE = 60.0


class Saved:
    """A ``save`` that keeps each batch it is handed and tells when one came."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.came = threading.Event()
        self.threads: set[str] = set()

    def __call__(self, batch: list[Any]) -> None:
        self.batches.append(list(batch))
        self.threads.add(threading.current_thread().name)
        self.came.set()


def test_a_plain_run_saves_each_grade_at_once_in_its_own_thread() -> None:
    saved = Saved()
    writer = GradeWriter(saved, batched=False)
    writer.add("a")
    assert saved.batches == [["a"]]  # before the next test starts
    writer.add("b")
    writer.close()
    assert saved.batches == [["a"], ["b"]]
    assert saved.threads == {threading.current_thread().name}


def test_a_full_batch_is_saved_without_waiting_and_the_rest_when_the_run_ends() -> None:
    saved = Saved()
    writer = GradeWriter(saved, batched=True, linger=DEADLINE, most=3)
    for grade in "abc":
        writer.add(grade)
    assert saved.came.wait(DEADLINE)  # full: saved long before its linger is up
    writer.add("d")
    writer.close()
    assert saved.batches == [["a", "b", "c"], ["d"]]
    assert saved.threads == {"cleo-grade grade writer"}


def test_a_lone_grade_is_saved_once_it_waited_its_linger_with_no_other_coming() -> None:
    # A long test after it: no further report comes, and the grade is on disk all the same.
    saved = Saved()
    writer = GradeWriter(saved, batched=True, linger=0.05)
    writer.add("a")
    assert saved.came.wait(DEADLINE)
    assert saved.batches == [["a"]]
    writer.close()
    assert saved.batches == [["a"]]


def test_a_run_that_grades_nothing_starts_no_thread() -> None:
    before = {thread.name for thread in threading.enumerate()}
    saved = Saved()
    writer = GradeWriter(saved, batched=True)
    writer.close()
    assert {thread.name for thread in threading.enumerate()} == before
    assert saved.batches == []


def test_what_the_thread_died_of_is_raised_when_the_run_ends() -> None:
    calls: list[list[Any]] = []

    def save(batch: list[Any]) -> None:
        calls.append(list(batch))
        if len(calls) == 1:
            raise RuntimeError("a bug in the save")

    writer = GradeWriter(save, batched=True, linger=DEADLINE, most=1)
    writer.add("a")
    with pytest.raises(RuntimeError, match="a bug in the save"):
        writer.close()
    assert calls[0] == ["a"]
    writer.add("b")  # after close: saved at once, nothing left to hand it to
    assert calls[-1] == ["b"]
