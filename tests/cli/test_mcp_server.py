"""``cleo-grade mcp``: CLEO's gateway tools driven by the MCP SDK's own client (in memory,
over stdio and over streamable HTTP)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp.server.mcpserver", reason="needs the mcp extra (MCP SDK 2.x)")

import anyio
import httpx2
import jsonschema
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.cli._gateway import Gateway
from pytest_cleo_grade.cli._mcp_app import build_server
from pytest_cleo_grade.cli.main import build_parser
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from pytest_cleo_grade.store import AuditStore
from tests.processes import DEADLINE, read_line

BIN = Path(sys.executable).parent
SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "grade.schema.json").read_text()
)
VARIABLES = ("CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID", "CLEO_SESSION_ID", "CLEO_AUDIT_DB")
#: The agent's calls, recorded with `cleo-grade record` under the variables session start gave.
AGENT_CALLS = (
    ("session", "list", "--gateway", "cleo_query"),
    ("tasks", "find", "--gateway", "cleo_query"),
    ("tasks", "show", "--exit-code", "4", "--gateway", "cleo_query"),
    ("session", "end", "--gateway", "cleo_mutate"),
)


@pytest.fixture(autouse=True)
def _no_session_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    previous, saved = Path.cwd(), {name: os.environ.get(name) for name in VARIABLES}
    os.chdir(cwd)
    os.environ.update(env or {})
    try:
        with redirect_stdout(out), redirect_stderr(err):
            status = main(list(args))
    finally:
        os.chdir(previous)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return status, out.getvalue(), err.getvalue()


def in_memory_server(cwd: Path, *options: str, env: dict[str, str] | None = None) -> Any:
    previous = Path.cwd()
    os.chdir(cwd)  # the defaults (.cleo/audit.db, the history) are resolved once, here
    try:
        args = build_parser().parse_args(["mcp", *options])
        return build_server(Gateway(args, env=env or {}))
    finally:
        os.chdir(previous)


def envelope(result: Any) -> dict[str, Any]:
    (block,) = result.content
    data: dict[str, Any] = json.loads(block.text)
    assert result.structured_content == data
    assert result.is_error is not data["success"]
    return data


async def call(client: Any, tool: str, domain: str, operation: str, **params: Any) -> Any:
    arguments: dict[str, Any] = {"domain": domain, "operation": operation, "params": params}
    return envelope(await client.call_tool(tool, arguments))


def record_agent_calls(env: dict[str, str], cwd: Path) -> None:
    for calls in AGENT_CALLS:
        assert cli("record", *calls, cwd=cwd, env=env)[0] == 0


def without_time(grade: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in grade.items() if key != "timestamp"}


async def lifecycle(client: Any, cwd: Path, *, record: Any = record_agent_calls) -> None:
    """The Done-when: tools listed, a graded session started, calls recorded with its
    variables, ended, and read back as `cleo-grade grade --json` prints it."""
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == ["cleo_mutate", "cleo_query"]
    assert tools["cleo_query"].annotations.read_only_hint is True
    assert tools["cleo_mutate"].annotations.read_only_hint is False
    started = await call(client, "cleo_mutate", "session", "start", grade=True, scope="epic:T1")
    assert started["success"] is True
    data = started["data"]
    assert data["env"]["CLEO_SESSION_GRADE"] == "true" and data["scope"] == "epic:T1"
    await anyio.to_thread.run_sync(record, data["env"], cwd)
    ended = await call(client, "cleo_mutate", "session", "end")
    assert ended["success"] is True and ended["_meta"]["operation"] == "end"
    session_id = data["sessionId"]
    assert (ended["data"]["sessionId"], ended["data"]["totalScore"]) == (session_id, 85)
    read = await call(client, "cleo_query", "admin", "grade", sessionId=session_id)
    status, out, _ = cli("grade", session_id, "--json", "--no-save", cwd=cwd)
    assert status == 0
    assert (
        without_time(read["data"]) == without_time(json.loads(out)) == without_time(ended["data"])
    )
    for grade in (read["data"], ended["data"]):
        jsonschema.validate(grade, SCHEMA)
    listed = await call(client, "cleo_query", "admin", "grade.list")
    # session end saved it once; admin grade (a query) saved nothing.
    assert [g["sessionId"] for g in listed["data"]] == [session_id]


def test_an_in_memory_client_starts_records_ends_and_reads_a_graded_session(
    tmp_path: Path,
) -> None:
    async def main_() -> None:
        async with Client(in_memory_server(tmp_path)) as client:
            await lifecycle(client, tmp_path)

    anyio.run(main_)
    history = tmp_path / ".cleo" / "metrics" / "GRADES.jsonl"
    assert len(history.read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("tool", "domain", "operation", "params", "code", "exit_code", "text"),
    [
        pytest.param(
            "cleo_query",
            "admin",
            "grade",
            {"sessionId": "session-typo"},
            "E_NOT_FOUND",
            4,
            "session session-typo not found",
            id="unknown-session",
        ),
        pytest.param(
            "cleo_query",
            "tasks",
            "find",
            {},
            "E_NOT_FOUND",
            4,
            "unknown domain 'tasks'",
            id="unknown-domain",
        ),
        pytest.param(
            "cleo_query",
            "admin",
            "help",
            {},
            "E_NOT_FOUND",
            4,
            "unknown operation 'help'",
            id="unknown-operation",
        ),
        pytest.param(
            "cleo_query",
            "session",
            "start",
            {},
            "E_NOT_FOUND",
            4,
            "is a mutation",
            id="mutation-through-query",
        ),
        pytest.param(
            "cleo_query",
            "admin",
            "grade",
            {},
            "E_INVALID_INPUT",
            2,
            "params.sessionId must be a non-empty string",
            id="no-session-id",
        ),
        pytest.param(
            "cleo_mutate",
            "session",
            "start",
            {"grade": "yes"},
            "E_INVALID_INPUT",
            2,
            "params.grade must be true or false",
            id="grade-not-a-bool",
        ),
        pytest.param(
            "cleo_mutate",
            "session",
            "start",
            {"grade": True, "scop": "x"},
            "E_INVALID_INPUT",
            2,
            "unknown params 'scop'",
            id="misspelt-param",
        ),
        pytest.param(
            "cleo_mutate",
            "session",
            "end",
            {},
            "E_NOT_FOUND",
            4,
            "no current session",
            id="no-current-session",
        ),
    ],
)
def test_a_call_that_fails_is_cleos_error_envelope_with_is_error(
    tmp_path: Path,
    tool: str,
    domain: str,
    operation: str,
    params: dict[str, Any],
    code: str,
    exit_code: int,
    text: str,
) -> None:
    (tmp_path / ".cleo").mkdir()
    assert cli("session", "start", "--grade", cwd=tmp_path)[0] == 0  # a store to look in

    async def main_() -> dict[str, Any]:
        async with Client(in_memory_server(tmp_path)) as client:
            return await call(client, tool, domain, operation, **params)

    failed = anyio.run(main_)
    assert failed["success"] is False
    assert (failed["error"]["code"], failed["error"]["exitCode"]) == (code, exit_code)
    assert text in failed["error"]["message"]
    assert failed["_meta"] == {"gateway": tool, "domain": domain, "operation": operation}


def test_params_sent_as_json_text_are_read_as_the_object(tmp_path: Path) -> None:
    async def main_() -> dict[str, Any]:
        async with Client(in_memory_server(tmp_path)) as client:
            result = await client.call_tool(
                "cleo_mutate",
                {"domain": "session", "operation": "start", "params": '{"grade": true}'},
            )
            return envelope(result)

    started = anyio.run(main_)
    assert started["data"]["grade"] is True


def test_the_servers_own_calls_are_never_recorded_into_the_session_around_it(
    tmp_path: Path,
) -> None:
    # The server runs where a graded session is active (its variables set, as in a test
    # that hands them on): none of its calls may become that session's entries.
    with GradeSession(SessionSettings(db_path=tmp_path / ".cleo" / "audit.db")) as outer:
        server = in_memory_server(tmp_path, env=dict(os.environ))
        before = dict(os.environ)

        async def main_() -> None:
            async with Client(server) as client:
                await call(client, "cleo_query", "admin", "grade.list")
                started = await call(client, "cleo_mutate", "session", "start", grade=True)
                inner = started["data"]["sessionId"]
                await call(client, "cleo_query", "admin", "grade", sessionId=inner)
                await call(client, "cleo_mutate", "session", "end", sessionId=inner)

        anyio.run(main_)
        assert dict(os.environ) == before  # the server never set its own environment
        assert outer.entries == []
        assert outer.store.count() == 0


def test_session_end_without_an_id_ends_the_session_the_servers_environment_names(
    tmp_path: Path,
) -> None:
    done = cli("session", "start", "--grade", "--json", cwd=tmp_path)
    env = json.loads(done[1])["env"]
    record_agent_calls(env, tmp_path)

    async def main_() -> dict[str, Any]:
        async with Client(in_memory_server(tmp_path, env=env)) as client:
            return await call(client, "cleo_mutate", "session", "end")

    ended = anyio.run(main_)
    assert ended["data"]["sessionId"] == env["CLEO_SESSION_GRADE_ID"]


@pytest.mark.parametrize(
    ("argv", "env", "text"),
    [
        (["--http", "0.0.0.0:0"], {}, "0.0.0.0 is not a loopback address"),
        (["--http", "example.org:80"], {}, "example.org is not a loopback address"),
        (["--http", "127.0.0.1"], {}, "expected HOST:PORT"),
        (["--http", "127.0.0.1:0"], {"CLEO_GRADE_MCP_TOKEN": "short"}, "at least 16"),
    ],
)
def test_http_refuses_what_would_open_the_server_to_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], env: dict[str, str],
    text: str,
) -> None:  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    status, out, err = cli("mcp", *argv, cwd=tmp_path)
    assert (status, out) == (2, "")
    assert text in err and err.count("\n") == 1


@pytest.mark.e2e
def test_a_stdio_client_runs_the_whole_lifecycle_on_the_installed_command(
    tmp_path: Path,
) -> None:
    params = StdioServerParameters(command=str(BIN / "cleo-grade"), args=["mcp"], cwd=str(tmp_path))

    def record(env: dict[str, str], cwd: Path) -> None:
        for calls in AGENT_CALLS:
            subprocess.run(
                [str(BIN / "cleo-grade"), "record", *calls], cwd=cwd, env={**os.environ, **env},
                check=True, timeout=DEADLINE,
            )  # fmt: skip

    async def main_() -> None:
        async with Client(params) as client:
            await lifecycle(client, tmp_path, record=record)

    anyio.run(main_)


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, Path]]:
    """``cleo-grade mcp --http 127.0.0.1:0`` in a process: its URL, the token it printed and its
    working directory; one server for the module's HTTP tests (each starts its own session)."""
    cwd = tmp_path_factory.mktemp("mcp-http")
    # Set up before any test's autouse fixtures clear the environment: nothing CLEO_ gets in.
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES and not k.startswith("CLEO_")}
    process = subprocess.Popen(
        [str(BIN / "cleo-grade"), "mcp", "--http", "127.0.0.1:0"],
        cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        serving = read_line(process.stderr.fileno()).decode()
        token_line = read_line(process.stderr.fileno()).decode()
        assert serving.startswith("cleo-grade mcp: serving http://127.0.0.1:"), serving
        assert token_line.startswith("cleo-grade mcp: token "), token_line
        yield serving.split()[-1], token_line.split()[-1], cwd
    finally:
        process.terminate()
        process.wait(timeout=DEADLINE)
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.e2e
def test_an_http_client_with_the_token_runs_the_whole_lifecycle(
    http_server: tuple[str, str, Path],
) -> None:
    url, token, cwd = http_server

    async def main_() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=DEADLINE) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            await lifecycle(client, cwd)

    anyio.run(main_)


