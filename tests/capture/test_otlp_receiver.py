"""capture.otlp's receiver as a door: its token, refused exports, and every real exporter."""

from __future__ import annotations

import gzip
import http.client
import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
import urllib.parse
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.capture import otlp
from pytest_cleo_grade.capture.otlp import TOKEN_HEADER, OtlpReceiver
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture.test_otlp import AGENT, json_span, kv, post, request, scenario_spans
from tests.capture_scenario import CALLS, assert_same_grade, grade_by_hand

START = 1_772_366_400_000_000_000


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def receiver_for(session: GradeSession, **options: Any) -> OtlpReceiver:
    return OtlpReceiver(
        session.id, session._received, refused=session.refuse, replace=session._amended, **options
    )


def base_url(receiver: OtlpReceiver) -> str:
    """The receiver's address without the token (what a process reading /proc/net/tcp knows)."""
    parts = urllib.parse.urlsplit(receiver.endpoint)
    return f"{parts.scheme}://{parts.netloc}"


def scenario_body() -> bytes:
    return json.dumps(request(scenario_spans())).encode()


# -- 1. the token ---------------------------------------------------------------------------


def test_an_export_without_the_sessions_token_is_refused_and_never_graded(
    session: GradeSession,
) -> None:
    with receiver_for(session) as receiver:
        base = base_url(receiver)
        bare = post(f"{base}/v1/traces", scenario_body(), "application/json")
        wrong = post(
            f"{base}/v1/traces", scenario_body(), "application/json", **{TOKEN_HEADER: "guess"}
        )
        wrong_path = post(f"{base}/guess/v1/traces", scenario_body(), "application/json")
        bearer = post(
            f"{base}/v1/traces", scenario_body(), "application/json", Authorization="Bearer x"
        )
    assert [status for status, _ in (bare, wrong, wrong_path, bearer)] == [401] * 4
    assert b"only with its session's token" in bare[1]
    assert dict(receiver.unauthorized) == {
        "carried no token": 1,
        "carried a wrong token": 2,
        "carried a wrong token in the path": 1,
    }
    # Never graded, and never a reason to refuse the session: the attacker cannot void it.
    assert session.entries == []
    assert session.refusals() == []


@pytest.mark.parametrize("how", ["path", "header", "bearer"])
def test_the_token_opens_the_receiver_in_the_path_or_a_header(
    session: GradeSession, how: str
) -> None:
    with receiver_for(session) as receiver:
        if how == "path":
            status, _ = post(receiver.traces_endpoint, scenario_body(), "application/json")
        else:
            header = (
                {TOKEN_HEADER: receiver.token}
                if how == "header"
                else {"Authorization": f"Bearer {receiver.token}"}
            )
            status, _ = post(
                f"{base_url(receiver)}/v1/traces", scenario_body(), "application/json", **header
            )
    assert status == 200
    assert_same_grade(session.entries, grade_by_hand(session.id))


def test_subprocess_env_hands_out_the_token_in_the_endpoint_and_the_headers(
    session: GradeSession,
) -> None:
    env = session.subprocess_env(otlp=True)
    token = session._receiver.token if session._receiver is not None else ""
    assert len(token) >= 32
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"].endswith(f"/{token}")
    assert env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].endswith(f"/{token}/v1/traces")
    assert env["OTEL_EXPORTER_OTLP_LOGS_ENDPOINT"].endswith(f"/{token}/v1/logs")
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == f"{TOKEN_HEADER}={token}"
    # Two sessions never share a secret.
    with GradeSession(SessionSettings(db_path=session.db_path)) as other:
        assert (
            other.subprocess_env(otlp=True)["OTEL_EXPORTER_OTLP_HEADERS"]
            != (env["OTEL_EXPORTER_OTLP_HEADERS"])
        )


