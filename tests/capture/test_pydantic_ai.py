"""capture.pydantic_ai: AuditHooks records an agent's tool calls, failures and retries included."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra (pydantic-ai-slim 2.x)")

from pydantic_ai import Agent, ModelRetry
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel

from pytest_cleo_grade.capture.mapping import ToolMapping
from pytest_cleo_grade.capture.pydantic_ai import AuditHooks, audit_agent
from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture_scenario import CALLS, MISSING_TASK, assert_same_grade, grade_by_hand
from tests.event_loops import close_the_loop_run_sync_leaves  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("close_the_loop_run_sync_leaves")


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def scripted(calls: list[tuple[str, Any]]) -> FunctionModel:
    """A model that makes ``calls`` one per turn (ignoring every result), then answers."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        if turn < len(calls):
            name, arguments = calls[turn]
            return ModelResponse(parts=[ToolCallPart(name, json.dumps(arguments))])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def build_agent(**kwargs: Any) -> Agent[None, str]:
    """The code under test: an agent with CLEO-named tools; tasks_show retries on a miss."""
    agent: Agent[None, str] = Agent(retries=3, **kwargs)

    @agent.tool_plain
    def session_list() -> list[str]:
        return ["S1"]

    @agent.tool_plain
    def admin_help() -> str:
        return "find before show"

    @agent.tool_plain
    def tasks_find(query: str) -> list[str]:
        return ["T1"]

    @agent.tool_plain
    def tasks_show(taskId: str) -> dict[str, str]:
        if taskId == MISSING_TASK:
            raise ModelRetry(f"Task {taskId} not found")
        return {"id": taskId}

    @agent.tool_plain
    def tasks_add(title: str, description: str = "") -> str:
        return "T2"

    @agent.tool_plain
    def session_end() -> str:
        return "ended"

    return agent


def test_the_constructor_capability_grades_like_hand_recorded_calls(
    session: GradeSession,
) -> None:
    agent = build_agent(model=scripted(CALLS), capabilities=[AuditHooks()])
    assert agent.run_sync("triage the login bug").output == "done"
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert session.entries[3].error == f"Task {MISSING_TASK} not found"
    assert {e.metadata.source for e in session.entries} == {"pydantic-ai"}


def test_audit_agent_records_an_unchanged_agent_under_override(session: GradeSession) -> None:
    agent = build_agent()
    with audit_agent(agent), agent.override(model=scripted(CALLS)):
        agent.run_sync("triage the login bug")
    assert_same_grade(session.entries, grade_by_hand(session.id))
    agent_outside = build_agent()
    with agent_outside.override(model=scripted(CALLS[:1])):
        agent_outside.run_sync("again")
    assert len(session.entries) == len(CALLS)


def test_audit_agent_on_an_agent_with_its_own_hooks_records_each_call_once(
    session: GradeSession,
) -> None:
    own = AuditHooks()
    agent = build_agent(model=scripted(CALLS), capabilities=[own])
    with audit_agent(agent) as hooks:
        agent.run_sync("triage the login bug")
    assert hooks is own
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert len(session.entries) == len(CALLS)


def test_nested_audit_agent_records_once_and_the_outer_block_audits_until_it_ends(
    session: GradeSession,
) -> None:
    agent = build_agent()
    # As a fixture's audit_agent and the test's own would nest.
    with audit_agent(agent) as outer:
        with audit_agent(agent) as inner, agent.override(model=scripted(CALLS[:2])):
            agent.run_sync("first")
        assert inner is outer
        with agent.override(model=scripted(CALLS[:1])):
            agent.run_sync("still audited by the outer block")
    with agent.override(model=scripted(CALLS[:1])):
        agent.run_sync("no longer audited")
    assert [(e.domain, e.operation) for e in session.entries] == [
        ("session", "list"),
        ("admin", "help"),
        ("session", "list"),
    ]


def test_audit_agent_refuses_a_mapping_the_hooks_already_there_do_not_use(
    session: GradeSession,
) -> None:
    agent = build_agent(model=scripted(CALLS[:1]), capabilities=[AuditHooks()])
    mapping = ToolMapping.parse(["session_list = session.find"])
    refused = pytest.raises(
        CleoGradeError, match="already has AuditHooks with another tool mapping"
    )
    with refused, audit_agent(agent, mapping=mapping):
        agent.run_sync("list")
    assert session.entries == []


