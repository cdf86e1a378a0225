"""``cleo-grade mcp``: CLEO's ``cleo_query``/``cleo_mutate`` gateway for grades, over MCP.

stdio by default (an MCP client starts it as a command); ``--http HOST:PORT`` serves
streamable HTTP at ``/mcp`` on a loopback address, every request needing the bearer token
``$CLEO_GRADE_MCP_TOKEN`` (or one made up and printed at start). The SDK is imported only
here, once the command runs.
"""

from __future__ import annotations

import argparse
import importlib
import ipaddress
import os
import secrets
import socket
import sys
from typing import Any, Final

from pytest_cleo_grade.cli._rubric_args import add_rubric_options
from pytest_cleo_grade.cli.common import (
    CommandError,
    add_db_option,
    add_history_option,
)

__all__ = ["ENV_TOKEN", "register"]

#: The variable the HTTP server reads its bearer token from.
ENV_TOKEN: Final = "CLEO_GRADE_MCP_TOKEN"
#: The shortest token taken from the variable (a guessable one would open the server).
_MIN_TOKEN: Final = 16


def register(subparsers: Any) -> None:
    mcp = subparsers.add_parser(
        "mcp",
        help="serve cleo_query / cleo_mutate (grades, graded sessions) over MCP",
        description=(
            "An MCP server with CLEO's two gateway tools: cleo_query (admin grade "
            "{sessionId}, admin grade.list) and cleo_mutate (session start {grade: true}, "
            "session end {sessionId?}). stdio by default; --http serves streamable HTTP."
        ),
    )
    mcp.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp (loopback only unless "
        f"--allow-remote; bearer token from ${ENV_TOKEN}, else printed at start; PORT 0 "
        "picks a free port)",
    )
    mcp.add_argument(
        "--allow-remote",
        action="store_true",
        help="let --http listen on an address other than loopback",
    )
    add_db_option(mcp)
    add_history_option(mcp)
    add_rubric_options(
        mcp,
        default=None,
        default_text="default: the rubric of the session's latest stored grade, else cleo",
    )
    mcp.set_defaults(handler=run_mcp)


def _host_port(value: str, *, allow_remote: bool) -> tuple[str, int]:
    host, sep, port_text = value.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise CommandError(f"cleo-grade mcp: --http {value!r}: expected HOST:PORT (127.0.0.1:8765)")
    host = host.removeprefix("[").removesuffix("]")
    if not allow_remote and not _loopback(host):
        raise CommandError(
            f"cleo-grade mcp: --http {value}: {host} is not a loopback address; the server "
            "hands out graded sessions: pass --allow-remote to listen there anyway"
        )
    return host, int(port_text)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name other than localhost may resolve anywhere


def _token() -> tuple[str, bool]:
    """The bearer token and whether it was made up here (then it is printed)."""
    given = os.environ.get(ENV_TOKEN)
    if given is None or given == "":
        return secrets.token_urlsafe(32), True
    if len(given) < _MIN_TOKEN or not given.isprintable() or not given.isascii():
        raise CommandError(
            f"cleo-grade mcp: ${ENV_TOKEN}: use at least {_MIN_TOKEN} printable ASCII "
            "characters (or leave it unset for a generated token)"
        )
    return given, False


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise CommandError(f"cleo-grade mcp: --http {host}:{port}: {exc.strerror or exc}") from exc
    return sock


def run_mcp(args: argparse.Namespace) -> int:
    if args.allow_remote and not args.http:
        raise CommandError(
            "cleo-grade mcp: --allow-remote is for --http HOST:PORT (stdio has no address)"
        )
    address = _host_port(args.http, allow_remote=args.allow_remote) if args.http else None
    token, generated = _token() if address else ("", False)
    try:
        _mcp_app = importlib.import_module("pytest_cleo_grade.cli._mcp_app")
    except ImportError as exc:
        text = str(exc)
        raise CommandError(
            text if text.startswith("cleo-grade") else f"cleo-grade mcp: {text}"
        ) from None
    from pytest_cleo_grade.cli._gateway import Gateway

    gateway = Gateway(args)
    server = _mcp_app.build_server(gateway)
    if address is None:
        server.run("stdio")
        return 0
    host, port = address
    sock = _bind(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    # Said once the socket listens: a client may connect as soon as it reads the URL.
    print(f"cleo-grade mcp: serving http://{shown}:{bound}/mcp", file=sys.stderr)
    if generated:
        print(f"cleo-grade mcp: token {token}", file=sys.stderr)
    else:
        print(f"cleo-grade mcp: token from ${ENV_TOKEN}", file=sys.stderr)
    sys.stderr.flush()
    with sock:
        _mcp_app.serve_http(server, sock, host, token)
    return 0
