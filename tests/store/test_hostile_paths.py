"""The tool never writes through a link it did not create, never changes a database it refuses,
and reads only regular files (issue 10, items 11, 12 and 13)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.errors import HistoryError, StoreError
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import append_grade
from tests.entries import NOW, sequence
from tests.store.test_import import SESSION, build_cleo_db


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("CLEO_AUDIT_DB", "CLEO_SESSION_ID", "CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_entries(path: Path) -> Path:
    entries = sequence(("session", "list"), ("tasks", "find"), ("session", "end"))
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    return path


def a_grade(session: str = "s1") -> object:
    return grade_entries(sequence(("session", "list")), session_id=session, now=NOW)


# -- item 11: symbolic links ----------------------------------------------------------------


def test_a_symlinked_history_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("precious\n")
    history = tmp_path / ".cleo" / "metrics" / "GRADES.jsonl"
    history.parent.mkdir(parents=True)
    history.symlink_to(outside)
    with pytest.raises(HistoryError, match=r"GRADES\.jsonl.*symbolic link"):
        append_grade(a_grade(), history)  # type: ignore[arg-type]
    assert outside.read_text() == "precious\n"


def test_the_cli_refuses_a_symlinked_history_in_one_line(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    outside = in_tmp / "outside.txt"
    outside.write_text("precious\n")
    write_entries(in_tmp / "e.jsonl")
    (in_tmp / "GRADES.jsonl").symlink_to(outside)
    status, _, err = run(capsys, "grade", "--entries", "e.jsonl", "--history", "GRADES.jsonl")
    assert status == 2
    assert err.startswith("cleo-grade: error: GRADES.jsonl: cannot append grade: ")
    assert "symbolic link" in err and len(err.splitlines()) == 1
    assert outside.read_text() == "precious\n"


def test_a_planted_partial_symlink_never_redirects_the_junit_report(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    victim = in_tmp / "victim.txt"
    victim.write_text("precious\n")
    history = in_tmp / "GRADES.jsonl"
    append_grade(a_grade(), history)  # type: ignore[arg-type]
    (in_tmp / "OUT.xml.partial").symlink_to(victim)
    status, _, _ = run(capsys, "junit", "OUT.xml", "--history", "GRADES.jsonl")
    assert status == 0
    assert victim.read_text() == "precious\n"
    assert (in_tmp / "OUT.xml").read_text().startswith("<?xml")
    assert not (in_tmp / "OUT.xml").is_symlink()
    leftovers = sorted(p.name for p in in_tmp.iterdir())
    assert leftovers == ["GRADES.jsonl", "OUT.xml", "OUT.xml.partial", "victim.txt"]


def test_a_junit_target_that_is_a_link_is_replaced_not_written_through(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    victim = in_tmp / "victim.txt"
    victim.write_text("precious\n")
    append_grade(a_grade(), in_tmp / "GRADES.jsonl")  # type: ignore[arg-type]
    (in_tmp / "OUT.xml").symlink_to(victim)
    assert run(capsys, "junit", "OUT.xml", "--history", "GRADES.jsonl")[0] == 0
    assert victim.read_text() == "precious\n"
    assert not (in_tmp / "OUT.xml").is_symlink()


@pytest.mark.parametrize("dangling", [True, False], ids=["dangling", "to-a-file"])
def test_a_linked_audit_store_is_refused_and_nothing_is_created_at_its_target(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, dangling: bool
) -> None:
    target = in_tmp / "elsewhere" / "created.db"
    target.parent.mkdir()
    if not dangling:
        target.write_bytes(b"")
    (in_tmp / ".cleo").mkdir()
    (in_tmp / ".cleo" / "audit.db").symlink_to(target)
    write_entries(in_tmp / "e.jsonl")
    status, out, err = run(capsys, "import", "e.jsonl")
    assert (status, out) == (2, "")
    assert err.startswith("cleo-grade: error: ")
    assert ".cleo/audit.db: is a symbolic link" in err and len(err.splitlines()) == 1
    assert target.exists() is not dangling
    if not dangling:
        assert target.read_bytes() == b""
    assert sorted(p.name for p in target.parent.iterdir()) == ([] if dangling else ["created.db"])


def test_a_planted_wal_link_is_refused_too(in_tmp: Path) -> None:
    victim = in_tmp / "victim"
    victim.write_text("precious\n")
    (in_tmp / "audit.db-wal").symlink_to(victim)
    with pytest.raises(StoreError, match=r"audit\.db-wal: is a symbolic link"):
        AuditStore(in_tmp / "audit.db")
    assert victim.read_text() == "precious\n"
    assert not (in_tmp / "audit.db").exists()


# -- item 12: someone else's database is never changed ---------------------------------------


def journal_mode(path: Path) -> str:
    conn = sqlite3.connect(path)
    try:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("via", ["env", "--db", "library"])
def test_a_cleo_project_database_as_the_store_is_refused_unchanged(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    in_tmp: Path,
    via: str,
) -> None:
    cleo = build_cleo_db(in_tmp / "proj" / ".cleo" / "cleo.db", idempotency_key=True)
    before = (digest(cleo), journal_mode(cleo), sorted(p.name for p in cleo.parent.iterdir()))
    assert before[1] == "delete"
    write_entries(in_tmp / "e.jsonl")
    if via == "library":
        with pytest.raises(StoreError, match="not a cleo-grade audit store"):
            AuditStore(cleo)
    else:
        if via == "env":
            monkeypatch.setenv("CLEO_AUDIT_DB", str(cleo))
            argv = ["import", "e.jsonl"]
        else:
            argv = ["import", "e.jsonl", "--db", str(cleo)]
        status, _, err = run(capsys, *argv)
        assert status == 2
        assert "not a cleo-grade audit store (a CLEO project database?)" in err
        assert len(err.splitlines()) == 1
    after = (digest(cleo), journal_mode(cleo), sorted(p.name for p in cleo.parent.iterdir()))
    assert after == before


def test_record_into_a_cleo_database_leaves_it_unchanged(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, in_tmp: Path
) -> None:
    cleo = build_cleo_db(in_tmp / "cleo.db", idempotency_key=False)
    before = digest(cleo)
    monkeypatch.setenv("CLEO_AUDIT_DB", str(cleo))
    monkeypatch.setenv("CLEO_SESSION_ID", SESSION)
    monkeypatch.setenv("CLEO_SESSION_GRADE", "true")
    status, _, err = run(capsys, "record", "tasks", "find")
    assert status == 2 and "not a cleo-grade audit store" in err
    assert (digest(cleo), journal_mode(cleo)) == (before, "delete")


# -- item 13: devices and FIFOs are refused, without blocking -------------------------------


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


#: Runs each case's command in turn in one fresh process (where a blocking open or an endless
#: read hits the timeout: a failure, never a hang), each in its own directory: prints each
#: one's exit status and what it wrote to stderr (a traceback included), as JSON.
REFUSALS = """
import contextlib, io, json, os, sys, traceback
from pytest_cleo_grade.cli import main

