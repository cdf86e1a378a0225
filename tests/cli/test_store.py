"""The store side of ``cleo-grade``: grade SESSION_ID, --list, import, record, bad input."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.rubrics.cleo import EMPTY_SESSION_FLAG
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import read_grades

ENV_VARS = ("CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID", "CLEO_SESSION_ID", "CLEO_AUDIT_DB")


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def line(i: int, session: str = "s1", **extra: Any) -> str:
    ops = [("session", "list"), ("tasks", "find"), ("tasks", "show"), ("session", "end")]
    domain, operation = ops[i % len(ops)]
    data = {
        "timestamp": f"2026-03-01T12:00:{i:02d}.000Z",
        "sessionId": session,
        "domain": domain,
        "operation": operation,
        "result": {"success": True},
        "metadata": {"gateway": "cleo_query"},
        **extra,
    }
    return json.dumps(data)


def write_entries(path: Path, count: int = 4, session: str = "s1") -> Path:
    path.write_text("\n".join(line(i, session) for i in range(count)) + "\n")
    return path


def test_import_then_grade_session_id_from_the_default_store(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    write_entries(in_tmp / "e.jsonl")
    status, out, _ = run(capsys, "import", "e.jsonl")
    assert status == 0
    assert out.startswith(f"Imported 4 entries into {in_tmp / '.cleo' / 'audit.db'}")
    status, out, err = run(capsys, "s1")
    assert (status, err) == (0, "")
    assert "Score:      90/100  (90%, grade A)" in out
    assert "Entries:    4" in out
    (saved,) = read_grades(in_tmp / ".cleo" / "metrics" / "GRADES.jsonl")
    assert saved.total_score == 90
    with AuditStore(in_tmp / ".cleo" / "audit.db", read_only=True) as store:
        assert store.grades("s1") == [saved]


def test_grade_subcommand_with_db_json_and_no_save(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    write_entries(in_tmp / "e.jsonl")
    assert run(capsys, "import", "e.jsonl", "--db", "x/store.db")[0] == 0
    status, out, _ = run(capsys, "grade", "s1", "--db", "x/store.db", "--json", "--no-save")
    assert status == 0
    data = json.loads(out)
    assert (data["totalScore"], data["percent"], data["grade"]) == (90, 90, "A")
    assert not (in_tmp / ".cleo" / "metrics" / "GRADES.jsonl").exists()


def test_cleo_audit_db_variable_moves_the_cli_store(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEO_AUDIT_DB", str(in_tmp / "env.db"))
    write_entries(in_tmp / "e.jsonl")
    assert run(capsys, "import", "e.jsonl")[0] == 0
    assert (in_tmp / "env.db").is_file()
    assert run(capsys, "s1", "--no-save")[0] == 0


def test_a_session_the_store_never_saw_exits_four_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    write_entries(in_tmp / "e.jsonl")
    run(capsys, "import", "e.jsonl")
    store = in_tmp / ".cleo" / "audit.db"

    def grade_rows() -> int:
        with closing(sqlite3.connect(store)) as db, db:  # closed, not only committed
            tables = {row[0] for row in db.execute("select name from sqlite_master")}
            return (
                db.execute("select count(*) from grades").fetchone()[0] if "grades" in tables else 0
            )

    before = grade_rows()
    status, out, err = run(capsys, "grade", "session-typo")
    assert (status, out) == (4, "")
    assert err.count("\n") == 1
    assert err.startswith("cleo-grade grade: session session-typo not found")
    assert not (in_tmp / ".cleo" / "metrics" / "GRADES.jsonl").exists()
    assert grade_rows() == before


def test_a_session_without_entries_grades_zero_with_allow_empty_is_persisted_and_warned(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    write_entries(in_tmp / "e.jsonl")
    run(capsys, "import", "e.jsonl")
    status, out, err = run(capsys, "s1-missing", "--allow-empty")
    assert status == 0
    assert "Score:      0/100  (0%, grade F)" in out
    assert EMPTY_SESSION_FLAG in out
    assert err == "cleo-grade: warning: no audit entries found for session s1-missing\n"
    (saved,) = read_grades(in_tmp / ".cleo" / "metrics" / "GRADES.jsonl")
    assert (saved.session_id, saved.total_score, saved.flags) == (
        "s1-missing",
        0,
        [EMPTY_SESSION_FLAG],
    )


def test_fail_under_turns_a_low_store_grade_into_exit_one(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    write_entries(in_tmp / "e.jsonl")
    run(capsys, "import", "e.jsonl")
    status, _, err = run(capsys, "s1", "--fail-under", "A", "--no-save")
    assert status == 0
    status, _, err = run(capsys, "s1", "--fail-under", "95", "--no-save")
    assert status == 1
    assert "below 95%" in err


def test_list_reads_history_or_the_stores_grades_table(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    write_entries(in_tmp / "e.jsonl")
    run(capsys, "import", "e.jsonl")
    run(capsys, "s1", "--history", "h.jsonl")
    for argv in (["--list", "--history", "h.jsonl"], ["--list", "--db", ".cleo/audit.db"]):
        status, out, _ = run(capsys, *argv)
        assert status == 0
        header, row = out.splitlines()
        assert header.split() == ["SESSION", "SCORE", "PERCENT", "GRADE", "TIMESTAMP", "FLAGS"]
        assert row.split()[:4] == ["s1", "90/100", "90%", "A"]


def test_grading_without_a_store_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = run(capsys, "s1")
    assert (status, out) == (2, "")
    assert err.startswith("cleo-grade grade: no audit store at ")
    assert "--db PATH" in err


def test_grade_from_a_cleo_database_is_read_only(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    from tests.store.test_import import SESSION, build_cleo_db

    cleo = build_cleo_db(in_tmp / "proj" / ".cleo" / "tasks.db", idempotency_key=False)
    before = hashlib.sha256(cleo.read_bytes()).hexdigest()
    status, out, _ = run(capsys, "grade", SESSION, "--cleo-db", "proj", "--json")
    assert status == 0
    assert json.loads(out)["entryCount"] == 4
    assert hashlib.sha256(cleo.read_bytes()).hexdigest() == before
    assert not (in_tmp / ".cleo" / "audit.db").exists()


def test_import_of_a_cleo_project_directory(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    from tests.store.test_import import SESSION, build_cleo_db

    build_cleo_db(in_tmp / "proj" / ".cleo" / "cleo.db", idempotency_key=True)
    status, out, _ = run(capsys, "import", "proj", "--session-id", SESSION)
    assert status == 0
    assert out.startswith("Imported 4 entries from proj/.cleo/cleo.db")
    status, out, _ = run(capsys, "import", "proj", "--session-id", SESSION)
    assert "Imported 0 entries" in out
    assert "(4 already there)" in out


@pytest.mark.parametrize("session", [None, "session-nobody"])
def test_a_cleo_database_import_that_fails_creates_no_store(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, session: str | None
) -> None:
    from tests.store.test_import import build_cleo_db

    cleo = build_cleo_db(in_tmp / "proj" / ".cleo" / "cleo.db", idempotency_key=True)
    conn = sqlite3.connect(cleo)
    with conn:
        conn.execute("UPDATE audit_log SET timestamp = 'yesterday'")
    conn.close()
    argv = ["import", "proj", *(["--session-id", session] if session else [])]
    status, out, err = run(capsys, *argv)
    assert (status, out, len(err.splitlines())) == (2, "", 1)
    assert not (in_tmp / ".cleo").exists()


def test_a_bad_line_aborts_import_with_its_line_and_creates_nothing(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    (in_tmp / "e.jsonl").write_text(line(0) + "\n" + line(1) + "\n{broken\n" + line(3) + "\n")
    status, out, err = run(capsys, "import", "e.jsonl")
    assert (status, out) == (2, "")
    assert err.startswith("cleo-grade: error: e.jsonl:3: invalid JSON")
    assert len(err.splitlines()) == 1
    assert not (in_tmp / ".cleo").exists()


def test_import_of_an_existing_store_keeps_it_unchanged_on_a_bad_file(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    write_entries(in_tmp / "good.jsonl")
    run(capsys, "import", "good.jsonl")
    (in_tmp / "bad.jsonl").write_text(line(0, "s2") + "\n" + line(1, "s2", result={}) + "\n")
    status, _, err = run(capsys, "import", "bad.jsonl")
    assert status == 2
    assert "bad.jsonl:2: result.success" in err
    with AuditStore(in_tmp / ".cleo" / "audit.db", read_only=True) as store:
        assert store.count() == 4


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["import", "missing.jsonl"], "missing.jsonl: no such file", id="missing"),
        pytest.param(["import", "junk.db"], "junk.db", id="import-junk"),
        pytest.param(["import", "empty.jsonl"], "empty", id="import-empty"),
        pytest.param(["s1", "--db", "junk.db"], "not a usable SQLite database", id="grade-junk-db"),
        pytest.param(["grade", "s1", "--cleo-db", "junk.db"], "not a usable", id="cleo-junk"),
        pytest.param(["grade", "s1", "--cleo-db", "nowhere"], "no CLEO database", id="cleo-none"),
        pytest.param(["grade", "s1", "--db", "a", "--cleo-db", "b"], "cannot be combined",
                     id="both-dbs"),
        pytest.param(["--list", "--db", "junk.db"], "not a usable SQLite database", id="list-junk"),
        pytest.param(["record", "tasks"], "required", id="record-missing-operation"),
        pytest.param(["record", "a", "b", "--params", "{"], "--params is not valid JSON",
                     id="record-bad-json"),
        pytest.param(["record", "a", "b", "--params", "[]"], "must be a JSON object",
                     id="record-not-object"),
        pytest.param(["record", "a", "b", "--params", '{"x": NaN}'], "NaN", id="record-nan"),
        pytest.param(["record", "a", "b", "--exit-code", "x"], "invalid int", id="record-exit"),
        pytest.param(["record", "a", "b", "--duration", "-1"], "--duration", id="record-dur"),
    ],
)  # fmt: skip
def test_malformed_input_to_every_store_command_is_one_line_and_exit_two(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, argv: list[str], message: str
) -> None:
    (in_tmp / "junk.db").write_bytes(b"SQLite format 3\x00" + b"\x07" * 2000)
    (in_tmp / "empty.jsonl").write_text("")
    status, out, err = run(capsys, *argv)
    assert status == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err
    assert "Traceback" not in err


def test_record_without_a_session_warns_and_records_nothing(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    status, _, err = run(capsys, "record", "tasks", "find")
    assert status == 0
    assert "no active graded session" in err
    assert not (in_tmp / ".cleo").exists()


@pytest.mark.e2e
def test_record_from_a_shell_lands_in_the_graded_session(in_tmp: Path) -> None:
    db = in_tmp / "store" / "audit.db"
    env = {
        **os.environ,
        "CLEO_SESSION_GRADE": "true",
        "CLEO_SESSION_GRADE_ID": "session-9-abcdef",
        "CLEO_SESSION_ID": "session-9-abcdef",
        "CLEO_AUDIT_DB": str(db),
    }
    script = (
        "cleo-grade record session list --gateway cleo_query && "
        'cleo-grade record tasks show --params \'{"taskId": "T4"}\' --exit-code 4 '
        "--error 'not found' --duration 2.5 && "
        'cleo-grade record tasks find --params \'{"query": "T4"}\' && '
        # As an entry's "params": null reads: no parameters (it was "got NoneType").
        "cleo-grade record session end --params null"
    )
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    subprocess.run(["sh", "-c", script], check=True, env=env)
    with AuditStore(db, read_only=True) as store:
        entries = store.session_entries("session-9-abcdef")
    assert [e.operation for e in entries] == ["list", "show", "find", "end"]
    assert entries[3].params == {}
    show = entries[1]
    assert (show.result.success, show.result.exit_code, show.result.duration) == (False, 4, 2.5)
    assert (show.error, show.metadata.source, show.params) == ("not found", "cli", {"taskId": "T4"})


def test_record_outside_grade_mode_keeps_only_mutations(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEO_SESSION_ID", "plain")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(in_tmp / "a.db"))
    status, _, err = run(capsys, "record", "tasks", "find", "--gateway", "cleo_query")
    # Said, not dropped silently (a tasks.add with no --gateway was dropped without a word).
    assert status == 0
    assert err.startswith("cleo-grade: warning: not recorded: outside grade mode")
    assert run(capsys, "record", "tasks", "add", "--gateway", "cleo_mutate")[0] == 0
    with AuditStore(in_tmp / "a.db", read_only=True) as store:
        assert [e.operation for e in store.session_entries("plain")] == ["add"]


def test_record_names_the_variable_that_is_missing(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEO_SESSION_ID", "s")
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    status, _, err = run(capsys, "record", "tasks", "find")
    assert status == 0
    assert "(CLEO_AUDIT_DB is not set); nothing recorded" in err


#: Holds the store's write lock from another process until its stdin closes: a lock held
#: by the test's own process would be dropped by its probes (closing any descriptor of a file
#: drops the process's POSIX locks on it, SQLite's included).
LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def _claimed(db: Path) -> bool:
    """Whether another process has the store open as a writer: each holds a shared flock on
    the file from before SQLite opens it (store._store._claim_file)."""
    fd = os.open(db, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def _blocked_in_its_wait(pid: int) -> bool:
    """Whether the process is sleeping (Linux; elsewhere assumed once it holds the store)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "S"


