"""Tool spans, whatever carried them (the OTel SDK, OTLP protobuf or JSON), as tool calls.

A :class:`SpanData` is the few facts of a span the mapping needs. :func:`tool_call_of` knows
the three conventions of a tool span: OpenTelemetry's GenAI ``execute_tool`` spans, the
OpenInference ``TOOL`` kind, and MCP ``tools/call`` spans (and pydantic-ai's span of a tool
that used up its retries, whose own failure only the stack trace holds). Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from pytest_cleo_grade.capture._direct import CallIdentity, same_call
from pytest_cleo_grade.capture.mapping import Call, Failure, envelope_failure
from pytest_cleo_grade.core._links import docs_page

__all__ = [
    "SpanData",
    "call_identity_of",
    "is_tool_span",
    "is_turn_span",
    "outermost_tool_spans",
    "repeats_enclosing_call",
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
#: GenAI operations that are a model's or an agent's turn: a tool span below one is a call
#: that turn decided on, not another layer of a tool call around it.
TURN_OPERATIONS: Final = frozenset(
    {"chat", "text_completion", "generate_content", "invoke_agent", "create_agent"}
)
#: The OpenInference kinds that are such a turn.
TURN_KINDS: Final = frozenset({"LLM", "AGENT"})
#: pydantic-ai's verdict on the attempt that uses up a tool's retries (tool_manager's
#: ``_check_max_retries``), raised ``from`` the tool's own failure (its ``ModelRetry``).
_GAVE_UP_TYPE: Final = "pydantic_ai.exceptions.UnexpectedModelBehavior"
_RETRIES_USED_UP: Final = re.compile(r"Tool '(?P<tool>[^'\n]*)' exceeded max retries count of \d+")
#: How Python's traceback text joins a chain: the exception an exception was raised ``from``
#: (its ``__cause__``) comes first, then this line, then the exception itself.
_DIRECT_CAUSE: Final = (
    "\n\nThe above exception was the direct cause of the following exception:\n\n"
)
_CHAIN_LINK: Final = re.compile(
    r"\n\n(?:The above exception was the direct cause of the following exception"
    r"|During handling of the above exception, another exception occurred):\n\n"
)
_TRACEBACK_HEADER: Final = "Traceback (most recent call last):"
_TYPE_NAME: Final = re.compile(r"[A-Za-z_][\w.]*")


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


def is_turn_span(name: str, attributes: Mapping[str, Any]) -> bool:
    """Whether a span is a model call or an agent run (a sub-agent's, say)."""
    if attributes.get("gen_ai.operation.name") in TURN_OPERATIONS:
        return True
    kind = attributes.get("openinference.span.kind")
    return isinstance(kind, str) and kind.upper() in TURN_KINDS


def call_identity_of(name: str, attributes: Mapping[str, Any]) -> CallIdentity | None:
    """What a tool span says of its call (tool, call id, arguments); None for other spans."""
    tool = tool_name_of(name, attributes)
    if tool is None:
        return None
    return CallIdentity.of(
        tool, attributes.get("gen_ai.tool.call.id"), _first(attributes, ARGUMENT_KEYS)
    )


def repeats_enclosing_call(
    identity: CallIdentity, ancestors: Iterable[tuple[str, Mapping[str, Any]]]
) -> bool:
    """Whether a tool span is one more layer of the tool call around it.

    ``ancestors`` are the (name, attributes) of the spans around it, nearest first. The nearest
    tool span decides, unless a model or agent turn comes first: a sub-agent run by a tool
    makes calls of its own.
    """
    for name, attributes in ancestors:
        if is_turn_span(name, attributes):
            return False
        around = call_identity_of(name, attributes)
        if around is not None:
            return same_call(identity, around)
    return False


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


#: The GenAI conventions' event of a tool's exception (on the execute_tool span, or logged
#: in its context): read as the span's own ``exception`` event, and a failure by itself.
TOOL_EXCEPTION_EVENT: Final = "gen_ai.execute_tool.exception"
_EXCEPTION_EVENTS: Final = frozenset({"exception", TOOL_EXCEPTION_EVENT})


def _failure(tool: str, span: SpanData, result: Any) -> Failure | None:
    attrs = span.attributes
    error_type = attrs.get("error.type")
    raised = any(name == TOOL_EXCEPTION_EVENT for name, _ in span.events)
    if not span.error and error_type in (None, "") and not raised:
        return envelope_failure(tool, result)
    message = span.status_message or None
    exc_type: str | None = None
    for event_name, event_attrs in span.events:
        if event_name in _EXCEPTION_EVENTS:
            cause = _retries_used_up_cause(tool, event_attrs)
            if cause is not None:
                # The attempt failed the way every earlier one did (AuditHooks records it so).
                exc_type, message = cause
                break
            exc_type = (
                exc_type
                or _str_or_none(event_attrs.get("exception.type"))
                or _str_or_none(event_attrs.get("error.type"))
            )
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


def _retries_used_up_cause(tool: str, event: Mapping[str, Any]) -> tuple[str, str] | None:
    """The (class name, message) of the tool's own failure when an exception event is
    pydantic-ai giving up on ``tool`` ("Tool 'tool' exceeded max retries count of N"); else None.

    The span holds that failure (the tool's "Task T9 not found") only in the stack trace of the
    verdict raised from it. Only the cause's own exception line(s) are read there, never its
    frames: their source lines are code, not what the call said. A verdict naming another tool
    is an agent that gave up inside this tool (this tool's own failure, as it is).
    """
    message = _str_or_none(event.get("exception.message"))
    stacktrace = _str_or_none(event.get("exception.stacktrace"))
    if event.get("exception.type") != _GAVE_UP_TYPE or message is None or stacktrace is None:
        return None
    verdict = _RETRIES_USED_UP.match(message)
    if verdict is None or verdict["tool"] != tool:
        return None
    chain, link, last = stacktrace.rpartition(_DIRECT_CAUSE)
    # The verdict's own section ends the text (one cut short by a length limit is not read).
    if not link or not last.rstrip("\n").endswith(f"{_GAVE_UP_TYPE}: {message}"):
        return None
    return _exception_lines(_CHAIN_LINK.split(chain)[-1])


def _exception_lines(section: str) -> tuple[str, str] | None:
    """(class name, message) from one exception's part of a Python traceback text: the
    header, the indented frame lines, then "module.Class: message" (the message may span
    several lines); None when the part does not read so."""
    lines = section.split("\n")
    if lines[0] == _TRACEBACK_HEADER:
        lines = lines[1:]
    while lines and lines[0].startswith(" "):
        lines = lines[1:]
    if not lines:
        return None
    type_name, _, first = lines[0].partition(": ")
    if _TYPE_NAME.fullmatch(type_name) is None:
        return None
    text = "\n".join([first, *lines[1:]])
    # As str(exc) or, when empty, the class name: how an adapter holding the cause writes it.
    return type_name, text or type_name.rsplit(".", 1)[-1]


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
    if span.parent_span_id and span.parent_span_id != span.span_id:
        # What ties this call to a layer of it another process recorded (see _one_call).
        extra["parentSpanId"] = span.parent_span_id
    conversation = attrs.get("gen_ai.conversation.id")
    if isinstance(conversation, str) and conversation:
        extra["conversationId"] = conversation
    arguments = _first(attrs, ARGUMENT_KEYS)
    failure = _failure(tool, span, result)
    return Call(
        tool=tool,
        arguments=arguments,
        failure=failure,
        started=time_of(span.start_ns),
        duration_ms=max(0, span.end_ns - span.start_ns) / 1_000_000,
        source=source,
        extra=extra,
        unseen=_unseen_by_mcp_span(attrs, arguments, result, failure),
    )


def _unseen_by_mcp_span(
    attrs: Mapping[str, Any], arguments: Any, result: Any, failure: Failure | None
) -> str | None:
    """What a call graded from the MCP SDK's own ``tools/call`` span cannot show: the SDK
    writes neither the arguments nor the result on it, and a failed call's span says only
    ``tool_error`` (no text, so no not-found)."""
    if attrs.get("mcp.method.name") != "tools/call" or arguments is not None:
        return None
    told = "graded with no parameters"
    if failure is not None and result is None and not failure.message:
        told += ", and its failure as exit 1 even if it was a not-found"
    return (
        "the MCP SDK's span of this call carries neither its arguments nor its result, so it "
        f"is {told} (record MCP calls with audited_client or audit_middleware: "
        f"{docs_page('capture.md', 'opentelemetry')})"
    )


def _ancestors(
    span: SpanData, by_id: Mapping[str, SpanData]
) -> Iterator[tuple[str, Mapping[str, Any]]]:
    # A span naming itself as its parent is a root, not one more layer of its own call.
    seen: set[str] = {span.span_id}
    parent = span.parent_span_id
    while parent and parent not in seen and parent in by_id:
        seen.add(parent)
        ancestor = by_id[parent]
        yield ancestor.name, ancestor.attributes
        parent = ancestor.parent_span_id


def outermost_tool_spans(spans: Sequence[SpanData]) -> list[SpanData]:
    """Each call's outermost tool span in ``spans``: one per call.

    One call is often traced more than once: an agent's ``execute_tool`` span holds the MCP
    client's ``tools/call`` span, which holds the server's; the outermost one is the call (see
    :func:`repeats_enclosing_call`). A tool span under a model or agent turn inside another
    tool's span is a call of its own: a sub-agent's.
    """
    by_id = {s.span_id: s for s in spans if s.span_id}
    kept = []
    for span in spans:
        identity = call_identity_of(span.name, span.attributes)
        if identity is not None and not repeats_enclosing_call(identity, _ancestors(span, by_id)):
            kept.append(span)
    return kept
