"""Tool spans, whatever carried them (the OTel SDK, OTLP protobuf or JSON), as tool calls.

A :class:`SpanData` is the few facts of a span the mapping needs. :func:`tool_call_of` knows
the three conventions of a tool span: OpenTelemetry's GenAI ``execute_tool`` spans, the
OpenInference ``TOOL`` kind, and MCP ``tools/call`` spans. Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pytest_cleo_grade.capture.mapping import Call, Failure, envelope_failure

__all__ = [
    "SpanData",
    "is_tool_span",
    "outermost_tool_spans",
    "time_of",
    "tool_call_of",
    "tool_name_of",
]

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
#: Attributes that hold a tool call's arguments, by convention (first found wins).
ARGUMENT_KEYS: Final = ("gen_ai.tool.call.arguments", "input.value", "tool_arguments")
#: Attributes that hold a tool call's result.
RESULT_KEYS: Final = ("gen_ai.tool.call.result", "output.value", "tool_response")
#: Attributes that hold a numeric error code (JSON-RPC, HTTP).
CODE_KEYS: Final = (
    "rpc.jsonrpc.error_code",
    "rpc.response.status_code",
    "http.response.status_code",
    "http.status_code",
)


@dataclass(frozen=True)
class SpanData:
    """One ended span: its name, attributes, times (ns since the epoch), status and events."""

    name: str
    attributes: Mapping[str, Any]
    start_ns: int
    end_ns: int
    error: bool = False
    status_message: str | None = None
    #: (event name, event attributes), e.g. ("exception", {"exception.type": "KeyError"}).
    events: Sequence[tuple[str, Mapping[str, Any]]] = ()
    trace_id: str = ""
    span_id: str = ""
    parent_span_id: str | None = None
    resource: Mapping[str, Any] = field(default_factory=dict)


def time_of(nanoseconds: int) -> datetime:
    """A span time (ns since the Unix epoch) as an aware UTC datetime (microseconds kept)."""
    return _EPOCH + timedelta(microseconds=nanoseconds // 1000)


def tool_name_of(name: str, attributes: Mapping[str, Any]) -> str | None:
    """The tool's name when the span is a tool span by one of the three conventions."""
    attr_name = attributes.get("gen_ai.tool.name")
    if attributes.get("gen_ai.operation.name") == "execute_tool":
        if isinstance(attr_name, str) and attr_name:
            return attr_name
        return name.removeprefix("execute_tool").strip() or None
    kind = attributes.get("openinference.span.kind")
    if isinstance(kind, str) and kind.upper() == "TOOL":
        tool = attributes.get("tool.name")
        return tool if isinstance(tool, str) and tool else name or None
    if attributes.get("mcp.method.name") == "tools/call":
        if isinstance(attr_name, str) and attr_name:
            return attr_name
        # The SDK names the span "tools/call NAME" (server) or "MCP send tools/call NAME".
        _, _, tail = name.partition("tools/call")
        return tail.strip() or None
    return None


def is_tool_span(name: str, attributes: Mapping[str, Any]) -> bool:
    """Whether a span (name and attributes) is a tool span by one of the conventions."""
    return tool_name_of(name, attributes) is not None


def _first(attributes: Mapping[str, Any], keys: Iterable[str]) -> Any:
    for key in keys:
        if key in attributes and attributes[key] not in (None, ""):
            return attributes[key]
    return None


def _code(value: Any) -> int | str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return int(text)
        return text or None
    return None


def _failure(tool: str, span: SpanData, result: Any) -> Failure | None:
    attrs = span.attributes
    error_type = attrs.get("error.type")
    if not span.error and error_type in (None, ""):
        return envelope_failure(tool, result)
    message = span.status_message or None
    exc_type: str | None = None
    for event_name, event_attrs in span.events:
        if event_name == "exception":
            exc_type = exc_type or _str_or_none(event_attrs.get("exception.type"))
            message = message or _str_or_none(event_attrs.get("exception.message"))
    code = _code(_first(attrs, CODE_KEYS))
    if code is None:
        code = _code(error_type)
    return Failure(
        tool=tool,
        payload=result,
        message=message,
        code=code,
        error_type=exc_type or _str_or_none(error_type),
    )


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def tool_call_of(span: SpanData, *, source: str = "otel") -> Call | None:
    """The tool call a span records, or None when it is not a tool span."""
    tool = tool_name_of(span.name, span.attributes)
    if tool is None:
        return None
    attrs = span.attributes
    result = _first(attrs, RESULT_KEYS)
    extra: dict[str, Any] = {"traceId": span.trace_id, "spanId": span.span_id}
    conversation = attrs.get("gen_ai.conversation.id")
    if isinstance(conversation, str) and conversation:
        extra["conversationId"] = conversation
    return Call(
        tool=tool,
        arguments=_first(attrs, ARGUMENT_KEYS),
        failure=_failure(tool, span, result),
        started=time_of(span.start_ns),
        duration_ms=max(0, span.end_ns - span.start_ns) / 1_000_000,
        source=source,
        extra=extra,
    )


def outermost_tool_spans(spans: Sequence[SpanData]) -> list[SpanData]:
    """The tool spans not nested in another tool span of ``spans``.

    One call is often traced more than once: an agent's ``execute_tool`` span holds the MCP
    client's ``tools/call`` span, which holds the server's. The outermost one is the call.
    """
    by_id = {s.span_id: s for s in spans if s.span_id}
    tools = {s.span_id for s in spans if s.span_id and is_tool_span(s.name, s.attributes)}
    kept = []
    for span in spans:
        if not is_tool_span(span.name, span.attributes):
            continue
        parent, seen = span.parent_span_id, set()
        nested = False
        while parent and parent not in seen:
            if parent in tools:
                nested = True
                break
            seen.add(parent)
            ancestor = by_id.get(parent)
            parent = ancestor.parent_span_id if ancestor is not None else None
        if not nested:
            kept.append(span)
    return kept
