"""An MCP server with the scenario's tools; run as a script it serves them over stdio.

``tasks_show`` of the missing task fails the way MCP tools say "not found" (a ToolError whose
text says so), or with ``crash=True`` (``--crash``) with a bare KeyError, which MCPServer turns
into an isError result that only says "Error executing tool tasks_show".
"""

from __future__ import annotations

import sys
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

from pytest_cleo_grade.capture.mcp import AuditMiddleware

READ = ToolAnnotations(read_only_hint=True)
WRITE = ToolAnnotations(read_only_hint=False)


def build(*, audited: bool = False, crash: bool = False) -> MCPServer:
    server: MCPServer = MCPServer("tasks")
    if audited:
        server.middleware.append(AuditMiddleware(server=server))

    @server.tool(annotations=READ)
    def session_list() -> list[str]:
        return ["S1"]

    @server.tool(annotations=READ)
    def admin_help() -> str:
        return "use tasks_find before tasks_show"

    @server.tool(annotations=READ)
    def tasks_find(query: str) -> list[str]:
        return ["T1"] if "login" in query else []

    @server.tool(annotations=READ)
    def tasks_show(taskId: str) -> dict[str, Any]:
        tasks = {"T1": {"id": "T1", "title": "Fix login"}}
        if taskId not in tasks and not crash:
            raise ToolError(f"Task {taskId} not found")
        return tasks[taskId]

    @server.tool(annotations=WRITE)
    def tasks_add(title: str, description: str = "") -> str:
        return "T2"

    @server.tool(annotations=WRITE)
    def session_end() -> str:
        return "ended"

    return server


def export_spans() -> None:
    """Trace the server with the OpenTelemetry SDK, each span exported as it ends (OTLP/HTTP
    to what the OTEL_EXPORTER_OTLP_* variables name): the MCP SDK's own server spans."""
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


if __name__ == "__main__":
    if "--otel" in sys.argv:
        export_spans()
    build(audited="--audited" in sys.argv, crash="--crash" in sys.argv).run("stdio")