@pytest.mark.e2e
def test_the_python_sdk_exporter_given_only_the_header_is_graded(session: GradeSession) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel extra")
    with receiver_for(session) as receiver:
        env = {
            **os.environ,
            **receiver.env(),
            # An exporter pointed at another URL (no token in it) still carries the header.
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{base_url(receiver)}/v1/traces",
        }
        subprocess.run(
            [sys.executable, "-c", AGENT, json.dumps(CALLS)], env=env, check=True, timeout=60
        )
    assert receiver.problems == []
    assert dict(receiver.unauthorized) == {}
    assert_same_grade(session.entries, grade_by_hand(session.id))


INTRUDER_TEST = """
import json, urllib.error, urllib.parse, urllib.request

def test_agent(graded_session):
    graded_session.record("session", "list")
    endpoint = graded_session.otlp_endpoint
    parts = urllib.parse.urlsplit(endpoint)
    # Another process that knows only the port: its spans must not lift the grade.
    body = json.dumps({SPANS}).encode()
    for url in (f"http://{parts.netloc}/v1/traces", f"http://{parts.netloc}/nope/v1/traces"):
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req, timeout=10)
        except urllib.error.HTTPError as exc:
            assert exc.code == 401
        else:
            raise AssertionError("accepted without the token")
    assert len(graded_session.entries) == 1
"""


def test_a_test_is_warned_how_many_exports_were_refused_and_why(
    pytester: pytest.Pytester,
) -> None:
    spans = request([json_span("session_end", 0), json_span("admin_help", 1)])
    pytester.makepyfile(INTRUDER_TEST.replace("{SPANS}", repr(spans)))
    result = pytester.runpytest("-p", "no:cacheprovider", "--cleo-grade-fail-under=F")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_agent: the OTLP receiver refused 2 exports (HTTP 401, not graded): "
            "1 carried a wrong token in the path, 1 carried no token; only a process given "
            "graded_session.subprocess_env()*"
        ]
    )


# -- 2. a refused export leaves the test ungradable -----------------------------------------


REFUSED_TEST = """
import json, urllib.error, urllib.request

def export(graded_session, spans):
    req = urllib.request.Request(
        graded_session.otlp_endpoint + "/v1/traces", data=json.dumps(spans).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200

@pytest.mark.cleo_grade(fail_under="F")
def test_agent(graded_session):
    assert export(graded_session, {GOOD}) == 200
    # The exporter is told 400 and, like most, drops the batch: the test must not pass on
    # the rest of what its agent did.
    assert export(graded_session, {BAD}) == 400
"""


def test_a_batch_the_receiver_refuses_fails_the_test_as_ungradable(
    pytester: pytest.Pytester,
) -> None:
    good = request(scenario_spans())
    bad = request([json_span("tasks_find", 9, extra={"gen_ai.tool.call.arguments": "[NaN]"})])
    pytester.makepyfile(
        "import pytest\n" + REFUSED_TEST.replace("{GOOD}", repr(good)).replace("{BAD}", repr(bad))
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_agent: not every call of the test could be recorded*: OTLP export refused "
            "(HTTP 400): OTLP JSON: span 000000000000000a: gen_ai.tool.call.arguments holds "
            "'NaN'*"
        ]
    )


@pytest.mark.parametrize(
    ("body", "headers", "status", "reason"),
    [
        (b"not gzip at all", {"Content-Encoding": "gzip"}, 400, "not valid gzip"),
        (gzip.compress(b"{}")[:-12], {"Content-Encoding": "gzip"}, 400, "gzip body is cut short"),
        (b"{}", {"Content-Encoding": "br"}, 415, "Content-Encoding 'br' is not supported"),
        (b"{not json", {}, 400, "not valid JSON"),
    ],
    ids=["bad-gzip", "cut-gzip", "unknown-encoding", "bad-json"],
)
def test_an_export_the_receiver_cannot_read_is_a_refusal_of_the_session(
    session: GradeSession, body: bytes, headers: dict[str, str], status: int, reason: str
) -> None:
    with receiver_for(session) as receiver:
        got, reply = post(receiver.traces_endpoint, body, "application/json", **headers)
    assert got == status
    assert reason.encode() in reply
    [refusal] = session.refusals()
    assert refusal.startswith(f"OTLP export refused (HTTP {status}): ")
    assert reason in refusal


