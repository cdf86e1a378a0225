"""Capture: record() through the environment, @audited, and the audited dispatcher."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.capture import audit
from pytest_cleo_grade.capture.audit import AuditedDispatcher, UnknownOperationError, audited
from pytest_cleo_grade.core.errors import CleoGradeWarning, EntryError
from pytest_cleo_grade.store import AuditStore


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / ".cleo" / "audit.db"


@pytest.fixture
def grade_env(monkeypatch: pytest.MonkeyPatch, db: Path) -> Iterator[Path]:
    monkeypatch.setenv("CLEO_SESSION_GRADE", "true")
    monkeypatch.setenv("CLEO_SESSION_GRADE_ID", "session-1-abcdef")
    monkeypatch.setenv("CLEO_SESSION_ID", "session-1-abcdef")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(db))
    yield db


def stored(db: Path, session: str = "session-1-abcdef") -> list[dict[str, Any]]:
    with AuditStore(db, read_only=True) as store:
        rows = [e.to_json_dict() for e in store.session_entries(session)]
    for row in rows:  # unset optional metadata (userId: None ...) is noise here
        row["metadata"] = {k: v for k, v in row["metadata"].items() if v is not None}
    return rows


def test_record_without_an_active_session_is_a_no_op(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID", "CLEO_SESSION_ID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CLEO_AUDIT_DB", str(tmp_path / "audit.db"))
    assert audit.record("tasks", "find") is None
    assert list(tmp_path.iterdir()) == []


def test_record_without_an_audit_db_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    monkeypatch.setenv("CLEO_SESSION_ID", "s")
    assert audit.record("tasks", "add", gateway="cleo_mutate") is None


def test_record_with_unstorable_params_raises_entry_error_and_records_nothing(
    grade_env: Path,
) -> None:
    circular: dict[str, Any] = {}
    circular["self"] = circular
    for params in (circular, {"x": "\ud800"}):
        with pytest.raises(EntryError, match=r"tasks\.find: cannot store"):
            audit.record("tasks", "find", params)
    audit.record("tasks", "find")
    assert len(stored(grade_env)) == 1


def test_record_creates_the_store_and_its_directory(grade_env: Path) -> None:
    entry = audit.record("tasks", "find", {"query": "auth"}, gateway="cleo_query")
    assert entry is not None
    assert grade_env.is_file()
    (row,) = stored(grade_env)
    assert row["sessionId"] == "session-1-abcdef"
    assert row["params"] == {"query": "auth"}
    assert row["metadata"] == {"source": "mcp", "gateway": "cleo_query"}


def test_record_keeps_every_documented_field(grade_env: Path) -> None:
    audit.record(
        "tasks",
        "show",
        {"taskId": "T9"},
        success=False,
        exit_code=4,
        duration=7.5,
        gateway="query",
        source="cli",
        task_id="T9",
        error="E_NOT_FOUND",
    )
    (row,) = stored(grade_env)
    assert row["result"] == {"success": False, "exitCode": 4, "duration": 7.5}
    assert row["metadata"] == {"source": "cli", "gateway": "query", "taskId": "T9"}
    assert row["error"] == "E_NOT_FOUND"


@pytest.mark.parametrize(
    ("gateway", "kept"),
    [
        pytest.param("cleo_mutate", True, id="cleo_mutate-recorded"),
        pytest.param("mutate", True, id="mutate-recorded"),
        pytest.param("cleo_query", False, id="cleo_query-skipped"),
        pytest.param("query", False, id="query-skipped"),
        pytest.param(None, False, id="no-gateway-skipped"),
    ],
)
def test_outside_grade_mode_only_mutations_are_recorded(
    monkeypatch: pytest.MonkeyPatch, db: Path, gateway: str | None, kept: bool
) -> None:
    monkeypatch.delenv("CLEO_SESSION_GRADE", raising=False)
    monkeypatch.delenv("CLEO_SESSION_GRADE_ID", raising=False)
    monkeypatch.setenv("CLEO_SESSION_ID", "plain")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(db))
    result = audit.record("tasks", "add", {"title": "x"}, gateway=gateway)
    assert (result is not None) is kept
    assert (len(stored(db, "plain")) if db.exists() else 0) == int(kept)


def test_in_grade_mode_queries_are_recorded_too(grade_env: Path) -> None:
    audit.record("tasks", "find", gateway="cleo_query")
    audit.record("tasks", "add", gateway="cleo_mutate")
    assert len(stored(grade_env)) == 2


def test_invalid_arguments_raise_an_entry_error_naming_the_field(grade_env: Path) -> None:
    with pytest.raises(EntryError, match=r"tasks\.find: result\.duration"):
        audit.record("tasks", "find", duration=-1)
    with pytest.raises(EntryError, match="domain"):
        audit.record("", "find")


def test_an_unwritable_store_is_a_warning_not_a_crash(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("CLEO_SESSION_GRADE", "true")
    monkeypatch.setenv("CLEO_SESSION_GRADE_ID", "s")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(blocker / "audit.db"))
    with pytest.warns(CleoGradeWarning, match=r"tasks\.find not recorded: .*cannot create"):
        assert audit.record("tasks", "find") is None


def test_an_unwritable_store_warns_but_never_raises_even_when_warnings_are_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("CLEO_SESSION_GRADE", "true")
    monkeypatch.setenv("CLEO_SESSION_GRADE_ID", "s")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(blocker / "audit.db"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error")  # what `filterwarnings = error` does to the code under test
        assert audit.record("tasks", "find") is None
    assert [w.category for w in caught] == [CleoGradeWarning]


@pytest.mark.e2e
def test_a_subprocess_that_inherits_the_environment_records_into_the_same_session(
    grade_env: Path,
) -> None:
    audit.record("session", "list", gateway="cleo_query")
    code = "from pytest_cleo_grade import record; record('tasks', 'find', {'from': 'child'})"
    subprocess.run([sys.executable, "-c", code], check=True)
    audit.record("session", "end")
    ops = [(row["domain"], row["operation"]) for row in stored(grade_env)]
    assert ops == [("session", "list"), ("tasks", "find"), ("session", "end")]
    assert stored(grade_env)[1]["params"] == {"from": "child"}


# -- @audited ------------------------------------------------------------------------------


class NotFound(Exception):
    exit_code = 4


@audited("tasks", "find", gateway="cleo_query")
def find(query: str, *, limit: int = 10, **extra: Any) -> list[str]:
    return [query] * min(limit, 1)


@audited("tasks", "show", gateway="cleo_query")
def show(task_id: str) -> dict[str, str]:
    raise NotFound(f"task {task_id} not found")


@audited("tasks", "exists")
def exists(task_id: str) -> bool:
    return {"T1": True}[task_id]


@audited("tasks", "add", gateway="cleo_mutate")
def add(title: str) -> str:
    raise ValueError("")


def test_audited_records_the_call_arguments_as_params(grade_env: Path) -> None:
    assert find("auth", limit=3, status="open") == ["auth"]
    (row,) = stored(grade_env)
    assert (row["domain"], row["operation"]) == ("tasks", "find")
    assert row["params"] == {"query": "auth", "limit": 3, "status": "open"}
    assert row["result"]["success"] is True
    assert row["result"]["duration"] >= 0
    assert row["metadata"]["gateway"] == "cleo_query"


@pytest.mark.parametrize(
    ("call", "exc_type", "exit_code", "error"),
    [
        pytest.param(lambda: show("T7"), NotFound, 4, "task T7 not found", id="exit-code-attr"),
        pytest.param(lambda: exists("T404"), KeyError, 4, "'T404'", id="key-error-is-4"),
        pytest.param(lambda: add("x"), ValueError, 1, "ValueError", id="other-is-1"),
    ],
)
def test_audited_records_a_failure_and_lets_the_exception_propagate(
    grade_env: Path, call: Any, exc_type: type[Exception], exit_code: int, error: str
) -> None:
    with pytest.raises(exc_type):
        call()
    (row,) = stored(grade_env)
    assert row["result"]["success"] is False
    assert row["result"]["exitCode"] == exit_code
    assert row["error"] == error


def test_audited_coroutine_functions_are_awaited_and_recorded(grade_env: Path) -> None:
    @audited("tasks", "list", gateway="query")
    async def list_tasks(status: str) -> list[str]:
        return [status]

    assert asyncio.run(list_tasks("open")) == ["open"]
    (row,) = stored(grade_env)
    assert row["operation"] == "list"
    assert row["params"] == {"status": "open"}


def test_audited_methods_do_not_record_self(grade_env: Path) -> None:
    class Tools:
        @audited("tasks", "find")
        def find(self, query: str) -> str:
            return query

    Tools().find("q")
    assert stored(grade_env)[0]["params"] == {"query": "q"}


def test_audited_with_an_explicit_recorder_uses_it(grade_env: Path) -> None:
    calls: list[tuple[str, str, dict[str, Any]]] = []

    def recorder(domain: str, operation: str, params: Any = None, **kw: Any) -> None:
        calls.append((domain, operation, dict(params or {})))

    @audited("admin", "help", recorder=recorder)
    def help_me(topic: str) -> str:
        return topic

    help_me("grading")
    assert calls == [("admin", "help", {"topic": "grading"})]
    assert not grade_env.exists()


# -- dispatcher ----------------------------------------------------------------------------


def test_dispatcher_records_query_and_mutate_with_their_gateways(grade_env: Path) -> None:
    dispatcher = AuditedDispatcher()
    dispatcher.register("tasks", "find", lambda p: [p["query"]])

    @dispatcher.register("tasks", "add")
    def add_task(params: dict[str, Any]) -> str:
        return "T1"

    assert dispatcher.query("tasks", "find", {"query": "auth"}) == ["auth"]
    assert dispatcher.mutate("tasks", "add", {"title": "x", "taskId": "T1"}) == "T1"
    rows = stored(grade_env)
    assert [r["metadata"]["gateway"] for r in rows] == ["cleo_query", "cleo_mutate"]
    assert rows[1]["metadata"]["taskId"] == "T1"
    assert rows[0]["params"] == {"query": "auth"}


def test_dispatcher_records_the_params_of_the_call_even_when_the_handler_changes_them(
    grade_env: Path,
) -> None:
    def add(params: dict[str, Any]) -> str:
        params.pop("description")
        params.setdefault("status", "pending")
        return "T1"

    dispatcher = AuditedDispatcher()
    dispatcher.register("tasks", "add", add)
    dispatcher.mutate("tasks", "add", {"title": "x", "description": "why"})
    assert stored(grade_env)[0]["params"] == {"title": "x", "description": "why"}


def test_dispatcher_records_a_failing_handler_with_its_exit_code(grade_env: Path) -> None:
    dispatcher = AuditedDispatcher()

    def missing(params: dict[str, Any]) -> None:
        raise KeyError(params["taskId"])

    dispatcher.register("tasks", "show", missing)
    with pytest.raises(KeyError):
        dispatcher.query("tasks", "show", {"taskId": "T404"})
    (row,) = stored(grade_env)
    assert row["result"]["success"] is False
    assert row["result"]["exitCode"] == 4


def test_dispatcher_records_and_raises_for_an_unknown_operation(grade_env: Path) -> None:
    dispatcher = AuditedDispatcher()
    with pytest.raises(UnknownOperationError, match=r"no handler registered for nope\.op"):
        dispatcher.mutate("nope", "op")
    (row,) = stored(grade_env)
    assert (row["domain"], row["result"]["exitCode"]) == ("nope", 2)


def test_dispatcher_outside_grade_mode_records_mutations_only(
    monkeypatch: pytest.MonkeyPatch, db: Path
) -> None:
    monkeypatch.delenv("CLEO_SESSION_GRADE", raising=False)
    monkeypatch.delenv("CLEO_SESSION_GRADE_ID", raising=False)
    monkeypatch.setenv("CLEO_SESSION_ID", "plain")
    monkeypatch.setenv("CLEO_AUDIT_DB", str(db))
    dispatcher = AuditedDispatcher()
    dispatcher.register("tasks", "find", lambda p: [])
    dispatcher.register("tasks", "add", lambda p: "T1")
    dispatcher.query("tasks", "find")
    dispatcher.mutate("tasks", "add", {"title": "x"})
    assert [row["operation"] for row in stored(db, "plain")] == ["add"]


def test_a_store_deleted_and_recreated_between_calls_is_reopened(grade_env: Path) -> None:
    audit.record("tasks", "find", {"n": 1})
    for leftover in grade_env.parent.iterdir():
        leftover.unlink()  # the store and its -wal/-shm, as `rm -rf .cleo` would
    audit.record("tasks", "find", {"n": 2})
    assert [row["params"] for row in stored(grade_env)] == [{"n": 2}]


def test_params_json_cannot_hold_are_recorded_as_text(grade_env: Path) -> None:
    class Opaque:
        def __str__(self) -> str:
            return "<opaque>"

    audit.record("tasks", "find", {"path": Path("/x/y"), "obj": Opaque(), "text": "ü"})
    (row,) = stored(grade_env)
    assert row["params"] == {"path": "/x/y", "obj": "<opaque>", "text": "ü"}


def test_threads_recording_at_once_lose_nothing(grade_env: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def work(worker: int) -> None:
        for i in range(100):
            assert audit.record("tasks", "find", {"w": worker, "i": i}) is not None

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(work, range(8)))
    rows = stored(grade_env)
    assert sorted((r["params"]["w"], r["params"]["i"]) for r in rows) == [
        (w, i) for w in range(8) for i in range(100)
    ]


class TaskNotFoundError(Exception):
    pass


class Gone(Exception):
    status_code = 404


@pytest.mark.parametrize(
    ("raised", "exit_code"),
    [
        (FileNotFoundError("tasks.json"), 4),
        (TaskNotFoundError("T9"), 4),
        (Gone("gone"), 4),
        (RuntimeError("Task T9 not found"), 4),
        (RuntimeError("database is locked"), 1),
    ],
    ids=["FileNotFoundError", "NotFoundError-class", "HTTP-404", "text", "other"],
)
def test_audited_and_the_dispatcher_map_exit_codes_as_every_adapter_does(
    grade_env: Path, raised: Exception, exit_code: int
) -> None:
    @audited("tasks", "show", gateway="cleo_query")
    def show(task_id: str) -> None:
        raise raised

    dispatcher = AuditedDispatcher()
    dispatcher.register("tasks", "show", lambda params: show(params["taskId"]))
    with pytest.raises(type(raised)):
        show("T9")
    with pytest.raises(type(raised)):
        dispatcher.query("tasks", "show", {"taskId": "T9"})
    codes = [(row["result"]["success"], row["result"]["exitCode"]) for row in stored(grade_env)]
    # The dispatcher's handler ran show() (recorded too), then the dispatcher's own call.
    assert codes == [(False, exit_code)] * 3


def test_an_exit_code_alone_decides_success(grade_env: Path) -> None:
    audit.record("tasks", "show", {"taskId": "T9"}, exit_code=4, gateway="cleo_query")
    audit.record("tasks", "find", exit_code=0, gateway="cleo_query")
    audit.record("tasks", "show", exit_code=4, success=True, gateway="cleo_query")  # as told
    rows = stored(grade_env)
    assert [(r["result"]["success"], r["result"]["exitCode"]) for r in rows] == [
        (False, 4),
        (True, 0),
        (True, 4),
    ]


@pytest.mark.parametrize("gateway", ["cleo_qeury", "Query", ""])
def test_a_gateway_cleo_never_writes_is_refused_where_it_is_recorded(
    grade_env: Path, gateway: str
) -> None:
    with pytest.raises(EntryError) as caught:
        audit.record("tasks", "find", gateway=gateway)
    assert str(caught.value) == (
        f"tasks.find: gateway {gateway!r} is not one of cleo_query, query, cleo_mutate, mutate "
        "(or None)"
    )
    for spelled in ("cleo_query", "query", "cleo_mutate", "mutate", None):
        audit.record("tasks", "find", gateway=spelled)
    assert [row["metadata"].get("gateway") for row in stored(grade_env)] == [
        "cleo_query",
        "query",
        "cleo_mutate",
        "mutate",
        None,
    ]


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        (math.nan, "score"),
        (-math.inf, "score"),
        ([1, {"x": math.nan}], "score[1].x"),
        (10**4300, "score"),  # stored, it could never be read back
    ],
    ids=["nan", "-inf", "nested-nan", "huge-int"],
)
def test_extra_metadata_must_be_finite_where_a_call_is_recorded(
    grade_env: Path, bad: object, where: str
) -> None:
    with pytest.raises(EntryError) as caught:
        audit.record("tasks", "find", gateway="cleo_query", metadata={"score": bad})
    assert str(caught.value) == (
        f"tasks.find: metadata: {where} is not a finite number JSON can carry (NaN, "
        "infinities and integers of more than 4300 digits are invalid)"
    )
    assert not grade_env.exists()  # nothing recorded


def test_an_adapters_call_the_store_cannot_hold_is_a_warning_and_a_refusal_never_raised(
    grade_env: Path,
) -> None:
    from pytest_cleo_grade.capture._refusals import refusals_for
    from pytest_cleo_grade.capture.mapping import Call, record_call

    audit.record("session", "list", gateway="cleo_query")  # the store exists
    with pytest.warns(CleoGradeWarning, match=r"tasks\.add not recorded: .*surrogates"):
        assert record_call(Call(tool="tasks_add", arguments={"title": "\ud800"})) is None
    assert [r.split(":")[0] for r in refusals_for(grade_env, "session-1-abcdef")] == [
        "tasks.add not stored"
    ]


NOT_UTF8_TEST = """
from pytest_cleo_grade import record

