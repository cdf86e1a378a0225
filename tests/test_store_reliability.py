"""No data loss: concurrent recorders, concurrent history appends, SIGKILL, a full disk."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from pytest_cleo_grade.history import read_grades
from pytest_cleo_grade.store import AuditStore

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
        from pytest_cleo_grade import audit
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
        from pytest_cleo_grade.history import append_grade
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
        from pytest_cleo_grade import audit
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


def test_a_full_disk_is_a_warning_from_the_library_and_nothing_recorded_is_lost(
    tmp_path: Path,
) -> None:
    db = tmp_path / "audit.db"
    AuditStore(db).close()
    recorder = python(
        """
        import warnings
        from pytest_cleo_grade import audit
        from pytest_cleo_grade.errors import CleoGradeWarning
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
        env=grade_env(db),
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