def test_a_body_cut_short_is_a_refusal_of_the_session(session: GradeSession) -> None:
    with receiver_for(session) as receiver:
        parts = urllib.parse.urlsplit(receiver.traces_endpoint)
        connection = http.client.HTTPConnection(parts.netloc, timeout=10)
        connection.putrequest("POST", parts.path)
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", "1000")
        connection.endheaders(b'{"resourceSpans": [')
        # The client goes away with 980 bytes unsent.
        connection.sock.shutdown(1)  # type: ignore[union-attr]
        assert connection.getresponse().status == 400
        connection.close()
    [refusal] = session.refusals()
    assert "the body ended after 19 of 1000 bytes" in refusal


# -- 3. every real exporter -------------------------------------------------------------------


def post_chunked(url: str, pieces: list[bytes], content_type: str) -> tuple[int, bytes]:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=10)
    try:
        connection.request(
            "POST",
            parts.path,
            body=iter(pieces),
            headers={"Content-Type": content_type},
            encode_chunked=True,
        )
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_a_chunked_body_is_read_whole(session: GradeSession) -> None:
    body = scenario_body()
    pieces = [body[i : i + 100] for i in range(0, len(body), 100)]
    with receiver_for(session) as receiver:
        status, reply = post_chunked(receiver.traces_endpoint, pieces, "application/json")
    assert (status, reply) == (200, b"{}")
    assert_same_grade(session.entries, grade_by_hand(session.id))


def test_a_chunked_body_over_the_limit_is_refused(session: GradeSession) -> None:
    with receiver_for(session, max_body=1000) as receiver:
        status, reply = post_chunked(receiver.traces_endpoint, [b" " * 600] * 2, "application/json")
    assert status == 413
    assert b"over the receiver's limit of 1000 bytes" in reply
    assert len(session.refusals()) == 1


def test_gzip_is_capped_on_what_it_decompresses_to_not_on_the_body(
    session: GradeSession,
) -> None:
    # 8 MiB of JSON (valid: padding in a string) in a gzip body of a few KB.
    padded = json.dumps({"resourceSpans": [], "padding": " " * (8 * 1024 * 1024)}).encode()
    bomb = gzip.compress(padded)
    assert len(bomb) < 64 * 1024
    limit = 1024 * 1024
    with receiver_for(session, max_body=limit) as receiver:
        status, reply = post(
            receiver.traces_endpoint, bomb, "application/json", **{"Content-Encoding": "gzip"}
        )
        small = gzip.compress(scenario_body())
        ok, _ = post(
            receiver.traces_endpoint, small, "application/json", **{"Content-Encoding": "gzip"}
        )
    assert status == 413
    assert b"decompressed body is over the receiver's limit of 1048576 bytes" in reply
    assert ok == 200
    assert len(session.refusals()) == 1
    assert OtlpReceiver("s", list).max_body == 64 * 1024 * 1024


def test_deflate_bodies_are_read_with_or_without_the_zlib_header(session: GradeSession) -> None:
    import zlib

    body = scenario_body()
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw_body = raw.compress(body) + raw.flush()
    with receiver_for(session) as receiver:
        first, _ = post(
            receiver.traces_endpoint,
            zlib.compress(body),
            "application/json",
            **{"Content-Encoding": "deflate"},
        )
        # The same spans again (an exporter's retry): recorded once.
        second, _ = post(
            receiver.traces_endpoint,
            raw_body,
            "application/json",
            **{"Content-Encoding": "deflate"},
        )
    assert (first, second) == (200, 200)
    assert_same_grade(session.entries, grade_by_hand(session.id))


