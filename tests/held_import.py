"""``cleo-grade import`` in a process of its own, held mid-import at a batch the test chooses:
the test acts on it (a signal, another import) at a point it knows, however loaded the machine
is. (A large file, acted on "while it still runs", was slow, and a race the import could win.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path

from tests.processes import DEADLINE, read_line

CLI = "import sys; from pytest_cleo_grade.cli import main; sys.exit(main())"
#: An import still running this long after its hold writes every thread's stack to stderr
#: (faulthandler), before a test's DEADLINE for it ends: an import that hangs (seen once, on
#: a machine at load 6, after a Ctrl-C) then fails its test saying where it waited.
DUMP_AFTER = DEADLINE - 15

#: Run first in the import's process. When its source is about to hand over batch number AT
#: (the first one opens the store, so the store is open and its transaction holds the rows
#: of the batches before), the import says so on the READY pipe and waits on the HOLD pipe,
#: until the test closes its end or a signal comes.
#:
#: The wait also watches a signal wake-up pipe. A signal the test sends as soon as it reads
#: "holding" may be taken by another thread of the import (one just started: the pool's, or
#: faulthandler's watchdog before it blocks signals), or arrive just before the wait's system
#: call starts; either way a blocking read is never interrupted, and Python runs the handler
#: only at its next check (seen on Python 3.13 under load: the import waited until the test's
#: deadline). The wake-up byte, written whichever thread takes the signal, ends the wait
#: instead, and the handler runs as the wait returns to Python.
HOLD = """
import faulthandler, os, select, signal
from pytest_cleo_grade.store import sources

read_batches = sources._raw_batches

def held(handle, where):
    for number, batch in enumerate(read_batches(handle, where)):
        if number == {at}:
            faulthandler.dump_traceback_later({dump_after})
            woken, wake = os.pipe()
            os.set_blocking(wake, False)
            signal.set_wakeup_fd(wake)
            os.write({ready}, b"holding\\n")
            select.select([{hold}, woken], [], [])
            faulthandler.cancel_dump_traceback_later()
            signal.set_wakeup_fd(-1)
        yield batch

sources._raw_batches = held
"""


class HeldImport:
    """An import started held (see HOLD); :meth:`close` ends whatever is left of it."""

    def __init__(self, child: subprocess.Popen[str], ready: int, hold: int) -> None:
        self.child = child
        self.pid = child.pid
        self._ready = ready
        self._hold: int | None = hold

    def wait_until_held(self) -> None:
        if read_line(self._ready) != b"holding\n":
            self.child.kill()
            _, err = self.child.communicate()
            raise AssertionError(f"the import never got to its hold: {err}")

    def communicate(self, timeout: float = DEADLINE) -> tuple[str, str]:
        """The import's output once it ends; an import still running after ``timeout`` is
        killed and the test fails with where each of its threads was (see DUMP_AFTER)."""
        try:
            return self.child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.child.kill()
            _, err = self.child.communicate()
            raise AssertionError(
                f"the import did not end within {timeout:.0f} s; its stderr:\n{err}"
            ) from None

    def go_on(self) -> None:
        """Let the import go on from its hold."""
        if self._hold is not None:
            os.close(self._hold)
            self._hold = None

    def close(self) -> None:
        if self.child.poll() is None:
            self.child.kill()
        self.child.communicate()
        self.go_on()
        os.close(self._ready)


def start_held_import(
    cwd: Path,
    argv: Sequence[str],
    *,
    at: int,
    env: dict[str, str],
    wait_until_held: bool = True,
    new_session: bool = False,
    preexec_fn: Callable[[], None] | None = None,
) -> HeldImport:
    """``cleo-grade import ARGV`` in ``cwd``, held before batch ``at``; returns once it holds
    (unless told not to wait)."""
    ready_out, ready_in = os.pipe()
    hold_out, hold_in = os.pipe()
    code = textwrap.dedent(HOLD).format(at=at, ready=ready_in, hold=hold_out, dump_after=DUMP_AFTER)
    code += CLI
    try:
        child = subprocess.Popen(
            [sys.executable, "-c", code, "import", *argv],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            pass_fds=(ready_in, hold_out),
            start_new_session=new_session,
            preexec_fn=preexec_fn,
        )
    except BaseException:
        for fd in (ready_out, hold_in):
            os.close(fd)
        raise
    finally:
        os.close(ready_in)
        os.close(hold_out)
    held = HeldImport(child, ready_out, hold_in)
    if wait_until_held:
        try:
            held.wait_until_held()
        except BaseException:
            held.close()
            raise
    return held