def test_agent(graded_session, monkeypatch):
    graded_session.record("session", "list", gateway="cleo_query")
    # An agent's process that mangled the variable: bytes that are no UTF-8.
    monkeypatch.setenv("CLEO_SESSION_GRADE_ID", "s\\udcff")
    assert record("tasks", "find", gateway="cleo_query") is None  # never an exception
"""


def test_a_session_id_that_is_not_utf8_is_a_refusal_the_test_fails_on_not_an_exception(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(NOT_UTF8_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--cleo-grade-fail-under=F")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_agent: not every call of the test could be recorded*: tasks.find not "
            "recorded: CLEO_SESSION_GRADE_ID/CLEO_SESSION_ID is not UTF-8 text ('s\\udcff')*"
        ]
    )


@pytest.mark.e2e
def test_a_child_whose_session_id_is_not_utf8_tells_the_session_and_goes_on(
    tmp_path: Path,
) -> None:
    import os

    from pytest_cleo_grade.grading.session import GradeSession, SessionSettings

    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as session:
        env = {**os.environ, **session.env, "CLEO_SESSION_GRADE_ID": "s\udcff"}
        done = subprocess.run(
            [
                sys.executable,
                "-W",
                "error",
                "-c",
                "from pytest_cleo_grade import record; print(record('tasks', 'find'))",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (done.returncode, done.stdout) == (0, "None\n")
        assert "tasks.find not recorded: CLEO_SESSION_GRADE_ID" in done.stderr
        [reason] = session.refusals()
    assert reason == (
        "tasks.find not recorded: CLEO_SESSION_GRADE_ID/CLEO_SESSION_ID is not UTF-8 text "
        "('s\\udcff')"
    )