def test_two_hundred_exporters_at_once_are_all_taken(session: GradeSession) -> None:
    count = 200
    start = threading.Barrier(count)

    def export(index: int) -> int:
        body = json.dumps(
            request([json_span("tasks_find", index, trace=f"{index + 1:032x}")])
        ).encode()
        parts = urllib.parse.urlsplit(receiver.traces_endpoint)
        connection = http.client.HTTPConnection(parts.netloc, timeout=60)
        try:
            start.wait(timeout=60)
            connection.request(
                "POST", parts.path, body=body, headers={"Content-Type": "application/json"}
            )
            return connection.getresponse().status
        finally:
            connection.close()

    with receiver_for(session) as receiver, ThreadPoolExecutor(count) as pool:
        statuses = list(pool.map(export, range(count)))
    assert statuses == [200] * count
    assert len(session.entries) == count


def test_deduplication_across_exports_is_linear_in_the_spans(
    session: GradeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Exports of 512 sibling tool spans each: every span is compared with what it could be
    # a layer of, never with every span recorded before it.
    asked = 0
    identity = otlp.call_identity_of

    def counted(name: str, attributes: Any) -> Any:
        nonlocal asked
        asked += 1
        return identity(name, attributes)

    monkeypatch.setattr(otlp, "call_identity_of", counted)
    exports, size = 4, 512
    with receiver_for(session) as receiver:
        for batch in range(exports):
            spans = [json_span("tasks_find", batch * size + i) for i in range(size)]
            status, _ = post(
                receiver.traces_endpoint, json.dumps(request(spans)).encode(), "application/json"
            )
            assert status == 200
    assert len(session.entries) == exports * size
    # Quadratic work would ask about 2 million times (each new span against each recorded).
    assert asked <= 4 * exports * size


def test_a_span_naming_itself_as_its_parent_is_recorded(session: GradeSession) -> None:
    span = json_span("tasks_find", 0)
    span["parentSpanId"] = span["spanId"]
    with receiver_for(session) as receiver:
        status, _ = post(
            receiver.traces_endpoint, json.dumps(request([span])).encode(), "application/json"
        )
    assert status == 200
    assert [(e.domain, e.operation) for e in session.entries] == [("tasks", "find")]


def test_a_span_naming_itself_as_its_parent_is_in_an_otlp_file(tmp_path: Path) -> None:
    span = json_span("tasks_find", 0)
    span["parentSpanId"] = span["spanId"]
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(request([span])))
    assert [e.operation for e in otlp.load_otlp_file(path, session_id="s")] == ["find"]


# -- /v1/logs -------------------------------------------------------------------------------


def log_record(attributes: dict[str, Any], *, body: str, index: int, span: str = "") -> Any:
    record: dict[str, Any] = {
        "timeUnixNano": str(START + index * 1_000_000_000),
        "body": {"stringValue": body},
        "attributes": [kv(key, value) for key, value in attributes.items()],
    }
    if span:
        record["traceId"] = "5b8efff798038103d269b633813fc60c"
        record["spanId"] = span
    return record


def logs_request(records: list[Any]) -> dict[str, Any]:
    return {
        "resourceLogs": [
            {
                "resource": {"attributes": [kv("service.name", "claude-code")]},
                "scopeLogs": [
                    {"scope": {"name": "com.anthropic.claude_code"}, "logRecords": records}
                ],
            }
        ]
    }


def claude_code_events() -> list[Any]:
    """Claude Code's telemetry of the scenario: one tool_result event per call."""
    records = []
    for index, (name, arguments) in enumerate(CALLS):
        failed = name == "tasks_show"
        attributes: dict[str, Any] = {
            "event.name": "tool_result",
            "event.timestamp": f"2026-03-01T12:00:0{index}.005Z",
            "session.id": "claude-session",
            "tool_name": f"mcp__cleo__{name}",
            "success": "false" if failed else "true",
            "duration_ms": "5",
            "tool_input": json.dumps(arguments),
            "tool_use_id": f"toolu_{index}",
        }
        if failed:
            attributes["error"] = "task T9 not found"
        records.append(log_record(attributes, body="claude_code.tool_result", index=index))
    # Claude Code's other events are no calls.
    records.append(
        log_record({"event.name": "user_prompt"}, body="claude_code.user_prompt", index=9)
    )
    return records