def _wait_for(condition: Callable[[], bool], what: str, child: subprocess.Popen[str]) -> None:
    # Generous: on a loaded machine the child's start alone took over a second.
    deadline = time.monotonic() + 60
    while not condition():
        assert child.poll() is None, f"the command ended before {what}"
        assert time.monotonic() < deadline, f"no {what} within 60 s"
        time.sleep(0.005)  # sleep-ok: a poll interval; what is waited for is the condition


@pytest.mark.e2e
@pytest.mark.parametrize("store", ["current", "rollback-journal"])
def test_record_stopped_while_waiting_for_a_lock_writes_nothing(in_tmp: Path, store: str) -> None:
    # SQLite's busy wait runs no signal handler: SIGTERM was handled only once the lock was
    # free, after the entry was written, and the command then said "terminated" (143). A
    # current store is written directly, any other by AuditStore (which here waits to switch
    # it to WAL): both wait in slices.
    db = in_tmp / "a.db"
    with AuditStore(db):
        pass  # the store exists
    if store == "rollback-journal":
        with sqlite3.connect(db) as conn:
            conn.execute("PRAGMA journal_mode = DELETE")
        conn.close()
    env = {
        **os.environ,
        "CLEO_SESSION_GRADE": "true",
        "CLEO_SESSION_GRADE_ID": "s",
        "CLEO_AUDIT_DB": str(db),
    }
    cli = Path(sys.executable).parent / "cleo-grade"
    with subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as holder:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline() == "held\n"
        with subprocess.Popen(
            [str(cli), "record", "tasks", "find"], env=env, stderr=subprocess.PIPE, text=True
        ) as record:
            try:
                # Holding the store, the command has its SIGTERM handler; asleep, it waits
                # for the lock (the signal must land in that wait, not before it).
                _wait_for(lambda: _claimed(db), "hold on the store", record)
                _wait_for(lambda: _blocked_in_its_wait(record.pid), "wait for the lock", record)
                record.send_signal(signal.SIGTERM)
                # It ends while the lock is still held (it used to wait for the lock first,
                # BUSY_TIMEOUT_S: 60 s): an unwinding command needs far less than 30 s.
                _, err = record.communicate(timeout=30)
            finally:
                if record.poll() is None:
                    record.kill()
        holder.stdin.close()  # the holder rolls back and ends
    assert holder.returncode == 0
    assert (record.returncode, err) == (143, "cleo-grade: terminated\n")
    with AuditStore(db, read_only=True) as check:
        assert check.session_entries("s") == []


