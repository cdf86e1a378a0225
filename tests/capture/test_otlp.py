"""capture.otlp: the loopback OTLP/HTTP receiver and OTLP JSON files."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.capture.otlp import OtlpError, OtlpReceiver, load_otlp_file
from pytest_cleo_grade.cli import main
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from pytest_cleo_grade.store import AuditStore
from tests.capture_scenario import CALLS, assert_same_grade, grade_by_hand

START = 1_772_366_400_000_000_000  # 2026-03-01T12:00:00Z in ns

#: An agent in another process: each tool call is a GenAI execute_tool span, exported with
#: the SDK's own OTLP/HTTP exporter to whatever OTEL_EXPORTER_OTLP_ENDPOINT names.
AGENT = textwrap.dedent(
    """
    import json, sys
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    tracer = provider.get_tracer("agent")
    calls = json.loads(sys.argv[1])
    with tracer.start_as_current_span("invoke_agent"):
        for name, arguments in calls:
            attributes = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.arguments": json.dumps(arguments),
            }
            with tracer.start_as_current_span("execute_tool " + name, attributes=attributes) as s:
                if arguments.get("taskId") == "T9":
                    s.set_attribute("error.type", "KeyError")
                    s.set_status(Status(StatusCode.ERROR, "task T9 not found"))
    provider.shutdown()
    """
)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def kv(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "value": {"boolValue": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def json_span(
    name: str,
    index: int,
    *,
    trace: str = "5b8efff798038103d269b633813fc60c",
    parent: str = "",
    error: str | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    attributes = [kv("gen_ai.operation.name", "execute_tool"), kv("gen_ai.tool.name", name)]
    attributes += [kv(k, v) for k, v in (extra or {}).items()]
    span: dict[str, Any] = {
        "traceId": trace,
        "spanId": f"{index + 1:016x}",
        "parentSpanId": parent,
        "name": f"execute_tool {name}",
        "kind": 1,
        "startTimeUnixNano": str(START + index * 1_000_000_000),
        "endTimeUnixNano": str(START + index * 1_000_000_000 + 5_000_000),
        "attributes": attributes,
        "status": {},
    }
    if error:
        span["status"] = {"code": 2, "message": error}
    return span


def kv_raw(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": value}


def request(spans: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [kv("service.name", "agent")]},
                "scopeSpans": [{"scope": {"name": "agent"}, "spans": spans}],
            }
        ]
    }


def scenario_spans(**kwargs: Any) -> list[dict[str, Any]]:
    return [
        json_span(
            name,
            i,
            error="task T9 not found" if name == "tasks_show" else None,
            extra={"gen_ai.tool.call.arguments": json.dumps(arguments)},
            **kwargs,
        )
        for i, (name, arguments) in enumerate(CALLS)
    ]


def post(url: str, body: bytes, content_type: str, **headers: str) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, data=body, method="POST", headers={"Content-Type": content_type, **headers}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.e2e
def test_an_agent_in_another_process_is_graded_through_the_receiver(
    session: GradeSession,
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel extra")
    with OtlpReceiver(session.id, session.ingest) as receiver:
        env = {**os.environ, **receiver.env()}
        subprocess.run(
            [sys.executable, "-c", AGENT, json.dumps(CALLS)], env=env, check=True, timeout=60
        )
    assert receiver.problems == []
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert {e.session_id for e in session.entries} == {session.id}


@pytest.mark.e2e
def test_an_agent_behind_a_proxy_still_reaches_the_loopback_receiver(
    session: GradeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel extra")
    # A proxy that refuses every connection: the exporter must not go through it.
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "internal.example")
    with OtlpReceiver(session.id, session.ingest) as receiver:
        assert receiver.env()["NO_PROXY"] == "internal.example,127.0.0.1"
        env = {**os.environ, **receiver.env()}
        subprocess.run(
            [sys.executable, "-c", AGENT, json.dumps(CALLS)], env=env, check=True, timeout=60
        )
    assert receiver.problems == []
    assert_same_grade(session.entries, grade_by_hand(session.id))


def test_the_receiver_takes_otlp_json_gzip_encoded_too(session: GradeSession) -> None:
    body = gzip.compress(json.dumps(request(scenario_spans())).encode())
    with OtlpReceiver(session.id, session.ingest) as receiver:
        status, reply = post(
            receiver.traces_endpoint, body, "application/json", **{"Content-Encoding": "gzip"}
        )
    assert (status, reply) == (200, b"{}")
    assert_same_grade(session.entries, grade_by_hand(session.id))


def _has_otlp_protobuf() -> bool:
    try:
        import opentelemetry.proto.collector.logs.v1.logs_service_pb2  # noqa: F401
    except ImportError:
        return False
    return True


def test_a_malformed_payload_gets_400_with_the_reason(session: GradeSession) -> None:
    bad = request([{**json_span("tasks_find", 0), "startTimeUnixNano": "soon"}])
    with OtlpReceiver(session.id, session.ingest) as receiver:
        status, reply = post(receiver.traces_endpoint, json.dumps(bad).encode(), "application/json")
        status_pb, _ = post(receiver.traces_endpoint, b"\xff\xff\xff", "application/x-protobuf")
        status_other, _ = post(receiver.endpoint + "/other", b"{}", "application/json")
        status_logs, _ = post(receiver.endpoint + "/v1/logs", b"", "application/x-protobuf")
    assert status == 400
    assert b"spans[0].startTimeUnixNano: expected a 64-bit integer, got 'soon'" in reply
    assert status_pb == 400
    # An empty protobuf logs export holds no records; without opentelemetry-proto (the otel
    # extra, absent from the lowest leg) it cannot be read, and is refused saying so.
    readable = _has_otlp_protobuf()
    assert (status_other, status_logs) == (404, 200 if readable else 400)
    # A path the receiver does not know is an export lost too: refused, with the others.
    assert len(receiver.problems) == (3 if readable else 4)
    assert session.entries == []


def test_a_call_exported_by_two_processes_is_recorded_once(session: GradeSession) -> None:
    # The agent's execute_tool span and, exported earlier by the tool server, the MCP
    # server span inside it.
    outer = json_span("tasks_find", 0)
    inner = {
        **json_span("tasks_find", 1),
        "parentSpanId": outer["spanId"],
        "name": "tools/call tasks_find",
        "attributes": [kv("mcp.method.name", "tools/call"), kv("gen_ai.tool.name", "tasks_find")],
    }
    with OtlpReceiver(session.id, session.ingest) as receiver:
        post(receiver.traces_endpoint, json.dumps(request([inner])).encode(), "application/json")
        post(receiver.traces_endpoint, json.dumps(request([outer])).encode(), "application/json")
    assert [(e.domain, e.operation) for e in session.entries] == [("tasks", "find")]


def sub_agent_spans() -> list[dict[str, Any]]:
    """A tool ``delegate`` running a sub-agent (its invoke_agent span) that calls tasks_find."""
    delegate = json_span("delegate", 0)
    agent = {
        **json_span("inner", 1, parent=delegate["spanId"]),
        "name": "invoke_agent inner",
        "attributes": [kv("gen_ai.operation.name", "invoke_agent")],
    }
    find = json_span(
        "tasks_find",
        2,
        parent=agent["spanId"],
        extra={"gen_ai.tool.call.arguments": json.dumps({"query": "login"})},
    )
    return [delegate, agent, find]


def test_a_sub_agents_call_in_an_otlp_file_is_a_call_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(request(sub_agent_spans())))
    assert [e.operation for e in load_otlp_file(path)] == ["delegate", "find"]


def test_the_receiver_records_a_sub_agents_call_exported_before_or_with_its_tool(
    session: GradeSession,
) -> None:
    delegate, agent, find = sub_agent_spans()
    with OtlpReceiver(session.id, session.ingest) as receiver:
        # The sub-agent's spans end first and may leave in an earlier export.
        post(receiver.traces_endpoint, json.dumps(request([find])).encode(), "application/json")
        post(receiver.traces_endpoint, json.dumps(request([agent])).encode(), "application/json")
        post(receiver.traces_endpoint, json.dumps(request([delegate])).encode(), "application/json")
    assert sorted(e.operation for e in session.entries) == ["delegate", "find"]


def test_an_otlp_file_becomes_one_session_per_conversation_or_trace(tmp_path: Path) -> None:
    root = {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": "00000000000000aa",
        "name": "invoke_agent",
        "startTimeUnixNano": str(START),
        "endTimeUnixNano": str(START + 10),
        "attributes": [kv("gen_ai.conversation.id", "conv-1")],
    }
    first = scenario_spans(parent="00000000000000aa")
    second = [json_span("admin_help", 10, trace="0af7651916cd43dd8448eb211c80319c")]
    path = tmp_path / "traces.jsonl"
    path.write_text(
        json.dumps(request([root, *first])) + "\n\n" + json.dumps(request(second)) + "\n"
    )
    entries = load_otlp_file(path)
    by_session: dict[str | None, list[Any]] = {}
    for entry in entries:
        by_session.setdefault(entry.session_id, []).append(entry)
    assert set(by_session) == {"conv-1", "0af7651916cd43dd8448eb211c80319c"}
    assert_same_grade(by_session["conv-1"], grade_by_hand("conv-1"))
    assert {e.session_id for e in load_otlp_file(path, session_id="mine")} == {"mine"}


def test_an_otlp_file_that_is_not_utf8_or_not_a_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(b'{"resourceSpans": []}\n\xff\n')
    with pytest.raises(OtlpError, match=r"bad\.json:2: not UTF-8 text \(invalid start"):
        load_otlp_file(bad)
    pipe = tmp_path / "pipe.json"
    os.mkfifo(pipe)  # read_text() blocked on it for ever
    with pytest.raises(OtlpError, match=r"pipe\.json: cannot read: not a regular file \(a FIFO\)"):
        load_otlp_file(pipe)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no spans"),
        ('{"resourceSpans": []}\nnot json\n', ":2: not valid JSON"),
        ('{"spans": []}', "expected an object with a resourceSpans list"),
        (
            json.dumps(request([{"name": "chat", "startTimeUnixNano": "1"}])),
            "1 spans but no tool span",
        ),
        (
            json.dumps(request([{"name": "x", "attributes": [{"value": {}}]}])),
            "spans[0].attributes[0]: expected {'key'",
        ),
        # Shapes and numbers that raised Python errors (OverflowError, AttributeError, ...).
        (
            json.dumps(request([{"name": "x", "startTimeUnixNano": "9" * 30}])),
            "spans[0].startTimeUnixNano: expected a 64-bit integer, got '999",
        ),
        (
            json.dumps(request([{"name": "x", "startTimeUnixNano": 2**64}])),
            "spans[0].startTimeUnixNano: expected a 64-bit integer",
        ),
        (
            json.dumps(request([{"attributes": [kv_raw("n", {"intValue": "9" * 5000})]}])),
            "spans[0].attributes[0].value: expected a 64-bit integer, got '999",
        ),
        (
            json.dumps(request([{"attributes": [kv_raw("n", {"arrayValue": 7})]}])),
            "attributes[0].value.arrayValue: expected an object",
        ),
        ('{"resourceSpans": [{"resource": 5}]}', "resourceSpans[0].resource: expected an object"),
        ('{"resourceSpans": [{"scopeSpans": 5}]}', "resourceSpans[0].scopeSpans: expected a list"),
        (
            '{"resourceSpans": [{"scopeSpans": [{"spans": 5}]}]}',
            "scopeSpans[0].spans: expected a list",
        ),
        (json.dumps(request([{"name": "x", "events": 5}])), "spans[0].events: expected a list"),
    ],
)
def test_a_bad_otlp_file_is_one_clear_error_naming_the_place(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(OtlpError) as caught:
        load_otlp_file(path)
    assert str(caught.value).startswith(str(path))
    assert message in str(caught.value)


def test_cleo_grade_import_format_otlp_stores_and_grades_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(request(scenario_spans())))
    db = tmp_path / "audit.db"
    status = main(
        ["import", "--format", "otlp", str(path), "--session-id", "run-1", "--db", str(db)]
    )
    assert status == 0
    assert f"Imported 6 entries into {db} (sessions: run-1)" in capsys.readouterr().out
    again = ["import", "--format", "otlp", str(path), "--session-id", "run-1", "--db", str(db)]
    assert main(again) == 0  # each span is stored once, however often its file is imported
    assert "(sessions: run-1; 6 already there)" in capsys.readouterr().out
    with AuditStore(db) as store:
        stored = store.session_entries("run-1")
    assert_same_grade(stored, grade_by_hand("run-1"))


def test_cleo_grade_import_format_otlp_names_the_bad_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(request(scenario_spans())) + "\n{oops\n")
    status = main(["import", "--format", "otlp", str(path), "--db", str(tmp_path / "a.db")])
    assert status == 2
    err = capsys.readouterr().err
    assert f"{path}:2: not valid JSON" in err
    assert "Traceback" not in err
    assert not (tmp_path / "a.db").exists()


@pytest.mark.parametrize(
    "number", ["NaN", "Infinity", "-Infinity", "1e400", "-1E+400", "1" + "0" * 400 + ".5"]
)
def test_tool_arguments_holding_a_number_json_has_not_are_refused(
    tmp_path: Path, number: str
) -> None:
    # json.loads read them as floats, stored as the text "nan" or "inf": not what was sent.
    arguments = f'{{"limit": {number}}}'
    spans = [json_span("tasks_find", 0, extra={"gen_ai.tool.call.arguments": arguments})]
    path = tmp_path / "traces.jsonl"
    path.write_text(json.dumps(request(scenario_spans())) + "\n" + json.dumps(request(spans)))
    with pytest.raises(OtlpError) as caught:
        load_otlp_file(path)
    assert str(caught.value) == (
        f"{path}:2: span 0000000000000001: gen_ai.tool.call.arguments holds {number[:20]!r}, "
        "a number JSON has no value for"
    )


def test_a_non_finite_double_attribute_is_stored_as_null(tmp_path: Path) -> None:
    # OTLP allows NaN and infinities as doubles; JSON and the entries have none: null.
    values = [{"doubleValue": v} for v in ("NaN", "Infinity", "-Infinity")]
    values.append({"doubleValue": 1.5})
    args = kv_raw(
        "tool_arguments",
        {"kvlistValue": {"values": [kv_raw(f"v{i}", value) for i, value in enumerate(values)]}},
    )
    span = json_span("tasks_find", 0)
    span["attributes"].append(args)
    path = tmp_path / "traces.json"
    path.write_text(json.dumps(request([span])))
    [entry] = load_otlp_file(path, session_id="s")
    assert entry.params == {"v0": None, "v1": None, "v2": None, "v3": 1.5}
    assert "nan" not in json.dumps(entry.model_dump(mode="json"), allow_nan=False).lower()


def test_the_receiver_refuses_tool_arguments_holding_nan(session: GradeSession) -> None:
    arguments = {"gen_ai.tool.call.arguments": '{"limit": NaN}'}
    bad = request([json_span("tasks_find", 0, extra=arguments)])
    with OtlpReceiver(session.id, session.ingest) as receiver:
        status, reply = post(receiver.traces_endpoint, json.dumps(bad).encode(), "application/json")
    assert status == 400
    assert reply == (
        b"OTLP JSON: span 0000000000000001: gen_ai.tool.call.arguments holds 'NaN', "
        b"a number JSON has no value for"
    )
    assert session.entries == []
