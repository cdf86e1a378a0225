"""No data loss: concurrent recorders, concurrent history appends, SIGKILL, a full disk."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import read_grades
from tests.entries import entry
from tests.store.test_import import SESSION as CLEO_SESSION
from tests.store.test_import import build_cleo_db

# Each test is about processes: concurrent writers, one killed, a file size limit, another user.
pytestmark = pytest.mark.e2e

SESSION = "session-1772366400000-c0ffee"


def grade_env(db: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CLEO_SESSION_GRADE": "true",
        "CLEO_SESSION_GRADE_ID": SESSION,
        "CLEO_SESSION_ID": SESSION,
        "CLEO_AUDIT_DB": str(db),
    }


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_four_processes_recording_two_thousand_entries_each_lose_nothing(
    tmp_path: Path,
) -> None:
    # The store does not exist yet: all four processes race to create and migrate it.
    db = tmp_path / "new" / "audit.db"
    recorder = python(
        """
        import sys, warnings
        from pytest_cleo_grade.capture import audit
        warnings.simplefilter("error")  # a lost entry would only be a warning: make it fatal
        worker = int(sys.argv[1])
        for i in range(2000):
            assert audit.record("tasks", "find", {"w": worker, "i": i}) is not None
        """
    )
    procs = [
        subprocess.Popen([*recorder, str(w)], env=grade_env(db), stderr=subprocess.PIPE, text=True)
        for w in range(4)
    ]
    errors = [p.communicate(timeout=240)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], errors
    assert not any("locked" in e for e in errors)
    with AuditStore(db, read_only=True) as store:
        entries = store.session_entries(SESSION)
        assert store.integrity_check() == "ok"
    assert len(entries) == 8000
    seen = {(e.params["w"], e.params["i"]) for e in entries}
    assert seen == {(w, i) for w in range(4) for i in range(2000)}
    # Each writer's own entries keep their order.
    for w in range(4):
        assert [e.params["i"] for e in entries if e.params["w"] == w] == list(range(2000))


def test_concurrent_history_appends_leave_every_line_intact(tmp_path: Path) -> None:
    history = tmp_path / "metrics" / "GRADES.jsonl"
    writer = python(
        """
        import sys
        from datetime import UTC, datetime
        from pytest_cleo_grade.store.history import append_grade
        from pytest_cleo_grade.rubrics.cleo import grade_entries
        worker = sys.argv[1]
        # A long task id makes each line several kB, beyond any atomic-write guarantee.
        for i in range(150):
            result = grade_entries([], session_id=f"{worker}-{i}", task_id="T" * 6000,
                                   now=datetime(2026, 3, 1, tzinfo=UTC))
            append_grade(result, sys.argv[2])
        """
    )
    procs = [subprocess.Popen([*writer, f"w{w}", str(history)]) for w in range(4)]
    assert [p.wait(timeout=240) for p in procs] == [0, 0, 0, 0]
    lines = history.read_text().splitlines()
    assert len(lines) == 600
    assert all(json.loads(text)["taskId"] == "T" * 6000 for text in lines)
    assert len({g.session_id for g in read_grades(history)}) == 600


def test_a_recorder_killed_mid_loop_leaves_a_sound_store_with_every_returned_entry(
    tmp_path: Path,
) -> None:
    db = tmp_path / "audit.db"
    recorder = python(
        """
        import sys
        from pytest_cleo_grade.capture import audit
        i = 0
        while True:
            audit.record("tasks", "add", {"i": i, "title": "x" * 500})
            print(i, flush=True)  # only after record() returned: the entry is durable
            i += 1
        """
    )
    with subprocess.Popen(recorder, env=grade_env(db), stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        acknowledged = -1
        for text in proc.stdout:
            acknowledged = int(text)
            if acknowledged >= 300:
                break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        # The recorder ran on while we stopped reading: its later acknowledgements are still
        # in the pipe, and each of them promised a durable entry too.
        for text in proc.stdout:
            acknowledged = int(text)
    assert proc.returncode == -signal.SIGKILL
    with AuditStore(db) as store:
        assert store.integrity_check() == "ok"
        stored = [e.params["i"] for e in store.session_entries(SESSION)]
    assert stored[: acknowledged + 1] == list(range(acknowledged + 1))
    # At most the one call in flight when the kill came may also have landed.
    assert len(stored) in (acknowledged + 1, acknowledged + 2)


def _fsize_limited(limit: int) -> object:
    import resource

    def limit_file_size() -> None:
        # Writing past the limit then fails with EFBIG (a full disk, as SQLite sees it).
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_file_size


def _no_bytecode(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a process under :func:`_fsize_limited`: it writes no bytecode.

    Python writing a module's cache past the limit left a cut ``.pyc`` beside the source
    (the header fits in 16 bytes, the code does not), and every later process that imported
    the module failed with EOFError until the file was removed.
    """
    return {**(os.environ if env is None else env), "PYTHONDONTWRITEBYTECODE": "1"}


