"""capture.mcp: MCP tool calls recorded on the client and on the server (in memory, stdio)."""

from __future__ import annotations

import logging
import logging.config
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel

pytest.importorskip("mcp.server.mcpserver", reason="needs the mcp extra (MCP SDK 2.x)")

import anyio
from anyio import wait_all_tasks_blocked
from mcp import Client, StdioServerParameters
from mcp.server.mcpserver import MCPServer, Resolve
from mcp.server.mcpserver.resolve import Elicit
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult

from pytest_cleo_grade.capture import ToolMapping, exit_code_for, subprocess_env
from pytest_cleo_grade.capture.mcp import (
    AuditMiddleware,
    audit_middleware,
    audited_client,
    result_failure,
)
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture_scenario import CALLS, assert_same_grade, grade_by_hand
from tests.capture_servers import mcp_tasks

ROOT = Path(__file__).resolve().parents[2]
#: The scenario's gateways as the tools' readOnlyHint annotations give them.
HINTED = ["cleo_query"] * 4 + ["cleo_mutate"] * 2


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


async def agent(client: Any, *, list_first: bool = True) -> None:
    """The scenario's agent: it ignores the not-found result of tasks_show."""
    if list_first:
        await client.list_tools()
    for name, arguments in CALLS:
        await client.call_tool(name, arguments)


def test_an_audited_in_memory_client_grades_like_hand_recorded_calls(
    session: GradeSession,
) -> None:
    async def main() -> None:
        async with Client(mcp_tasks.build()) as client:
            await agent(audited_client(client))

    anyio.run(main)
    assert_same_grade(session.entries, grade_by_hand(session.id, HINTED))
    assert session.entries[3].error == "Error executing tool tasks_show: Task T9 not found"


@pytest.mark.parametrize("wrapped", ["client", "session"])
def test_the_listing_the_sdk_makes_by_itself_lends_its_hints_whichever_object_is_wrapped(
    session: GradeSession, wrapped: str
) -> None:
    # The agent never lists the tools; the SDK's session does, before calling a tool it has
    # not seen (for its output schema). Wrapping the Client once took no hint from it.
    async def main() -> None:
        async with Client(mcp_tasks.build()) as client:
            target = client if wrapped == "client" else client.session
            await agent(audited_client(target), list_first=False)

    anyio.run(main)
    assert [e.metadata.gateway for e in session.entries] == HINTED
    assert_same_grade(session.entries, grade_by_hand(session.id, HINTED))


def test_a_client_wrapped_before_it_is_entered_takes_the_hints_of_its_session(
    session: GradeSession,
) -> None:
    async def main() -> None:
        async with audited_client(Client(mcp_tasks.build())) as client:
            await agent(client, list_first=False)

    anyio.run(main)
    assert_same_grade(session.entries, grade_by_hand(session.id, HINTED))


def test_wrapping_twice_records_each_call_once(session: GradeSession) -> None:
    async def main() -> None:
        async with Client(mcp_tasks.build()) as client:
            twice = audited_client(audited_client(client))
            assert twice is client
            await twice.call_tool("admin_help", {})

    anyio.run(main)
    assert [(e.domain, e.operation) for e in session.entries] == [("admin", "help")]


def test_wrapping_a_client_and_its_session_records_each_call_once(
    session: GradeSession,
) -> None:
    # Client.call_tool calls its session's: both wrapped, each call was recorded twice.
    async def main() -> None:
        async with Client(mcp_tasks.build()) as client:
            audited_client(client.session)
            audited = audited_client(client)
            await audited.call_tool("admin_help", {})
            await audited.call_tool("tasks_show", {"taskId": "T9"})
            await client.session.call_tool("admin_help", {})  # the session alone: recorded

    anyio.run(main)
    calls = [(e.operation, e.result.exit_code) for e in session.entries]
    assert calls == [("help", 0), ("show", 4), ("help", 0)]


def test_a_session_level_client_is_audited_too(session: GradeSession) -> None:
    async def main() -> None:
        async with Client(mcp_tasks.build()) as client:
            audited = audited_client(client.session, mapping=ToolMapping.parse(["* = query"]))
            await audited.call_tool("tasks_show", {"taskId": "T9"})

    anyio.run(main)
    (entry,) = session.entries
    assert (entry.result.success, entry.result.exit_code, entry.metadata.gateway) == (
        False,
        4,
        "query",
    )


def test_a_json_rpc_error_is_recorded_and_still_raised(session: GradeSession) -> None:
    class Refusing:
        async def call_tool(self, name: str, arguments: Any = None) -> Any:
            raise MCPError(code=-32002, message="Resource T9 missing")

        async def list_tools(self) -> Any:
            return []

    async def main() -> None:
        with pytest.raises(MCPError):
            await audited_client(Refusing()).call_tool("tasks_show", {"taskId": "T9"})

    anyio.run(main)
    (entry,) = session.entries
    assert (entry.result.exit_code, entry.error) == (4, "Resource T9 missing")