said = {}
for name, directory, argv in json.loads(sys.argv[1]):
    os.chdir(directory)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            status = 1
            traceback.print_exc()
    said[name] = [status, err.getvalue()]
print(json.dumps(said))
"""

FIFO_CASES = {
    "import": ["import", "{path}"],
    "import-otlp": ["import", "--format", "otlp", "{path}"],
    "import-claude-code": ["import", "--format", "claude-code", "{path}"],
    "grade-entries": ["grade", "--entries", "{path}", "--no-save"],
    "grade-cleo-db": ["grade", "s1", "--cleo-db", "{path}", "--no-save"],
    "list-db": ["list", "--db", "{path}"],
    "list-history": ["list", "--history", "{path}"],
    "junit-history": ["junit", "-", "--history", "{path}"],
    "rubric-file": [
        "grade",
        "--entries",
        "e.jsonl",
        "--rubric",
        "weighted",
        "--rubric-file",
        "{path}",
        "--no-save",
    ],
}


KINDS = ("fifo", "dev-zero")


@pytest.fixture(scope="module")
def refusals(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[int, str, str]]:
    """(exit status, stderr, the input's path) of every case of the test below, by case.

    Shared by the cases, which each start no process of their own: the commands run in one
    process, one after the other, each in a directory of its own holding its entries file
    and its FIFO (or naming /dev/zero)."""
    cases = []
    paths = {}
    for kind in KINDS:
        for case, argv in FIFO_CASES.items():
            directory = tmp_path_factory.mktemp(f"{kind}-{case}")
            path = _fifo(directory) if kind == "fifo" else Path("/dev/zero")
            write_entries(directory / "e.jsonl")
            paths[f"{kind}-{case}"] = str(path)
            argv = [part.replace("{path}", str(path)) for part in argv]
            cases.append((f"{kind}-{case}", str(directory), argv))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLEO_")}
    done = subprocess.run(
        [sys.executable, "-c", REFUSALS, json.dumps(cases)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert (done.returncode, done.stderr) == (0, "")
    said = json.loads(done.stdout)
    return {name: (status, err, paths[name]) for name, (status, err) in said.items()}


@pytest.mark.e2e
@pytest.mark.parametrize("case", list(FIFO_CASES))
@pytest.mark.parametrize("kind", KINDS)
def test_a_fifo_or_device_as_input_is_refused_in_one_line_without_blocking(
    refusals: dict[str, tuple[int, str, str]], case: str, kind: str
) -> None:
    status, err, path = refusals[f"{kind}-{case}"]
    assert status == 2, err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    assert "not a regular file" in err
    assert path in err


OUTPUT_CASES = {
    "junit": ["junit", "{path}", "--history", "GRADES.jsonl"],
    "baseline-save": ["baseline", "save", "{path}", "--history", "GRADES.jsonl"],
    "report-html": ["report", "--html", "{path}", "--db", "a.db", "--history", "GRADES.jsonl"],
}


@pytest.mark.parametrize("argv", list(OUTPUT_CASES.values()), ids=list(OUTPUT_CASES))
@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_an_output_that_is_a_fifo_or_a_directory_is_refused_and_left_as_it_was(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, argv: list[str], kind: str
) -> None:
    # Renaming a new file over the output replaced a FIFO or a device (as root, /dev/null for
    # the whole machine) with a regular file.
    path = _fifo(in_tmp) if kind == "fifo" else in_tmp / "out"
    if kind == "directory":
        path.mkdir()
    append_grade(a_grade(), in_tmp / "GRADES.jsonl")  # type: ignore[arg-type]
    status, _, err = run(capsys, *(p.replace("{path}", path.name) for p in argv))
    assert status == 2, err
    [line] = err.splitlines()
    assert f"{path.name}: " in line
    assert ("not a regular file" if kind == "fifo" else "directory") in line
    assert path.is_fifo() if kind == "fifo" else path.is_dir()


def test_a_warning_of_the_run_shows_a_paths_control_characters_escaped(
    pytester: pytest.Pytester,
) -> None:
    # The run's warnings (a report or history not written, a Langfuse server's refusal)
    # carry text from outside: an escape sequence in it recoloured or rewrote the terminal.
    fifo = pytester.path / "pipe\x1b[31m"
    os.mkfifo(fifo)
    pytester.makepyfile(
        "def test_a(graded_session):\n    graded_session.record('tasks', 'find', {'q': 'x'})\n"
    )
    result = pytester.runpytest(f"--cleo-grade-html={fifo.name}", "-W", "default")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*CleoGradeWarning: cleo-grade: HTML report *pipe\\x1b[[]31m: *"])
    assert "\x1b[31m" not in result.stdout.str()


def test_the_plugins_html_report_over_a_fifo_is_a_warning_and_the_fifo_stays(
    pytester: pytest.Pytester,
) -> None:
    fifo = _fifo(pytester.path)
    pytester.makepyfile(
        "def test_a(graded_session):\n    graded_session.record('tasks', 'find', {'q': 'x'})\n"
    )
    result = pytester.runpytest(f"--cleo-grade-html={fifo.name}", "-W", "default")
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(
        ["*CleoGradeWarning: cleo-grade: HTML report *pipe: not a regular file (a FIFO)"]
    )
    assert fifo.is_fifo()