def test_a_full_disk_is_a_warning_from_the_library_and_nothing_recorded_is_lost(
    tmp_path: Path,
) -> None:
    db = tmp_path / "audit.db"
    AuditStore(db).close()
    recorder = python(
        """
        import warnings
        from pytest_cleo_grade.capture import audit
        from pytest_cleo_grade.core.errors import CleoGradeWarning
        kept = 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(400):
                if audit.record("tasks", "add", {"i": i, "pad": "p" * 2000}) is not None:
                    kept += 1
        lost = [w for w in caught if issubclass(w.category, CleoGradeWarning)]
        print(kept, len(lost), str(lost[0].message) if lost else "")
        """
    )
    done = subprocess.run(
        recorder,
        env=_no_bytecode(grade_env(db)),
        capture_output=True,
        text=True,
        preexec_fn=_fsize_limited(256 * 1024),  # type: ignore[arg-type]
        timeout=240,
    )
    assert done.returncode == 0, done.stderr
    kept_text, lost_text, message = done.stdout.strip().split(" ", 2)
    kept, lost = int(kept_text), int(lost_text)
    assert kept > 0
    assert lost > 0
    assert kept + lost == 400
    assert "not recorded" in message
    with AuditStore(db) as store:
        assert store.integrity_check() == "ok"
        assert store.count(SESSION) == kept


