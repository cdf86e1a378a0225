"""capture.langchain: a real LangChain v1 agent and a LangGraph ToolNode graph, driven offline
by LangChain's own GenericFakeChatModel, grade exactly like hand-recorded calls."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="needs the langchain extra (langchain 1.x)")

from langchain.agents import create_agent
from langchain.agents.middleware import ToolRetryMiddleware
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt

from pytest_cleo_grade.capture.langchain import (
    AuditCallbackHandler,
    AuditMiddleware,
    audit_tool_call,
)
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture_scenario import CALLS, MISSING_TASK, assert_same_grade, grade_by_hand


class ScriptedModel(GenericFakeChatModel):
    """LangChain's fake chat model, accepting tools (the scripted messages hold the calls)."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


def scripted(calls: list[tuple[str, dict[str, Any]]]) -> ScriptedModel:
    turns = [
        AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call-{i}"}])
        for i, (name, args) in enumerate(calls)
    ]
    return ScriptedModel(messages=iter([*turns, AIMessage(content="done")]))


def make_tools(missing: str = "raise") -> list[BaseTool]:
    """The code under test's tools; tasks_show of the missing task fails as ``missing`` says."""

    @tool
    def session_list() -> list[str]:
        """List sessions."""
        return ["S1"]

    @tool
    def admin_help() -> str:
        """Help."""
        return "find before show"

    @tool
    def tasks_find(query: str) -> list[str]:
        """Find tasks."""
        return ["T1"]

    @tool
    def tasks_show(taskId: str) -> Any:
        """Show a task."""
        if taskId == MISSING_TASK:
            if missing == "envelope":
                return {"success": False, "error": {"code": "E_NOT_FOUND", "exitCode": 4}}
            raise KeyError(f"task {taskId} not found")
        return {"id": taskId}

    @tool
    def tasks_add(title: str, description: str = "") -> str:
        """Add a task."""
        return "T2"

    @tool
    def session_end() -> str:
        """End the session."""
        return "ended"

    return [session_list, admin_help, tasks_find, tasks_show, tasks_add, session_end]


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def test_a_langchain_agent_with_the_middleware_grades_like_hand_recorded_calls(
    session: GradeSession,
) -> None:
    agent = create_agent(scripted(CALLS), make_tools("envelope"), middleware=[AuditMiddleware()])
    final = agent.invoke({"messages": [HumanMessage("triage the login bug")]})
    assert final["messages"][-1].content == "done"
    assert_same_grade(session.entries, grade_by_hand(session.id))
    show = session.entries[3]
    assert show.params == {"taskId": MISSING_TASK}
    assert show.metadata.source == "langchain" and show.result.duration >= 0


def langgraph_agent(model: ScriptedModel, node: ToolNode) -> Any:
    """A hand-built LangGraph agent: model node, ToolNode, loop until no tool calls."""

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", node)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile()


def test_a_toolnode_error_message_from_a_raised_keyerror_is_a_not_found(
    session: GradeSession,
) -> None:
    # handle_tool_errors turns the KeyError into ToolMessage(status="error"): still exit 4.
    node = ToolNode(make_tools(), handle_tool_errors=True, wrap_tool_call=audit_tool_call)
    langgraph_agent(scripted(CALLS), node).invoke({"messages": [HumanMessage("go")]})
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert "not found" in (session.entries[3].error or "")


def test_a_toolnode_error_from_a_bare_keyerror_is_a_not_found(session: GradeSession) -> None:
    # A dict lookup's KeyError says nothing but the key; LangGraph's message names the type.
    @tool
    def tasks_show(taskId: str) -> Any:
        """Show a task."""
        return {"T1": {"id": "T1"}}[taskId]

    node = ToolNode([tasks_show], handle_tool_errors=True, wrap_tool_call=audit_tool_call)
    calls = [("tasks_show", {"taskId": "T9"})]
    langgraph_agent(scripted(calls), node).invoke({"messages": [HumanMessage("go")]})
    (entry,) = session.entries
    assert (entry.result.success, entry.result.exit_code) == (False, 4)
    assert "KeyError('T9')" in (entry.error or "")


