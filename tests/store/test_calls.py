"""Grading a session as graded calls (from store columns, from a streamed file) is grading
its entries, exactly."""

from __future__ import annotations

import random
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.cli.common import CommandError
from pytest_cleo_grade.cli.grade import grade_entries_file, grade_from_store
from pytest_cleo_grade.core.errors import StoreError
from pytest_cleo_grade.core.models import AuditEntry, GradeResult
from pytest_cleo_grade.rubrics._cleo_calls import graded_call
from pytest_cleo_grade.rubrics.cleo import grade_calls, grade_entries
from pytest_cleo_grade.store import ROW_COLUMNS, AuditStore, entry_row
from pytest_cleo_grade.store.sources import load_entries_file
from tests.store.test_import import NOT_FOUND_SESSION, SESSION, build_cleo_db, cleo_db_with_a_miss

NOW = datetime(2026, 3, 2, tzinfo=UTC)
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

CALLS: list[tuple[str, str]] = [
    ("session", "list"),
    ("session", "end"),
    ("tasks", "find"),
    ("tasks", "list"),
    ("tasks", "show"),
    ("tasks", "add"),
    ("tasks", "exists"),
    ("tasks", "update"),
    ("admin", "help"),
    ("tools", "skill.show"),
    ("memory", "find"),
]
PARAMS: list[dict[str, Any]] = [
    {},
    {"title": "Fix login", "description": "Users cannot log in"},
    {"title": " fix LOGIN ", "description": "   "},
    {"title": "", "description": 0},
    {"title": 7, "description": ["x"], "parent": "T1"},
    {"title": None, "description": {}, "parent": ""},
    {"title": "Child", "description": "d", "parent": "T9", "nested": {"a": [1, 2.5]}},
]


def random_session(rng: random.Random, size: int, session: str) -> list[AuditEntry]:
    entries = []
    for _ in range(size):
        domain, operation = rng.choice(CALLS)
        ok = rng.random() > 0.25
        entries.append(
            AuditEntry.model_validate(
                {
                    # Ties and out-of-order times: the store orders them, ties by insertion.
                    "timestamp": START + timedelta(milliseconds=rng.randrange(size * 2)),
                    "sessionId": session,
                    "domain": domain,
                    "operation": operation,
                    "params": rng.choice(PARAMS),
                    "result": {
                        "success": ok,
                        "exitCode": rng.choice([0, 1, 4, 4]) if not ok else rng.choice([0, 4]),
                    },
                    "metadata": {
                        "gateway": rng.choice(["cleo_query", "query", "cleo_mutate", None]),
                        "taskId": rng.choice([None, "T1", "T2"]),
                        "userId": rng.choice([None, "u1"]),
                    },
                    "error": None if ok else "E_NOT_FOUND",
                }
            )
        )
    return entries


def dump(result: GradeResult) -> dict[str, Any]:
    return result.model_dump(mode="json")


def by_entries(path: Path, session: str) -> GradeResult:
    with AuditStore(path, read_only=True) as store:
        return grade_entries(store.session_entries(session), session_id=session, now=NOW)


def by_calls(path: Path, session: str) -> GradeResult:
    with AuditStore(path, read_only=True) as store:
        calls = store.session_calls(session)
    assert calls is not None, "the session should have been read as graded calls"
    return grade_calls(calls, session_id=session, now=NOW)