def test_a_per_run_capability_records_too(session: GradeSession) -> None:
    agent = build_agent(model=scripted(CALLS[:2]))
    agent.run_sync("help", capabilities=[AuditHooks()])
    assert [(e.domain, e.operation) for e in session.entries] == [
        ("session", "list"),
        ("admin", "help"),
    ]


def test_an_argument_validation_failure_is_recorded_as_a_failed_call(
    session: GradeSession,
) -> None:
    calls = [("tasks_find", {"query": 42, "unexpected": True}), ("tasks_find", {"query": "x"})]
    agent = build_agent(model=scripted(calls), capabilities=[AuditHooks()])
    agent.run_sync("find")
    first, second = session.entries
    assert (first.domain, first.operation, first.result.success, first.result.exit_code) == (
        "tasks",
        "find",
        False,
        1,
    )
    assert first.params == {"query": 42, "unexpected": True}
    assert "validation error" in (first.error or "")
    assert second.result.success


def test_the_attempt_that_uses_up_the_retries_keeps_the_tools_own_not_found(
    session: GradeSession,
) -> None:
    # retries=3: the fourth miss makes pydantic-ai give up ("exceeded max retries count of 3",
    # raised from the tool's ModelRetry); that attempt failed the way the three before it did.
    agent = build_agent(model=scripted([("tasks_show", {"taskId": MISSING_TASK})] * 4))
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        agent.run_sync("show", capabilities=[AuditHooks()])
    assert [(e.result.exit_code, e.error) for e in session.entries] == [
        (4, f"Task {MISSING_TASK} not found")
    ] * 4


@pytest.mark.parametrize("capture", ["hooks", "spans"])
def test_an_agent_giving_up_inside_a_tool_is_that_tools_own_failure(
    session: GradeSession, capture: str
) -> None:
    inner = build_agent(model=scripted([("tasks_show", {"taskId": MISSING_TASK})] * 4))
    outer: Agent[None, str] = Agent(scripted([("ask_inner", {})]), retries=3)

    @outer.tool_plain
    async def ask_inner() -> str:
        return (await inner.run("show")).output

    # The outer call is on its first attempt: the inner agent's "exceeded max retries" (from
    # its tool's ModelRetry) is what this tool raised, not a retry of its own used up; in the
    # span, the verdict names the inner agent's tool, not ask_inner.
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        run_audited(outer, "delegate", capture)
    (entry,) = session.entries
    assert (entry.operation, entry.result.exit_code) == ("ask_inner", 1)
    assert "exceeded max retries" in (entry.error or "")


def test_a_crashing_tool_is_recorded_before_the_run_fails(session: GradeSession) -> None:
    agent: Agent[None, str] = Agent(
        scripted([("lookup", {"key": "k"})]), capabilities=[AuditHooks()]
    )

    @agent.tool_plain
    def lookup(key: str) -> str:
        return {"other": "v"}[key]

    with pytest.raises(KeyError):
        agent.run_sync("look")
    (entry,) = session.entries
    assert (entry.domain, entry.operation, entry.result.exit_code) == ("tool", "lookup", 4)


def test_test_model_calls_every_tool_and_each_is_recorded(session: GradeSession) -> None:
    agent = build_agent(model=TestModel(), capabilities=[AuditHooks()])
    agent.run_sync("go")
    recorded = {f"{e.domain}_{e.operation}" for e in session.entries}
    assert recorded == {name for name, _ in CALLS}


def test_an_instrumented_agents_spans_grade_like_the_capability(session: GradeSession) -> None:
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    from opentelemetry.sdk.trace import TracerProvider
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider = TracerProvider()
    provider.add_span_processor(otel.AuditSpanProcessor())
    agent = build_agent(model=scripted(CALLS))
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    agent.run_sync("triage the login bug")
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert session.entries[3].error == f"Task {MISSING_TASK} not found"