@pytest.mark.parametrize(
    "handle",
    ["The tool failed, try again.", lambda error: f"Tool error: {error}"],
    ids=["text", "function"],
)
def test_a_keyerror_toolnode_turns_into_its_own_text_is_still_a_not_found(
    session: GradeSession, handle: Any
) -> None:
    # The interceptor sees only the error message the node's handle_tool_errors made, which
    # need not name the KeyError: it was recorded as exit 1.
    @tool
    def tasks_show(taskId: str) -> Any:
        """Show a task."""
        return {"T1": {"id": "T1"}}[taskId]

    node = ToolNode([tasks_show], handle_tool_errors=handle, wrap_tool_call=audit_tool_call)
    calls = [("tasks_show", {"taskId": "T9"}), ("tasks_show", {"taskId": "T1"})]
    langgraph_agent(scripted(calls), node).invoke({"messages": [HumanMessage("go")]})
    missing, found = session.entries
    assert (missing.result.success, missing.result.exit_code) == (False, 4)
    assert missing.error in {"The tool failed, try again.", "Tool error: 'T9'"}
    assert (found.result.success, found.result.exit_code) == (True, 0)


def test_the_async_interceptor_records_the_same_calls(session: GradeSession) -> None:
    node = ToolNode(make_tools("envelope"), awrap_tool_call=AuditMiddleware().awrap_tool_call)
    graph = langgraph_agent(scripted(CALLS), node)
    asyncio.run(graph.ainvoke({"messages": [HumanMessage("go")]}))
    assert_same_grade(session.entries, grade_by_hand(session.id))


def test_a_raised_tool_error_is_recorded_and_propagates(session: GradeSession) -> None:
    agent = create_agent(scripted(CALLS[:4]), make_tools(), middleware=[AuditMiddleware()])
    with pytest.raises(KeyError):
        agent.invoke({"messages": [HumanMessage("go")]})
    last = session.entries[-1]
    assert (last.domain, last.operation, last.result.exit_code) == ("tasks", "show", 4)


def test_the_callback_handler_records_tool_runs_paired_by_run_id(session: GradeSession) -> None:
    handler = AuditCallbackHandler()
    node = ToolNode(make_tools(), handle_tool_errors=True)
    graph = langgraph_agent(scripted(CALLS), node)
    graph.invoke({"messages": [HumanMessage("go")]}, config={"callbacks": [handler]})
    assert_same_grade(session.entries, grade_by_hand(session.id))


def test_middleware_and_callbacks_together_record_each_call_once(session: GradeSession) -> None:
    agent = create_agent(scripted(CALLS), make_tools("envelope"), middleware=[AuditMiddleware()])
    agent.invoke({"messages": [HumanMessage("go")]}, config={"callbacks": [AuditCallbackHandler()]})
    assert len(session.entries) == len(CALLS)


def test_a_retry_middleware_inside_the_recording_one_is_one_call_with_callbacks_too(
    session: GradeSession,
) -> None:
    # Each retry is a new tool run with the same call id: the callbacks took only the first
    # as the middleware's call and recorded the other attempts again (three entries).
    attempts: list[str] = []

    @tool
    def tasks_show(taskId: str) -> dict[str, str]:
        """Show a task."""
        attempts.append(taskId)
        raise KeyError(taskId)

    retry = ToolRetryMiddleware(max_retries=2, initial_delay=0, jitter=False)
    agent = create_agent(
        scripted([("tasks_show", {"taskId": MISSING_TASK})]),
        [tasks_show],
        middleware=[AuditMiddleware(), retry],
    )
    agent.invoke({"messages": [HumanMessage("go")]}, config={"callbacks": [AuditCallbackHandler()]})
    assert len(attempts) == 3
    assert [(e.operation, e.result.exit_code) for e in session.entries] == [("show", 4)]


