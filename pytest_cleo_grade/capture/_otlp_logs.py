"""OTLP log records (``POST /v1/logs``) that carry tool calls or their failures.

Two kinds are read, the rest of a logs export is left alone:

- Claude Code's own telemetry: its ``claude_code.tool_result`` event (``tool_name``,
  ``success``, ``duration_ms``, ``error``, ``tool_input`` or ``tool_parameters``,
  ``tool_use_id``) is one tool call; Claude Code exports no tool spans by default, so these
  events are the session's calls.
- The GenAI conventions' ``gen_ai.execute_tool.exception`` event, emitted as a log record in
  the context of the tool's ``execute_tool`` span: the exception of that span's call, read as
  the span's own ``exception`` event would be (a ``KeyError`` or "not found" is exit 4).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from pytest_cleo_grade.capture._otlp_values import (
    OtlpError,
    _any_value,
    _attributes,
    _hex_id,
    _int,
    _pb_value,
)
from pytest_cleo_grade.capture._spans import TOOL_EXCEPTION_EVENT, time_of
from pytest_cleo_grade.capture.mapping import Call, Failure

__all__ = [
    "CLAUDE_CODE_TOOL_RESULT",
    "TOOL_EXCEPTION",
    "LogData",
    "claude_code_call",
    "logs_from_json",
    "logs_from_protobuf",
]

CLAUDE_CODE_TOOL_RESULT: Final = "claude_code.tool_result"
TOOL_EXCEPTION: Final = TOOL_EXCEPTION_EVENT
#: The event names a log record may carry a Claude Code tool result under: the record's
#: body (Claude Code's own) or its ``event.name`` attribute (``tool_result``, short).
_TOOL_RESULT_NAMES: Final = frozenset({CLAUDE_CODE_TOOL_RESULT, "tool_result"})


@dataclass(frozen=True)
class LogData:
    """The facts of one log record the receiver reads."""

    event_name: str
    attributes: Mapping[str, Any]
    time_ns: int
    trace_id: str = ""
    span_id: str = ""


def _event_name(event_name: Any, body: Any, attributes: Mapping[str, Any]) -> str:
    for candidate in (event_name, attributes.get("event.name"), body):
        if isinstance(candidate, str) and candidate:
            return CLAUDE_CODE_TOOL_RESULT if candidate == "tool_result" else candidate
    return ""


def logs_from_json(document: Any, where: str = "OTLP JSON logs") -> list[LogData]:
    """The log records of an OTLP JSON ``ExportLogsServiceRequest``."""
    if not isinstance(document, Mapping) or not isinstance(document.get("resourceLogs"), list):
        raise OtlpError(f"{where}: expected an object with a resourceLogs list")
    found: list[LogData] = []
    for r, resource_logs in enumerate(document["resourceLogs"]):
        if not isinstance(resource_logs, Mapping):
            raise OtlpError(f"{where}: resourceLogs[{r}]: expected an object")
        scopes = resource_logs.get("scopeLogs") or []
        if not isinstance(scopes, list):
            raise OtlpError(f"{where}: resourceLogs[{r}].scopeLogs: expected a list")
        for s, scope in enumerate(scopes):
            records = scope.get("logRecords") if isinstance(scope, Mapping) else None
            if not isinstance(records, list | None):
                raise OtlpError(f"{where}: resourceLogs[{r}].scopeLogs[{s}]: expected a list")
            for n, record in enumerate(records or []):
                place = f"{where}: resourceLogs[{r}].scopeLogs[{s}].logRecords[{n}]"
                if not isinstance(record, Mapping):
                    raise OtlpError(f"{place}: expected an object")
                attributes = _attributes(record.get("attributes"), place)
                body = record.get("body")
                body_value = _any_value(body, f"{place}.body") if body else None
                stamp = record.get("timeUnixNano") or record.get("observedTimeUnixNano") or 0
                found.append(
                    LogData(
                        event_name=_event_name(record.get("eventName"), body_value, attributes),
                        attributes=attributes,
                        time_ns=_int(stamp, f"{place}.timeUnixNano"),
                        trace_id=_hex_id(record.get("traceId"), f"{place}.traceId"),
                        span_id=_hex_id(record.get("spanId"), f"{place}.spanId"),
                    )
                )
    return found


def logs_from_protobuf(body: bytes) -> list[LogData]:
    """The log records of a protobuf ``ExportLogsServiceRequest`` (the ``otel`` extra)."""
    try:
        from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
            ExportLogsServiceRequest,
        )
    except ImportError:
        raise OtlpError(
            "OTLP protobuf needs opentelemetry-proto: pip install 'pytest-cleo-grade[otel]' "
            "(or export with OTEL_EXPORTER_OTLP_PROTOCOL=http/json)"
        ) from None
    request = ExportLogsServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError has no stable import path
        raise OtlpError(f"OTLP protobuf: not an ExportLogsServiceRequest ({exc})") from None
    found: list[LogData] = []
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                attributes = {kv.key: _pb_value(kv.value) for kv in record.attributes}
                body_value = _pb_value(record.body) if record.HasField("body") else None
                found.append(
                    LogData(
                        event_name=_event_name(
                            getattr(record, "event_name", ""), body_value, attributes
                        ),
                        attributes=attributes,
                        time_ns=record.time_unix_nano or record.observed_time_unix_nano,
                        trace_id=record.trace_id.hex(),
                        span_id=record.span_id.hex(),
                    )
                )
    return found


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _arguments(attributes: Mapping[str, Any]) -> Any:
    # tool_input (OTEL_LOG_TOOL_DETAILS=1) holds the call's arguments; tool_parameters only a
    # summary of some tools' (Bash's command, an MCP tool's server and name).
    for key in ("tool_input", "tool_parameters"):
        value = attributes.get(key)
        if isinstance(value, str) and value:
            try:
                parsed = json.loads(value)
            except ValueError:
                return value
            return parsed
        if isinstance(value, Mapping):
            return dict(value)
    return None


def claude_code_call(record: LogData) -> Call | None:
    """The tool call a Claude Code ``tool_result`` event records (None for other records)."""
    if record.event_name not in _TOOL_RESULT_NAMES:
        return None
    attributes = record.attributes
    tool = _text(attributes.get("tool_name"))
    if tool is None:
        return None
    success = attributes.get("success")
    failed = success is False or (isinstance(success, str) and success.lower() == "false")
    failure = None
    if failed:
        failure = Failure(tool=tool, message=_text(attributes.get("error")) or "failed")
    duration = _number(attributes.get("duration_ms"))
    ended = _stamp(attributes.get("event.timestamp")) or time_of(record.time_ns)
    started = ended - timedelta(milliseconds=duration) if duration is not None else ended
    extra: dict[str, Any] = {}
    call_id = _text(attributes.get("tool_use_id"))
    if call_id is not None:
        extra["toolUseId"] = call_id
    session = _text(attributes.get("session.id"))
    if session is not None:
        extra["conversationId"] = session
    return Call(
        tool=tool,
        arguments=_arguments(attributes),
        failure=failure,
        started=started,
        duration_ms=duration,
        source="claude-code",
        extra=extra,
    )


def _stamp(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None
