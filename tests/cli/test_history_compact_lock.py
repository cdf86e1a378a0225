"""``cleo-grade history compact`` against a real second process holding the history's lock
(a pytest run appending its grades): it waits, or says so in one line, and loses nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from tests.cli.test_history_compact import HISTORY, archive_rows, line, merged, runs_history
from tests.processes import DEADLINE, read_line, wait_until_open

pytestmark = pytest.mark.e2e

BIN = Path(sys.executable).parent

#: A writer of the history as pytest's controller is one: it takes the lock the way
#: append_grades does, says so, and appends its line (argv[2]) once told to (a line on stdin).
HOLDER = """
import os, sys
from pathlib import Path
from pytest_cleo_grade.store import history
with history._locked_append(Path(sys.argv[1])) as fd:
    print("locked", flush=True)
    sys.stdin.readline()
    os.write(fd, sys.argv[2].encode())
"""


def holding(path: Path, text: bytes) -> subprocess.Popen[bytes]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path), text.decode()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None
    assert read_line(holder.stdout.fileno()) == b"locked\n"
    return holder


def release(holder: subprocess.Popen[bytes]) -> None:
    assert holder.stdin is not None
    holder.stdin.write(b"go\n")
    holder.stdin.close()
    assert holder.wait(timeout=DEADLINE) == 0
    assert holder.stdout is not None
    holder.stdout.close()


def test_a_history_held_by_a_writer_is_one_line_and_stays_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    original = runs_history(tmp_path, 3)
    appended = line("t::0", 90, "run-3")
    holder = holding(tmp_path / HISTORY, appended)
    try:
        assert main(["history", "compact", "--keep-runs", "1", "--wait", "0"]) == 2
    finally:
        release(holder)
    assert capsys.readouterr().err == (
        f"cleo-grade: error: {tmp_path / HISTORY}: locked by another process for more than "
        "0 s (a hung or stopped cleo-grade or pytest?): nothing changed\n"
    )
    assert (tmp_path / HISTORY).read_bytes() == original + appended
    assert archive_rows(tmp_path) == []


def test_compact_waits_for_a_writer_holding_the_lock_and_keeps_its_line(
    tmp_path: Path,
) -> None:
    original = runs_history(tmp_path, 3)
    appended = line("t::0", 90, "run-3")  # the newest run's: kept
    holder = holding(tmp_path / HISTORY, appended)
    try:
        command = ["history", "compact", "--keep-runs", "1", "--wait", str(DEADLINE)]
        compact = subprocess.Popen(
            [str(BIN / "cleo-grade"), *command],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        wait_until_open(compact.pid, tmp_path / HISTORY)
    finally:
        release(holder)  # its line lands while compact waits for the lock
    out, err = compact.communicate(timeout=DEADLINE)
    assert (compact.returncode, err) == (0, b"")
    assert out.startswith(b"cleo-grade: kept 1 run (1 line), archived 3 runs (6 lines)")
    kept = (tmp_path / HISTORY).read_bytes()
    assert kept == appended
    assert merged(kept, archive_rows(tmp_path)) == original + appended


@pytest.mark.parametrize("argv", [["history", "--help"], ["history", "compact", "--help"]])
def test_history_help_loads_neither_pydantic_nor_the_store(argv: list[str]) -> None:
    from tests.cli.test_main import PROBE

    done = subprocess.run(
        [sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, check=True
    )
    status, out, modules = json.loads(done.stdout)
    assert status == 0 and "usage: cleo-grade history" in out
    assert not {m.split(".")[0] for m in modules} & {"pydantic", "sqlite_utils", "sqlite3"}
    assert "pytest_cleo_grade.store._compact" not in modules


def _without_override() -> list[str]:
    """The prefix that runs a command unable to write what its permissions refuse: as root,
    without the capabilities that override them (setpriv, util-linux); else nothing."""
    import os
    import shutil

    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: permissions refuse root nothing")
    caps = "-dac_override,-dac_read_search"
    return [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]


@pytest.mark.parametrize("locked", ["store", "history's directory"])
def test_what_cannot_be_written_is_one_line_and_the_history_stays_whole(
    tmp_path: Path, locked: str
) -> None:
    from tests.cli.test_history_compact import STORE

    original = runs_history(tmp_path, 3)
    made_read_only = (
        [tmp_path / STORE, tmp_path / STORE.parent]
        if locked == "store"
        else [(tmp_path / HISTORY).parent]
    )
    for path in made_read_only:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        command = [str(BIN / "cleo-grade"), "history", "compact", "--keep-runs", "1"]
        done = subprocess.run(
            [*_without_override(), *command],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
    finally:
        for path in made_read_only:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("cleo-grade: error: ") and done.stderr.count("\n") == 1
    assert ("readonly database" in done.stderr) == (locked == "store")
    assert (tmp_path / HISTORY).read_bytes() == original
    assert archive_rows(tmp_path) == []
    assert sorted(p.name for p in (tmp_path / HISTORY).parent.iterdir()) == ["GRADES.jsonl"]