@pytest.mark.parametrize("seed", range(40))
def test_random_stored_sessions_grade_alike_from_columns_and_from_entries(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "audit.db"
    with AuditStore(path) as store:
        store.append_many(random_session(rng, rng.randrange(1, 120), "s1"))
        store.append_many(random_session(rng, 20, "s2"))  # another session is left out
    assert dump(by_calls(path, "s1")) == dump(by_entries(path, "s1"))


def test_graded_calls_of_entries_grade_like_the_entries() -> None:
    entries = sorted(random_session(random.Random(3), 300, "s1"), key=lambda e: e.timestamp)
    calls = [graded_call(e) for e in entries]
    assert dump(grade_calls(calls, session_id="s1", now=NOW)) == dump(
        grade_entries(entries, session_id="s1", now=NOW)
    )


def test_a_session_not_in_the_store_is_no_calls_and_grades_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditStore(path) as store:
        store.append_many(random_session(random.Random(1), 5, "s1"))
        assert store.session_calls("nobody") == []
    assert grade_from_store(path, "nobody").entry_count == 0


def test_a_cleo_database_without_the_extra_columns_is_read_as_calls_too(tmp_path: Path) -> None:
    path = build_cleo_db(tmp_path / "cleo.db", idempotency_key=False)
    with sqlite3.connect(path) as conn:
        # CLEO's legacy row has a naive timestamp; give it the store's form for this test.
        conn.execute(
            "UPDATE audit_log SET timestamp = '2026-03-01T12:00:02.000Z' WHERE domain IS NULL"
        )
    conn.close()
    assert dump(by_calls(path, SESSION)) == dump(by_entries(path, SESSION))


def store_with(tmp_path: Path, column: str, value: object) -> Path:
    """A store whose session s1 holds good rows and one row with ``column`` set to ``value``."""
    path = tmp_path / "audit.db"
    rows = [
        list(entry_row(e, f"row-{i}"))
        for i, e in enumerate(random_session(random.Random(5), 30, "s1"))
    ]
    rows[12][ROW_COLUMNS.index(column)] = value
    with AuditStore(path) as store:
        store.append_rows(rows)
    return path


ODD_ROWS = [
    ("timestamp", "2026-03-01 12:00:00.500"),  # CLEO's naive SQL form: parsed, not text-ordered
    ("timestamp", "2026-03-01T12:00:00Z"),
    ("timestamp", "2026-03-01T13:00:00.000+01:00"),
    ("timestamp", "2026-02-30T12:00:00.000Z"),
    ("timestamp", "2026-04-31T12:00:00.000Z"),
    ("timestamp", "2026-13-01T12:00:00.000Z"),
    ("timestamp", "2026-00-01T12:00:00.000Z"),
    ("timestamp", "2026-03-00T12:00:00.000Z"),
    ("timestamp", "2026-03-01T24:00:00.000Z"),
    ("timestamp", "2026-03-01T12:00:60.000Z"),
    ("timestamp", "0000-03-01T12:00:00.000Z"),
    ("timestamp", "2026-03-01T12:00:00.000"),
    ("timestamp", "yesterday"),
    ("timestamp", 1772366400000),  # Unix milliseconds: TEXT affinity stores the digits
    ("details_json", "{not json"),
    ("details_json", "[1, 2]"),
    ("details_json", b"{}"),
    ("metadata_json", b"{}"),
    ("timestamp", b"2026-03-01T12:00:00.000Z"),
    ("metadata_json", "{not json"),
    ("metadata_json", '{"userId": 5}'),
    ("metadata_json", '"text"'),
    ("metadata_json", '{"task_id": "T7"}'),
    ("metadata_json", '{"user_id": 5}'),
    ("domain", ""),
    ("domain", b"tasks"),
    ("operation", ""),
    ("gateway", b"query"),
    ("task_id", b"T1"),
    ("exit_code", "four"),
    ("exit_code", 4.5),
    ("duration_ms", -1),
    ("duration_ms", float("inf")),
    ("duration_ms", "slow"),
    ("error_message", b"E"),
]
#: Values SQLite's column affinity turns into the column's type: both paths read them alike.
ALIKE_ROWS = [
    ("details_json", ""),  # CLEO's "no parameters"
    ("domain", 5),
    ("gateway", 3.5),
    ("task_id", 12),
    ("exit_code", 4.0),
    ("exit_code", None),
    ("success", None),
    ("error_message", 404),
    ("metadata_json", None),
    ("timestamp", "2026-03-31T12:00:00.000Z"),  # the last day of a month, checked by SQLite
    ("timestamp", "2024-02-29T12:00:00.000Z"),
    ("timestamp", "0001-01-01T00:00:00.000Z"),
]


@pytest.mark.parametrize(("column", "value"), ALIKE_ROWS, ids=[f"{c}={v!r}" for c, v in ALIKE_ROWS])
def test_values_sqlite_converts_are_read_alike_by_both_paths(
    tmp_path: Path, column: str, value: object
) -> None:
    path = store_with(tmp_path, column, value)
    assert dump(by_calls(path, "s1")) == dump(by_entries(path, "s1"))


@pytest.mark.parametrize(("column", "value"), ODD_ROWS, ids=[f"{c}={v!r}" for c, v in ODD_ROWS])
def test_a_row_the_columns_cannot_vouch_for_takes_the_entry_path(
    tmp_path: Path, column: str, value: object
) -> None:
    path = store_with(tmp_path, column, value)
    with AuditStore(path, read_only=True) as store:
        plain = store.session_calls("s1")
    assert plain is None
    # The CLI's reading: the same grade as the entry path, or the same error naming the row.
    try:
        expected: object = dump(by_entries(path, "s1"))
    except StoreError as exc:
        with pytest.raises(StoreError) as raised:
            grade_from_store(path, "s1")
        assert str(raised.value) == str(exc)
        assert "row-12" in str(exc)
    else:
        got = grade_from_store(path, "s1").model_dump(mode="json")
        assert {**got, "timestamp": None} == {**expected, "timestamp": None}  # type: ignore[dict-item]


def test_a_timestamp_that_is_not_a_date_is_quoted_as_the_row_holds_it(tmp_path: Path) -> None:
    path = store_with(tmp_path, "timestamp", 1772366400.5)
    with pytest.raises(StoreError) as raised:
        grade_from_store(path, "s1")
    assert str(raised.value).endswith("not '1772366400.5'")


def write_entries(path: Path, entries: list[AuditEntry], *, array: bool) -> Path:
    lines = [e.model_dump_json(by_alias=True) for e in entries]
    path.write_text("[" + ",".join(lines) + "]" if array else "\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("array", [False, True], ids=["jsonl", "json-array"])
@pytest.mark.parametrize("seed", range(6))
def test_a_file_streamed_as_graded_calls_grades_like_its_entries(
    tmp_path: Path, seed: int, array: bool
) -> None:
    rng = random.Random(seed)
    mixed = random_session(rng, 200, "s1") + random_session(rng, 50, "s2")
    rng.shuffle(mixed)  # out of order, two sessions interleaved
    path = write_entries(tmp_path / "entries.json", mixed, array=array)
    for session in ("s1", "s2", "nobody"):
        streamed = grade_entries_file(str(path), session)
        whole = grade_entries(load_entries_file(path), session_id=session)
        assert {**dump(streamed), "timestamp": None} == {**dump(whole), "timestamp": None}


def test_a_streamed_file_chooses_its_one_session_or_says_which_to_choose(tmp_path: Path) -> None:
    rng = random.Random(1)
    one = write_entries(tmp_path / "one.jsonl", random_session(rng, 30, "s1"), array=False)
    assert grade_entries_file(str(one)).session_id == "s1"
    two = random_session(rng, 5, "s1") + random_session(rng, 5, "s2")
    both = write_entries(tmp_path / "two.jsonl", two, array=False)
    with pytest.raises(CommandError, match=r"holds 2 sessions \(s1, s2\); choose one"):
        grade_entries_file(str(both))


def test_a_cleo_not_found_failure_is_e_not_found_on_the_calls_path_too(tmp_path: Path) -> None:
    # CLEO's layout has no exit_code: both readings derive it with the shared not-found rule.
    path = cleo_db_with_a_miss(tmp_path / "cleo.db")
    with AuditStore(path, read_only=True) as store:
        calls = store.session_calls(NOT_FOUND_SESSION)
    assert calls is not None
    assert [call[4] for call in calls] == [4, 1, 0]
    graded = by_calls(path, NOT_FOUND_SESSION)
    assert dump(graded) == dump(by_entries(path, NOT_FOUND_SESSION))
    assert graded.dimensions["errorProtocol"].score == 15