def test_the_server_middleware_records_a_crashing_tool_as_not_found(
    session: GradeSession,
) -> None:
    server = mcp_tasks.build(crash=True)
    server.middleware.append(audit_middleware)

    async def main() -> None:
        async with Client(server) as client:
            await agent(client)

    anyio.run(main)
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert session.entries[3].error == "Error executing tool tasks_show"


@pytest.mark.parametrize("quieted", ["level", "disable", "dictconfig"])
def test_a_crash_is_a_not_found_even_with_the_sdks_logger_quieted(
    session: GradeSession, caplog: pytest.LogCaptureFixture, quieted: str
) -> None:
    # Users quiet the SDK's "raised an unexpected exception" tracebacks; the middleware must
    # still hear the crash, and the quieted record must stay quiet.
    logger = logging.getLogger("mcp.server.mcpserver.server")
    level = logger.level
    root = logging.getLogger()
    kept = (root.level, root.handlers[:])
    enabled = [
        each
        for each in logging.root.manager.loggerDict.values()
        if isinstance(each, logging.Logger) and not each.disabled
    ]
    server = mcp_tasks.build(crash=True)
    server.middleware.append(audit_middleware)

    async def main() -> None:
        async with Client(server) as client:
            await agent(client)

    try:
        # caplog's handler would take every record the logger lets through.
        with caplog.at_level(logging.DEBUG, logger="mcp.server.mcpserver.server"):
            if quieted == "level":
                logger.setLevel(logging.CRITICAL)
            elif quieted == "disable":
                logging.disable(logging.CRITICAL)
            else:
                # An application configuring logging after its imports: dictConfig disables
                # the loggers that exist already (disable_existing_loggers defaults to True).
                logging.config.dictConfig({"version": 1, "root": {"level": "WARNING"}})
                assert logger.disabled
            anyio.run(main)
    finally:
        logger.setLevel(level)
        logging.disable(logging.NOTSET)
        root.setLevel(kept[0])
        root.handlers[:] = kept[1]
        for each in enabled:
            each.disabled = False
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert session.entries[3].result.exit_code == 4
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