def test_an_injected_not_found_fails_the_call_before_the_tool_runs(session: GradeSession) -> None:
    ran: list[str] = []

    @tool
    def tasks_show(taskId: str) -> dict[str, str]:
        """Show a task."""
        ran.append(taskId)
        return {"id": taskId}

    @tool
    def tasks_find(query: str) -> list[str]:
        """Find tasks."""
        return ["T1"]

    session.inject("tasks.show")
    calls = [("tasks_show", {"taskId": "T1"}), ("tasks_find", {"query": "T1"})]
    agent = create_agent(scripted(calls), [tasks_show, tasks_find], middleware=[AuditMiddleware()])
    messages = agent.invoke({"messages": [HumanMessage("go")]})["messages"]
    assert ran == []  # the tool never ran
    error = [m for m in messages if getattr(m, "status", None) == "error"]
    assert error and error[0].content.startswith("E_NOT_FOUND")
    show = session.entries[0]
    assert (show.result.success, show.result.exit_code) == (False, 4)
    assert show.metadata.model_extra == {**(show.metadata.model_extra or {}), "injected": True}


def test_a_sub_agents_calls_inside_a_recorded_tool_are_recorded_too(
    session: GradeSession,
) -> None:
    # The middleware records the outer call, which the callbacks see too; the calls its
    # tool's sub-agent (no middleware) makes are other calls, seen by the callbacks the tool
    # passes on to it.
    inner = create_agent(scripted([("tasks_show", {"taskId": MISSING_TASK})]), make_tools())

    @tool
    def research(question: str) -> str:
        """Ask the research sub-agent."""
        try:
            return str(inner.invoke({"messages": [HumanMessage(question)]})["messages"][-1].content)
        except KeyError:
            return "not found"

    outer = create_agent(
        scripted([("research", {"question": "login bug"})]),
        [research],
        middleware=[AuditMiddleware()],
    )
    outer.invoke({"messages": [HumanMessage("go")]}, config={"callbacks": [AuditCallbackHandler()]})
    assert [(e.operation, e.result.exit_code, e.metadata.source) for e in session.entries] == [
        ("research", 0, "langchain"),
        ("show", 4, "langchain"),
    ]


@pytest.mark.parametrize("audit", ["middleware", "callbacks"])
def test_a_tool_paused_by_interrupt_is_recorded_once_when_resumed(
    session: GradeSession, audit: str
) -> None:
    # interrupt() (a human approval) pauses the graph with LangGraph's GraphInterrupt raised
    # through the tool; the tool runs again from the start on Command(resume=...).
    @tool
    def tasks_delete(taskId: str) -> str:
        """Delete a task once a human approves."""
        return "deleted" if interrupt({"approve": taskId}) else "kept"

    model = scripted([("tasks_delete", {"taskId": "T1"})])
    middleware = [AuditMiddleware()] if audit == "middleware" else []
    callbacks = [AuditCallbackHandler()] if audit == "callbacks" else []
    agent = create_agent(model, [tasks_delete], middleware=middleware, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "1"}, "callbacks": callbacks}
    paused = agent.invoke({"messages": [HumanMessage("delete T1")]}, config)
    assert "__interrupt__" in paused and session.entries == []
    agent.invoke(Command(resume=True), config)
    assert [(e.domain, e.operation, e.result.exit_code) for e in session.entries] == [
        ("tasks", "delete", 0)
    ]


@pytest.mark.parametrize("audit", ["middleware", "callbacks"])
def test_a_validation_failure_quoting_not_found_is_no_not_found_either_way(
    session: GradeSession, audit: str
) -> None:
    # ToolNode answers with "Error invoking tool 'tasks_show' with kwargs {'id': 'Fix the 404
    # page not found'} with error: ... Field required": the agent's own words, not a miss.
    calls = [("tasks_show", {"id": "Fix the 404 page not found"}), ("tasks_show", {"taskId": "T1"})]
    middleware = [AuditMiddleware()] if audit == "middleware" else []
    callbacks = [AuditCallbackHandler()] if audit == "callbacks" else []
    agent = create_agent(scripted(calls), make_tools(), middleware=middleware)
    agent.invoke({"messages": [HumanMessage("show")]}, config={"callbacks": callbacks})
    first, second = session.entries
    assert (first.result.success, first.result.exit_code) == (False, 1)
    assert first.params == {"id": "Fix the 404 page not found"}
    assert second.result.success