def test_spans_and_the_capability_together_record_each_call_once(session: GradeSession) -> None:
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    from opentelemetry.sdk.trace import TracerProvider
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider = TracerProvider()
    processor = otel.AuditSpanProcessor()
    provider.add_span_processor(processor)
    agent = build_agent(model=scripted(CALLS), capabilities=[AuditHooks()])
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    try:
        agent.run_sync("triage the login bug")
    finally:
        processor.shutdown()
    # The capability recorded each call; the execute_tool spans around them add nothing.
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert {entry.metadata.source for entry in session.entries} == {"pydantic-ai"}


@pytest.mark.parametrize("where", ["constructor", "audit_agent"])
def test_with_spans_too_an_injected_fault_is_recorded_once(
    session: GradeSession, where: str
) -> None:
    # The injected call never reaches the tool, but its execute_tool span ends with the
    # ModelRetry the hooks raise: it must not be recorded a second time, as a plain failure.
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    from opentelemetry.sdk.trace import TracerProvider
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider = TracerProvider()
    provider.add_span_processor(otel.AuditSpanProcessor())
    session.inject("tasks.show")
    hooks = [AuditHooks()] if where == "constructor" else []
    agent = build_agent(model=scripted(CALLS), capabilities=hooks)
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    try:
        if where == "constructor":
            agent.run_sync("triage the login bug")
        else:
            with audit_agent(agent):
                agent.run_sync("triage the login bug")
    finally:
        provider.shutdown()
    # The injected not-found grades exactly like the scenario's real one, and only once.
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert {entry.metadata.source for entry in session.entries} == {"pydantic-ai"}
    show = session.entries[3]
    assert (show.operation, show.result.exit_code) == ("show", 4)
    assert (show.metadata.model_extra or {}).get("injected") is True


@pytest.mark.parametrize("where", ["constructor", "audit_agent"])
def test_with_otel_capture_too_a_call_the_tools_code_makes_is_recorded_once(
    session: GradeSession, where: str
) -> None:
    # session_start's code calls another tool through an MCP client, whose tools/call spans
    # (the SDK's own) are a call of their own: recorded from the spans, once, beside the
    # hooks' entry of session_start (which its execute_tool span does not record again).
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    pytest.importorskip("mcp.server.mcpserver", reason="needs the mcp extra (MCP SDK 2.x)")
    from mcp import Client

    from tests.capture_servers import mcp_tasks

    hooks = [AuditHooks()] if where == "constructor" else []
    agent: Agent[None, str] = Agent(scripted([("session_start", {})]), capabilities=hooks)

    @agent.tool_plain
    async def session_start() -> str:
        async with Client(mcp_tasks.build()) as client:
            await client.call_tool("tasks_find", {"query": "login"})
        return "S1"

    # As --cleo-grade-capture=otel does: the global SDK provider gets the span processor,
    # and the agent and the MCP SDK trace there.
    uninstall = otel.install_otel_capture()
    agent.instrument = True
    try:
        if where == "constructor":
            agent.run_sync("start")
        else:
            with audit_agent(agent):
                agent.run_sync("start")
    finally:
        uninstall()
    recorded = sorted((f"{e.domain}.{e.operation}", e.metadata.source) for e in session.entries)
    assert recorded == [("session.start", "pydantic-ai"), ("tasks.find", "otel")]


def run_audited(agent: Agent[None, str], prompt: str, capture: str) -> None:
    """Run ``agent`` recorded by ``capture``: its AuditHooks, or its own instrumentation's
    execute_tool spans through the span processor (what ``--cleo-grade-capture=otel`` does)."""
    if capture == "hooks":
        agent.run_sync(prompt, capabilities=[AuditHooks()])
        return
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    from opentelemetry.sdk.trace import TracerProvider
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider = TracerProvider()
    provider.add_span_processor(otel.AuditSpanProcessor())
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    try:
        agent.run_sync(prompt)
    finally:
        provider.shutdown()