@pytest.mark.e2e
def test_a_stdio_server_started_by_the_code_under_test_records_with_subprocess_env(
    session: GradeSession,
) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(Path(mcp_tasks.__file__)), "--audited", "--crash"],
        env={**subprocess_env(session), "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )

    async def main() -> None:
        async with Client(params) as client:
            await agent(client)

    anyio.run(main)
    entries = session.entries
    assert {e.session_id for e in entries} == {session.id}
    assert_same_grade(entries, grade_by_hand(session.id, HINTED))


@pytest.mark.e2e
def test_a_stdio_server_without_the_sessions_variables_records_nothing(
    session: GradeSession,
) -> None:
    # The SDK passes only a safe subset of the environment: this is the trap the
    # subprocess_env() line avoids.
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(Path(mcp_tasks.__file__)), "--audited"],
        env={"PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )

    async def main() -> None:
        async with Client(params) as client:
            await client.call_tool("admin_help", {})

    anyio.run(main)
    assert session.entries == []


def run_stdio_server(session: GradeSession, *flags: str, otlp: bool = False) -> None:
    """The scenario's agent (a plain client, traced by --cleo-grade-capture=otel's processor
    in this process) against the tasks server in a child process."""
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(Path(mcp_tasks.__file__)), *flags],
        env={**session.subprocess_env(otlp=otlp), "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )

    async def main() -> None:
        async with Client(params) as client:
            await agent(client)

    uninstall = otel.install_otel_capture()
    try:
        anyio.run(main)
    finally:
        uninstall()


@pytest.mark.e2e
def test_a_stdio_servers_middleware_and_the_clients_spans_are_one_entry_per_call(
    session: GradeSession,
) -> None:
    # The documented recipe with --cleo-grade-capture=otel on: the client's tools/call span
    # (here) and the server's middleware (there) see each call; the trace context the SDK
    # sends with the request ties them.
    with pytest.warns(Warning):  # the client's spans alone would lack the arguments: said
        run_stdio_server(session, "--audited", "--crash")
    entries = session.entries
    assert [e.metadata.source for e in entries] == ["mcp"] * len(CALLS)
    assert_same_grade(entries, grade_by_hand(session.id, HINTED))


@pytest.mark.e2e
def test_an_agents_tool_span_around_a_stdio_call_and_the_servers_middleware_are_one_entry(
    session: GradeSession,
) -> None:
    # An instrumented agent framework: its execute_tool span holds the MCP client's span
    # (a layer of the same call, folded into it here); the server's middleware names the
    # client's span as its caller.
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    from opentelemetry import trace

    params = StdioServerParameters(
        command=sys.executable,
        args=[str(Path(mcp_tasks.__file__)), "--audited"],
        env={**session.subprocess_env(), "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )

    async def main() -> None:
        tracer = trace.get_tracer("agent")
        async with Client(params) as client:
            for name, arguments in CALLS:
                attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
                with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes):
                    await client.call_tool(name, arguments)

    uninstall = otel.install_otel_capture()
    try:
        anyio.run(main)
    finally:
        uninstall()
    entries = session.entries
    assert [e.metadata.source for e in entries] == ["mcp"] * len(CALLS)
    assert [e.result.exit_code for e in entries] == [
        4 if n == "tasks_show" else 0 for n, _ in CALLS
    ]


@pytest.mark.e2e
def test_a_stdio_servers_failure_reaches_the_grade_from_its_own_spans(
    session: GradeSession,
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel extra")
    # No adapter in the server: its MCP SDK spans go to the session's receiver, the client's
    # spans to the processor here. The client's span of tasks_show says nothing of the
    # isError result; the server's says tool_error: one entry per call, and that one failed.
    with pytest.warns(Warning):  # the SDK's spans carry no arguments: said, not hidden
        run_stdio_server(session, "--otel", otlp=True)
    entries = session.entries
    assert session.refusals() == []
    assert [(e.domain, e.operation) for e in entries] == [
        tuple(name.split("_", 1)) for name, _ in CALLS
    ]
    assert [e.result.success for e in entries] == [name != "tasks_show" for name, _ in CALLS]


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        ({"isError": True, "content": [{"type": "text", "text": "no such task"}]}, 4),
        ({"isError": True, "content": [{"type": "text", "text": "permission denied"}]}, 1),
        (
            {
                "content": [
                    {"type": "text", "text": '{"success": false, "error": {"code": "E_NOT_FOUND"}}'}
                ]
            },
            4,
        ),
        ({"structuredContent": {"success": False, "error": {"exitCode": 6}}, "content": []}, 6),
        ({"content": [{"type": "text", "text": "ok"}]}, None),
    ],
)
def test_results_report_failures_by_is_error_or_cleos_envelope(
    result: dict[str, Any], expected: int | None
) -> None:
    failure = result_failure("t", result)
    assert (None if failure is None else exit_code_for(failure)) == expected


def test_with_otel_capture_on_too_an_audited_client_records_each_call_once(
    session: GradeSession,
) -> None:
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")

    async def main() -> None:
        async with Client(mcp_tasks.build(audited=True)) as client:
            await agent(audited_client(client))

    # As --cleo-grade-capture=otel does: the global SDK provider gets the span processor.
    uninstall = otel.install_otel_capture()
    try:
        anyio.run(main)
    finally:
        uninstall()
    # Client wrapper and server middleware each record (as they do without OTel); the MCP
    # SDK's client and server tools/call spans add nothing.
    sources = [entry.metadata.source for entry in session.entries]
    assert len(sources) == 2 * len(CALLS) and "otel" not in sources


@pytest.mark.parametrize("side", ["client", "server"])
def test_with_otel_capture_on_too_a_call_the_tools_code_makes_is_recorded_once(
    session: GradeSession, side: str
) -> None:
    """session_start's code calls tasks_find: two calls, each recorded once, whichever layer
    the adapter is on. Server: the middleware records session_start, the MCP SDK's spans of
    the inner call record tasks_find. Client: the agent's traced session_start (an
    execute_tool span, as instrumented frameworks make) runs an audited client's tasks_find."""
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    from opentelemetry import trace

    server = MCPServer("agent", middleware=[AuditMiddleware()] if side == "server" else [])

    @server.tool()
    async def session_start() -> str:
        async with Client(mcp_tasks.build()) as inner:
            await inner.call_tool("tasks_find", {"query": "login"})
        return "S1"

    async def main() -> None:
        if side == "server":
            async with Client(server) as client:
                await client.call_tool("session_start", {})
            return
        span = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "session_start"}
        with trace.get_tracer("agent").start_as_current_span("execute_tool", attributes=span):
            async with Client(mcp_tasks.build()) as client:
                await audited_client(client).call_tool("tasks_find", {"query": "login"})

    # As --cleo-grade-capture=otel does: the global SDK provider gets the span processor.
    uninstall = otel.install_otel_capture()
    try:
        anyio.run(main)
    finally:
        uninstall()
    recorded = sorted((f"{e.domain}.{e.operation}", e.metadata.source) for e in session.entries)
    if side == "server":
        assert recorded == [("session.start", "mcp"), ("tasks.find", "otel")]
    else:
        assert recorded == [("session.start", "otel"), ("tasks.find", "mcp")]


