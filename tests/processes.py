"""Helpers for tests that start other processes: wait for the event itself (a line on a pipe,
a process gone), never for a guess at how long it takes, so a loaded machine only makes them
slower, never wrong."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Iterable
from pathlib import Path

#: For an inner ``pytest`` run in a subprocess: leaves out a plugin no test here is about.
#: LangSmith's (installed with the langchain extra) imports its whole client at start-up,
#: two seconds of every inner run; ``-p no:NAME`` is a no-op where it is not installed.
NO_UNRELATED_PLUGINS = ("-p", "no:langsmith_plugin")

#: How long a test waits for an event before it gives up: generous, so that only a hang
#: (not a busy machine) fails it.
DEADLINE = 120.0


def read_line(fd: int, timeout: float = DEADLINE) -> bytes:
    """The next line written to the pipe ``fd`` (b"" once the writer closed it, or at the
    deadline)."""
    line = b""
    end = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        chunk = os.read(fd, 1)
        if not chunk:
            break
        line += chunk
    return line


class Exits:
    """The processes ``pids``, watched from now on (before anything may end them, so that a
    pid the system reuses later is never taken for theirs): :meth:`wait` returns once every
    one has exited, whoever its parent is (each one's pidfd becomes readable then)."""

    def __init__(self, pids: Iterable[int]) -> None:
        self._fds: list[int] = []
        for pid in pids:
            try:
                self._fds.append(os.pidfd_open(pid))
            except ProcessLookupError:
                continue  # already gone (and reaped)

    def wait(self, timeout: float = DEADLINE) -> None:
        """Return once every watched process exited, or at the deadline."""
        end = time.monotonic() + timeout
        while self._fds and (left := end - time.monotonic()) > 0:
            ready, _, _ = select.select(self._fds, [], [], left)
            for fd in ready:
                self._fds.remove(fd)
                os.close(fd)

    def __enter__(self) -> Exits:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def wait_until_open(pid: int, path: Path, timeout: float = DEADLINE) -> None:
    """Return once process ``pid`` holds ``path`` open (it is then waiting for its lock);
    fail if it exits first or the deadline passes."""
    target = str(path.resolve())
    watched = os.pidfd_open(pid)
    try:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            folder = f"/proc/{pid}/fd"
            for name in os.listdir(folder):
                try:
                    if os.readlink(f"{folder}/{name}") == target:
                        return
                except FileNotFoundError:
                    continue  # closed while listed
            # Wakes at once if the process exits; else looks again in a moment.
            exited, _, _ = select.select([watched], [], [], 0.005)
            assert not exited, "the process ended before it opened the history"
        raise AssertionError(f"process {pid} never opened {target}")
    finally:
        os.close(watched)