def test_a_full_disk_is_a_clear_error_from_the_cli(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    entries = tmp_path / "big.jsonl"
    entry = {
        "timestamp": "2026-03-01T12:00:00Z",
        "sessionId": "s",
        "domain": "tasks",
        "operation": "add",
        "params": {"pad": "p" * 4000},
        "result": {"success": True},
    }
    entries.write_text("\n".join(json.dumps(entry) for _ in range(200)) + "\n")
    AuditStore(db).close()
    cli = python("from pytest_cleo_grade.cli import main; raise SystemExit(main())")
    done = subprocess.run(
        [*cli, "import", str(entries), "--db", str(db)],
        env=_no_bytecode(),
        capture_output=True,
        text=True,
        preexec_fn=_fsize_limited(256 * 1024),  # type: ignore[arg-type]
        timeout=240,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("cleo-grade: error: ")
    assert "cannot write" in done.stderr
    assert "Traceback" not in done.stderr
    with AuditStore(db) as store:
        assert store.integrity_check() == "ok"
        assert store.count() == 0  # all or nothing


# -- reading what the user may not write -------------------------------------------------------

SETPRIV = shutil.which("setpriv")
#: Tests run as root, which bypasses permissions: these commands run as nobody instead.
AS_NOBODY = [SETPRIV or "setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
CLI = python("from pytest_cleo_grade.cli import main; raise SystemExit(main())")
#: Exit status 2 when the directory cannot be read, 1 when it can be written, else 0.
PROBE = python(
    """
    import os, sys
    readable = os.access(sys.argv[1], os.R_OK | os.X_OK)
    raise SystemExit(2 if not readable else int(os.access(sys.argv[1], os.W_OK)))
    """
)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory the user nobody can reach (not under tmp_path, which is private to root)."""
    if SETPRIV is None:
        pytest.skip("setpriv is missing: cannot run a command as a user without write access")
    if os.geteuid() != 0:
        pytest.skip("not root: setpriv cannot switch to another user")
    ran = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", "pass"], capture_output=True, text=True, timeout=60
    )
    if ran.returncode != 0:
        # A pyenv Python under /root loads its shared library from a directory nobody may
        # not read: the command cannot run as another user at all.
        reason = (ran.stderr.strip().splitlines() or ["no message"])[-1]
        pytest.skip(f"this Python cannot run as user nobody here: {reason}")
    root = Path(tempfile.mkdtemp(prefix="cleo-grade-perm-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root)


def read_only_to_nobody(directory: Path) -> list[str]:
    """Make ``directory`` readable but not writable to nobody; returns what it holds."""
    for path in directory.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    directory.chmod(0o555)
    probe = subprocess.run([*AS_NOBODY, *PROBE, str(directory)], timeout=60)
    if probe.returncode == 2:
        pytest.skip(f"nobody cannot reach {directory} (a private temporary directory?)")
    if probe.returncode != 0:
        pytest.skip("nobody may write a mode 555 directory here: permissions are not enforced")
    return sorted(p.name for p in directory.iterdir())


def cli_as_nobody(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AS_NOBODY, *CLI, *args],
        cwd=cwd,
        env={**os.environ, "HOME": str(cwd)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_cleo_wal_database_the_user_cannot_write_beside_is_graded_and_imported(
    shared: Path,
) -> None:
    cleo_db = build_cleo_db(shared / "proj" / ".cleo" / "tasks.db", idempotency_key=True, wal=True)
    (shared / "out").mkdir(mode=0o777)
    (shared / "out").chmod(0o777)
    held = read_only_to_nobody(cleo_db.parent)
    graded = cli_as_nobody(shared, "grade", CLEO_SESSION, "--cleo-db", "proj", "--no-save")
    assert (graded.returncode, graded.stderr) == (0, "")
    assert "Entries:    4" in graded.stdout
    imported = cli_as_nobody(shared, "import", "proj", "--db", "out/audit.db")
    assert (imported.returncode, imported.stderr) == (0, "")
    assert imported.stdout.startswith("Imported 5 entries")
    assert sorted(p.name for p in cleo_db.parent.iterdir()) == held


def test_a_wal_the_user_cannot_read_without_writing_beside_it_is_never_skipped(
    shared: Path,
) -> None:
    # A CLEO process wrote a row that is still only in the log (no checkpoint yet); a copy
    # of the database with its -wal but without the -shm, in a directory nobody may write.
    source = build_cleo_db(shared / "src" / "tasks.db", idempotency_key=False, wal=True)
    target = shared / "proj" / ".cleo"
    target.mkdir(parents=True)
    conn = sqlite3.connect(source)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    with conn:
        conn.execute(
            "INSERT INTO audit_log (id, action, task_id, session_id, success) "
            f"VALUES ('r6', 'session.end', 'system', '{CLEO_SESSION}', 1)"
        )
    for name in ("tasks.db", "tasks.db-wal"):
        shutil.copyfile(source.with_name(name), target / name)
    conn.close()
    assert (target / "tasks.db-wal").stat().st_size > 0
    held = read_only_to_nobody(target)
    done = cli_as_nobody(shared, "grade", CLEO_SESSION, "--cleo-db", "proj", "--no-save")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("cleo-grade: error: ")
    assert "tasks.db-wal may hold entries not yet in the database" in done.stderr
    assert sorted(p.name for p in target.iterdir()) == held


def test_a_store_the_user_cannot_write_beside_is_graded_shown_and_listed(
    shared: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = shared / "st" / "audit.db"
    entries = shared / "e.jsonl"
    entries.write_text(
        json.dumps(
            {
                "timestamp": "2026-03-01T12:00:00Z",
                "sessionId": SESSION,
                "domain": "session",
                "operation": "list",
                "result": {"success": True},
            }
        )
        + "\n"
    )
    assert main(["import", str(entries), "--db", str(db)]) == 0  # as root, here
    capsys.readouterr()
    held = read_only_to_nobody(db.parent)
    assert held == ["audit.db"]
    out = {}
    for args in (
        ["grade", SESSION, "--no-save"],
        ["show", SESSION],
        ["list"],
    ):
        done = cli_as_nobody(shared, *args, "--db", str(db))
        assert (args, done.returncode, done.stderr) == (args, 0, "")
        out[args[0]] = done.stdout
    assert "Entries:    1" in out["grade"]
    assert sorted(p.name for p in db.parent.iterdir()) == held


def test_a_store_file_the_user_cannot_write_says_cannot_write_once(shared: Path) -> None:
    db = shared / "w" / "audit.db"
    AuditStore(db).close()
    db.parent.chmod(0o777)
    db.chmod(0o444)
    entries = shared / "e.jsonl"
    entries.write_text(
        '{"timestamp": "2026-03-01T12:00:00Z", "sessionId": "s", "domain": "tasks", '
        '"operation": "find", "result": {"success": true}}\n'
    )
    done = cli_as_nobody(shared, "import", str(entries), "--db", str(db))
    if done.returncode == 0:
        pytest.skip("nobody may write a mode 444 file here: permissions are not enforced")
    assert done.returncode == 2
    assert f"{db}: cannot write (attempt to write a readonly database)" in done.stderr
    assert "cannot write: cannot write" not in done.stderr


def test_ctrl_c_ends_a_store_open_waiting_for_a_file_held_exclusively(tmp_path: Path) -> None:
    # An import undoing itself holds the store file's flock exclusively while it checks the
    # file is unused; an operator's `flock -x` may hold it for longer. A store opening then
    # waits, and Ctrl-C (or a CI job's SIGTERM) must still end the wait.
    import fcntl

    path = tmp_path / ".cleo" / "audit.db"
    AuditStore(path).close()
    code = textwrap.dedent(
        f"""
        import signal, sys
        from pytest_cleo_grade.store import AuditStore, _store as core
        # As a terminal gives it: a runner started in the background (xdist's workers, a
        # shell's `&`) hands its children SIGINT ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)

        claim = core._claim_file
        said = []

        def claim_saying_when_it_waits(path):
            claimed = claim(path)
            if claimed == core._BUSY and not said:  # from now on the open waits
                print("waiting", flush=True)
                said.append(True)
            return claimed

        core._claim_file = claim_saying_when_it_waits
        print("opening", flush=True)
        try:
            AuditStore({str(path)!r})
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(130)
        """
    )
    with open(path, "rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        child = subprocess.Popen(
            [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert child.stdout is not None
            assert child.stdout.readline() == "opening\n"
            assert child.stdout.readline() == "waiting\n"
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=60)
        finally:
            child.kill()
    assert (child.returncode, out, err) == (130, "interrupted\n", "")


def test_a_healthy_store_is_read_on_a_full_disk(tmp_path: Path) -> None:
    # The read-only commands need a -shm beside a WAL database: on a full disk SQLite could
    # create it but not grow it (SQLITE_IOERR_SHMSIZE), and `grade --no-save`, `show` and
    # `list` failed with "disk I/O error" on a store with nothing left in any log.
    db = tmp_path / "audit.db"
    with AuditStore(db) as store:
        store.append_many(
            AuditEntry.model_validate(e)
            for e in (entry("session", "list", at=0), entry("tasks", "find", at=1))
        )
    session = str(entry("session", "list")["sessionId"])
    cli = str(Path(sys.executable).parent / "cleo-grade")
    out = {}
    for argv in (["grade", session, "--no-save", "--json"], ["show", session], ["list"]):
        done = subprocess.run(
            [cli, *argv, "--db", str(db)],
            env=_no_bytecode(),
            capture_output=True,
            text=True,
            preexec_fn=_fsize_limited(16),  # type: ignore[arg-type]
            timeout=60,
            check=False,
        )
        assert (done.returncode, done.stderr) == (0, ""), argv
        out[argv[0]] = done.stdout
    assert json.loads(out["grade"])["entryCount"] == 2