def test_claude_codes_tool_events_are_graded(session: GradeSession) -> None:
    body = json.dumps(logs_request(claude_code_events())).encode()
    with receiver_for(session) as receiver:
        status, reply = post(receiver.logs_endpoint, body, "application/json")
        # Its exporter retries a batch it was not sure was taken: each call counts once.
        again, _ = post(receiver.logs_endpoint, body, "application/json")
    assert (status, reply, again) == (200, b"{}", 200)
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert {e.metadata.source for e in session.entries} == {"claude-code"}


@pytest.mark.e2e
def test_tool_events_exported_by_the_python_sdk_log_exporter_are_graded(
    session: GradeSession,
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel extra")
    events = [
        {
            "event.name": "tool_result",
            "tool_name": f"mcp__cleo__{name}",
            "success": "false" if name == "tasks_show" else "true",
            "error": "task T9 not found",
            "tool_input": json.dumps(arguments),
            "tool_use_id": f"toolu_{index}",
        }
        for index, (name, arguments) in enumerate(CALLS)
    ]
    script = textwrap.dedent(
        """
        import json, sys
        from opentelemetry._logs import LogRecord
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

        provider = LoggerProvider()
        provider.add_log_record_processor(SimpleLogRecordProcessor(OTLPLogExporter()))
        logger = provider.get_logger("com.anthropic.claude_code")
        for attributes in json.loads(sys.argv[1]):
            logger.emit(LogRecord(body="claude_code.tool_result", attributes=attributes))
        provider.shutdown()
        """
    )
    with receiver_for(session) as receiver:
        env = {**os.environ, **receiver.env()}
        subprocess.run(
            [sys.executable, "-c", script, json.dumps(events)], env=env, check=True, timeout=60
        )
    assert receiver.problems == []
    got = [(e.domain, e.operation, e.result.exit_code) for e in session.entries]
    assert got == [
        (name.partition("_")[0], name.partition("_")[2], 4 if name == "tasks_show" else 0)
        for name, _ in CALLS
    ]


def exception_attributes() -> dict[str, Any]:
    return {
        "exception.type": "KeyError",
        "exception.message": "'task T9'",
        "gen_ai.tool.name": "tasks_show",
    }


def test_a_tool_exception_event_on_the_span_is_a_not_found(session: GradeSession) -> None:
    span = json_span("tasks_show", 0)
    span["events"] = [
        {
            "name": "gen_ai.execute_tool.exception",
            "timeUnixNano": str(START),
            "attributes": [kv(k, v) for k, v in exception_attributes().items()],
        }
    ]
    with receiver_for(session) as receiver:
        status, _ = post(
            receiver.traces_endpoint, json.dumps(request([span])).encode(), "application/json"
        )
    assert status == 200
    [entry] = session.entries
    assert (entry.result.success, entry.result.exit_code) == (False, 4)


@pytest.mark.parametrize("order", ["log-first", "span-first"])
def test_a_tool_exception_logged_in_the_spans_context_is_a_not_found(
    session: GradeSession, order: str
) -> None:
    span = json_span("tasks_show", 0)
    logged = log_record(exception_attributes(), body="", index=0, span=span["spanId"])
    logged["eventName"] = "gen_ai.execute_tool.exception"
    spans_body = json.dumps(request([span])).encode()
    logs_body = json.dumps(logs_request([logged])).encode()
    with receiver_for(session) as receiver:
        bodies = [(receiver.logs_endpoint, logs_body), (receiver.traces_endpoint, spans_body)]
        for url, body in bodies if order == "log-first" else bodies[::-1]:
            assert post(url, body, "application/json")[0] == 200
    [entry] = session.entries
    assert (entry.result.success, entry.result.exit_code) == (False, 4)
    assert session.refusals() == []


# -- the Node.js exporter -------------------------------------------------------------------


NODE_AGENT = textwrap.dedent(
    """
    const { BasicTracerProvider, BatchSpanProcessor } = require("@opentelemetry/sdk-trace-base");
    const { OTLPTraceExporter } = require("@opentelemetry/exporter-trace-otlp-http");
    const { SpanStatusCode, context, trace } = require("@opentelemetry/api");

    // The exporter reads OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_HEADERS.
    const provider = new BasicTracerProvider({
      spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
    });
    const tracer = provider.getTracer("agent");
    const root = tracer.startSpan("invoke_agent", {
      attributes: { "gen_ai.operation.name": "invoke_agent" },
    });
    const inside = trace.setSpan(context.active(), root);
    for (const [name, args] of JSON.parse(process.argv[2])) {
      const span = tracer.startSpan("execute_tool " + name, {
        attributes: {
          "gen_ai.operation.name": "execute_tool",
          "gen_ai.tool.name": name,
          "gen_ai.tool.call.arguments": JSON.stringify(args),
        },
      }, inside);
      if (args.taskId === "T9") {
        span.setAttribute("error.type", "KeyError");
        span.setStatus({ code: SpanStatusCode.ERROR, message: "task T9 not found" });
      }
      span.end();
    }
    root.end();
    provider.shutdown().catch((err) => { console.error(err); process.exit(1); });
    """
)
NODE_PACKAGES = (
    "@opentelemetry/api@1",
    "@opentelemetry/sdk-trace-base@2",
    "@opentelemetry/exporter-trace-otlp-http",
)


@pytest.fixture(scope="module")
def node_modules(tmp_path_factory: pytest.TempPathFactory) -> Path:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js and npm are not installed: the Node.js exporter cannot be run")
    folder = tmp_path_factory.mktemp("node-exporter")
    done = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--prefix", str(folder), *NODE_PACKAGES],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        pytest.skip(f"npm could not install the Node.js exporter (offline?): {done.stderr[-300:]}")
    return folder / "node_modules"


@pytest.mark.e2e
def test_the_nodejs_exporters_spans_are_graded(
    session: GradeSession, node_modules: Path, tmp_path: Path
) -> None:
    agent = tmp_path / "agent.js"
    agent.write_text(NODE_AGENT)
    env = {**os.environ, **session.subprocess_env(otlp=True), "NODE_PATH": str(node_modules)}
    subprocess.run(["node", str(agent), json.dumps(CALLS)], env=env, check=True, timeout=120)
    assert session.refusals() == []
    assert_same_grade(session.entries, grade_by_hand(session.id))


LATE_TEST = """
import json, urllib.error, urllib.request
import pytest

@pytest.fixture
def late_export(graded_session):
    yield
    # After the test was graded (a fixture's teardown): an export the receiver refuses.
    req = urllib.request.Request(
        graded_session.otlp_endpoint + "/v1/traces", data=b"{not json",
        headers={"Content-Type": "application/json"},
    )
    try:
        urllib.request.urlopen(req, timeout=10)
    except urllib.error.HTTPError as exc:
        assert exc.code == 400

def test_agent(graded_session, late_export):
    graded_session.record("session", "list")
"""


def test_an_export_refused_after_the_grade_is_a_warning_on_the_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(LATE_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider", "--cleo-grade-fail-under=F")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_agent: refused after the test was graded, so not in its grade: OTLP export "
            "refused (HTTP 400): OTLP JSON: not valid JSON*"
        ]
    )


def test_an_export_on_a_connection_kept_past_the_stop_is_a_refusal(session: GradeSession) -> None:
    receiver = receiver_for(session).start()
    parts = urllib.parse.urlsplit(receiver.traces_endpoint)
    connection = http.client.HTTPConnection(parts.netloc, timeout=10)
    try:
        connection.request(
            "POST", parts.path, scenario_body(), {"Content-Type": "application/json"}
        )
        assert connection.getresponse().read() == b"{}"
        # stop() has begun (its first step); the kept-alive connection sends once more.
        with receiver._busy:
            receiver._stopping = True
        connection.request(
            "POST", parts.path, scenario_body(), {"Content-Type": "application/json"}
        )
        assert connection.getresponse().status == 503
    finally:
        connection.close()
        receiver.stop()
    assert session.refusals() == ["OTLP export refused (HTTP 503): it arrived after the test ended"]