@pytest.mark.e2e
@pytest.mark.parametrize("authorization", [None, "Bearer wrong-token", "Basic eDp5"])
def test_an_http_request_without_the_token_is_refused(
    http_server: tuple[str, str, Path], authorization: str | None
) -> None:
    url, _, _ = http_server
    request = urllib.request.Request(
        url, data=b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}', method="POST",
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )  # fmt: skip
    if authorization is not None:
        request.add_header("Authorization", authorization)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=DEADLINE)
    with refused.value:  # its connection, closed here rather than in a later test's GC
        assert refused.value.code == 401
        assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.e2e
def test_no_command_but_mcp_imports_the_mcp_sdk(tmp_path: Path) -> None:
    probe = (
        "import sys\n"
        "from pytest_cleo_grade.cli import main\n"
        "for argv in (['session', 'start', '--grade'], ['skill'], ['grade', '--list'],\n"
        "             ['mcp', '--help'], ['--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "assert not [m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')], 'mcp'\n"
        "assert 'pytest_cleo_grade.cli._gateway' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
        timeout=DEADLINE, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_a_history_that_cannot_be_written_is_a_file_error_and_the_session_stays_open(
    tmp_path: Path,
) -> None:
    history = tmp_path / "history"
    history.mkdir()  # a directory where the history file goes

    async def main_() -> tuple[dict[str, Any], dict[str, Any]]:
        server = in_memory_server(tmp_path, "--history", str(history))
        async with Client(server) as client:
            started = await call(client, "cleo_mutate", "session", "start", grade=True)
            failed = await call(client, "cleo_mutate", "session", "end")
            again = await call(client, "cleo_mutate", "session", "end")
            assert again["error"]["code"] == "E_FILE_ERROR"  # still the current session
            return started, failed

    started, failed = anyio.run(main_)
    assert (failed["error"]["code"], failed["error"]["exitCode"]) == ("E_FILE_ERROR", 3)
    assert str(history) in failed["error"]["message"]
    with AuditStore(tmp_path / ".cleo" / "audit.db", read_only=True) as store:
        assert store.grades(started["data"]["sessionId"]) == []  # saved nowhere


def test_grade_list_skips_a_corrupt_history_line_and_says_so(tmp_path: Path) -> None:
    history = tmp_path / ".cleo" / "metrics" / "GRADES.jsonl"

    async def main_() -> dict[str, Any]:
        async with Client(in_memory_server(tmp_path)) as client:
            await call(client, "cleo_mutate", "session", "start", grade=True)
            await call(client, "cleo_mutate", "session", "end")
            with history.open("a") as handle:
                handle.write("not json\n")
            return await call(client, "cleo_query", "admin", "grade.list")

    listed = anyio.run(main_)
    assert listed["success"] is True and len(listed["data"]) == 1
    (warning,) = listed["_meta"]["warnings"]
    assert ":2:" in warning or "line 2" in warning


def test_without_the_sdk_mcp_says_which_extra_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "pytest_cleo_grade.cli._mcp_app", raising=False)
    monkeypatch.setitem(sys.modules, "mcp.server.mcpserver", None)  # import fails
    status, out, err = cli("mcp", cwd=tmp_path)
    assert (status, out) == (2, "")
    assert err == (
        "cleo-grade mcp needs the MCP SDK 2.x (the mcp extra; mcp.server.mcpserver is not "
        "installed): pip install 'pytest-cleo-grade[mcp]' (in a checkout: pip install -e "
        "'.[mcp]')\n"
    )


def test_allow_remote_without_http_is_a_usage_error(tmp_path: Path) -> None:
    status, _, err = cli("mcp", "--allow-remote", cwd=tmp_path)
    assert status == 2
    assert err == "cleo-grade mcp: --allow-remote is for --http HOST:PORT (stdio has no address)\n"
