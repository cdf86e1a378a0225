"""OpenTelemetry GenAI model spans as the session's conversation: in-process spans, the OTLP
receiver and OTLP files (gen_ai.input.messages, gen_ai.output.messages, gen_ai.usage.*)."""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture.test_otlp import json_span, kv, post, request

START = 1_772_366_400_000_000_000
USER = [{"role": "user", "parts": [{"type": "text", "content": "triage the login bug"}]}]


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def answer(text: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "parts": [{"type": "text", "content": text}]}]


def chat_span(index: int, inputs: list[dict[str, Any]], output: str) -> dict[str, Any]:
    attributes = [
        kv("gen_ai.operation.name", "chat"),
        kv("gen_ai.request.model", "gpt-x"),
        kv("gen_ai.usage.input_tokens", 40),
        kv("gen_ai.usage.output_tokens", 6),
        kv("gen_ai.usage.cache_read.input_tokens", 10),
        kv("gen_ai.input.messages", json.dumps(inputs)),
        kv("gen_ai.output.messages", json.dumps(answer(output))),
    ]
    return {
        "traceId": "5b8efff798038103d269b633813fc60c",
        "spanId": f"{index + 100:016x}",
        "parentSpanId": "",
        "name": "chat gpt-x",
        "kind": 3,
        "startTimeUnixNano": str(START + index * 1_000_000_000),
        "endTimeUnixNano": str(START + index * 1_000_000_000 + 500_000_000),
        "attributes": attributes,
        "status": {},
    }


def spans() -> list[dict[str, Any]]:
    # Two requests; the second repeats the history before it, as every client sends it.
    first = chat_span(0, USER, "Looking it up")
    tool = json_span("tasks_find", 1, extra={"gen_ai.tool.call.arguments": '{"query": "login"}'})
    second = chat_span(2, [*USER, *answer("Looking it up")], "Found T1")
    return [first, tool, second]


def assert_the_conversation(session: GradeSession) -> None:
    talk = session.conversation
    assert [(m.role, m.text) for m in talk.messages] == [
        ("user", "triage the login bug"),
        ("assistant", "Looking it up"),
        ("assistant", "Found T1"),
    ]
    assert talk.final_output == "Found T1"
    assert talk.tokens() == {"input": 80, "output": 12, "cached": 20, "total": 92}
    assert {c.model for c in talk.model_calls} == {"gpt-x"}


def test_an_otlp_files_model_spans_become_the_conversation(
    session: GradeSession, tmp_path: Path
) -> None:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(request(spans())))
    assert session.ingest(path, format="otlp") == 1
    assert_the_conversation(session)


def test_the_receiver_takes_the_conversation_with_the_calls(session: GradeSession) -> None:
    env = session.subprocess_env(otlp=True)
    url = env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"]
    headers = dict(
        urllib.parse.unquote(pair).split("=", 1)
        for pair in env.get("OTEL_EXPORTER_OTLP_HEADERS", "").split(",")
        if "=" in pair
    )
    body = json.dumps(request(spans())).encode()
    status, _ = post(url, body, "application/json", **headers)
    assert status == 200
    assert len(session.entries) == 1
    assert_the_conversation(session)


def test_in_process_model_spans_reach_the_session(session: GradeSession) -> None:
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    provider.add_span_processor(otel.AuditSpanProcessor())
    tracer = provider.get_tracer("agent")
    history = list(USER)
    for text in ("Looking it up", "Found T1"):
        with tracer.start_as_current_span("chat gpt-x") as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.response.model", "gpt-x")
            span.set_attribute("gen_ai.usage.input_tokens", 40)
            span.set_attribute("gen_ai.usage.output_tokens", 6)
            span.set_attribute("gen_ai.usage.cache_read.input_tokens", 10)
            span.set_attribute("gen_ai.input.messages", json.dumps(history))
            span.set_attribute("gen_ai.output.messages", json.dumps(answer(text)))
        history = [*history, *answer(text)]
    assert_the_conversation(session)


def test_the_older_per_message_events_are_read_too(session: GradeSession, tmp_path: Path) -> None:
    span = chat_span(0, [], "unused")
    span["attributes"] = [a for a in span["attributes"] if "messages" not in a["key"]]
    span["events"] = [
        {"name": "gen_ai.user.message", "attributes": [kv("content", "hello there")]},
        {
            "name": "gen_ai.choice",
            "attributes": [kv("message", json.dumps({"content": "hi, how can I help?"}))],
        },
    ]
    path = tmp_path / "trace.json"
    tool = json_span("tasks_find", 1)
    path.write_text(json.dumps(request([span, tool])))
    session.ingest(path, format="otlp")
    assert [(m.role, m.text) for m in session.conversation.messages] == [
        ("user", "hello there"),
        ("assistant", "hi, how can I help?"),
    ]
