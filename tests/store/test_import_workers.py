"""A large import validates its batches in worker processes and stores exactly what a
one-process import stores; errors still come in file order (issue 11, Deliver 4)."""

from __future__ import annotations

import functools
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.store import ROW_COLUMNS
from tests.held_import import CLI, HeldImport, start_held_import
from tests.processes import DEADLINE, Exits

WORKERS_ENV = "CLEO_GRADE_IMPORT_WORKERS"
#: The size from which an import hands its batches to worker processes (_PARALLEL_BYTES).
WORKERS_FROM = 4 * 1024 * 1024
#: Entries of a file past that size, with four full batches (4,096 lines each, after the
#: growing first ones: 4,095 lines in 12 batches) for the workers and a short last one.
COUNT = 22_000


def cli(
    cwd: Path, *argv: str, workers: str | None, code: str = CLI
) -> subprocess.CompletedProcess[str]:
    """``cleo-grade ARGV`` in a fresh process (forking is only done from one thread)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEO_")}
    if workers is not None:
        env["CLEO_GRADE_IMPORT_WORKERS"] = workers
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def varied_line(i: int) -> str:
    """Entries of every shape the row builder distinguishes (metadata, failures, nesting)."""
    entry: dict[str, object] = {
        "timestamp": f"2026-03-01T{10 + i // 36_000:02d}:{i // 600 % 60:02d}:"
        f"{i // 10 % 60:02d}.{i % 10 * 100 + i % 7:03d}Z",
        "sessionId": f"s{i % 3}" if i % 11 else None,
        "domain": ("tasks", "session", "admin")[i % 3],
        "operation": ("add", "list", "help", "find")[i % 4],
        "params": {"title": f"t{i % 50}", "nested": {"deep": [i, {"x": i / 7}]}},
        "result": {"success": i % 5 != 0, "exitCode": 0 if i % 5 else 4, "duration": i % 13},
    }
    if i % 4 == 0:
        entry["metadata"] = {"gateway": "query", "taskId": f"T{i}", "userId": "u1", "team": "x"}
    if i % 9 == 0:
        entry["timestamp"] = "2026-03-01T12:00:00.250+02:00"  # not UTC: converted
    if i % 5 == 0:
        entry["error"] = "E_NOT_FOUND: no such task"
    return json.dumps(entry)


@functools.cache
def entries_text(count: int = COUNT) -> str:
    """``count`` varied lines (made once: a few tests share the file's text)."""
    return "\n".join(varied_line(i) for i in range(count)) + "\n"


@pytest.fixture
def here(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Callable[..., tuple[int, str, str]]:
    """``cleo-grade ARGV`` in this process, in ``tmp_path``, with the workers setting given:
    where nothing forks (no workers, or a setting refused before any), a process of its own
    proves nothing more."""
    monkeypatch.chdir(tmp_path)

    def run(*argv: str, workers: str) -> tuple[int, str, str]:
        monkeypatch.setenv(WORKERS_ENV, workers)
        status = main(list(argv))
        out, err = capsys.readouterr()
        return status, out, err

    return run


def stored(db: Path) -> tuple[list[str], list[tuple[object, ...]]]:
    """The row ids and the rows without their ids, in insertion order."""
    columns = ", ".join(ROW_COLUMNS[1:])
    with sqlite3.connect(db) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM audit_log ORDER BY rowid")]
        rows = conn.execute(f"SELECT {columns} FROM audit_log ORDER BY rowid").fetchall()
    conn.close()
    return ids, rows


@pytest.mark.e2e
def test_an_import_with_workers_stores_what_one_without_them_stores(
    tmp_path: Path, here: Callable[..., tuple[int, str, str]]
) -> None:
    (tmp_path / "e.jsonl").write_text(entries_text())
    assert (tmp_path / "e.jsonl").stat().st_size > WORKERS_FROM  # past the size for workers
    status, out, err = here("import", "e.jsonl", "--db", "alone.db", workers="0")
    shared = cli(tmp_path, "import", "e.jsonl", "--db", "shared.db", workers="2")
    assert (status, err) == (0, "")
    assert (shared.returncode, shared.stderr) == (0, "")
    assert shared.stdout == out.replace("alone.db", "shared.db")
    assert shared.stdout == (
        f"Imported {COUNT} entries into shared.db (sessions: (no session), s1, s2, s0)\n"
    )
    alone_ids, alone_rows = stored(tmp_path / "alone.db")
    shared_ids, shared_rows = stored(tmp_path / "shared.db")
    assert len(shared_rows) == COUNT
    assert shared_rows == alone_rows
    assert len(set(shared_ids)) == COUNT
    # An id holds its process's random prefix after the time: rows made by the workers
    # carry other prefixes than the first ones, made by the importing process itself.
    assert len({row_id[12:24] for row_id in alone_ids}) == 1
    assert len({row_id[12:24] for row_id in shared_ids}) == 3


@pytest.mark.e2e
def test_the_first_bad_line_in_file_order_is_the_one_reported(
    tmp_path: Path, here: Callable[..., tuple[int, str, str]]
) -> None:
    # Both bad lines are in full batches (the third and the fourth), which the workers
    # validate side by side: the later one's worker may well finish first.
    lines = entries_text().splitlines()
    lines[13_000] = lines[13_000].replace('"success": true', '"success": "maybe"')
    lines[13_000] = lines[13_000].replace('"success": false', '"success": "maybe"')
    lines[17_000] = "{not json"
    (tmp_path / "e.jsonl").write_text("\n".join(lines) + "\n")
    assert (tmp_path / "e.jsonl").stat().st_size > WORKERS_FROM

    def assert_the_first_bad_line_reported(status: int, err: str) -> None:
        assert status == 2
        assert err.startswith("cleo-grade: error: e.jsonl:13001: result.success")
        assert len(err.splitlines()) == 1
        assert not (tmp_path / "out").exists()

    status, _, err = here("import", "e.jsonl", "--db", "out/audit.db", workers="0")
    assert_the_first_bad_line_reported(status, err)
    shared = cli(tmp_path, "import", "e.jsonl", "--db", "out/audit.db", workers="2")
    assert_the_first_bad_line_reported(shared.returncode, shared.stderr)


@pytest.mark.parametrize("setting", ["lots", "-1", "65", "1.5"])
def test_a_bad_workers_setting_is_one_line_naming_it(
    tmp_path: Path, here: Callable[..., tuple[int, str, str]], setting: str
) -> None:
    (tmp_path / "e.jsonl").write_text(varied_line(1) + "\n")
    status, _, err = here("import", "e.jsonl", workers=setting)
    assert status == 2
    assert err == (
        f"cleo-grade: error: CLEO_GRADE_IMPORT_WORKERS={setting!r}: "
        "expected a whole number from 0 to 64\n"
    )
    assert not (tmp_path / ".cleo").exists()


ORDERED = textwrap.dedent(
    """
    import multiprocessing, sys
    from pytest_cleo_grade.store._workers import ordered_map

    # Shared with the workers, which are forked: item 20 is still running in its worker
    # when the source fails.
    SOURCE_FAILED = multiprocessing.get_context("fork").Event()

    def work(item):
        if item == 20:
            if not SOURCE_FAILED.wait(120):
                raise RuntimeError("the source never failed while item 20 ran")
            raise ValueError(f"item {item} is bad")
        return item * item

    def items():
        yield from range(22)
        SOURCE_FAILED.set()
        raise KeyError("the source failed after item 21")

    seen = []
    try:
        for result in ordered_map(work, items(), remote=lambda i: i % 3 != 0, workers=2):
            seen.append(result)
    except ValueError as exc:
        print("error", exc)
    print("seen", seen == [i * i for i in range(20)])
    print("children", len(multiprocessing.active_children()))

    # Closing early (the consumer failed) stops the workers too.
    results = ordered_map(work, range(10_000), remote=lambda i: True, workers=2)
    print("first", next(results), next(results))
    results.close()
    print("children", len(multiprocessing.active_children()))
    """
)


@pytest.mark.e2e
def test_ordered_map_keeps_file_order_for_results_and_errors(tmp_path: Path) -> None:
    script = tmp_path / "ordered.py"
    script.write_text(ORDERED)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120
    )
    assert done.stderr == ""
    assert done.stdout.splitlines() == [
        "error item 20 is bad",  # not the source's later error, not a later item's result
        "seen True",
        "children 0",
        "first 0 1",
        "children 0",
    ]


#: The batch a held import holds before (see tests.held_import): the store is open, its
#: transaction holds the first batches' rows, the workers have the first full batch, and
#: three full batches are still to come.
HOLD_AT = 13


_STARTED: list[HeldImport] = []


@pytest.fixture(autouse=True)
def no_import_left() -> Iterator[None]:
    """A test that failed while its import still ran does not leave the import running
    (killed outright, its workers die with it: see the last test)."""
    yield
    while _STARTED:
        _STARTED.pop().close()


def _signals_as_a_terminal_gives_them(ignoring: signal.Signals | None) -> None:
    """In the child: SIGINT and SIGTERM at their defaults, then ``ignoring`` ignored.

    A child inherits ignored signals: run from a background job of a non-interactive shell
    (as a CI harness may run the suite), pytest and so the CLI start with SIGINT ignored,
    and a Ctrl-C would never reach the import these tests interrupt.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if ignoring is not None:
        signal.signal(ignoring, signal.SIG_IGN)


def started_import(
    tmp_path: Path,
    *,
    wait_until_held: bool = True,
    workers: str = "2",
    ignoring: signal.Signals | None = None,
    count: int = COUNT,
    hold_at: int = HOLD_AT,
) -> HeldImport:
    """A CLI import of ``count`` entries in its own process group, held before batch
    ``hold_at``; started with the signal ``ignoring`` ignored, as a supervisor may start it."""
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "e.jsonl").write_text(entries_text(count))
    assert workers == "0" or (tmp_path / "e.jsonl").stat().st_size > WORKERS_FROM
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEO_")}
    env[WORKERS_ENV] = workers
    started = start_held_import(
        tmp_path,
        ["e.jsonl"],
        at=hold_at,
        env=env,
        wait_until_held=wait_until_held,
        new_session=True,  # a terminal's Ctrl-C reaches the whole group
        preexec_fn=lambda: _signals_as_a_terminal_gives_them(ignoring),
    )
    _STARTED.append(started)
    return started


def workers_of(pid: int) -> list[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [int(child) for child in children]


@pytest.mark.e2e
def test_ctrl_c_during_an_import_with_workers_leaves_nothing(tmp_path: Path) -> None:
    held = started_import(tmp_path)
    os.killpg(held.pid, signal.SIGINT)  # the importing process and its workers alike
    out, err = held.communicate()
    assert (held.child.returncode, out, err) == (130, "", "cleo-grade: interrupted\n")
    assert not (tmp_path / ".cleo").exists()


@pytest.mark.e2e
@pytest.mark.parametrize("workers", ["2", "0"])
def test_a_terminated_import_leaves_nothing(tmp_path: Path, workers: str) -> None:
    # SIGTERM is how a CI timeout, `timeout` or a container stop ends a command: it undoes
    # the import as Ctrl-C does, instead of leaving a new store with no entries behind.
    held = started_import(tmp_path, workers=workers)
    os.killpg(held.pid, signal.SIGTERM)
    out, err = held.communicate()
    assert (held.child.returncode, out, err) == (143, "", "cleo-grade: terminated\n")
    assert not (tmp_path / ".cleo").exists()


def assert_a_sigterm_leaves_nothing(tmp_path: Path, patch: str) -> None:
    """An import of one entry, SIGTERM raised where ``patch`` (run first) sends it."""
    (tmp_path / "e.jsonl").write_text(varied_line(1) + "\n")
    code = f"{textwrap.dedent(patch)}\n{CLI}\n"
    done = cli(tmp_path, "import", "e.jsonl", workers=None, code=code)
    assert (done.returncode, done.stdout, done.stderr) == (143, "", "cleo-grade: terminated\n")
    assert not (tmp_path / ".cleo").exists()


@pytest.mark.e2e
def test_a_sigterm_while_the_store_claims_its_file_leaves_nothing(tmp_path: Path) -> None:
    # The signal lands where the store file's descriptor holds its flock (which a failed
    # import's undo must take exclusively) but is not yet the store's: Python runs the
    # handler right after a system call. The descriptor was left to nobody, the store stayed.
    patch = """
        import os, signal
        from pytest_cleo_grade.store import _store as core

        same_file = core._same_file
        signalled = []

        def terminated_once(opened, path):  # first called once the flock is granted
            if not signalled:
                signalled.append(os.kill(os.getpid(), signal.SIGTERM))
            return same_file(opened, path)

        core._same_file = terminated_once
        """
    assert_a_sigterm_leaves_nothing(tmp_path, patch)


@pytest.mark.e2e
def test_a_sigterm_as_the_store_is_opened_leaves_nothing(tmp_path: Path) -> None:
    # The handler runs right after the store's constructor returns, before the import's
    # ``with`` holds the store: the store, open and holding its flock, was left to nobody.
    patch = """
        import os, signal
        from pytest_cleo_grade.store import _imports as imports, _store as core

        class Store(core.AuditStore):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                # As in the caller, once the constructor returned: nothing else refers to
                # the new store (a traceback would keep this frame's locals).
                del self
                os.kill(os.getpid(), signal.SIGTERM)

        imports.AuditStore = Store
        """
    assert_a_sigterm_leaves_nothing(tmp_path, patch)


@pytest.mark.e2e
def test_a_sigterm_as_the_schema_is_created_leaves_no_traceback(tmp_path: Path) -> None:
    # The store's tables are made inside sqlite-utils' ``atomic()`` blocks: a handler run
    # right after such a block's generator yielded (before its ``with`` holds it) left the
    # generator open, and its cleanup ran at exit, on the closed connection, printing a
    # traceback ("Exception ignored in: <generator object Database.atomic>").
    patch = """
        import os, signal
        from sqlite_utils import db

        atomic = db.Database.atomic

        class Entered:
            def __init__(self, managed):
                self.managed = managed

            def __enter__(self):
                entered = self.managed.__enter__()
                os.kill(os.getpid(), signal.SIGTERM)  # handled as this call returns
                return entered

            def __exit__(self, *exc):
                return self.managed.__exit__(*exc)

        db.Database.atomic = lambda self: Entered(atomic(self))
        """
    assert_a_sigterm_leaves_nothing(tmp_path, patch)


@pytest.mark.e2e
def test_a_sigterm_the_caller_ignores_stays_ignored(tmp_path: Path) -> None:
    # A program that starts the command with SIGTERM ignored wants it to finish: the
    # command does not take the signal back (as shells leave a background job's alone).
    # In one process, the file need not be large: held after its first batches, it is
    # mid-import all the same.
    held = started_import(tmp_path, workers="0", ignoring=signal.SIGTERM, count=500, hold_at=3)
    os.killpg(held.pid, signal.SIGTERM)  # a handler would run as the hold's read returns
    held.go_on()
    out, err = held.communicate()
    assert (held.child.returncode, err) == (0, "")
    assert out.startswith("Imported 500 entries into ")
    assert len(stored(tmp_path / ".cleo" / "audit.db")[0]) == 500


@pytest.mark.e2e
def test_repeated_sigterms_do_not_cut_the_undo_short(tmp_path: Path) -> None:
    # Supervisors repeat themselves; the first SIGTERM starts the undo, the rest must not
    # interrupt it (a traceback, or the new store left behind). One that comes once the
    # command has ended meets the default action again: the process dies of it, undone.
    held = started_import(tmp_path, workers="0")
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        os.killpg(held.pid, signal.SIGTERM)  # the group lives until the child is reaped
        try:
            held.child.wait(timeout=0.001)  # its exit, or another SIGTERM a moment later
            break
        except subprocess.TimeoutExpired:
            continue
    out, err = held.communicate()
    assert held.child.returncode in (143, -signal.SIGTERM), err
    assert (out, err) in {("", "cleo-grade: terminated\n"), ("", "")}
    assert not (tmp_path / ".cleo").exists()


@pytest.mark.e2e
@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="finds the worker processes through /proc"
)
def test_a_worker_killed_during_an_import_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    held = started_import(tmp_path)
    workers = workers_of(held.pid)
    assert workers, "no worker processes were started"
    with Exits(workers[:1]) as killed:
        os.kill(workers[0], signal.SIGKILL)
        killed.wait()  # the pool hears of it while the import holds, then meets it
    held.go_on()
    out, err = held.communicate()
    assert (held.child.returncode, out) == (2, ""), err
    assert err.startswith("cleo-grade: error: a worker process stopped unexpectedly (")
    assert err.endswith("; set CLEO_GRADE_IMPORT_WORKERS=0 to work in one process\n")
    assert len(err.splitlines()) == 1
    assert not (tmp_path / ".cleo").exists()


@pytest.mark.e2e
@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="finds the worker processes through /proc"
)
def test_ctrl_c_while_the_workers_start_still_interrupts(tmp_path: Path) -> None:
    # The moment the first worker appears is inside the pool's start: an interrupt there
    # once went to a fork callback (lost: the import committed) or left a worker behind.
    # (Held mid-import, an import this test is late for is still interrupted, never done.)
    for attempt in range(4):
        held = started_import(tmp_path / str(attempt), wait_until_held=False)
        while not workers_of(held.pid) and held.child.poll() is None:
            pass
        workers = workers_of(held.pid)
        os.killpg(held.pid, signal.SIGINT)
        out, err = held.communicate()
        assert (held.child.returncode, out, err) == (130, "", "cleo-grade: interrupted\n")
        assert not (tmp_path / str(attempt) / ".cleo").exists()
        assert not [w for w in workers if _running(w)]


@pytest.mark.e2e
@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="finds the worker processes through /proc"
)
def test_workers_die_with_an_importing_process_killed_outright(tmp_path: Path) -> None:
    held = started_import(tmp_path)
    workers = workers_of(held.pid)
    assert workers, "no worker processes were started"
    with Exits(workers) as gone:
        held.child.kill()
        held.communicate()
        gone.wait()
    assert not [w for w in workers if _running(w)]


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, or no process, is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.e2e
def test_a_sigterm_once_the_import_committed_reports_the_import_not_a_termination(
    tmp_path: Path,
) -> None:
    # The handler ran after COMMIT (a large import's then takes a moment to close its store):
    # every row stayed, yet the command said "terminated" (143), so a caller that retried
    # stored every entry twice.
    patch = """
        import os, signal
        from pytest_cleo_grade.store import _store as core

        append_batches = core.AuditStore.append_batches

        def then_terminated(self, batches):
            added = append_batches(self, batches)
            os.kill(os.getpid(), signal.SIGTERM)
            return added

        core.AuditStore.append_batches = then_terminated
        """
    (tmp_path / "e.jsonl").write_text("\n".join(varied_line(i) for i in range(50)) + "\n")
    done = cli(
        tmp_path, "import", "e.jsonl", workers=None, code=f"{textwrap.dedent(patch)}\n{CLI}\n"
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("Imported 50 entries into")
    assert len(stored(tmp_path / ".cleo" / "audit.db")[0]) == 50