def test_a_store_on_an_unwritable_path_is_a_clear_cli_error(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (in_tmp / "file").write_text("x")
    monkeypatch.setenv("CLEO_SESSION_GRADE", "true")
    monkeypatch.setenv("CLEO_SESSION_ID", "s")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(in_tmp / "file" / "audit.db"))
    status, _, err = run(capsys, "record", "tasks", "find")
    assert status == 2
    assert "cannot create directory" in err
    write_entries(in_tmp / "e.jsonl")
    status, _, err = run(capsys, "import", "e.jsonl")
    assert status == 2
    assert "cannot create directory" in err


def test_a_cleo_database_that_is_not_one_is_refused(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    with sqlite3.connect(in_tmp / "other.db") as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    status, _, err = run(capsys, "grade", "s1", "--cleo-db", "other.db")
    assert status == 2
    assert "no audit_log table" in err


def test_an_exit_code_beyond_64_bits_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEO_SESSION_GRADE", "true")
    monkeypatch.setenv("CLEO_SESSION_ID", "s")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(in_tmp / "a.db"))
    status, _, err = run(capsys, "record", "a", "b", "--exit-code", str(2**70))
    assert status == 2
    bound = "less than or equal to 9223372036854775807"
    assert err == f"cleo-grade: error: --exit-code: Input should be {bound}\n"
    (in_tmp / "e.jsonl").write_text(line(0, result={"success": False, "exitCode": 2**70}))
    status, _, err = run(capsys, "import", "e.jsonl")
    assert status == 2
    # Refused where it is read, naming the line and the field (no store is created).
    assert err == f"cleo-grade: error: e.jsonl:1: result.exitCode: Input should be {bound}\n"
    assert not (in_tmp / ".cleo").exists()


