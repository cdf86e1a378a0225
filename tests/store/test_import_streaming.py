"""``cleo-grade import`` streams: memory bounded by a batch, an error on line 1 costs one line,
and the import stays all or nothing (issue 10, item 9)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.store import AuditStore
from tests.held_import import CLI, start_held_import
from tests.processes import DEADLINE, read_line

#: Runs the CLI in a grandchild and prints its peak RSS in KiB, so the figure is that one
#: import's, not the largest of every child the test process ever started.
MEASURE = """
import resource, subprocess, sys
cli = "import sys; from pytest_cleo_grade.cli import main; sys.exit(main())"
done = subprocess.run([sys.executable, "-c", cli, *sys.argv[1:]], capture_output=True, text=True)
sys.stderr.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def measured_import(cwd: Path, *argv: str) -> tuple[int, float, str]:
    """Exit status, peak RSS in MiB and stderr of ``cleo-grade import ARGV``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEO_")}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, "import", *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    status, peak_kib = done.stdout.split()
    return int(status), int(peak_kib) / 1024, done.stderr


def entry_line(i: int, session: str = "s1") -> str:
    ops = [("session", "list"), ("tasks", "find"), ("tasks", "show"), ("session", "end")]
    domain, operation = ops[i % len(ops)]
    return json.dumps(
        {
            "timestamp": f"2026-03-01T12:{(i // 1000) % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z",
            "sessionId": session,
            "domain": domain,
            "operation": operation,
            "params": {"query": f"q{i}"},
            "result": {"success": True},
        },
        separators=(",", ":"),
    )


@pytest.mark.e2e
def test_an_error_on_line_one_is_reported_without_reading_the_rest(tmp_path: Path) -> None:
    # 40 MB of "{}" lines: reading them all (as a list of lines) peaked at gigabytes.
    path = tmp_path / "bad.jsonl"
    with path.open("w") as handle:
        handle.write("{broken\n")
        handle.write("{}\n" * 13_000_000)
    status, peak, err = measured_import(tmp_path, "bad.jsonl")
    assert status == 2
    assert err.startswith("cleo-grade: error: bad.jsonl:1: invalid JSON")
    assert len(err.splitlines()) == 1
    assert peak < 120, f"peak RSS {peak:.0f} MiB"
    assert not (tmp_path / ".cleo").exists()


@pytest.mark.e2e
def test_a_large_valid_import_keeps_memory_bounded_by_a_batch(tmp_path: Path) -> None:
    count = 50_000
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join(entry_line(i, f"s{i // 20_000}") for i in range(count)) + "\n")
    status, peak, err = measured_import(tmp_path, "big.jsonl")
    assert (status, err) == (0, "")
    # Holding the file's entries took several hundred MiB at this size (5.6 GB at 1M).
    assert peak < 160, f"peak RSS {peak:.0f} MiB"
    with AuditStore(tmp_path / ".cleo" / "audit.db", read_only=True) as store:
        assert store.count() == count
        assert store.session_ids() == ["s0", "s1", "s2"]


@pytest.fixture
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    return tmp_path


def test_a_bad_line_after_many_batches_creates_no_store(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    lines = [entry_line(i) for i in range(12_000)]
    lines[10_000] = lines[10_000].replace('"success":true', '"success":"maybe"')
    (in_tmp / "e.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["import", "e.jsonl"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("cleo-grade: error: e.jsonl:10001: result.success")
    assert not (in_tmp / ".cleo").exists()


def test_a_bad_line_after_many_batches_leaves_an_existing_store_unchanged(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "good.jsonl").write_text("\n".join(entry_line(i, "old") for i in range(5)) + "\n")
    assert main(["import", "good.jsonl"]) == 0
    lines = [entry_line(i, "new") for i in range(12_000)]
    lines.append("{not json")
    (in_tmp / "bad.jsonl").write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["import", "bad.jsonl"]) == 2
    assert capsys.readouterr().err.startswith("cleo-grade: error: bad.jsonl:12001: invalid JSON")
    with AuditStore(in_tmp / ".cleo" / "audit.db", read_only=True) as store:
        assert store.count() == 5
        assert store.session_ids() == ["old"]


def test_a_session_filter_streams_and_a_missing_session_imports_nothing(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    lines = [entry_line(i, "a" if i % 2 else "b") for i in range(10_000)]
    (in_tmp / "e.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["import", "e.jsonl", "--session-id", "a"]) == 0
    assert "Imported 5000 entries" in capsys.readouterr().out
    assert main(["import", "e.jsonl", "--session-id", "zzz", "--db", "other.db"]) == 2
    assert "no entries for session zzz" in capsys.readouterr().err
    assert not (in_tmp / "other.db").exists()
    with AuditStore(in_tmp / ".cleo" / "audit.db", read_only=True) as store:
        assert store.session_ids() == ["a"]


def test_a_json_array_is_streamed_too(capsys: pytest.CaptureFixture[str], in_tmp: Path) -> None:
    items = [entry_line(i) for i in range(3000)]
    # Items spread over lines and chunk boundaries, strings holding brackets and commas.
    items[7] = items[7].replace('"q7"', '"[,]\\u2028{"')
    (in_tmp / "e.json").write_text("[\n" + ",\n  ".join(items) + "\n]\n")
    assert main(["import", "e.json"]) == 0
    assert "Imported 3000 entries" in capsys.readouterr().out
    with AuditStore(in_tmp / ".cleo" / "audit.db", read_only=True) as store:
        stored = [entry.params["query"] for _, entry in store.session_items("s1")]
    assert sorted(stored) == sorted(f"q{i}" if i != 7 else "[,]\u2028{" for i in range(3000))


def test_blank_lines_keep_line_numbers_and_clean_batches(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    lines: list[str] = []
    for i in range(9_000):
        lines.append(entry_line(i))
        if i % 97 == 0:
            lines.append(" \t" if i % 2 else "")  # blank and whitespace-only lines
    (in_tmp / "ok.jsonl").write_text("\r\n".join(lines) + "\r\n")
    assert main(["import", "ok.jsonl"]) == 0
    assert "Imported 9000 entries" in capsys.readouterr().out
    bad = lines[:]
    at = 8_500
    bad[at] = bad[at].replace('"success":true', '"success":"maybe"')
    (in_tmp / "bad.jsonl").write_text("\n".join(bad) + "\n")
    assert main(["import", "bad.jsonl", "--db", "other.db"]) == 2
    assert capsys.readouterr().err.startswith(f"cleo-grade: error: bad.jsonl:{at + 1}: result")
    assert not (in_tmp / "other.db").exists()


def test_a_bad_line_before_an_over_long_line_is_the_one_reported(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    huge = b'{"pad": "' + b"x" * (64 * 1024 * 1024) + b'"}'
    good = [entry_line(i).encode() for i in range(3)]
    (in_tmp / "long.jsonl").write_bytes(b"\n".join([*good, huge, *good]) + b"\n")
    assert main(["import", "long.jsonl"]) == 2
    assert capsys.readouterr().err == ("cleo-grade: error: long.jsonl:4: line longer than 64 MiB\n")
    (in_tmp / "both.jsonl").write_bytes(b"\n".join([*good, b"{broken", huge]) + b"\n")
    assert main(["import", "both.jsonl"]) == 2
    assert capsys.readouterr().err.startswith("cleo-grade: error: both.jsonl:4: invalid JSON")
    assert not (in_tmp / ".cleo").exists()


def test_leading_blank_lines_do_not_open_the_store_before_the_first_entry(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "notadb.txt").write_text("not a database\n")
    (in_tmp / "bad.jsonl").write_text("\n  \n{bad\n" + entry_line(1) + "\n")
    assert main(["import", "bad.jsonl", "--db", "notadb.txt"]) == 2
    assert capsys.readouterr().err.startswith("cleo-grade: error: bad.jsonl:3: invalid JSON")
    (in_tmp / "blank.jsonl").write_text("\n\n  \n")
    assert main(["import", "blank.jsonl", "--db", "notadb.txt"]) == 2
    assert capsys.readouterr().err == (
        "cleo-grade: error: blank.jsonl: file is empty (no audit entries)\n"
    )
    (in_tmp / "other.jsonl").write_text("\n" + entry_line(1, "a") + "\n")
    assert main(["import", "other.jsonl", "--session-id", "b", "--db", "notadb.txt"]) == 2
    assert capsys.readouterr().err == ("cleo-grade: error: other.jsonl: no entries for session b\n")
    assert (in_tmp / "notadb.txt").read_text() == "not a database\n"


#: Run first in import A's process: it says on the pipe OPENED when its store is open (it
#: holds the store file's shared flock from then on), and goes on.
OPENED = """
import os
from pytest_cleo_grade.store import _imports as imports, _store as core

