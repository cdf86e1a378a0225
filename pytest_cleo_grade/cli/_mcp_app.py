"""The MCP server of ``cleo-grade mcp``: CLEO's two gateway tools over the MCP SDK (2.x).

Imported only when ``cleo-grade mcp`` runs (or a test builds the server): it loads the SDK.
Over HTTP the app is behind a bearer-token check of its own (constant-time compare), so no
OAuth metadata is needed for a loopback server a harness starts.
"""

from __future__ import annotations

import hmac
import json
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

try:
    import anyio
    from mcp.server.mcpserver import MCPServer
    from mcp_types import CallToolResult, TextContent, ToolAnnotations
except ImportError as exc:  # pragma: no cover - depends on the environment
    from pytest_cleo_grade.core.errors import missing_extra

    raise missing_extra("cleo-grade mcp", "the MCP SDK 2.x", "mcp", exc) from exc

from pytest_cleo_grade.cli._gateway import OPERATIONS, Gateway

__all__ = ["BearerGuard", "build_server", "serve_http"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_INSTRUCTIONS: Final = (
    "CLEO's session grading. Start a graded session with cleo_mutate session start "
    '{"grade": true}, give the returned env to the agent\'s process (every call it makes is '
    "recorded into the session), end it with cleo_mutate session end, read grades with "
    "cleo_query admin grade {sessionId} and admin grade.list. Results are CLEO envelopes: "
    '{"success": true, "data": ...} or {"success": false, "error": {"code", "exitCode", '
    '"message"}}. Calls to this server are never recorded into a session.'
)


def _describe(gateway: str, summary: str) -> str:
    lines = [summary, "", "Operations (domain operation params):"]
    lines += [f"- {d} {o} {p}" for (d, o), p in OPERATIONS[gateway].items()]
    return "\n".join(lines)


def _result(envelope: dict[str, Any], failed: bool) -> CallToolResult:
    text = json.dumps(envelope, ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=envelope,
        is_error=failed,
    )


def build_server(gateway: Gateway) -> MCPServer[Any]:
    """The MCPServer with ``cleo_query`` (read-only) and ``cleo_mutate``."""
    from pytest_cleo_grade import __version__

    server: MCPServer[Any] = MCPServer(
        "cleo-grade", version=__version__, instructions=_INSTRUCTIONS, log_level="WARNING"
    )

    async def run(gateway_name: str, domain: Any, operation: Any, params: Any) -> CallToolResult:
        # SQLite and the rubric are blocking: a worker thread keeps the event loop serving.
        envelope, failed = await anyio.to_thread.run_sync(
            gateway.call, gateway_name, domain, operation, params
        )
        return _result(envelope, failed)

    @server.tool(
        name="cleo_query",
        description=_describe("cleo_query", "CLEO's query gateway for grades (reads only)."),
        annotations=ToolAnnotations(
            title="CLEO query: grades",
            read_only_hint=True,
            idempotent_hint=True,
            open_world_hint=False,
        ),
    )
    async def cleo_query(
        domain: str, operation: str, params: dict[str, Any] | str | None = None
    ) -> CallToolResult:
        return await run("cleo_query", domain, operation, params)

    @server.tool(
        name="cleo_mutate",
        description=_describe(
            "cleo_mutate", "CLEO's mutate gateway: start a graded session, end (grade) it."
        ),
        annotations=ToolAnnotations(
            title="CLEO mutate: graded sessions",
            read_only_hint=False,
            destructive_hint=False,
            idempotent_hint=False,
            open_world_hint=False,
        ),
    )
    async def cleo_mutate(
        domain: str, operation: str, params: dict[str, Any] | str | None = None
    ) -> CallToolResult:
        return await run("cleo_mutate", domain, operation, params)

    return server


class BearerGuard:
    """An ASGI wrapper answering 401 to an HTTP request without ``Authorization: Bearer
    <token>``; lifespan events pass (they start the SDK's session manager)."""

    def __init__(self, app: App, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = b""
            for name, value in scope.get("headers", ()):
                if name.lower() == b"authorization":
                    given = bytes(value)
                    break
            if not hmac.compare_digest(given, self._expected):
                body = b'{"error": "unauthorized: send Authorization: Bearer <token>"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="cleo-grade"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self._app(scope, receive, send)


def serve_http(server: MCPServer[Any], sock: socket.socket, host: str, token: str) -> None:
    """Serve streamable HTTP at ``/mcp`` on the bound, listening ``sock`` until stopped."""
    import uvicorn

    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(
        BearerGuard(app, token), log_level="warning", lifespan="on", access_log=False
    )
    uvicorn.Server(config).run(sockets=[sock])
    sys.stderr.flush()
