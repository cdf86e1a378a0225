"""An ordered map over worker processes, for CPU-bound batches on a machine with cores to spare.

Results come back in the order the items went in, and so do errors: an item's exception is
raised where its result would have been, after every earlier item's result, exactly as a plain
loop would. Items are submitted a few at a time, so memory holds a bounded number of them.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Final, TypeVar

from pytest_cleo_grade.core._files import interrupts_held
from pytest_cleo_grade.core.errors import CleoGradeError

__all__ = ["WORKERS_ENV", "ordered_map", "worker_count"]

T = TypeVar("T")
R = TypeVar("R")

#: Overrides how many worker processes an import may use (0: none, everything in-process).
WORKERS_ENV: Final = "CLEO_GRADE_IMPORT_WORKERS"
_MOST: Final = 4
_PR_SET_PDEATHSIG: Final = 1  # from <sys/prctl.h>


def worker_count() -> int:
    """How many worker processes to use here: 0 where forking is unsafe or pointless.

    Forking is only safe from a process with one thread (a forked child inherits locks held
    by the others), and only worth it with two or more cores this process may run on. Unless
    ``CLEO_GRADE_IMPORT_WORKERS`` asks for workers, they are used on Linux only (macOS system
    libraries are not fork-safe, and Windows cannot fork).
    """
    setting = os.environ.get(WORKERS_ENV, "").strip()
    if setting:
        try:
            wanted = int(setting)
        except ValueError:
            wanted = -1
        if not 0 <= wanted <= 64:
            raise CleoGradeError(f"{WORKERS_ENV}={setting!r}: expected a whole number from 0 to 64")
    elif sys.platform.startswith("linux"):
        wanted = min(len(os.sched_getaffinity(0)), _MOST)
        wanted = 0 if wanted < 2 else wanted
    else:
        wanted = 0
    if threading.active_count() > 1 or "fork" not in multiprocessing.get_all_start_methods():
        return 0
    return wanted


def ordered_map(
    work: Callable[[T], R],
    items: Iterable[T],
    *,
    remote: Callable[[T], bool],
    workers: int,
) -> Iterator[R]:
    """``work(item)`` for each item, in order; items ``remote`` accepts run in worker processes.

    ``work`` and those items must pickle. With ``workers`` at 0 everything runs here. Closing
    the iterator early (an error downstream) cancels what has not started and waits for the
    rest, so no worker outlives the call.
    """
    if workers <= 0:
        yield from map(work, items)
        return
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(
        workers, mp_context=context, initializer=_worker_setup, initargs=(os.getpid(),)
    )
    pending: deque[Future[R]] = deque()
    source = iter(items)
    try:
        _start(pool)
        while True:
            try:
                item = next(source)
            except StopIteration:
                break
            except Exception as exc:
                # The source's own error comes after the results of the items before it.
                pending.append(_settled(exc))
                break
            pending.append(pool.submit(work, item) if remote(item) else _here(work, item))
            # Hand back what is ready, and keep at most two items per worker in flight.
            while pending and (pending[0].done() or len(pending) > 2 * workers):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BrokenProcessPool as exc:  # a worker was killed (out of memory, a signal)
        raise CleoGradeError(
            f"a worker process stopped unexpectedly ({exc}); "
            f"set {WORKERS_ENV}=0 to work in one process"
        ) from exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def _here(work: Callable[[T], R], item: T) -> Future[R]:
    """``work(item)`` run now, as a settled future (its error waits its turn in the queue)."""
    try:
        result = work(item)
    except Exception as exc:  # raised by result(), after the results before it
        return _settled(exc)
    done: Future[R] = Future()
    done.set_result(result)
    return done


def _settled(exc: Exception) -> Future[R]:
    failed: Future[R] = Future()
    failed.set_exception(exc)
    return failed


def _start(pool: ProcessPoolExecutor) -> None:
    """Fork every worker of ``pool`` now, with Ctrl-C (and SIGTERM) held back until they run.

    With fork, the first submit starts all the processes, then the thread that stops them.
    An interrupt in between would leave forked workers that nothing stops (and a handler
    run inside a fork callback loses it): the signals stay pending until the pool is whole.
    """
    with interrupts_held():
        try:
            pool.submit(int)
        except BaseException:
            # A fork that failed part way (no memory, a process limit): the workers already
            # started have no thread to stop them, and the interpreter would wait for them at
            # exit. The pool keeps no public handle on its processes.
            for process in list(getattr(pool, "_processes", {}).values()):
                process.kill()
                process.join()
            raise


def _worker_setup(parent: int) -> None:
    # Ctrl-C reaches the whole process group (the workers' own group below is Linux's only,
    # and comes after the fork); the parent decides what an interrupt means (it rolls the
    # import back), so workers must not die printing their own tracebacks.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The pool stops the workers of a broken pool with SIGTERM: it must kill them outright
    # (not run the command's handler, inherited by the fork), and it was held back while
    # the pool forked.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    if sys.platform.startswith("linux"):
        # A group of their own: a SIGTERM to the command's group (a CI timeout, `timeout`)
        # reaches only the parent, which rolls the import back and then stops the pool;
        # workers dying first would turn that into a worker's failure.
        os.setpgid(0, 0)
        # A parent killed outright (SIGKILL, the OOM killer, a CI timeout) cannot stop its
        # workers: the kernel kills them with it, instead of leaving them blocked forever.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)