@pytest.fixture
def recording_db(in_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Grade mode for session ``s``, recording into ``a.db`` (not created until written)."""
    monkeypatch.setenv("CLEO_SESSION_GRADE", "true")
    monkeypatch.setenv("CLEO_SESSION_GRADE_ID", "s")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(in_tmp / "a.db"))
    return in_tmp / "a.db"


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["tasks", "find", "--source", "cli\udcff"], "--source"),
        (["tasks", "find", "--error", "\udcffbad"], "--error"),
        (["tasks", "fi\udcffnd"], "OPERATION"),
    ],
)
def test_record_text_that_is_not_utf8_names_the_argument(
    capsys: pytest.CaptureFixture[str],
    recording_db: Path,
    argv: list[str],
    option: str,
) -> None:
    # A byte the shell passed that is not UTF-8 reaches Python as a lone surrogate; the store
    # refused it naming the database, not the argument.
    status, out, err = run(capsys, "record", *argv)
    assert (status, out, err) == (2, "", f"cleo-grade: error: {option}: not UTF-8 text\n")
    assert not recording_db.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["a", "b", "--exit-code", str(2**63)],
                     "--exit-code: Input should be less than or equal to", id="exit-code"),
        pytest.param(["", "b"], "DOMAIN: String should have at least 1 character", id="domain"),
        pytest.param(["a", ""], "OPERATION: String should have at least 1 character",
                     id="operation"),
        pytest.param(["", ""], "DOMAIN: String should have at least 1 character; "
                     "OPERATION: String should have at least 1 character", id="both"),
        pytest.param(["a", "b", "--gateway", "cleo-query"],
                     "--gateway: 'cleo-query' is not one of", id="gateway"),
    ],
)  # fmt: skip
def test_record_errors_name_the_argument_not_the_entry_field(
    capsys: pytest.CaptureFixture[str],
    recording_db: Path,
    argv: list[str],
    message: str,
) -> None:
    # They named the model's fields ("result.exit_code"), the call as "." when DOMAIN and
    # OPERATION were empty, and hid the second error behind "(and 1 more error)".
    status, out, err = run(capsys, "record", *argv)
    assert (status, out) == (2, "")
    assert err.startswith(f"cleo-grade: error: {message}") and err.count("\n") == 1
    assert "result." not in err and "more error" not in err
    assert not recording_db.exists()


def test_a_command_leaves_the_callers_sigterm_handler_in_place(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    # main() ends a command on SIGTERM as on Ctrl-C (tests/store/test_import_workers.py), with a
    # handler of its own that must not outlive the command in a program that called it.
    (in_tmp / "e.jsonl").write_text(line(0) + "\n")

    def callers(signum: int, frame: object) -> None:
        raise AssertionError("not raised: only the handler's identity is checked")

    previous = signal.signal(signal.SIGTERM, callers)
    try:
        assert run(capsys, "import", "e.jsonl")[0] == 0
        assert signal.getsignal(signal.SIGTERM) is callers
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_a_command_runs_outside_the_main_thread(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    # Signal handlers can only be set from the main thread: elsewhere SIGTERM keeps its
    # meaning and the command still runs.
    (in_tmp / "e.jsonl").write_text(line(0) + "\n")
    statuses: list[int] = []
    worker = threading.Thread(target=lambda: statuses.append(main(["import", "e.jsonl"])))
    worker.start()
    worker.join(timeout=60)
    assert statuses == [0]
    assert capsys.readouterr().out.startswith("Imported 1 entries into ")


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_import_format_json_and_jsonl_read_an_entries_file(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, fmt: str
) -> None:
    write_entries(in_tmp / "e.jsonl")
    rows = [json.loads(line(i, "s2")) for i in range(3)]
    (in_tmp / "a.json").write_text(json.dumps(rows))
    assert run(capsys, "import", "--format", fmt, "e.jsonl")[0] == 0
    status, out, _ = run(capsys, "import", "--format", fmt, "a.json")
    assert (status, out.split(" into ")[0]) == (0, "Imported 3 entries")
    with AuditStore(in_tmp / ".cleo" / "audit.db") as store:
        assert (store.count("s1"), store.count("s2")) == (4, 3)


def test_import_format_cleo_db_reads_a_cleo_project_and_an_entries_format_refuses_one(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    db = in_tmp / "project" / ".cleo" / "cleo.db"
    db.parent.mkdir(parents=True)
    with AuditStore(db) as cleo:  # a database with CLEO's audit_log table
        cleo.append_many(_entries_of(write_entries(in_tmp / "c.jsonl", session="c1")))
    status, out, _ = run(capsys, "import", "--format", "cleo-db", "project")
    expected = f"Imported 4 entries from {Path('project/.cleo/cleo.db')}"
    assert status == 0 and out.startswith(expected)
    status, _, err = run(capsys, "import", "--format", "jsonl", "project")
    assert status == 2
    assert err.strip() == (
        "cleo-grade import: project: --format jsonl reads an audit entries "
        "file, and this is a CLEO database or a directory (use --format cleo-db)"
    )
    status, _, err = run(capsys, "import", "--format", "cleo-db", "c.jsonl")
    assert status == 2 and len(err.strip().splitlines()) == 1 and "c.jsonl" in err


def _entries_of(path: Path) -> list[Any]:
    from pytest_cleo_grade.store.sources import load_entries_file

    return load_entries_file(path)


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["list", "--db", "/"], None, "cleo-grade: error: /: a directory, not an audit store"),
        (["report", "--html", "r.html", "--db", "."], None, "--db .: a directory"),
        (["import", "in.jsonl", "--db", "."], None, "--db .: a directory"),
        (["report", "--html", "r.html"], ".", "CLEO_AUDIT_DB .: a directory"),
        (["report", "--html", "r.html", "--db", ""], None, "--db: an empty path"),
    ],
)
def test_a_store_path_naming_no_file_is_one_line_and_status_two(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    in_tmp: Path,
    argv: list[str],
    env: str | None,
    expected: str,
) -> None:
    # "." and "/" have no last component: pathlib raised, and the command was a traceback.
    (in_tmp / "in.jsonl").write_text(line(0) + "\n", encoding="utf-8")
    assert run(capsys, "grade", "--entries", "in.jsonl")[0] == 0  # a history to report
    if env is not None:
        monkeypatch.setenv("CLEO_AUDIT_DB", env)
    status, out, err = run(capsys, *argv)
    assert (status, out) == (2, "")
    assert err.count("\n") == 1 and expected in err
    assert not (in_tmp / "r.html").exists()


@pytest.mark.e2e
def test_a_command_started_with_its_stdout_closed_ends_without_a_traceback(
    in_tmp: Path,
) -> None:
    # sys.stdout is None then: the final flush raised AttributeError (a traceback, exit 1,
    # "below the threshold") after the grade had been saved.
    (in_tmp / "e.jsonl").write_text(line(0) + "\n")
    cli = Path(sys.executable).parent / "cleo-grade"
    done = subprocess.run(
        ["sh", "-c", f"'{cli}' grade --entries e.jsonl >&-"],
        cwd=in_tmp,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert len((in_tmp / ".cleo" / "metrics" / "GRADES.jsonl").read_text().splitlines()) == 1


def test_an_empty_history_path_is_a_usage_error_not_the_default(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    # `--history ''` (an unset variable in a CI script) appended to the default history.
    (in_tmp / "e.jsonl").write_text(line(0) + "\n")
    status, out, err = run(capsys, "grade", "--entries", "e.jsonl", "--history", "")
    assert (status, out) == (2, "")
    assert err == "cleo-grade: error: --history: an empty path (name a grade history)\n"
    assert not (in_tmp / ".cleo").exists()
