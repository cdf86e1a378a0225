"""The SQLite audit store: layout, lossless round trips, order, transactions, bad files."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.core.errors import CleoGradeWarning, EntryError, StoreError
from pytest_cleo_grade.core.models import AuditEntry, GradeResult
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.store import AUDIT_COLUMNS, ROW_COLUMNS, AuditStore, entry_row

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def entry(session: str = "s1", *, at: int = 0, **fields: Any) -> AuditEntry:
    data: dict[str, Any] = {
        "timestamp": T0 + timedelta(milliseconds=at),
        "sessionId": session,
        "domain": "tasks",
        "operation": "find",
        "params": {},
        "result": {"success": True},
    }
    data.update(fields)
    return AuditEntry.model_validate(data)


@pytest.fixture
def store(tmp_path: Path) -> Any:
    with AuditStore(tmp_path / ".cleo" / "audit.db") as opened:
        yield opened


def test_new_store_has_cleo_columns_then_exit_code_and_metadata_json(store: AuditStore) -> None:
    columns = [row[1] for row in store._conn.execute("PRAGMA table_info(audit_log)").fetchall()]
    assert columns == list(AUDIT_COLUMNS)
    assert columns[-2:] == ["exit_code", "metadata_json"]


def test_new_store_uses_wal_and_indexes_session_and_timestamp(store: AuditStore) -> None:
    assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    indexes = {
        row[1]: [c[2] for c in store._conn.execute(f"PRAGMA index_info({row[1]})").fetchall()]
        for row in store._conn.execute("PRAGMA index_list(audit_log)").fetchall()
    }
    assert ["session_id", "timestamp"] in indexes.values()
    assert store._conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'grades'").fetchone()


def test_store_and_its_directory_are_created_and_migrations_recorded(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "audit.db"
    with AuditStore(path) as opened:
        applied = opened._conn.execute("SELECT name FROM _sqlite_migrations").fetchall()
    assert path.is_file()
    assert [row[0] for row in applied] == [
        "0001_audit_log_and_grades",
        "0002_conversation",
        "0004_history_archive",
    ]


def test_reopening_a_store_keeps_its_rows_and_applies_nothing_twice(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditStore(path) as first:
        first.append(entry())
    with AuditStore(path) as second:
        assert second.count() == 1
        assert second._conn.execute("SELECT count(*) FROM _sqlite_migrations").fetchone()[0] == 3


def test_entry_round_trips_through_the_store_losslessly(store: AuditStore) -> None:
    original = entry(
        operation="add",
        params={"title": "Fix", "parent": "T1", "nested": {"a": [1, 2.5, None]}, "ü": "✓"},
        result={"success": False, "exitCode": 4, "duration": 12.75},
        metadata={
            "source": "rpc",
            "gateway": "mutate",
            "taskId": "T9",
            "userId": "alice",
            "role": "worker",
        },
        error="E_NOT_FOUND: T1",
    )
    store.append(original)
    (back,) = store.session_entries("s1")
    assert back.to_json_dict() == original.to_json_dict()


@pytest.mark.parametrize("task_id", ["system", "unknown", ""])
def test_a_task_id_that_looks_like_cleos_placeholder_reads_back_as_written(
    store: AuditStore, task_id: str
) -> None:
    # CLEO writes "system" into its NOT NULL task_id column for "no task"; an entry of ours
    # that really carries such an id must not read back as carrying none.
    original = entry(operation="add", metadata={"source": "mcp", "taskId": task_id})
    store.append(original)
    (back,) = store.session_entries("s1")
    assert back.metadata.task_id == task_id
    assert back.to_json_dict() == original.to_json_dict()
    (call,) = store.session_calls("s1") or []
    assert call[7] == task_id  # the graded-calls reading agrees
    # The column keeps a CLEO placeholder, so CLEO's own readers still find one.
    (column,) = store._conn.execute("SELECT task_id FROM audit_log").fetchone()
    assert column in ("system", "unknown")


def test_rows_written_before_task_ids_were_kept_still_read_as_no_task(store: AuditStore) -> None:
    # What the store wrote for an entry without a taskId (or with "system") before the real
    # value was kept in metadata_json: the placeholder only.
    row = entry_row(entry(operation="add", metadata={"role": "planner"}))
    store.append_rows([row])
    store._conn.execute("UPDATE audit_log SET task_id = 'unknown'")
    (back,) = store.session_entries("s1")
    assert back.metadata.task_id is None
    assert back.metadata.model_extra == {"role": "planner"}
    (call,) = store.session_calls("s1") or []
    assert call[7] is None


@pytest.mark.parametrize(
    "duration", [12.345678901234567, 0.30000000000000004, 0.1, 1e300, 5e-324, 2.5, 7.0]
)
def test_a_duration_round_trips_exactly(store: AuditStore, duration: float) -> None:
    # SQLite's json_object() prints a REAL with 15 significant digits.
    store.append(entry(result={"success": True, "duration": duration}))
    store.append(entry(at=1, result={"success": True, "duration": 3}))
    first, second = store.session_entries("s1")
    assert first.result.duration == duration
    assert second.result.duration == 3.0
    assert [e.result.duration for _, e in store.session_items("s1")] == [duration, 3.0]


def test_timestamps_in_other_zones_are_stored_as_utc_and_still_order(store: AuditStore) -> None:
    plus_two = datetime(2026, 3, 1, 13, 0, 0, 500000, tzinfo=timezone_hours(2))  # 11:00:00.5Z
    store.append(entry(at=0, operation="list"))  # 12:00Z
    store.append(entry(operation="show", timestamp=plus_two))
    stored = [row[0] for row in store._conn.execute("SELECT timestamp FROM audit_log ORDER BY 1")]
    assert stored == ["2026-03-01T11:00:00.500Z", "2026-03-01T12:00:00.000Z"]
    assert [e.operation for e in store.session_entries("s1")] == ["show", "list"]


def timezone_hours(hours: int) -> Any:
    from datetime import timezone

    return timezone(timedelta(hours=hours))


def test_session_is_read_in_timestamp_order_with_ties_in_insertion_order(
    store: AuditStore,
) -> None:
    store.append(entry(at=5, operation="late"))
    store.append(entry(at=1, operation="tie-first"))
    store.append(entry(at=1, operation="tie-second"))
    store.append(entry(at=0, operation="early"))
    store.append(entry(at=1, operation="tie-third"))
    ops = [e.operation for e in store.session_entries("s1")]
    assert ops == ["early", "tie-first", "tie-second", "tie-third", "late"]


def test_session_selection_is_an_exact_match_never_a_prefix(store: AuditStore) -> None:
    store.append_many([entry("session-1"), entry("session-10"), entry("session-1%")])
    assert len(store.session_entries("session-1")) == 1
    assert store.session_entries("session-") == []
    assert store.session_ids() == ["session-1", "session-10", "session-1%"]


def test_append_many_is_one_transaction_so_a_failure_adds_nothing(store: AuditStore) -> None:
    good = entry_row(entry())
    with pytest.raises(StoreError, match="cannot write"):
        store.append_rows([good, good[:-1]])  # the second row has a column missing
    assert store.count() == 0


@pytest.mark.parametrize(
    "fields",
    [
        pytest.param({"params": {"x": "\ud800"}}, id="lone surrogate in params"),
        pytest.param({"error": "\udfff"}, id="lone surrogate in a text column"),
        pytest.param({"metadata": {"role": "\ud800"}}, id="lone surrogate in extra metadata"),
    ],
)
def test_text_that_is_not_unicode_is_an_entry_error_and_stores_nothing(
    store: AuditStore, fields: dict[str, Any]
) -> None:
    with pytest.raises(EntryError, match="cannot store"):
        store.append_many([entry(), entry(**fields)])
    with pytest.raises(EntryError, match="cannot store"):
        store.append(entry(**fields))
    assert store.count() == 0


def test_grades_table_keeps_every_grade_in_order(store: AuditStore) -> None:
    first = grade_entries([entry()], session_id="s1", now=T0)
    second = grade_entries([], session_id="s2", now=T0)
    store.add_grade(first)
    store.add_grade(second)
    assert store.grades() == [first, second]
    assert store.grades("s2") == [second]
    row = store._conn.execute("SELECT letter, entry_count, flag_count FROM grades").fetchone()
    assert tuple(row) == (first.letter, 1, len(first.flags))


def test_several_grades_are_stored_all_or_nothing(store: AuditStore) -> None:
    good = grade_entries([entry()], session_id="s1", now=T0)
    # An integer SQLite cannot hold makes the second insert fail after the first one ran.
    huge = good.model_copy(update={"total_score": 2**70, "max_score": 2**71})
    with pytest.raises(StoreError, match="cannot write"):
        store.add_grades([good, huge])
    assert store.grades() == []
    store.add_grades([good, good])
    assert store.grades() == [good, good]


def test_a_corrupt_grades_row_is_skipped_with_a_warning_naming_its_id(store: AuditStore) -> None:
    for session in ("a", "b"):
        store.add_grade(grade_entries([entry(session)], session_id=session, now=T0))
    store._conn.execute("UPDATE grades SET result_json = '{bad' WHERE session_id = 'a'")
    with pytest.warns(CleoGradeWarning, match=r"grades row 1: skipped corrupt grade"):
        assert [g.session_id for g in store.grades()] == ["b"]


def test_grade_results_from_the_table_validate_as_grade_results(store: AuditStore) -> None:
    result = grade_entries([entry()], session_id="s1", now=T0)
    store.add_grade(result)
    (back,) = store.grades()
    assert isinstance(back, GradeResult)
    assert back.to_json_dict() == result.to_json_dict()


def test_store_written_by_a_newer_schema_is_refused_with_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    AuditStore(path).close()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
            "VALUES ('pytest_cleo_grade', '0002_from_the_future', 'x')"
        )
    with pytest.raises(StoreError, match=r"newer pytest-cleo-grade .*0002_from_the_future"):
        AuditStore(path)


def test_a_file_that_is_not_a_database_gives_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    path.write_bytes(b"this is not sqlite at all, just text " * 200)
    with pytest.raises(StoreError, match="not a usable SQLite database"):
        AuditStore(path)
    with pytest.raises(StoreError, match="not a usable SQLite database"):
        AuditStore(path, read_only=True)


def test_a_locked_database_gives_a_clear_error_after_the_busy_timeout(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    AuditStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with (
            AuditStore(path, timeout=0.05) as store,
            pytest.raises(StoreError, match="database is locked by another process"),
        ):
            store.append(entry())
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_opening_a_database_another_process_holds_locked_is_a_clear_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "audit.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreError, match="database is locked by another process"):
            AuditStore(path, timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_store_whose_directory_cannot_be_created_gives_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(StoreError, match="cannot create directory"):
        AuditStore(blocker / "audit.db")


def test_read_only_store_is_never_modified_and_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditStore(path) as writable:
        writable.append(entry())
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    with AuditStore(path, read_only=True) as reader:
        assert len(reader.session_entries("s1")) == 1
        with pytest.raises(StoreError, match="read-only"):
            reader.append(entry())
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest


def test_read_only_open_of_a_missing_file_is_an_error_and_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such database file"):
        AuditStore(tmp_path / "missing.db", read_only=True)
    assert list(tmp_path.iterdir()) == []


def test_a_row_with_malformed_details_json_is_named_by_its_id(store: AuditStore) -> None:
    row = list(entry_row(entry(), "row-42"))
    row[ROW_COLUMNS.index("details_json")] = "{not json"
    store.append_rows([row])
    with pytest.raises(StoreError, match="audit_log row row-42"):
        store.session_entries("s1")


def test_a_row_with_an_invalid_field_is_named_by_its_id(store: AuditStore) -> None:
    row = list(entry_row(entry(), "row-7"))
    row[ROW_COLUMNS.index("timestamp")] = "yesterday"
    store.append_rows([row])
    with pytest.raises(StoreError, match=r"audit_log row row-7: timestamp"):
        store.session_entries("s1")


def test_a_row_with_an_infinite_duration_is_named_by_its_id(store: AuditStore) -> None:
    # SQLite keeps an infinite REAL and writes it into JSON as Inf, which is no JSON.
    good = entry_row(entry(), "row-1")
    bad = list(entry_row(entry(at=1), "row-2"))
    bad[ROW_COLUMNS.index("duration_ms")] = float("inf")
    store.append_rows([good, bad])
    with pytest.raises(StoreError, match=r"audit_log row row-2: holds a number JSON cannot"):
        store.session_entries("s1")


def test_rows_with_the_same_id_are_stored_once(store: AuditStore) -> None:
    row = entry_row(entry(), "fixed-id")
    assert store.append_rows([row]) == 1
    assert store.append_rows([row, entry_row(entry(), "other-id")]) == 1
    assert store.count() == 2


def test_integrity_check_of_a_healthy_store_is_ok(store: AuditStore) -> None:
    store.append_many(entry(at=i) for i in range(50))
    assert store.integrity_check() == "ok"


_OPENS = """
import sys
from pytest_cleo_grade.store import AuditStore
with AuditStore(sys.argv[1]) as store:
    store.append_many([])
print("sqlite_utils" in sys.modules)
"""


@pytest.mark.e2e
def test_only_a_store_that_needs_a_migration_loads_sqlite_utils(tmp_path: Path) -> None:
    # sqlite-utils costs a process about 80 ms to import: every xdist worker and CLI command
    # that opened a store paid it, though only creating or upgrading one uses it.
    path = tmp_path / "audit.db"

    def opened_loads_it() -> bool:
        done = subprocess.run(
            [sys.executable, "-c", _OPENS, str(path)], capture_output=True, text=True, check=True
        )
        return done.stdout.split() == ["True"]

    assert opened_loads_it()  # created: the migrations ran
    assert not opened_loads_it()  # current: read with the standard library alone
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = '0004_history_archive'")
        conn.execute("DROP TABLE history_archive")
        conn.execute("DROP TABLE history_archive_batches")
    assert opened_loads_it()  # an older store: upgraded
    with closing(sqlite3.connect(path)) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "history_archive" in tables
