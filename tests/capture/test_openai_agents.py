"""capture.openai_agents: a real Runner with a scripted model (the SDK's Model interface), no
network, no export to OpenAI; its function spans grade like hand-recorded calls."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs the openai-agents extra (OpenAI Agents SDK)")

from agents import (
    Agent,
    RunConfig,
    Runner,
    add_trace_processor,
    function_tool,
    set_trace_processors,
)
from agents.exceptions import ToolInputGuardrailTripwireTriggered
from agents.items import ModelResponse
from agents.mcp import MCPServerStdio
from agents.models.interface import Model
from agents.tool_guardrails import ToolGuardrailFunctionOutput, tool_input_guardrail
from agents.tracing import function_span, trace
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from pytest_cleo_grade.capture import openai_agents
from pytest_cleo_grade.capture.openai_agents import AuditTracingProcessor
from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture_scenario import CALLS, MISSING_TASK, assert_same_grade, grade_by_hand


class ScriptedModel(Model):
    """Calls the scenario's tools one per turn, whatever the results, then answers."""

    def __init__(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.calls = calls
        self.turn = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        turn, self.turn = self.turn, self.turn + 1
        if turn < len(self.calls):
            name, arguments = self.calls[turn]
            call = ResponseFunctionToolCall(
                type="function_call",
                name=name,
                arguments=json.dumps(arguments),
                call_id=f"call_{turn}",
                id=f"fc_{turn}",
                status="completed",
            )
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text="done", annotations=[])
        message = ResponseOutputMessage(
            type="message", id="msg", role="assistant", status="completed", content=[text]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise AssertionError("the tests run the agent without streaming")


@function_tool
def session_list() -> list[str]:
    """List sessions."""
    return ["S1"]


@function_tool
def admin_help() -> str:
    """Help."""
    return "find before show"


@function_tool
def tasks_find(query: str) -> list[str]:
    """Find tasks."""
    return ["T1"]


def tell_the_model(context: Any, error: Exception) -> str:
    # What an agent that should recover from a miss does: tell its model what went wrong.
    # (The SDK's default error function hides the error, and redacts it from traces too.)
    return f"Error: {error}"


@function_tool(failure_error_function=tell_the_model)
def tasks_show(taskId: str) -> dict[str, str]:
    """Show a task."""
    if taskId == MISSING_TASK:
        raise KeyError(f"task {taskId} not found")
    return {"id": taskId}


def name_the_error(context: Any, error: Exception) -> str:
    # The text docs/capture.md suggests: the exception's type says what a bare KeyError
    # ("'T9'") does not.
    return f"{type(error).__name__}: {error}"


@function_tool(failure_error_function=name_the_error)
def tasks_show_by_key(taskId: str) -> dict[str, str]:
    """Show a task (a dict lookup)."""
    return {"T1": {"id": "T1"}}[taskId]


@function_tool
def tasks_show_quietly(taskId: str) -> dict[str, str]:
    """Show a task (the SDK's default error function)."""
    raise KeyError(f"task {taskId} not found")


@function_tool
def tasks_show_envelope(taskId: str) -> dict[str, Any]:
    """Show a task, answering CLEO's error envelope."""
    return {"success": False, "error": {"code": "E_NOT_FOUND", "exitCode": 4}}


@function_tool
def tasks_add(title: str, description: str = "") -> str:
    """Add a task."""
    return "T2"


@function_tool
def session_end() -> str:
    """End the session."""
    return "ended"


TOOLS = [session_list, admin_help, tasks_find, tasks_show, tasks_add, session_end]


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


@pytest.fixture
def processor(monkeypatch: pytest.MonkeyPatch) -> Iterator[AuditTracingProcessor]:
    # No key, no vendor export: the audit processor replaces the SDK's exporter.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_AGENTS_DISABLE_TRACING", raising=False)
    audit = AuditTracingProcessor()
    set_trace_processors([audit])
    yield audit
    set_trace_processors([])


def test_a_runner_graded_through_its_traces_matches_hand_recorded_calls(
    session: GradeSession, processor: AuditTracingProcessor, recwarn: pytest.WarningsRecorder
) -> None:
    agent = Agent(name="triage", model=ScriptedModel(CALLS), tools=TOOLS)
    result = asyncio.run(Runner.run(agent, "triage the login bug"))
    # Every span carried its call whole: nothing to warn of.
    assert [str(w.message) for w in recwarn if w.category is CleoGradeWarning] == []
    assert result.final_output == "done"
    assert_same_grade(session.entries, grade_by_hand(session.id))
    show = session.entries[3]
    assert show.params == {"taskId": MISSING_TASK}
    assert "not found" in (show.error or "")
    assert show.metadata.source == "openai-agents" and show.result.duration >= 0


def test_outside_a_graded_session_nothing_is_recorded(
    tmp_path: Path, processor: AuditTracingProcessor
) -> None:
    agent = Agent(name="triage", model=ScriptedModel(CALLS[:1]), tools=TOOLS)
    assert asyncio.run(Runner.run(agent, "go")).final_output == "done"
    with GradeSession(SessionSettings(db_path=tmp_path / "later.db")) as later:
        assert later.entries == []


def test_a_cleo_envelope_output_is_a_not_found_and_a_redacted_error_is_exit_one(
    session: GradeSession, processor: AuditTracingProcessor
) -> None:
    calls = [("tasks_show_envelope", {"taskId": "T9"}), ("tasks_show_quietly", {"taskId": "T9"})]
    agent = Agent(
        name="triage",
        model=ScriptedModel(calls),
        tools=[tasks_show_envelope, tasks_show_quietly],
    )
    with pytest.warns(CleoGradeWarning) as warned:
        asyncio.run(Runner.run(agent, "go"))
    # The redacted error is graded on part of the call, and says so; the envelope is whole.
    (message,) = [str(w.message) for w in warned]
    assert message.startswith("cleo-grade: openai-agents: tool 'tasks_show_quietly': ")
    assert "redacted its error's text" in message and "not-found" in message
    envelope, quiet = session.entries
    assert (envelope.domain, envelope.operation, envelope.result.exit_code) == (
        "tasks",
        "show.envelope",
        4,
    )
    # The SDK redacts a tool's error from traces under its default error function: a
    # failure, but nothing says "not found" (docs/capture.md says how to keep the text).
    assert (quiet.result.success, quiet.result.exit_code) == (False, 1)
    assert "redacted" in (quiet.error or "")


def test_a_bare_keyerror_named_by_the_failure_function_is_a_not_found(
    session: GradeSession, processor: AuditTracingProcessor
) -> None:
    agent = Agent(
        name="triage",
        model=ScriptedModel([("tasks_show_by_key", {"taskId": "T9"})]),
        tools=[tasks_show_by_key],
    )
    asyncio.run(Runner.run(agent, "go"))
    (entry,) = session.entries
    assert (entry.result.success, entry.result.exit_code) == (False, 4)
    assert "KeyError: 'T9'" in (entry.error or "")


def test_a_trace_without_sensitive_data_grades_its_calls_without_arguments_and_says_so(
    session: GradeSession, processor: AuditTracingProcessor
) -> None:
    # The SDK writes no arguments, output or error text on the spans of such a run: the miss
    # and the description below cannot be graded, and a silent grade would hide that.
    calls = [
        ("tasks_show_by_key", {"taskId": "T9"}),
        ("tasks_add", {"title": "Fix login", "description": "Users cannot log in"}),
    ]
    agent = Agent(name="t", model=ScriptedModel(calls), tools=[tasks_show_by_key, tasks_add])
    config = RunConfig(trace_include_sensitive_data=False)
    with pytest.warns(CleoGradeWarning) as warned:
        asyncio.run(Runner.run(agent, "go", run_config=config))
    messages = [str(w.message) for w in warned]
    assert [m.split(":")[2] for m in messages] == [" tool 'tasks_show_by_key'", " tool 'tasks_add'"]
    for message in messages:
        assert "neither its arguments nor its output" in message
        assert "not-found" in message and "trace_include_sensitive_data=False" in message
    show, add = session.entries
    assert (show.params, show.result.exit_code, add.params) == ({}, 1, {})


@pytest.fixture
def no_processors(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_AGENTS_DISABLE_TRACING", raising=False)
    set_trace_processors([])
    yield
    set_trace_processors([])


def test_processors_left_registered_by_earlier_tests_record_each_call_once(
    session: GradeSession, no_processors: None
) -> None:
    # What three tests that each add_trace_processor() leave registered: the SDK's processors
    # are process-wide, and every one of them is handed every span.
    for _ in range(3):
        add_trace_processor(AuditTracingProcessor())
    agent = Agent(name="triage", model=ScriptedModel(CALLS), tools=TOOLS)
    asyncio.run(Runner.run(agent, "triage the login bug"))
    assert len(session.entries) == len(CALLS)
    assert_same_grade(session.entries, grade_by_hand(session.id))


def test_the_record_of_recorded_spans_keeps_only_the_newest(no_processors: None) -> None:
    kept = openai_agents.RECORDED_SPANS_KEPT
    add_trace_processor(AuditTracingProcessor())
    with trace("many tool calls"):
        for number in range(kept + 10):
            with function_span(f"tool_{number}"):
                pass
    # Outside a graded session nothing is recorded, but each span is still claimed once; the
    # claims stop growing at the bound (a long-lived process traces without end).
    assert len(openai_agents._claims) == kept


# An MCP SDK server (MCPServer) whose failing tools become isError results the way MCPServer
# makes them; run over stdio by the Agents SDK's own MCPServerStdio.
MCP_SERVER = """
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("tasks")

@server.tool()
def tasks_show(taskId: str) -> str:
    raise ToolError(f"Task {taskId} not found")

@server.tool()
def tasks_get(taskId: str) -> str:
    return {"T1": "Fix login"}[taskId]  # a crash: only "Error executing tool tasks_get"

@server.tool()
def tasks_find(query: str) -> str:
    return f"Task {query} not found in the archive; T1 matches"  # a success that says so

@server.tool()
def tasks_add(title: str) -> str:
    return '{"success": false, "error": {"code": "E_NOT_FOUND", "exitCode": 4}}'

server.run()
"""


@pytest.mark.e2e
def test_an_mcp_servers_error_result_is_a_failure_and_its_not_found_is_exit_four(
    session: GradeSession, processor: AuditTracingProcessor
) -> None:
    calls = [
        ("tasks_show", {"taskId": "T9"}),
        ("tasks_get", {"taskId": "T9"}),
        ("tasks_find", {"query": "T9"}),
        ("tasks_add", {"title": "x"}),
    ]

    async def run() -> None:
        params = {"command": sys.executable, "args": ["-c", MCP_SERVER]}
        async with MCPServerStdio(params=params) as server:
            agent = Agent(name="triage", model=ScriptedModel(calls), mcp_servers=[server])
            await Runner.run(agent, "go")

    asyncio.run(run())
    show, get, find, add = session.entries
    # The SDK hands the isError result to the model as output and keeps the flag off the
    # span: MCPServer's "Error executing tool" text is what says it failed.
    assert (show.result.success, show.result.exit_code) == (False, 4)
    assert show.error == "Error executing tool tasks_show: Task T9 not found"
    assert show.metadata.model_extra is not None and "mcp" in show.metadata.model_extra
    assert (get.result.success, get.result.exit_code) == (False, 1)
    assert (find.result.success, find.result.exit_code) == (True, 0)
    # CLEO's envelope as the text of an MCP result, as from a function tool.
    assert (add.result.success, add.result.exit_code) == (False, 4)


DELETED: list[str] = []


@function_tool(needs_approval=True)
def tasks_delete(taskId: str) -> str:
    """Delete a task."""
    DELETED.append(taskId)
    return "deleted"


def test_a_call_rejected_by_an_approval_decision_is_not_recorded(
    session: GradeSession, processor: AuditTracingProcessor
) -> None:
    DELETED.clear()
    calls = [("tasks_delete", {"taskId": "T1"}), ("tasks_delete", {"taskId": "T2"})]
    agent = Agent(name="triage", model=ScriptedModel(calls), tools=[tasks_delete])

    async def run() -> None:
        paused = await Runner.run(agent, "go")
        (approval,) = paused.interruptions
        state = paused.to_state()
        state.reject(approval, always_reject=True)
        resumed = await Runner.run(agent, state)
        assert resumed.interruptions == []

    asyncio.run(run())
    assert DELETED == []
    # T2 came after "always reject": its span carries the SDK's rejection and is left out.
    # T1's span is the call paused for approval, which says nothing of the pause (the limit
    # docs/capture.md states); the rejected T1 itself leaves no span.
    assert [entry.params for entry in session.entries] == [{"taskId": "T1"}]


@tool_input_guardrail
def no_deleting(data: Any) -> ToolGuardrailFunctionOutput:
    return ToolGuardrailFunctionOutput.raise_exception(output_info="deleting is not allowed")


@function_tool(tool_input_guardrails=[no_deleting])
def tasks_delete_guarded(taskId: str) -> str:
    """Delete a task."""
    DELETED.append(taskId)
    return "deleted"


def test_a_call_stopped_by_a_tool_input_guardrails_tripwire_is_not_recorded(
    session: GradeSession, processor: AuditTracingProcessor
) -> None:
    DELETED.clear()
    calls = [("tasks_find", {"query": "login"}), ("tasks_delete_guarded", {"taskId": "T1"})]
    agent = Agent(
        name="triage", model=ScriptedModel(calls), tools=[tasks_find, tasks_delete_guarded]
    )
    with pytest.raises(ToolInputGuardrailTripwireTriggered):
        asyncio.run(Runner.run(agent, "go"))
    assert DELETED == []
    assert [f"{entry.domain}.{entry.operation}" for entry in session.entries] == ["tasks.find"]


class TracedModel(ScriptedModel):
    """The scripted model, traced as the SDK's chat-completions model traces itself: one
    generation span per request, with its input, output, model and usage."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        from agents.tracing import generation_span

        history = [{"role": "user", "content": input}] if isinstance(input, str) else []
        if not isinstance(input, str):
            history = [item for item in input if isinstance(item, dict) and "role" in item]
        with generation_span(model="scripted-4o", input=history) as span:
            response = await super().get_response(system_instructions, input, *args, **kwargs)
            texts = [
                {"role": "assistant", "content": part.text}
                for item in response.output
                if isinstance(item, ResponseOutputMessage)
                for part in item.content
                if isinstance(part, ResponseOutputText)
            ]
            span.span_data.output = texts
            span.span_data.usage = {"input_tokens": 50, "output_tokens": 5}
        return response


def test_generation_spans_give_the_session_its_conversation_and_usage(
    session: GradeSession, processor: AuditTracingProcessor
) -> None:
    from tests.capture_scenario import goal_and_output, judged_prompt

    agent = Agent(name="triage", model=TracedModel(CALLS), tools=TOOLS)
    asyncio.run(Runner.run(agent, "triage the login bug"))
    talk = session.conversation
    assert talk.goal == "triage the login bug"
    assert talk.final_output == "done"
    assert len(talk.model_calls) == len(CALLS) + 1
    assert talk.tokens()["total"] == 55 * (len(CALLS) + 1)
    assert {c.model for c in talk.model_calls} == {"scripted-4o"}
    before, after = goal_and_output(judged_prompt(session))
    assert '"triage the login bug"' in before
    assert '"done"' in after
