"""A call a test leaves running that ends during the next test is the first test's call.

Every adapter decides a call's session when the call starts (docs/capture.md, "My test
recorded nothing"): pydantic-ai's AuditHooks, the MCP client wrapper and server middleware,
the OpenAI Agents processor and the Claude hooks recorded into whichever session was active
when the call ended, so the next test was graded for a mutation it never made.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from tests.extras import needs

# The suite drives every adapter but LangChain's (tests/capture/test_langchain.py has its
# own): each needs its extra, which the lowest-versions CI leg does not install.
pytestmark = [
    needs("pydantic_ai", "needs the pydantic-ai extra (pydantic-ai-slim 2.x)"),
    needs("mcp.server.mcpserver", "needs the mcp extra (MCP SDK 2.x)"),
    needs("agents", "needs the openai-agents extra (OpenAI Agents SDK)"),
    needs("claude_agent_sdk", "needs the claude extra (claude-agent-sdk)"),
]

SUITE = """
import asyncio
import threading

import anyio
from agents.tracing import function_span, set_trace_processors, trace
from mcp import Client
from mcp.server.mcpserver import MCPServer
from pydantic_ai import Agent
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from pytest_cleo_grade.capture.claude import audit_hooks
from pytest_cleo_grade.capture.mcp import AuditMiddleware, audited_client
from pytest_cleo_grade.capture.openai_agents import AuditTracingProcessor
from pytest_cleo_grade.capture.pydantic_ai import AuditHooks
from pytest_cleo_grade.store._store import AuditStore

set_trace_processors([AuditTracingProcessor()])
go = threading.Event()
started = {name: threading.Event() for name in ("pydantic", "client", "server", "openai")}
left = []
sessions = []

agent = Agent(capabilities=[AuditHooks()])

@agent.tool_plain
def tasks_delete(taskId: str) -> str:
    started["pydantic"].set()
    go.wait(20)
    return "ok"

def pydantic_call():
    agent.run_sync("go", model=FunctionModel(script))
    # run_sync leaves its event loop as this thread's current one (to reuse it): closed here,
    # or it is collected unclosed (a ResourceWarning) some time after the thread ends.
    asyncio.get_event_loop_policy().get_event_loop().close()

def script(messages, info):
    if len(messages) == 1:
        return ModelResponse(parts=[ToolCallPart("tasks_delete", {"taskId": "T1"})])
    return ModelResponse(parts=[TextPart("done")])

client_side = MCPServer("client side")

@client_side.tool()
async def tasks_archive(taskId: str) -> str:
    started["client"].set()
    await anyio.to_thread.run_sync(go.wait, 20)
    return "ok"

server_side = MCPServer("server side", middleware=[AuditMiddleware()])

@server_side.tool()
async def tasks_cancel(taskId: str) -> str:
    started["server"].set()
    await anyio.to_thread.run_sync(go.wait, 20)
    return "ok"

async def call_through_client():
    async with Client(client_side) as client:
        await audited_client(client).call_tool("tasks_archive", {"taskId": "T1"})

async def call_the_server():
    async with Client(server_side) as client:
        await client.call_tool("tasks_cancel", {"taskId": "T1"})

def openai_call():
    with trace("left running"):
        with function_span("tasks_reopen", input='{"taskId": "T1"}') as span:
            started["openai"].set()
            go.wait(20)
            span.span_data.output = "ok"

claude = audit_hooks()

def claude_hook(event, data):
    callback = claude[event][0].hooks[0]
    asyncio.run(callback(data, data["tool_use_id"], None))

CLAUDE_CALL = {"tool_name": "tasks_complete", "tool_input": {"taskId": "T1"}, "tool_use_id": "u1"}

def test_a_leaves_calls_running(graded_session):
    sessions.append(graded_session.id)
    graded_session.record("session", "list")
    for target in (
        pydantic_call,
        lambda: anyio.run(call_through_client),
        lambda: anyio.run(call_the_server),
        openai_call,
    ):
        thread = threading.Thread(target=target)
        thread.start()
        left.append(thread)
    claude_hook("PreToolUse", CLAUDE_CALL)
    for event in started.values():
        assert event.wait(20)

def test_b_ends_them(graded_session):
    graded_session.record("session", "list")
    go.set()
    for thread in left:
        thread.join(20)
    claude_hook("PostToolUse", {**CLAUDE_CALL, "tool_response": "ok"})
    assert [(e.domain, e.operation) for e in graded_session.entries] == [("session", "list")]
    with AuditStore(".cleo/audit.db") as store:
        first = sorted(e.operation for e in store.session_entries(sessions[0]))
    assert first == ["archive", "cancel", "complete", "delete", "list", "reopen"]
"""


@pytest.fixture
def nothing_left_behind() -> Iterator[None]:
    """The suite runs in this process (its two tests are one session, as in a process of its
    own): the OpenAI Agents processor it registers is unregistered after it, as the OpenAI
    Agents tests' fixtures do, and what its threads left (an event loop) is collected here,
    where a ResourceWarning would fail this test rather than a later one."""
    yield
    from agents.tracing import set_trace_processors

    set_trace_processors([])
    gc.collect()


@pytest.mark.usefixtures("nothing_left_behind")
def test_calls_left_running_by_one_test_are_not_the_next_tests(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