def test_with_otel_capture_on_too_a_fault_injected_on_the_server_is_recorded_once(
    session: GradeSession,
) -> None:
    # The middleware answers with isError before the tool runs; the SDK's tools/call span
    # around it ends as a tool error, which is the same call, not a failure of its own.
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    session.inject("tasks.show")

    async def main() -> None:
        async with Client(mcp_tasks.build(audited=True)) as client:
            result = await client.call_tool("tasks_show", {"taskId": "T1"})
            assert result.is_error

    uninstall = otel.install_otel_capture()
    try:
        anyio.run(main)
    finally:
        uninstall()
    (entry,) = session.entries
    assert (entry.operation, entry.result.exit_code, entry.metadata.source) == ("show", 4, "mcp")
    assert (entry.metadata.model_extra or {}).get("injected") is True


class Confirm(BaseModel):
    ok: bool


def ask_to_create(title: str) -> Elicit[Confirm]:
    return Elicit(f"Create task {title!r}?", Confirm)


def asking_server(*, audited: bool) -> MCPServer:
    """A tool that asks the user to confirm (MCP 2026-07-28: the first ``tools/call`` round is
    answered with an ``InputRequiredResult``, and the client resends the call with the answer)."""
    server = MCPServer("tasks", middleware=[AuditMiddleware()] if audited else [])

    @server.tool()
    def tasks_add(
        title: str, description: str, confirm: Annotated[Confirm, Resolve(ask_to_create)]
    ) -> str:
        return "T7"

    return server


def answering(action: str) -> Any:
    async def on_elicit(context: Any, params: Any) -> ElicitResult:
        await anyio.sleep(0.2)  # sleep-ok: plays the user thinking (the call's duration has it)
        if action == "accept":
            return ElicitResult(action="accept", content={"ok": True})
        return ElicitResult(action="decline")

    return on_elicit


@pytest.mark.parametrize("side", ["server", "session"])
@pytest.mark.parametrize(("action", "success"), [("accept", True), ("decline", False)])
def test_a_tool_that_asks_the_user_is_one_call_whatever_its_rounds(
    session: GradeSession, side: str, action: str, success: bool
) -> None:
    async def main() -> None:
        server = asking_server(audited=side == "server")
        async with Client(server, elicitation_callback=answering(action)) as client:
            if side == "session":
                audited_client(client.session)  # Client.call_tool calls it once per round
            await client.call_tool("tasks_add", {"title": "Fix login", "description": "d"})

    anyio.run(main)
    (entry,) = session.entries  # the declined confirmation is the tool's outcome, once
    assert (entry.domain, entry.operation, entry.result.success) == ("tasks", "add", success)
    assert entry.params == {"title": "Fix login", "description": "d"}
    # Timed from the first round: the user's answer is part of the call.
    assert entry.result.duration >= 200


def test_a_validation_error_quoting_a_not_found_title_is_no_not_found(
    session: GradeSession,
) -> None:
    # MCPServer answers a misspelt field with pydantic's text, which quotes the arguments.
    server = MCPServer("tasks", middleware=[AuditMiddleware()])

    @server.tool()
    def tasks_add(title: str, description: str) -> str:
        return "T7"

    async def main() -> None:
        async with Client(server) as client:
            result = await client.call_tool(
                "tasks_add", {"title": "Fix the 404 page not found", "desc": "d"}
            )
            assert result.is_error and "not found" in str(result.content)

    anyio.run(main)
    (entry,) = session.entries
    assert (entry.operation, entry.result.success, entry.result.exit_code) == ("add", False, 1)


@pytest.mark.parametrize("side", ["client", "server"])
def test_a_call_cancelled_by_the_callers_timeout_is_recorded_once_as_cancelled(
    session: GradeSession, side: str
) -> None:
    server = MCPServer("tasks", middleware=[AuditMiddleware()] if side == "server" else [])

    @server.tool()
    async def tasks_add(title: str, description: str) -> str:
        await anyio.sleep(30)  # sleep-ok: plays a tool far slower than its caller's bound
        return "T7"

    async def main() -> None:
        async with Client(server) as client:
            tools = audited_client(client) if side == "client" else client
            with anyio.move_on_after(0.3):  # the agent bounds the tool and moves on
                await tools.call_tool("tasks_add", {"title": "Fix login", "description": "d"})
            # The server hears of the cancellation: once every other task waits again, it
            # has cancelled the tool's run and recorded it.
            with anyio.fail_after(60):
                await wait_all_tasks_blocked()

    anyio.run(main)
    (entry,) = session.entries
    assert (entry.operation, entry.result.success, entry.result.exit_code) == ("add", False, 1)
    assert entry.error is not None and entry.error.startswith("cancelled before it ended")
