"""GradeSession: environment in and out, recording, ingesting, grading and persisting."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_cleo_grade import grade_entries
from pytest_cleo_grade.core.errors import CleoGradeError, EntryError
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings, new_session_id
from pytest_cleo_grade.rubrics.cleo import EMPTY_SESSION_FLAG
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import read_grades
from pytest_cleo_grade.store.sources import load_entries_file

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
VARS = ("CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID", "CLEO_SESSION_ID", "CLEO_AUDIT_DB")


@pytest.fixture
def settings(tmp_path: Path) -> SessionSettings:
    return SessionSettings(
        db_path=tmp_path / ".cleo" / "audit.db",
        history_path=tmp_path / ".cleo" / "metrics" / "GRADES.jsonl",
    )


@pytest.fixture
def session(settings: SessionSettings) -> Iterator[GradeSession]:
    with GradeSession(settings) as started:
        yield started


def test_new_session_ids_have_cleos_shape_and_do_not_repeat() -> None:
    ids = {new_session_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"session-\d{13}-[0-9a-f]{6}", i) for i in ids)


def test_ids_issued_in_one_millisecond_never_repeat_even_past_the_birthday_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 20,000 ids in a single frozen millisecond: 24 random bits alone would collide about
    # 12 times (n^2 / 2^25); the process must still hand out distinct ids.
    monkeypatch.setattr(time, "time_ns", lambda: 1_772_366_400_000_000_000)
    ids = [new_session_id() for _ in range(20_000)]
    assert len(set(ids)) == 20_000
    assert all(i.startswith("session-1772366400000-") for i in ids)


def test_settings_make_paths_absolute(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    settings = SessionSettings(db_path=Path("x/audit.db"), history_path=Path("h.jsonl"))
    assert settings.db_path == tmp_path / "x" / "audit.db"
    assert settings.history_path == tmp_path / "h.jsonl"


def test_constructing_a_session_touches_neither_environment_nor_disk(
    settings: SessionSettings,
) -> None:
    before = {name: os.environ.get(name) for name in VARS}
    GradeSession(settings)
    assert {name: os.environ.get(name) for name in VARS} == before
    assert not settings.db_path.exists()


def test_start_sets_the_four_variables_and_close_restores_them_exactly(
    monkeypatch: pytest.MonkeyPatch, settings: SessionSettings
) -> None:
    monkeypatch.setenv("CLEO_SESSION_ID", "outer-session")
    monkeypatch.delenv("CLEO_SESSION_GRADE", raising=False)
    monkeypatch.delenv("CLEO_SESSION_GRADE_ID", raising=False)
    monkeypatch.setenv("CLEO_AUDIT_DB", "/elsewhere/audit.db")
    session = GradeSession(settings, session_id="session-1-000001").start()
    assert {name: os.environ[name] for name in VARS} == {
        "CLEO_SESSION_GRADE": "true",
        "CLEO_SESSION_GRADE_ID": "session-1-000001",
        "CLEO_SESSION_ID": "session-1-000001",
        "CLEO_AUDIT_DB": str(settings.db_path),
    }
    assert session.env == {name: os.environ[name] for name in VARS}
    assert Path(session.env["CLEO_AUDIT_DB"]).is_absolute()
    session.close()
    session.close()  # idempotent
    assert os.environ["CLEO_SESSION_ID"] == "outer-session"
    assert os.environ["CLEO_AUDIT_DB"] == "/elsewhere/audit.db"
    assert "CLEO_SESSION_GRADE" not in os.environ
    assert "CLEO_SESSION_GRADE_ID" not in os.environ


def test_start_creates_the_store_without_recording_anything(session: GradeSession) -> None:
    assert session.settings.db_path.is_file()
    assert session.entries == []


def test_using_a_session_before_start_is_a_clear_error(settings: SessionSettings) -> None:
    with pytest.raises(CleoGradeError, match="is not started"):
        GradeSession(settings, session_id="s").record("tasks", "find")


def test_recorded_entries_come_back_in_session_order(session: GradeSession) -> None:
    session.record("session", "list", gateway="cleo_query")
    session.dispatcher.register("tasks", "find", lambda params: [])
    session.dispatcher.query("tasks", "find", {"query": "x"})
    session.record("session", "end")
    entries = session.entries
    assert [(e.domain, e.operation) for e in entries] == [
        ("session", "list"),
        ("tasks", "find"),
        ("session", "end"),
    ]
    assert {e.session_id for e in entries} == {session.id}
    assert entries[1].metadata.gateway == "cleo_query"


@pytest.mark.e2e
def test_entries_include_those_written_by_a_subprocess(session: GradeSession) -> None:
    code = "from pytest_cleo_grade import record; record('tasks', 'exists', {'taskId': 'T1'})"
    subprocess.run([sys.executable, "-c", code], check=True)
    (entry,) = session.entries
    assert (entry.operation, entry.params, entry.session_id) == (
        "exists",
        {"taskId": "T1"},
        session.id,
    )


@pytest.mark.e2e
@pytest.mark.parametrize("child_first", [True, False], ids=["child-then-grade", "grade-only"])
def test_calls_recorded_while_a_grade_is_made_are_late_not_graded(
    session: GradeSession, child_first: bool
) -> None:
    # A judge takes seconds: a child still recording meanwhile (and a thread of this process)
    # added calls the grade never saw. Counted after the grade, they were taken as graded,
    # so the test's end did not warn that its grade missed them.
    code = (
        "from pytest_cleo_grade.capture import audit; audit.record('tasks', 'find', {'query': 'q'})"
    )
    if child_first:  # one stored call the grade does see
        subprocess.run([sys.executable, "-c", code], check=True)
    session.record("session", "list")

    def slow_grader(graded: GradeSession, /, *, now: datetime | None = None) -> GradeResult:
        entries = graded.entries  # what the rubric reads
        subprocess.run([sys.executable, "-c", code], check=True)  # while the judge answers
        graded.record("session", "end")
        return grade_entries(entries, session_id=graded.id, now=now)

    session.grader = slow_grader
    assert session.grade(now=NOW).entry_count == (2 if child_first else 1)
    assert session.recorded_since_graded() == 2


def test_grade_reads_the_store_and_writes_nothing(session: GradeSession) -> None:
    session.record("session", "list")
    session.record("session", "end")
    result = session.grade(now=NOW)
    assert result.session_id == session.id
    assert result.entry_count == 2
    assert result.dimensions["sessionDiscipline"].score == 20
    assert session.settings.history_path is not None
    assert not session.settings.history_path.exists()
    assert session.store.grades() == []


def test_persist_appends_to_the_history_and_the_grades_table(session: GradeSession) -> None:
    session.record("session", "list")
    result = session.grade(now=NOW)
    session.persist(result)
    assert session.settings.history_path is not None
    assert read_grades(session.settings.history_path) == [result]
    assert session.store.grades(session.id) == [result]
    line = session.settings.history_path.read_text().splitlines()[0]
    assert json.loads(line)["evaluator"] == "auto"


def test_persist_without_a_history_path_only_fills_the_grades_table(tmp_path: Path) -> None:
    with GradeSession(SessionSettings(db_path=tmp_path / "a.db")) as session:
        result = session.grade(now=NOW)
        session.persist(result)
        assert session.store.grades() == [result]
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix == ".jsonl") == []


def test_an_empty_session_grades_zero_with_seed_000s_flag(session: GradeSession) -> None:
    result = session.grade(now=NOW)
    assert (result.total_score, result.entry_count, result.flags) == (0, 0, [EMPTY_SESSION_FLAG])


def test_ingest_tags_every_entry_with_the_session_id(session: GradeSession, tmp_path: Path) -> None:
    path = tmp_path / "entries.jsonl"
    rows = [
        {"timestamp": "2026-03-01T12:00:00Z", "sessionId": "other", "domain": "session",
         "operation": "list", "result": {"success": True}},
        {"timestamp": "2026-03-01T12:00:01Z", "domain": "session", "operation": "end",
         "result": {"success": True}},
    ]  # fmt: skip
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    assert session.ingest(path) == 2
    assert session.ingest(rows) == 2
    assert [e.session_id for e in session.entries] == [session.id] * 4


@pytest.mark.parametrize("fmt", ["auto", "json", "jsonl", "cleo-db", "auto-cleo-db"])
def test_ingest_reads_every_import_format_name_of_an_entries_file_or_a_cleo_database(
    session: GradeSession, tmp_path: Path, fmt: str
) -> None:
    rows = [
        {"timestamp": f"2026-03-01T12:00:0{i}Z", "sessionId": "cleo-1", "domain": "session",
         "operation": op, "result": {"success": True}}
        for i, op in enumerate(["list", "end"])
    ]  # fmt: skip
    source: Path = tmp_path / "entries.json"
    source.write_text(json.dumps(rows))
    if fmt.endswith("cleo-db"):
        with AuditStore(tmp_path / "project" / ".cleo" / "tasks.db") as cleo:
            cleo.append_many(load_entries_file(source))
        source = tmp_path / "project"
        if fmt == "auto-cleo-db":  # auto tells a database (or a project) by its content
            source, fmt = source / ".cleo" / "tasks.db", "auto"
    assert session.ingest(source, format=fmt) == 2
    assert [(e.session_id, e.operation) for e in session.entries] == [
        (session.id, "list"),
        (session.id, "end"),
    ]


def test_ingest_names_the_formats_it_reads(session: GradeSession, tmp_path: Path) -> None:
    with pytest.raises(CleoGradeError) as caught:
        session.ingest(tmp_path / "x.csv", format="csv")
    assert str(caught.value) == (
        "ingest: unknown format 'csv': expected one of auto, json, jsonl, otlp, claude-code, "
        "cleo-db"
    )


def test_an_entry_the_store_cannot_hold_never_takes_the_sessions_other_calls_with_it(
    session: GradeSession,
) -> None:
    session.record("session", "list", gateway="cleo_query")
    # A task id from a file name that is not UTF-8: graded, but no SQLite text can hold it.
    session.record("tasks", "add", {"title": "x"}, task_id=os.fsdecode(b"T-\xff"))
    session.record("session", "end", gateway="cleo_mutate")
    with pytest.raises(EntryError) as caught:
        session.flush()
    assert str(caught.value).startswith("1 of 3 entries not stored (the others were): tasks.add:")
    with AuditStore(session.settings.db_path, read_only=True) as store:
        assert [e.operation for e in store.session_entries(session.id)] == ["list", "end"]
    assert session.flush() == 0  # nothing left held, nothing stored twice


def test_ingest_is_all_or_nothing(session: GradeSession) -> None:
    good = {"timestamp": "2026-03-01T12:00:00Z", "domain": "a", "operation": "b",
            "result": {"success": True}}  # fmt: skip
    bad = {**good, "timestamp": "2026-03-01T12:00:00"}  # no timezone
    with pytest.raises(EntryError, match=r"entries\[1\]: timestamp"):
        session.ingest([good, bad])
    assert session.entries == []


def test_two_sessions_on_one_store_stay_apart(settings: SessionSettings) -> None:
    with GradeSession(settings) as first:
        first.record("session", "list")
    with GradeSession(settings) as second:
        second.record("session", "end")
        assert [e.operation for e in second.entries] == ["end"]
    with AuditStore(settings.db_path, read_only=True) as store:
        assert store.session_ids() == [first.id, second.id]


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("module", "forbidden"),
    [
        (
            "pytest_cleo_grade.store",
            {"pytest", "pytest_cleo_grade.capture.audit", "pytest_cleo_grade.grading.session"},
        ),
        ("pytest_cleo_grade.capture.audit", {"pytest", "pytest_cleo_grade.grading.session"}),
        ("pytest_cleo_grade.grading.session", {"pytest", "pytest_cleo_grade.plugin"}),
        ("pytest_cleo_grade.store.sources", {"pytest", "pytest_cleo_grade.grading.session"}),
    ],
)
def test_capture_modules_import_nothing_from_a_higher_layer(
    module: str, forbidden: set[str]
) -> None:
    code = (
        f"import sys, {module}; print(sorted(m for m in {sorted(forbidden)!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_sessions_can_borrow_one_open_store_and_leave_it_open(settings: SessionSettings) -> None:
    with AuditStore(settings.db_path) as shared:
        for n in range(2):
            with GradeSession(settings, store=shared) as borrowing:
                borrowing.record("tasks", "find", {"n": n})
                assert [e.params for e in borrowing.entries] == [{"n": n}]
        # Both sessions closed; the shared store still works.
        assert len(shared.session_ids()) == 2


def test_a_borrowed_store_must_be_the_sessions_own(
    settings: SessionSettings, tmp_path: Path
) -> None:
    with (
        AuditStore(tmp_path / "other.db") as other,
        pytest.raises(CleoGradeError, match=r"other\.db"),
    ):
        GradeSession(settings, store=other)


def test_a_call_an_adapter_noted_and_never_ended_is_forgotten_with_its_session(
    settings: SessionSettings,
) -> None:
    from pytest_cleo_grade.capture import _direct as direct

    identity = direct.CallIdentity.of("tasks_show", None, {"taskId": "T1"})
    with GradeSession(settings):
        # A tool the user's own hook denied: noted at PreToolUse, never ended.
        direct.expect_call("tool-use-1", "tasks_show", arguments={"taskId": "T1"})
        assert direct.is_expected_call(identity)
    # A later test's span of the same call is its own again.
    assert not direct.is_expected_call(identity)


def test_ingesting_a_cleo_database_takes_one_session_never_several_merged(
    session: GradeSession, tmp_path: Path
) -> None:
    rows = [
        {"timestamp": f"2026-03-01T12:00:0{i}Z", "sessionId": sid, "domain": "session",
         "operation": "list", "result": {"success": True}}
        for i, sid in enumerate(["agent-a", "agent-b", "agent-a"])
    ]  # fmt: skip
    source = tmp_path / "rows.json"
    source.write_text(json.dumps(rows))
    with AuditStore(tmp_path / "project" / ".cleo" / "tasks.db") as cleo:
        cleo.append_many(load_entries_file(source))
    with pytest.raises(CleoGradeError) as caught:
        session.ingest(tmp_path / "project")
    assert str(caught.value) == (
        f"ingest: {tmp_path / 'project'} holds 2 sessions (agent-a, agent-b): pass session_id="
    )
    assert session.refusals()  # the test cannot be graded on part of its calls
    other = GradeSession(session.settings)
    with other:
        assert other.ingest(tmp_path / "project", session_id="agent-a") == 2