@pytest.mark.parametrize("capture", ["hooks", "spans"])
def test_the_attempt_that_uses_up_the_retries_is_the_same_not_found_either_way(
    session: GradeSession, capture: str
) -> None:
    # The last attempt's span holds "exceeded max retries"; the tool's own ModelRetry ("Task
    # T9 not found") is only the cause in its exception event's stack trace.
    agent = build_agent(model=scripted([("tasks_show", {"taskId": MISSING_TASK})] * 4))
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        run_audited(agent, "show", capture)
    assert [(e.result.exit_code, e.error) for e in session.entries] == [
        (4, f"Task {MISSING_TASK} not found")
    ] * 4


@pytest.mark.parametrize("capture", ["hooks", "spans"])
def test_the_code_around_a_used_up_retry_is_not_its_error_text(
    session: GradeSession, capture: str
) -> None:
    agent: Agent[None, str] = Agent(scripted([("tasks_show", {"taskId": "T1"})] * 2), retries=1)

    @agent.tool_plain
    def tasks_show(taskId: str) -> str:
        raise ModelRetry("try again later")  # the frame's source line: not found

    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        run_audited(agent, "show", capture)
    assert [(e.result.exit_code, e.error) for e in session.entries] == [(1, "try again later")] * 2


@pytest.mark.parametrize("capture", ["hooks", "spans"])
def test_a_validation_failure_quoting_not_found_is_no_not_found_either_way(
    session: GradeSession, capture: str
) -> None:
    # The span's result is pydantic-ai's retry prompt: the errors as JSON, quoting the input.
    calls = [("tasks_show", {"id": "Fix the 404 page not found"}), ("tasks_show", {"taskId": "T1"})]
    run_audited(build_agent(model=scripted(calls)), "show", capture)
    first, second = session.entries
    assert (first.result.success, first.result.exit_code) == (False, 1)
    assert first.params == {"id": "Fix the 404 page not found"}
    assert second.result.success


def test_parallel_calls_cancelled_by_a_siblings_error_are_recorded_as_failures(
    session: GradeSession,
) -> None:
    # When one of a response's parallel calls raises, pydantic-ai cancels the others. The
    # hooks caught only Exception, so a cancelled call (maybe a tasks.add that had acted) was
    # not recorded at all, while the instrumented run's spans recorded it as a failure.
    agent: Agent[None, str] = Agent(capabilities=[AuditHooks()])
    running = asyncio.Event()

    @agent.tool_plain
    async def tasks_add(title: str, description: str) -> str:
        running.set()
        await asyncio.sleep(30)  # sleep-ok: plays a slow tool, cancelled long before
        return "T2"

    @agent.tool_plain
    async def tasks_show(taskId: str) -> dict[str, str]:
        await running.wait()
        raise KeyError(taskId)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(
            parts=[
                ToolCallPart("tasks_add", {"title": "A", "description": "d"}),
                ToolCallPart("tasks_show", {"taskId": "T9"}),
            ]
        )

    with pytest.raises(KeyError):
        agent.run_sync("go", model=FunctionModel(respond))
    outcomes = {
        e.operation: (e.result.success, e.result.exit_code, e.error) for e in session.entries
    }
    assert outcomes == {
        "show": (False, 4, "'T9'"),
        "add": (False, 1, "cancelled before it ended (CancelledError)"),
    }


def test_the_runs_conversation_and_usage_reach_the_session_and_the_judge(
    session: GradeSession,
) -> None:
    from tests.capture_scenario import goal_and_output, judged_prompt

    agent = build_agent(model=scripted(CALLS), capabilities=[AuditHooks()])
    agent.run_sync("triage the login bug")
    talk = session.conversation
    assert talk.goal == "triage the login bug"
    assert talk.output == "done"
    assert [m.role for m in talk.messages] == ["user", "assistant"]
    # One model request per turn: six tool calls, then the answer; FunctionModel counts tokens.
    assert len(talk.model_calls) == len(CALLS) + 1
    assert {c.model for c in talk.model_calls} == {"function:respond:"}
    assert talk.tokens()["input"] > 0 and talk.tokens()["output"] > 0
    assert talk.messages[1].model_call == talk.model_calls[-1].id
    before, after = goal_and_output(judged_prompt(session))
    assert '"triage the login bug"' in before
    assert '"done"' in after
