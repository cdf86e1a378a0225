"""Import from a CLEO project database (CLEO's exact layout, read-only) and entry files."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.cli.grade import grade_entries_file, grade_from_store
from pytest_cleo_grade.core.errors import EntryError, StoreError
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store._imports import (
    import_cleo_db,
    import_entries_file,
    stream_entries_file,
)
from pytest_cleo_grade.store.sources import find_cleo_db, load_entries_file

# CLEO's audit_log as its drizzle migrations create it (before idempotency_key was added).
CLEO_AUDIT_LOG = """
CREATE TABLE `audit_log` (
    `id` text PRIMARY KEY NOT NULL,
    `timestamp` text DEFAULT (datetime('now')) NOT NULL,
    `action` text NOT NULL,
    `task_id` text NOT NULL,
    `actor` text DEFAULT 'system' NOT NULL,
    `details_json` text DEFAULT '{}',
    `before_json` text,
    `after_json` text,
    `domain` text,
    `operation` text,
    `session_id` text,
    `request_id` text,
    `duration_ms` integer,
    `success` integer,
    `source` text,
    `gateway` text,
    `error_message` text,
    `project_hash` text
);
CREATE INDEX `idx_audit_log_task_id` ON `audit_log` (`task_id`);
CREATE INDEX `idx_audit_log_action` ON `audit_log` (`action`);
CREATE INDEX `idx_audit_log_timestamp` ON `audit_log` (`timestamp`);
CREATE INDEX `idx_audit_log_domain` ON `audit_log` (`domain`);
CREATE INDEX `idx_audit_log_request_id` ON `audit_log` (`request_id`);
CREATE INDEX `idx_audit_log_project_hash` ON `audit_log` (`project_hash`);
CREATE INDEX `idx_audit_log_session_id` ON `audit_log` (`session_id`);
"""
IDEMPOTENCY = "ALTER TABLE `audit_log` ADD `idempotency_key` text;"

SESSION = "session-1772366400000-a1b2c3"

# (id, timestamp, action, task_id, details_json, domain, operation, session_id, duration_ms,
#  success, source, gateway, error_message)
ROWS: list[tuple[Any, ...]] = [
    ("r1", "2026-03-01T12:00:00.000Z", "session.list", "system", "{}",
     "session", "list", SESSION, 3, 1, "mcp", "cleo_query", None),
    ("r2", "2026-03-01T12:00:01.000Z", "tasks.show", "T404", '{"taskId":"T404"}',
     "tasks", "show", SESSION, 2, 0, "mcp", "query", "Task T404 not found"),
    ("r3", "2026-03-01 12:00:02", "task_created", "T5", '{"title":"Fix","description":"d"}',
     None, None, SESSION, None, None, None, None, None),
    ("r4", "2026-03-01T12:00:03.000Z", "tasks.add", "unknown", '{"title":"Other"}',
     "tasks", "add", SESSION + "0", 1, 1, "cli", "mutate", None),
    ("r5", "2026-03-01T12:00:04.000Z", "session.end", "system", None,
     "session", "end", SESSION, 1, 1, "cli", "cleo_mutate", None),
]  # fmt: skip


def build_cleo_db(path: Path, *, idempotency_key: bool, wal: bool = False) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        if wal:  # as CLEO's node:sqlite store opens it
            conn.execute("PRAGMA journal_mode = WAL")
        conn.executescript(CLEO_AUDIT_LOG + (IDEMPOTENCY if idempotency_key else ""))
        conn.executemany(
            "INSERT INTO audit_log (id, timestamp, action, task_id, details_json, domain, "
            "operation, session_id, duration_ms, success, source, gateway, error_message) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            ROWS,
        )
    conn.close()
    return path


@pytest.fixture(params=[False, True], ids=["cleo-db-before-idempotency", "cleo-db-with-it"])
def cleo_db(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    return build_cleo_db(tmp_path / "project" / ".cleo" / "cleo.db", idempotency_key=request.param)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cleo_rows_map_to_entries_as_cleo_defines_them(cleo_db: Path) -> None:
    with AuditStore(cleo_db, read_only=True) as store:
        entries = [e.to_json_dict() for e in store.session_entries(SESSION)]
    assert [e["operation"] for e in entries] == ["list", "show", "task_created", "end"]
    listed, shown, legacy, ended = entries
    assert listed["metadata"]["gateway"] == "cleo_query"
    assert "taskId" not in {k for k, v in listed["metadata"].items() if v is not None}
    assert shown["params"] == {"taskId": "T404"}
    # CLEO keeps no exit code: a failure whose error says not found is E_NOT_FOUND (4).
    assert shown["result"] == {"success": False, "exitCode": 4, "duration": 2.0}
    assert shown["error"] == "Task T404 not found"
    assert shown["metadata"]["taskId"] == "T404"
    assert shown["metadata"]["gateway"] == "query"
    # A legacy row: no domain, no operation, no success, no source, naive SQL timestamp.
    assert legacy["domain"] == "unknown"
    assert legacy["operation"] == "task_created"
    assert legacy["result"] == {"success": True, "exitCode": 0, "duration": 0.0}
    assert legacy["metadata"]["source"] == "cli"
    assert legacy["timestamp"] == "2026-03-01T12:00:02.000Z"
    assert ended["params"] == {}
    assert ended["result"]["exitCode"] == 0


def test_a_cleo_session_is_selected_exactly_never_by_prefix(cleo_db: Path) -> None:
    with AuditStore(cleo_db, read_only=True) as store:
        assert len(store.session_entries(SESSION)) == 4
        assert len(store.session_entries(SESSION + "0")) == 1
        assert store.session_entries(SESSION[:-1]) == []


def test_importing_a_cleo_database_never_modifies_it(cleo_db: Path, tmp_path: Path) -> None:
    before = digest(cleo_db)
    neighbours = sorted(p.name for p in cleo_db.parent.iterdir())
    with AuditStore(tmp_path / "ours.db") as store:
        assert import_cleo_db(store, cleo_db, session_id=SESSION) == (4, 4)
    assert digest(cleo_db) == before
    assert sorted(p.name for p in cleo_db.parent.iterdir()) == neighbours


def test_a_read_only_open_of_a_cleo_wal_database_leaves_no_side_files(tmp_path: Path) -> None:
    cleo_db = build_cleo_db(
        tmp_path / "project" / ".cleo" / "tasks.db", idempotency_key=True, wal=True
    )
    before, mtime = digest(cleo_db), cleo_db.stat().st_mtime_ns
    assert [p.name for p in cleo_db.parent.iterdir()] == ["tasks.db"]
    with AuditStore(cleo_db, read_only=True) as cleo:
        assert len(cleo.session_entries(SESSION)) == 4
        # SQLite needs them even to read a WAL database; a read-only connection cannot
        # remove them when it closes.
        assert {"tasks.db-wal", "tasks.db-shm"} <= {p.name for p in cleo_db.parent.iterdir()}
    with AuditStore(tmp_path / "ours.db") as store:
        assert import_cleo_db(store, cleo_db) == (5, 5)
    assert [p.name for p in cleo_db.parent.iterdir()] == ["tasks.db"]
    assert digest(cleo_db) == before
    assert cleo_db.stat().st_mtime_ns == mtime


@pytest.mark.e2e
def test_side_files_another_process_uses_are_left_to_it(tmp_path: Path) -> None:
    cleo_db = build_cleo_db(tmp_path / ".cleo" / "tasks.db", idempotency_key=False, wal=True)
    writer_code = textwrap.dedent(
        f"""
        import sqlite3, sys
        conn = sqlite3.connect({str(cleo_db)!r})
        conn.execute("SELECT count(*) FROM audit_log").fetchone()
        print("open", flush=True)
        sys.stdin.readline()
        with conn:
            conn.execute("INSERT INTO audit_log (id, action, task_id, session_id, success) "
                         "VALUES ('r6', 'session.end', 'system', 'late', 1)")
        conn.close()
        """
    )
    with AuditStore(cleo_db, read_only=True) as cleo:
        assert len(cleo.session_entries(SESSION)) == 4
        writer = subprocess.Popen(
            [sys.executable, "-c", writer_code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert writer.stdout is not None and writer.stdin is not None
        assert writer.stdout.readline() == "open\n"
    # The other process holds the database open: its files stay, and it goes on writing.
    assert {"tasks.db-wal", "tasks.db-shm"} <= {p.name for p in cleo_db.parent.iterdir()}
    writer.communicate("go\n", timeout=60)
    assert writer.returncode == 0
    with AuditStore(cleo_db, read_only=True) as cleo:
        assert cleo.count() == 6
    assert [p.name for p in cleo_db.parent.iterdir()] == ["tasks.db"]


def test_importing_the_same_cleo_database_twice_adds_nothing(cleo_db: Path, tmp_path: Path) -> None:
    with AuditStore(tmp_path / "ours.db") as store:
        assert import_cleo_db(store, cleo_db) == (5, 5)
        assert import_cleo_db(store, cleo_db) == (5, 0)
        assert store.count() == 5


def test_imported_cleo_entries_grade_as_they_do_read_directly(
    cleo_db: Path, tmp_path: Path
) -> None:
    with AuditStore(cleo_db, read_only=True) as cleo:
        direct = cleo.session_entries(SESSION)
    with AuditStore(tmp_path / "ours.db") as store:
        import_cleo_db(store, cleo_db, session_id=SESSION)
        imported = store.session_entries(SESSION)
    assert [e.to_json_dict() for e in imported] == [e.to_json_dict() for e in direct]
    assert (
        grade_entries(imported, session_id=SESSION).total_score
        == grade_entries(direct, session_id=SESSION).total_score
    )


NOT_FOUND_SESSION = "session-1772366400000-nf"
EXAMPLE_SESSION = (
    Path(__file__).resolve().parents[2] / "examples" / "sessions" / "agent-session.jsonl"
)


def cleo_db_with_a_miss(path: Path) -> Path:
    """A CLEO project whose session has an unrecovered E_NOT_FOUND and another failure."""
    build_cleo_db(path, idempotency_key=True)
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO audit_log (id, timestamp, action, task_id, details_json, domain, "
            "operation, session_id, duration_ms, success, source, gateway, error_message) "
            "VALUES (?, ?, ?, ?, '{}', 'tasks', ?, ?, 1, ?, 'mcp', 'query', ?)",
            [
                ("n1", "2026-03-01T12:00:00.000Z", "tasks.show", "T9", "show",
                 NOT_FOUND_SESSION, 0, "E_NOT_FOUND: task T9 not found"),
                ("n2", "2026-03-01T12:00:01.000Z", "tasks.update", "T5", "update",
                 NOT_FOUND_SESSION, 0, "E_VALIDATION: title is required"),
                ("n3", "2026-03-01T12:00:02.000Z", "tasks.list", "system", "list",
                 NOT_FOUND_SESSION, 1, None),
            ],
        )  # fmt: skip
    conn.close()
    return path


def test_a_cleo_not_found_failure_grades_as_e_not_found_on_every_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # CLEO's audit_log has no exit code column: "not found" in error_message is the shared
    # rule's E_NOT_FOUND (4) when read directly, when imported, and on the calls path.
    from pytest_cleo_grade.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    cleo_db_with_a_miss(tmp_path / "proj" / ".cleo" / "tasks.db")
    flag = "E_NOT_FOUND (tasks.show) not followed by recovery lookup"
    assert main(["grade", NOT_FOUND_SESSION, "--cleo-db", "proj", "--no-save", "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)
    assert direct["dimensions"]["errorProtocol"]["score"] == 15
    assert flag in direct["flags"]
    assert main(["import", "proj", "--db", "ours.db"]) == 0
    capsys.readouterr()
    assert main(["grade", NOT_FOUND_SESSION, "--db", "ours.db", "--no-save", "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert imported["dimensions"] == direct["dimensions"]
    assert imported["flags"] == direct["flags"]
    for source in (["--cleo-db", "proj"], ["--db", "ours.db"]):
        assert main(["show", NOT_FOUND_SESSION, *source]) == 0
        shown = capsys.readouterr().out
        assert re.search(r"tasks\.show +query +exit 4 ", shown)
        assert re.search(r"tasks\.update +query +exit 1 ", shown)
        assert "errorProtocol 15/20" in shown
    with AuditStore(tmp_path / "ours.db", read_only=True) as store:
        codes = [e.result.exit_code for e in store.session_entries(NOT_FOUND_SESSION)]
    assert codes == [4, 1, 0]


def test_our_own_rows_keep_their_exit_code_whatever_their_error_says(tmp_path: Path) -> None:
    entry = AuditEntry.model_validate(
        {
            "timestamp": "2026-03-01T12:00:00.000Z",
            "sessionId": "s1",
            "domain": "tasks",
            "operation": "show",
            "result": {"success": False, "exitCode": 1},
            "error": "Task T1 not found",
        }
    )
    with AuditStore(tmp_path / "ours.db") as store:
        store.append(entry)
        stored = store.session_entries(entry.session_id or "")
        calls = store.session_calls(entry.session_id or "")
    assert [e.result.exit_code for e in stored] == [1]
    assert calls is not None and [call[4] for call in calls] == [1]


@pytest.mark.parametrize(
    ("row", "column", "named"),
    [
        ("r2", "task_id", "r2"),
        ("r2", "error_message", "r2"),  # a failure: its error is read for the not-found rule
        ("r1", "id", repr("T\\xff\nA")),  # the id itself: escaped, on one line
    ],
)
def test_text_that_is_not_utf8_is_one_line_naming_the_row_and_column(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    row: str,
    column: str,
    named: str,
) -> None:
    from pytest_cleo_grade.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    path = build_cleo_db(tmp_path / "proj" / ".cleo" / "cleo.db", idempotency_key=True)
    with sqlite3.connect(path) as conn:
        conn.execute(
            f"UPDATE audit_log SET {column} = CAST(X'54FF0A41' AS TEXT) WHERE id = ?", (row,)
        )
    conn.close()
    expected = (
        f"cleo-grade: error: proj/.cleo/cleo.db: audit_log row {named}: column {column} "
        "holds text that is not valid UTF-8\n"
    )
    for argv in (
        ["grade", SESSION, "--cleo-db", "proj", "--no-save"],
        ["show", SESSION, "--cleo-db", "proj"],
        ["import", "proj", "--db", "ours.db"],
        ["grade", SESSION, "--db", "proj/.cleo/cleo.db", "--no-save"],  # the calls path first
    ):
        assert main(argv) == 2, argv
        assert capsys.readouterr() == ("", expected), argv


def test_a_session_id_that_is_not_utf8_in_a_store_is_named_too(tmp_path: Path) -> None:
    store = tmp_path / "ours.db"
    with AuditStore(store) as audit:
        audit.append_many(load_entries_file(EXAMPLE_SESSION))
    with sqlite3.connect(store) as conn:
        row = conn.execute("SELECT id FROM audit_log ORDER BY rowid LIMIT 1").fetchone()[0]
        conn.execute("UPDATE audit_log SET session_id = CAST(X'FF' AS TEXT) WHERE id = ?", (row,))
    conn.close()
    with AuditStore(store, read_only=True) as audit, pytest.raises(StoreError) as caught:
        audit.session_ids()
    assert str(caught.value) == (
        f"{store}: audit_log row {row}: column session_id holds text that is not valid UTF-8"
    )


def test_importing_a_session_the_cleo_database_lacks_is_an_error(
    cleo_db: Path, tmp_path: Path
) -> None:
    with (
        AuditStore(tmp_path / "ours.db") as store,
        pytest.raises(StoreError, match="no audit entries for session nope"),
    ):
        import_cleo_db(store, cleo_db, session_id="nope")


def test_find_cleo_db_prefers_cleo_db_then_the_older_tasks_db(tmp_path: Path) -> None:
    older = build_cleo_db(tmp_path / ".cleo" / "tasks.db", idempotency_key=False)
    assert find_cleo_db(tmp_path) == older
    newer = build_cleo_db(tmp_path / ".cleo" / "cleo.db", idempotency_key=True)
    assert find_cleo_db(tmp_path) == newer
    assert find_cleo_db(older) == older
    with pytest.raises(StoreError, match=r"no CLEO database \(\.cleo/cleo\.db or"):
        find_cleo_db(tmp_path / "elsewhere")


def test_a_database_without_audit_log_is_refused_clearly(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (x)")
    conn.close()
    with pytest.raises(StoreError, match="no audit_log table"):
        AuditStore(path, read_only=True)


def entry_line(i: int, **extra: Any) -> str:
    data = {
        "timestamp": f"2026-03-01T12:00:{i:02d}.000Z",
        "sessionId": "s1",
        "domain": "tasks",
        "operation": "find",
        "result": {"success": True},
        **extra,
    }
    return json.dumps(data)


def test_a_jsonl_file_imports_every_entry(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(entry_line(i) for i in range(20)) + "\n\n")
    with AuditStore(tmp_path / "ours.db") as store:
        assert len(import_entries_file(store, path)) == 20
        assert store.count("s1") == 20


@pytest.mark.parametrize(
    ("bad_line", "message"),
    [
        pytest.param('{"timestamp": ', r"e\.jsonl:3: invalid JSON", id="truncated"),
        pytest.param(entry_line(3, params={"x": float("nan")}), r"e\.jsonl:3: invalid JSON: NaN",
                     id="nan"),
        pytest.param(entry_line(3).replace(".000Z", ""), r"e\.jsonl:3: timestamp", id="naive"),
        pytest.param("[1, 2]", r"e\.jsonl:3: expected a JSON object", id="not-object"),
        pytest.param(entry_line(3) + "," + entry_line(5), r"e\.jsonl:3: invalid JSON: Extra data",
                     id="two-objects-on-a-line"),
        pytest.param(entry_line(3, params={"x": "\ud800"}), r"e\.jsonl:3: invalid JSON: a lone",
                     id="lone-surrogate"),
    ],
)  # fmt: skip
def test_a_bad_line_aborts_the_import_naming_its_line_and_imports_nothing(
    tmp_path: Path, bad_line: str, message: str
) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join([entry_line(1), entry_line(2), bad_line, entry_line(4)]))
    with AuditStore(tmp_path / "ours.db") as store:
        with pytest.raises(EntryError, match=message):
            import_entries_file(store, path)
        assert store.count() == 0


@pytest.mark.parametrize("task_id", ["system", "unknown", "", "T7"])
def test_a_stored_session_grades_as_its_file_does_whatever_its_task_ids(
    tmp_path: Path, task_id: str
) -> None:
    path = tmp_path / "e.jsonl"
    lines = [
        entry_line(0, domain="session", operation="list"),
        entry_line(1, operation="add", params={"title": "a"}, metadata={"taskId": task_id}),
        entry_line(2, operation="add", params={"title": "b"}, metadata={"taskId": "T2"}),
        entry_line(3, domain="session", operation="end"),
    ]
    path.write_text("\n".join(lines) + "\n")
    from_file = grade_entries_file(str(path), "s1")
    assert f"tasks.add without description (taskId: {task_id})" in from_file.flags
    db = tmp_path / "ours.db"
    stream_entries_file(db, path)
    from_calls = grade_from_store(db, "s1")  # what `cleo-grade grade s1` reads
    with AuditStore(db, read_only=True) as store:
        assert store.session_calls("s1") is not None  # the calls reading was the one taken
        from_entries = grade_entries(store.session_entries("s1"), session_id="s1")
    assert from_calls.flags == from_file.flags
    assert from_entries.flags == from_file.flags
    assert from_calls.total_score == from_entries.total_score == from_file.total_score


def test_jsonl_and_a_json_array_of_the_same_entries_load_alike(tmp_path: Path) -> None:
    lines = [entry_line(i, params={"n": i, "s": "ü"}) for i in range(30)]
    jsonl = tmp_path / "e.jsonl"
    jsonl.write_text("\n".join(lines))
    array = tmp_path / "e.json"
    array.write_text("[" + ",\n".join(lines) + "]")
    loaded = load_entries_file(jsonl)
    assert len(loaded) == 30 and loaded[29].params == {"n": 29, "s": "ü"}
    assert load_entries_file(array) == loaded


@pytest.mark.parametrize("text", ["jsonl", "array"])
def test_a_byte_order_mark_at_the_start_of_a_file_is_ignored(tmp_path: Path, text: str) -> None:
    lines = [entry_line(i) for i in range(2)]
    body = "\n".join(lines) if text == "jsonl" else "[" + ",".join(lines) + "]"
    path = tmp_path / "e.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert len(load_entries_file(path)) == 2


def test_a_json_array_file_imports_too(tmp_path: Path) -> None:
    path = tmp_path / "e.json"
    path.write_text("[" + ",".join(entry_line(i) for i in range(3)) + "]")
    assert len(load_entries_file(path)) == 3


def test_an_empty_entries_file_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text("\n\n")
    with pytest.raises(EntryError, match="empty"):
        load_entries_file(path)


def test_pathologically_nested_json_is_an_entry_error_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(entry_line(1) + "\n" + '{"a":' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(EntryError, match=r"e\.jsonl:2: invalid JSON: nested too deeply"):
        load_entries_file(path)


def test_a_database_read_as_an_entries_file_is_named_as_one(tmp_path: Path) -> None:
    # load_entries_file and ingest(format="jsonl") read its binary pages as bad JSON at line 1.
    path = tmp_path / "audit.db"
    with sqlite3.connect(path) as made:
        made.execute("CREATE TABLE t (a TEXT)")
    made.close()
    with pytest.raises(EntryError) as caught:
        load_entries_file(path)
    assert str(caught.value) == f"{path}: an SQLite database, not a JSON-lines entries file"
    with pytest.raises(EntryError, match="an SQLite database"):
        grade_entries_file(str(path))


@pytest.mark.parametrize(
    ("format", "what"),
    [("otlp", "an OTLP JSON file"), ("claude-code", "a Claude Code transcript")],
)
def test_a_database_given_as_a_file_of_another_format_is_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], format: str, what: str
) -> None:
    # Its binary pages were "not UTF-8 text" or "not valid JSON" at some line, which sent the
    # user looking there.
    path = tmp_path / "cleo.db"
    with sqlite3.connect(path) as made:
        made.execute("CREATE TABLE t (a TEXT)")
    made.close()
    db = tmp_path / "audit.db"
    assert main(["import", "--format", format, str(path), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err == f"cleo-grade: error: {path}: an SQLite database, not {what}\n"
    assert not db.exists()
