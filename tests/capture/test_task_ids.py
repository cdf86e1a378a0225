"""Task ids from results: a tasks.add without a description is flagged with the id its
answer names, through the audited dispatcher and the adapters that see the tool's answer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.capture._task_ids import task_id_from_result
from pytest_cleo_grade.capture.audit import AuditedDispatcher
from pytest_cleo_grade.capture.mapping import Call, build_entry
from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.event_loops import close_the_loop_run_sync_leaves  # noqa: F401 (a fixture)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def hygiene_flags(session: GradeSession) -> list[str]:
    return [flag for flag in session.grade().flags if flag.startswith("tasks.add without")]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param({"id": "T123", "title": "Fix login"}, id="id"),
        pytest.param({"taskId": "T123"}, id="taskId"),
        pytest.param({"success": True, "data": {"task": {"id": "T123"}}}, id="cleo-envelope"),
        pytest.param('{"success": true, "data": {"id": "T123"}}', id="json-text"),
    ],
)
def test_the_dispatcher_names_the_task_a_tasks_add_returned(
    session: GradeSession, answer: Any
) -> None:
    dispatcher = AuditedDispatcher()
    dispatcher.register("tasks", "add", lambda params: answer)
    dispatcher.mutate("tasks", "add", {"title": "Fix login"})
    assert session.entries[0].metadata.task_id == "T123"
    # The specification's per-task flag, naming the task.
    assert hygiene_flags(session) == ["tasks.add without description (taskId: T123)"]


def test_an_answer_without_an_id_still_flags_the_task_as_unknown(session: GradeSession) -> None:
    dispatcher = AuditedDispatcher()
    dispatcher.register("tasks", "add", lambda params: "created")
    dispatcher.mutate("tasks", "add", {"title": "Fix login"})
    assert hygiene_flags(session) == ["tasks.add without description (taskId: unknown)"]


def test_a_documented_extractor_reads_the_id_from_any_answer(session: GradeSession) -> None:
    class Created:
        key = "T77"

    dispatcher = AuditedDispatcher(task_id_from=lambda domain, operation, result: result.key)
    dispatcher.register("tasks", "add", lambda params: Created())
    dispatcher.mutate("tasks", "add", {"title": "Fix login"})
    assert hygiene_flags(session) == ["tasks.add without description (taskId: T77)"]


def test_a_failing_extractor_warns_and_the_call_is_still_recorded(session: GradeSession) -> None:
    def broken(domain: str, operation: str, result: Any) -> str | None:
        raise RuntimeError("no key")

    dispatcher = AuditedDispatcher(task_id_from=broken)
    dispatcher.register("tasks", "add", lambda params: {"id": "T1"})
    with pytest.warns(CleoGradeWarning, match="task_id_from failed for tasks.add"):
        dispatcher.mutate("tasks", "add", {"title": "Fix login"})
    assert len(session.entries) == 1
    assert session.entries[0].metadata.task_id is None


def test_a_task_id_in_the_params_wins_over_the_answer(session: GradeSession) -> None:
    dispatcher = AuditedDispatcher()
    dispatcher.register("tasks", "add", lambda params: {"id": "T2"})
    dispatcher.mutate("tasks", "add", {"title": "x", "taskId": "T1"})
    assert session.entries[0].metadata.task_id == "T1"


@pytest.mark.parametrize(
    ("domain", "operation", "result", "expected"),
    [
        pytest.param("tasks", "add", {"id": 42}, "42", id="whole-number"),
        pytest.param("session", "start", {"id": "S1"}, None, id="not-a-task-answer"),
        pytest.param("tasks", "add", {"id": True}, None, id="a-bool-is-no-id"),
        pytest.param("tasks", "add", "[1, 2]", None, id="json-not-an-object"),
        pytest.param("tasks", "add", b'{"taskId": "T5"}', "T5", id="bytes"),
        pytest.param("tasks", "add", "{" * 10_000, None, id="broken-json"),
    ],
)
def test_which_answers_name_a_task(
    domain: str, operation: str, result: Any, expected: str | None
) -> None:
    assert task_id_from_result(domain, operation, result) == expected


def test_an_adapters_call_carries_its_answers_task_id_into_the_entry() -> None:
    entry = build_entry(
        Call(tool="tasks_add", arguments={"title": "x"}, result=json.dumps({"id": "T9"})),
        session_id="s",
    )
    assert (entry.domain, entry.operation, entry.metadata.task_id) == ("tasks", "add", "T9")


def test_the_mcp_client_names_the_task_from_the_tools_structured_answer(
    session: GradeSession,
) -> None:
    pytest.importorskip("mcp.server.mcpserver", reason="needs the mcp extra (MCP SDK 2.x)")
    import anyio
    from mcp import Client
    from mcp.server.mcpserver import MCPServer

    from pytest_cleo_grade.capture.mcp import audited_client

    server: MCPServer = MCPServer("tasks")

    @server.tool()
    def tasks_add(title: str, description: str = "") -> dict[str, str]:
        return {"id": "T31", "title": title}

    async def main() -> None:
        async with Client(server) as client:
            await audited_client(client).call_tool("tasks_add", {"title": "Fix login"})

    anyio.run(main)
    assert hygiene_flags(session) == ["tasks.add without description (taskId: T31)"]


@pytest.mark.usefixtures("close_the_loop_run_sync_leaves")
def test_the_pydantic_ai_hooks_name_the_task_from_the_tools_answer(
    session: GradeSession,
) -> None:
    pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra")
    from pydantic_ai import Agent

    from pytest_cleo_grade.capture.pydantic_ai import AuditHooks
    from tests.capture.test_pydantic_ai import scripted

    agent: Agent[None, str] = Agent(
        model=scripted([("tasks_add", {"title": "Fix login"})]), capabilities=[AuditHooks()]
    )

    @agent.tool_plain
    def tasks_add(title: str, description: str = "") -> dict[str, str]:
        return {"taskId": "T32"}

    agent.run_sync("file the bug")
    assert hygiene_flags(session) == ["tasks.add without description (taskId: T32)"]


def test_the_langchain_middleware_names_the_task_from_the_tool_message(
    session: GradeSession,
) -> None:
    pytest.importorskip("langchain.agents", reason="needs the langchain extra")
    from langchain_core.messages import ToolMessage

    from pytest_cleo_grade.capture.langchain import AuditMiddleware

    class Request:
        def __init__(self) -> None:
            self.tool_call = {"name": "tasks_add", "args": {"title": "Fix login"}, "id": "call-1"}

    def handler(request: Any) -> ToolMessage:
        return ToolMessage(content=json.dumps({"id": "T33"}), tool_call_id="call-1")

    AuditMiddleware().wrap_tool_call(Request(), handler)
    assert hygiene_flags(session) == ["tasks.add without description (taskId: T33)"]


def test_the_claude_hooks_name_the_task_from_the_tool_response(session: GradeSession) -> None:
    pytest.importorskip("claude_agent_sdk", reason="needs the claude extra")
    import asyncio

    from pytest_cleo_grade.capture.claude import audit_hooks
    from tests.capture.test_claude import Claude

    answer = {"content": [{"type": "text", "text": json.dumps({"id": "T34"})}]}
    claude = Claude(audit_hooks())
    asyncio.run(claude.call(0, "mcp__tasks__tasks_add", {"title": "Fix login"}, answer))
    assert hygiene_flags(session) == ["tasks.add without description (taskId: T34)"]


def test_the_openai_agents_processor_names_the_task_from_the_function_spans_output(
    session: GradeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("agents", reason="needs the openai-agents extra")
    import asyncio

    from agents import Agent, Runner, function_tool, set_trace_processors

    from pytest_cleo_grade.capture.openai_agents import AuditTracingProcessor
    from tests.capture.test_openai_agents import ScriptedModel

    @function_tool
    def tasks_add(title: str, description: str = "") -> dict[str, str]:
        """Add a task."""
        return {"taskId": "T35"}

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    set_trace_processors([AuditTracingProcessor()])
    try:
        agent = Agent(
            name="filer", model=ScriptedModel([("tasks_add", {"title": "x"})]), tools=[tasks_add]
        )
        asyncio.run(Runner.run(agent, "file it"))
    finally:
        set_trace_processors([])
    assert hygiene_flags(session) == ["tasks.add without description (taskId: T35)"]


def test_a_claude_code_transcript_names_the_task_from_its_tool_result(tmp_path: Path) -> None:
    from pytest_cleo_grade import grade_entries
    from pytest_cleo_grade.capture.claude_code import load_transcript
    from tests.capture.test_claude_code_import import result, text_blocks, use, write

    path = write(
        tmp_path,
        use("t1", "mcp__tasks__tasks_add"),
        result("t1", text_blocks(json.dumps({"success": True, "data": {"id": "T36"}}))),
    )
    graded = grade_entries(load_transcript(path), session_id="s")
    assert "tasks.add without description (taskId: T36)" in graded.flags