def test_a_toolnode_that_handles_every_error_keeps_a_validation_failure_at_1(
    session: GradeSession,
) -> None:
    # handle_tool_errors=True writes the repr: Error: ToolInvocationError("Error invoking ...").
    node = ToolNode(make_tools(), handle_tool_errors=True, wrap_tool_call=audit_tool_call)
    calls = [("tasks_show", {"id": "Fix the 404 page not found"})]
    langgraph_agent(scripted(calls), node).invoke({"messages": [HumanMessage("go")]})
    (entry,) = session.entries
    assert (entry.result.success, entry.result.exit_code) == (False, 1)
    assert (entry.error or "").startswith("Error: ToolInvocationError(")


def test_a_tool_run_started_in_one_test_and_ended_in_the_next_is_the_first_tests_call(
    pytester: pytest.Pytester,
) -> None:
    # The handler recorded a run into whatever session was active when it ended: the next
    # test's, graded for a delete it never made. (The two tests are one session in this
    # process, as in one of their own: nothing process-wide is involved.)
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(
        """
import threading
from langchain_core.tools import tool
from pytest_cleo_grade.capture.langchain import AuditCallbackHandler
from pytest_cleo_grade.store._store import AuditStore

go = threading.Event()
left = []
sessions = []
handler = AuditCallbackHandler()

@tool
def tasks_delete(taskId: str) -> str:
    \"\"\"Delete a task.\"\"\"
    go.wait(10)
    return "ok"

@tool
def session_list() -> list:
    \"\"\"List sessions.\"\"\"
    return []

def test_a_leaves_a_call_running(graded_session):
    sessions.append(graded_session.id)
    session_list.invoke({}, config={"callbacks": [handler]})
    run = lambda: tasks_delete.invoke({"taskId": "T1"}, config={"callbacks": [handler]})
    thread = threading.Thread(target=run)
    thread.start()
    left.append(thread)

def test_b_ends_it(graded_session):
    session_list.invoke({}, config={"callbacks": [handler]})
    go.set()
    left[0].join()
    assert [e.operation for e in graded_session.entries] == ["list"]
    with AuditStore(".cleo/audit.db") as store:
        assert [e.operation for e in store.session_entries(sessions[0])] == ["list", "delete"]
"""
    )
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_a_langgraph_agents_conversation_reaches_the_judge_through_the_callbacks(
    session: GradeSession,
) -> None:
    from tests.capture_scenario import goal_and_output, judged_prompt

    node = ToolNode(make_tools(), handle_tool_errors=True)
    graph = langgraph_agent(scripted(CALLS), node)
    graph.invoke(
        {"messages": [HumanMessage("triage the login bug")]},
        config={"callbacks": [AuditCallbackHandler()]},
    )
    talk = session.conversation
    assert talk.goal == "triage the login bug"
    assert talk.final_output == "done"
    # One model request per turn, each seen once although each repeats the history.
    assert len(talk.model_calls) == len(CALLS) + 1
    assert [m.text for m in talk.messages].count("triage the login bug") == 1
    before, after = goal_and_output(judged_prompt(session))
    assert '"triage the login bug"' in before
    assert '"done"' in after


def test_the_middleware_records_the_input_each_answer_and_the_output(
    session: GradeSession,
) -> None:
    agent = create_agent(scripted(CALLS), make_tools("envelope"), middleware=[AuditMiddleware()])
    agent.invoke(
        {"messages": [HumanMessage("triage the login bug")]},
        config={"callbacks": [AuditCallbackHandler()]},
    )
    talk = session.conversation
    assert [(m.role, m.text) for m in talk.messages] == [
        ("user", "triage the login bug"),
        ("assistant", "done"),
    ]
    assert talk.output == "done"
    # The middleware and the callbacks both saw each answer: each model call is kept once.
    assert len(talk.model_calls) == len(CALLS) + 1
