"""graded_session.inject(): the next matching call fails before it runs, through every adapter
that can intercept a call, recorded like a real failure and marked ``metadata.injected``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade import grade_entries
from pytest_cleo_grade.capture._faults import FaultError, InjectedFault
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.event_loops import close_the_loop_run_sync_leaves  # noqa: F401 (a fixture)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def shown(entries: list[AuditEntry]) -> list[tuple[str, bool, int, bool]]:
    return [
        (
            f"{e.domain}.{e.operation}",
            e.result.success,
            e.result.exit_code,
            bool((e.metadata.model_extra or {}).get("injected")),
        )
        for e in entries
    ]


def test_the_dispatcher_fails_the_next_calls_before_the_handler_runs(
    session: GradeSession,
) -> None:
    ran: list[Any] = []
    dispatcher = session.dispatcher
    dispatcher.register("tasks", "show", lambda params: ran.append(params) or {"id": "T1"})
    session.inject("tasks.show", times=2)
    for _ in range(2):
        with pytest.raises(InjectedFault) as caught:
            dispatcher.query("tasks", "show", {"taskId": "T1"})
        assert caught.value.exit_code == 4
        assert str(caught.value) == "E_NOT_FOUND: tasks.show failed (injected by cleo-grade)"
    assert dispatcher.query("tasks", "show", {"taskId": "T1"}) == {"id": "T1"}
    assert ran == [{"taskId": "T1"}]  # only the third call reached the handler
    assert shown(session.entries) == [
        ("tasks.show", False, 4, True),
        ("tasks.show", False, 4, True),
        ("tasks.show", True, 0, False),
    ]
    assert session.entries[0].error == "E_NOT_FOUND: tasks.show failed (injected by cleo-grade)"


def test_faults_match_their_operation_only_and_other_codes_are_kept(
    session: GradeSession,
) -> None:
    dispatcher = session.dispatcher
    dispatcher.register("tasks", "find", lambda params: [])
    dispatcher.register("tasks", "add", lambda params: "T2")
    session.inject("tasks.add", exit_code=6, error="E_VALIDATION: title too long")
    assert dispatcher.query("tasks", "find", {}) == []
    with pytest.raises(InjectedFault, match="E_VALIDATION: title too long"):
        dispatcher.mutate("tasks", "add", {"title": "x"})
    assert shown(session.entries) == [("tasks.find", True, 0, False), ("tasks.add", False, 6, True)]


def agent(dispatcher: Any, *, recover: bool) -> None:
    """Shows a task; on a not-found it looks the task up again if ``recover``."""
    dispatcher.query("session", "list")
    try:
        dispatcher.query("tasks", "show", {"taskId": "T1"})
    except LookupError:
        pass
    except InjectedFault:
        pass
    if recover:
        dispatcher.query("tasks", "find", {"query": "T1"})
    dispatcher.mutate("session", "end")


def real_not_found(params: dict[str, Any]) -> Any:
    raise KeyError("task T1 not found")


@pytest.mark.parametrize("recover", [True, False])
def test_an_injected_not_found_grades_exactly_like_a_real_one(
    tmp_path: Path, recover: bool
) -> None:
    grades = []
    for injected in (True, False):
        with GradeSession(SessionSettings(db_path=tmp_path / f"{injected}.db")) as session:
            dispatcher = session.dispatcher
            for domain, operation in [("session", "list"), ("tasks", "find"), ("session", "end")]:
                dispatcher.register(domain, operation, lambda params: "ok")
            if injected:
                dispatcher.register("tasks", "show", lambda params: {"id": "T1"})
                session.inject("tasks.show")
            else:
                dispatcher.register("tasks", "show", real_not_found)
            agent(dispatcher, recover=recover)
            result = grade_entries(session.entries, session_id=session.id)
            grades.append((result.dimensions, result.flags, result.total_score))
    assert grades[0] == grades[1]
    protocol = grades[0][0]["errorProtocol"]
    if recover:
        assert (protocol.score, protocol.evidence) == (
            20,
            ["E_NOT_FOUND followed by recovery lookup"],
        )
    else:
        assert protocol.score == 15


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("tasks",), "inject: 'tasks' is not 'domain.operation'"),
        (("tasks.show",), None),
        (("tasks.show", {"exit_code": 0}), "exit_code must be a non-zero int"),
        (("tasks.show", {"times": 0}), "times must be a whole number from 1"),
        (("tasks.show", {"error": "  "}), "error must be a non-empty string"),
    ],
)
def test_bad_arguments_are_one_clear_error(
    session: GradeSession, args: tuple[Any, ...], message: str | None
) -> None:
    kwargs = args[1] if len(args) > 1 else {}
    if message is None:
        assert session.inject(args[0], **kwargs).exit_code == 4
        return
    with pytest.raises(FaultError, match=message):
        session.inject(args[0], **kwargs)


def test_a_fault_is_forgotten_when_its_session_ends(tmp_path: Path) -> None:
    from pytest_cleo_grade.capture import _faults as faults

    with GradeSession(SessionSettings(db_path=tmp_path / "a.db")) as session:
        session.inject("tasks.show", times=3)
        sid = session.id
        assert faults.pending(sid)[0][1] == 3
    assert faults.pending(sid) == []


def test_the_mcp_client_wrapper_and_the_middleware_inject(session: GradeSession) -> None:
    pytest.importorskip("mcp.server.mcpserver", reason="needs the mcp extra (MCP SDK 2.x)")
    import anyio
    from mcp import Client

    from pytest_cleo_grade.capture.mcp import audited_client
    from tests.capture_servers import mcp_tasks

    session.inject("tasks.find")
    results: list[Any] = []

    async def main() -> None:
        async with Client(mcp_tasks.build()) as client:
            audited = audited_client(client)
            await audited.list_tools()
            results.append(await audited.call_tool("tasks_find", {"query": "login"}))
            results.append(await audited.call_tool("tasks_find", {"query": "login"}))
        # The server side: the middleware fails the call inside the server.
        session.inject("tasks.find")
        async with Client(mcp_tasks.build(audited=True)) as client:
            results.append(await client.call_tool("tasks_find", {"query": "login"}))

    anyio.run(main)
    assert [r.is_error for r in results] == [True, False, True]
    assert results[0].content[0].text == "E_NOT_FOUND: tasks.find failed (injected by cleo-grade)"
    assert shown(session.entries) == [
        ("tasks.find", False, 4, True),
        ("tasks.find", True, 0, False),
        ("tasks.find", False, 4, True),
    ]


@pytest.mark.usefixtures("close_the_loop_run_sync_leaves")
def test_the_pydantic_ai_hooks_inject_a_retry(session: GradeSession) -> None:
    pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra")
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from pytest_cleo_grade.capture.pydantic_ai import AuditHooks

    seen: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < 2:
            return ModelResponse(parts=[ToolCallPart("tasks_show", json.dumps({"taskId": "T1"}))])
        return ModelResponse(parts=[TextPart("done")])

    agent: Agent[None, str] = Agent(FunctionModel(respond), capabilities=[AuditHooks()])

    @agent.tool_plain
    def tasks_show(taskId: str) -> dict[str, str]:
        seen.append(taskId)
        return {"id": taskId}

    session.inject("tasks.show")
    assert agent.run_sync("show T1").output == "done"
    assert seen == ["T1"]  # the first call was failed before the tool; the retry ran
    assert shown(session.entries) == [
        ("tasks.show", False, 4, True),
        ("tasks.show", True, 0, False),
    ]


def test_in_a_pytest_run_an_injected_not_found_costs_points_until_the_agent_recovers(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest
        from pytest_cleo_grade.capture._faults import InjectedFault

        def agent(dispatcher, recover):
            dispatcher.query("session", "list")
            try:
                dispatcher.query("tasks", "show", {"taskId": "T1"})
            except InjectedFault:
                if recover:
                    dispatcher.query("tasks", "find", {"query": "T1"})
            dispatcher.mutate("session", "end")

        @pytest.fixture
        def dispatcher(graded_session):
            d = graded_session.dispatcher
            for domain, operation in [("session", "list"), ("tasks", "show"),
                                      ("tasks", "find"), ("session", "end")]:
                d.register(domain, operation, lambda params: "ok")
            graded_session.inject("tasks.show")
            return d

        @pytest.mark.cleo_grade(fail_under=85)
        def test_recovers(dispatcher):
            agent(dispatcher, recover=True)

        @pytest.mark.cleo_grade(fail_under=85)
        def test_does_not_recover(dispatcher):
            agent(dispatcher, recover=False)
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*E_NOT_FOUND (tasks.show) not followed by recovery lookup*"])


def test_audited_tools_fail_an_injected_call_before_they_run(session: GradeSession) -> None:
    from pytest_cleo_grade.capture.audit import audited

    ran: list[str] = []

    @audited("tasks", "show", gateway="cleo_query")
    def show(task_id: str) -> str:
        ran.append(task_id)
        return task_id

    @audited("tasks", "show", gateway="cleo_query")
    async def show_async(task_id: str) -> str:
        ran.append(task_id)
        return task_id

    session.inject("tasks.show", times=2)
    with pytest.raises(InjectedFault):
        show("T1")
    with pytest.raises(InjectedFault):
        asyncio.run(show_async("T2"))
    assert (show("T3"), ran) == ("T3", ["T3"])
    assert shown(session.entries) == [
        ("tasks.show", False, 4, True),
        ("tasks.show", False, 4, True),
        ("tasks.show", True, 0, False),
    ]
    assert session.entries[0].params == {"task_id": "T1"}


def test_a_fault_no_call_used_is_a_warning_naming_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        from pytest_cleo_grade.capture.audit import record

        def test_vacuous(graded_session):
            graded_session.inject("tasks.show")
            graded_session.inject("tasks.exists", times=3)
            # The agent records its calls itself: nothing can fail them on purpose.
            record("tasks", "show", {"taskId": "T1"}, gateway="cleo_query")
            assert graded_session.grade().dimensions["errorProtocol"].score == 20

        def test_used(graded_session):
            graded_session.inject("tasks.show", times=3)  # used once of three: it was tested
            try:
                graded_session.dispatcher.query("tasks", "show")
            except Exception:
                pass
        """
    )
    result = pytester.runpytest("-W", "error")
    result.assert_outcomes(passed=2)
    text = "\n".join(result.outlines)
    assert (
        "cleo-grade: test_a_fault_no_call_used_is_a_warning_naming_the_test.py::test_vacuous: "
        "graded_session.inject() failed no call of tasks.exists, tasks.show: none reached an "
        "adapter that can intercept it"
    ) in text
    assert "::test_used: graded_session.inject()" not in text
