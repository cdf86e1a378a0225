"""An MCP server and client (SDK 2.x) in memory, the client's calls recorded."""

from __future__ import annotations

import anyio
from common import graded_session, report
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from pytest_cleo_grade.capture.mcp import audited_client

server = MCPServer("tasks")


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def tasks_find(query: str) -> list[str]:
    return ["T1"]


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def tasks_show(taskId: str) -> dict[str, str]:
    if taskId != "T1":
        raise ToolError(f"Task {taskId} not found")
    return {"id": "T1"}


async def agent() -> None:
    async with Client(server) as client:
        tools = audited_client(client)  # the one added line
        await tools.list_tools()  # the listing lends each tool's readOnlyHint to the gateway
        await tools.call_tool("tasks_show", {"taskId": "T9"})
        await tools.call_tool("tasks_find", {"query": "login"})  # recovers from the miss


with graded_session() as session:
    anyio.run(agent)
    report(session)