class Store(core.AuditStore):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        os.write({opened}, b"opened\\n")

imports.AuditStore = Store
"""


@pytest.mark.e2e
def test_a_failed_import_never_removes_a_store_another_import_filled_meanwhile(
    tmp_path: Path,
) -> None:
    # Import B creates the store and fails at its last line; import A, started while B is
    # writing, opens the store, waits for B's write lock and commits when B rolls back. B
    # removed the store it had created, by path, and with it A's acknowledged rows (review
    # 6, finding 7). B is held mid-import (its store open, rows in its transaction) until A
    # has opened the store.
    count = 200
    lines = [entry_line(i, "b") for i in range(count)]
    (tmp_path / "b.jsonl").write_text("\n".join([*lines, "{bad"]) + "\n")
    (tmp_path / "a.jsonl").write_text("\n".join(entry_line(i, "a") for i in range(9)) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEO_")}
    env["CLEO_GRADE_IMPORT_WORKERS"] = "0"
    store = tmp_path / "st" / "a.db"
    b = start_held_import(tmp_path, ["b.jsonl", "--db", "st/a.db"], at=3, env=env)
    opened_out, opened_in = os.pipe()
    try:
        assert store.exists()
        code = textwrap.dedent(OPENED).format(opened=opened_in) + CLI
        a = subprocess.Popen(
            [sys.executable, "-c", code, "import", "a.jsonl", "--db", "st/a.db"],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            pass_fds=(opened_in,),
        )
        os.close(opened_in)
        opened = read_line(opened_out)
        b.go_on()
        _, b_err = b.communicate()
        a_out, a_err = a.communicate(timeout=DEADLINE)
    finally:
        b.close()
        os.close(opened_out)
    assert opened == b"opened\n", a_err
    assert b.child.returncode == 2
    assert b_err.startswith(f"cleo-grade: error: b.jsonl:{count + 1}: invalid JSON")
    assert (a.returncode, a_err) == (0, "")
    assert a_out.startswith("Imported 9 entries into st/a.db")
    with AuditStore(store, read_only=True) as stored:
        assert stored.session_ids() == ["a"]
        assert stored.count() == 9


def test_a_failed_import_removes_the_store_it_created_when_nobody_else_used_it(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    lines = [entry_line(i) for i in range(12_000)]
    (in_tmp / "bad.jsonl").write_text("\n".join([*lines, "{bad"]) + "\n")
    assert main(["import", "bad.jsonl", "--db", "new/dir/a.db"]) == 2
    assert capsys.readouterr().err.startswith("cleo-grade: error: bad.jsonl:12001: invalid")
    assert not (in_tmp / "new").exists()
