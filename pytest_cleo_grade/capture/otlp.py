"""OTLP: tool spans from other processes (a loopback OTLP/HTTP receiver) and from files.

:class:`OtlpReceiver` listens on 127.0.0.1 for the test's duration; an agent in any
language that exports traces with OTLP/HTTP (``OTEL_EXPORTER_OTLP_ENDPOINT`` set to
:attr:`OtlpReceiver.endpoint`) has its tool spans graded. JSON payloads need nothing beyond
the standard library; protobuf payloads need the ``otel`` extra (``opentelemetry-proto``).
:func:`load_otlp_file` reads the OTLP JSON files an OpenTelemetry Collector's file exporter
writes (``cleo-grade import --format otlp``).
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
import re
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from pytest_cleo_grade.capture._direct import same_call
from pytest_cleo_grade.capture._spans import (
    ARGUMENT_KEYS,
    SpanData,
    call_identity_of,
    is_tool_span,
    is_turn_span,
    outermost_tool_spans,
    repeats_enclosing_call,
    tool_call_of,
)
from pytest_cleo_grade.capture.mapping import ToolMapping, build_entry
from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core._files import open_regular
from pytest_cleo_grade.core.errors import CleoGradeError, EntryError
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.store.sources import is_sqlite_file, may_overflow, parse_json_strict

__all__ = [
    "OtlpError",
    "OtlpReceiver",
    "entries_from_spans",
    "load_otlp_conversation",
    "load_otlp_file",
    "spans_from_json",
    "spans_from_protobuf",
]

#: gRPC-style status codes of OTLP JSON (``2`` or ``"STATUS_CODE_ERROR"``).
_ERROR_STATUS: Final = (2, "2", "STATUS_CODE_ERROR")
_MAX_BODY: Final = 64 * 1024 * 1024


class OtlpError(CleoGradeError):
    """An OTLP payload or file is malformed (the message names the place)."""


# -- decoding -------------------------------------------------------------------------------

#: OTLP's integers are 64-bit (fixed64 times, int64 values); JSON spells them as text.
_INTEGER_TEXT: Final = re.compile(r"-?[0-9]{1,20}")
_INT_BOUND: Final = 2**64
#: The proto3 JSON spellings of a double no JSON number holds.
_NON_FINITE: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _object(value: Any, where: str) -> Mapping[str, Any]:
    """An optional JSON object of the payload: absent or null reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise OtlpError(f"{where}: expected an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    """An optional JSON array of the payload: absent or null reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpError(f"{where}: expected a list")
    return value


def _any_value(value: Any, where: str) -> Any:
    """An OTLP JSON AnyValue as a Python value."""
    if not isinstance(value, Mapping):
        raise OtlpError(f"{where}: expected an AnyValue object")
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return _int(value["intValue"], where)
    if "doubleValue" in value:
        return _double(value["doubleValue"])
    if "arrayValue" in value:
        array = _object(value["arrayValue"], f"{where}.arrayValue")
        items = _list(array.get("values"), f"{where}.arrayValue.values")
        return [_any_value(item, f"{where}[{i}]") for i, item in enumerate(items)]
    if "kvlistValue" in value:
        kvlist = _object(value["kvlistValue"], f"{where}.kvlistValue")
        return _attributes(kvlist.get("values"), where)
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _double(value: Any) -> Any:
    # OTLP allows NaN and infinities as doubles (JSON spells them "NaN", "Infinity"), but JSON
    # and the entries have no such value: they are stored as null, never as the text "nan".
    number = _NON_FINITE.get(value, value) if isinstance(value, str) else value
    return None if isinstance(number, float) and not math.isfinite(number) else number


def _int(value: Any, where: str) -> int:
    # OTLP JSON writes 64-bit integers as strings; numbers are accepted too.
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < _INT_BOUND:
        return value
    shown = repr(value)
    shown = shown if len(shown) <= 40 else f"{shown[:40]}..."
    raise OtlpError(f"{where}: expected a 64-bit integer, got {shown}")


def _attributes(items: Any, where: str) -> dict[str, Any]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise OtlpError(f"{where}: attributes must be a list")
    found: dict[str, Any] = {}
    for index, item in enumerate(items):
        place = f"{where}.attributes[{index}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise OtlpError(f"{place}: expected {{'key': ..., 'value': ...}}")
        found[item["key"]] = _any_value(item.get("value") or {}, f"{place}.value")
    return found


def _hex_id(value: Any, where: str) -> str:
    # The OTLP JSON encoding writes ids as hex; tolerate base64 (protobuf's JSON mapping).
    if value in (None, ""):
        return ""
    if not isinstance(value, str):
        raise OtlpError(f"{where}: expected a hex id string")
    text = value.strip()
    if all(c in "0123456789abcdefABCDEF" for c in text) and len(text) in (16, 32):
        return text.lower()
    try:
        return base64.b64decode(text, validate=True).hex()
    except ValueError:
        raise OtlpError(f"{where}: {value!r} is not a hex id") from None


def spans_from_json(document: Any, where: str = "OTLP JSON") -> list[SpanData]:
    """The spans of an OTLP JSON ``ExportTraceServiceRequest`` (``{"resourceSpans": [...]}``)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("resourceSpans"), list):
        raise OtlpError(f"{where}: expected an object with a resourceSpans list")
    spans: list[SpanData] = []
    for r, resource_spans in enumerate(document["resourceSpans"]):
        rwhere = f"{where}: resourceSpans[{r}]"
        if not isinstance(resource_spans, Mapping):
            raise OtlpError(f"{rwhere}: expected an object")
        held = _object(resource_spans.get("resource"), f"{rwhere}.resource")
        resource = _attributes(held.get("attributes"), f"{rwhere}.resource")
        scopes = _list(resource_spans.get("scopeSpans"), f"{rwhere}.scopeSpans")
        for s, scope_spans in enumerate(scopes):
            swhere = f"{rwhere}.scopeSpans[{s}]"
            if not isinstance(scope_spans, Mapping):
                raise OtlpError(f"{swhere}: expected an object")
            for n, span in enumerate(_list(scope_spans.get("spans"), f"{swhere}.spans")):
                spans.append(_json_span(span, f"{swhere}.spans[{n}]", resource))
    return spans


def _json_span(span: Any, where: str, resource: Mapping[str, Any]) -> SpanData:
    if not isinstance(span, Mapping):
        raise OtlpError(f"{where}: expected a span object")
    status = _object(span.get("status"), f"{where}.status")
    events = []
    for e, event in enumerate(_list(span.get("events"), f"{where}.events")):
        if not isinstance(event, Mapping):
            raise OtlpError(f"{where}.events[{e}]: expected an object")
        attrs = _attributes(event.get("attributes"), f"{where}.events[{e}]")
        events.append((str(event.get("name") or ""), attrs))
    start = _int(span.get("startTimeUnixNano", 0), f"{where}.startTimeUnixNano")
    end = _int(span.get("endTimeUnixNano", start), f"{where}.endTimeUnixNano")
    message = status.get("message")
    return SpanData(
        name=str(span.get("name") or ""),
        attributes=_attributes(span.get("attributes"), where),
        start_ns=start,
        end_ns=end,
        error=status.get("code") in _ERROR_STATUS,
        status_message=message if isinstance(message, str) and message else None,
        events=events,
        trace_id=_hex_id(span.get("traceId"), f"{where}.traceId"),
        span_id=_hex_id(span.get("spanId"), f"{where}.spanId"),
        parent_span_id=_hex_id(span.get("parentSpanId"), f"{where}.parentSpanId") or None,
        resource=resource,
    )


def spans_from_protobuf(body: bytes) -> list[SpanData]:
    """The spans of a protobuf ``ExportTraceServiceRequest`` (needs the ``otel`` extra)."""
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )
        from opentelemetry.proto.trace.v1.trace_pb2 import Status
    except ImportError:
        raise OtlpError(
            "OTLP protobuf needs opentelemetry-proto: pip install 'pytest-cleo-grade[otel]' "
            "(or export with OTEL_EXPORTER_OTLP_PROTOCOL=http/json)"
        ) from None
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except Exception as exc:  # protobuf's DecodeError has no stable import path
        raise OtlpError(f"OTLP protobuf: not an ExportTraceServiceRequest ({exc})") from None
    spans: list[SpanData] = []
    for resource_spans in request.resource_spans:
        resource = {kv.key: _pb_value(kv.value) for kv in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    SpanData(
                        name=span.name,
                        attributes={kv.key: _pb_value(kv.value) for kv in span.attributes},
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        error=span.status.code == Status.STATUS_CODE_ERROR,
                        status_message=span.status.message or None,
                        events=[
                            (e.name, {kv.key: _pb_value(kv.value) for kv in e.attributes})
                            for e in span.events
                        ],
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_span_id=span.parent_span_id.hex() or None,
                        resource=resource,
                    )
                )
    return spans


def _pb_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_pb_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    found = None if kind is None else getattr(value, kind)
    return _double(found) if kind == "double_value" else found


# -- spans to entries -----------------------------------------------------------------------


def _conversation(span: SpanData, by_id: Mapping[str, SpanData]) -> str | None:
    """The ``gen_ai.conversation.id`` of the span or its nearest ancestor that has one."""
    seen: set[str] = set()
    current: SpanData | None = span
    while current is not None and current.span_id not in seen:
        value = current.attributes.get("gen_ai.conversation.id")
        if isinstance(value, str) and value:
            return value
        seen.add(current.span_id)
        current = by_id.get(current.parent_span_id or "")
    return None


def entries_from_spans(
    spans: Sequence[SpanData],
    *,
    session_id: str | None = None,
    mapping: ToolMapping | None = None,
    source: str = "otlp",
) -> list[AuditEntry]:
    """One entry per outermost tool span, in span start order.

    ``session_id`` puts every entry in that session; otherwise each joins the session named
    by its ``gen_ai.conversation.id`` (on the span or an ancestor), else its trace id.
    Raises EntryError naming the span when a call cannot become a valid entry.
    """
    by_id = {s.span_id: s for s in spans if s.span_id}
    entries: list[AuditEntry] = []
    for span in sorted(outermost_tool_spans(spans), key=lambda s: s.start_ns):
        call = tool_call_of(span, source=source)
        if call is None:
            continue
        chosen = session_id or _conversation(span, by_id) or span.trace_id or None
        try:
            entries.append(build_entry(call, session_id=chosen, mapping=mapping))
        except EntryError as exc:
            raise EntryError(f"span {span.span_id or span.name}: {exc}") from exc
    return entries


def load_otlp_file(
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    mapping: ToolMapping | None = None,
) -> list[AuditEntry]:
    """The entries of an OTLP JSON file: one ``ExportTraceServiceRequest`` per line (the
    Collector's file exporter) or one document. Errors name the file and line; a file with
    no tool span is an error (an empty session would grade as an agent that did nothing)."""
    target = Path(path)
    spans = _file_spans(target)
    if not spans:
        raise OtlpError(f"{target}: no spans (expected OTLP JSON with resourceSpans)")
    try:
        entries = entries_from_spans(spans, session_id=session_id, mapping=mapping)
    except EntryError as exc:
        raise OtlpError(f"{target}: {exc}") from exc
    if not entries:
        raise OtlpError(
            f"{target}: {len(spans)} spans but no tool span (gen_ai execute_tool, "
            "OpenInference TOOL or MCP tools/call)"
        )
    return entries


def _file_spans(target: Path) -> list[SpanData]:
    """Every span of an OTLP JSON file (errors name the file and line)."""
    if is_sqlite_file(target):
        raise OtlpError(f"{target}: an SQLite database, not an OTLP JSON file")
    try:
        with open_regular(target) as handle:  # a FIFO or a device is refused, never read
            raw = handle.read()
    except OSError as exc:
        raise OtlpError(f"{target}: cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        at = raw.count(b"\n", 0, exc.start) + 1
        raise OtlpError(f"{target}:{at}: not UTF-8 text ({exc.reason})") from None
    spans: list[SpanData] = []
    lines = text.splitlines()
    stripped = text.strip()
    try:
        documents = [(0, parse_json_strict(stripped))] if stripped else []
    except ValueError:
        documents = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                documents.append((number, parse_json_strict(line)))
            except ValueError as exc:
                raise OtlpError(f"{target}:{number}: not valid JSON: {exc}") from None
    for number, document in documents:
        where = f"{target}:{number}" if number else str(target)
        found = spans_from_json(document, where)
        for span in found:
            _refuse_non_finite_arguments(span, where)
        spans.extend(found)
    return spans


def load_otlp_conversation(path: str | os.PathLike[str]) -> Conversation:
    """The conversation an OTLP JSON file's model spans hold (GenAI ``gen_ai.input.messages``
    / ``gen_ai.output.messages`` and ``gen_ai.usage.*``; see ``capture._genai``): empty when
    it holds none."""
    from pytest_cleo_grade.capture._genai import conversation_from_spans

    return conversation_from_spans(_file_spans(Path(path)))


class _NonFinite(ValueError):
    """A number JSON has no value for, met while reading a tool's arguments."""


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e400: a float holds it only as infinity
        raise _NonFinite(text)
    return number


def _constant(text: str) -> float:
    raise _NonFinite(text)


def _may_be_non_finite(text: str) -> bool:
    # A substring test, so that the arguments, parsed again when the entry is built, are
    # parsed here only when they may hold such a number (a word, or a float that overflows).
    return "NaN" in text or "Infinity" in text or may_overflow(text.encode("utf-8", "replace"))


def _refuse_non_finite_arguments(span: SpanData, where: str) -> None:
    """Refuse a tool span whose JSON arguments hold NaN or an infinity.

    JSON has no such number; json.loads would read it as a float the entry could only store
    as the text "nan", which is not what the agent sent. Arguments that are no JSON at all
    are left alone: they are stored as their text.
    """
    for key in ARGUMENT_KEYS:
        value = span.attributes.get(key)
        if not isinstance(value, str) or not _may_be_non_finite(value):
            continue
        try:
            json.loads(value, parse_constant=_constant, parse_float=_finite)
        except _NonFinite as exc:
            token = str(exc)[:20]
            raise OtlpError(
                f"{where}: span {span.span_id or span.name}: {key} holds {token!r}, "
                "a number JSON has no value for"
            ) from None
        except (ValueError, RecursionError):
            continue


# -- the receiver ---------------------------------------------------------------------------


#: Both spellings: requests and httpx read either, the upper case first.
_NO_PROXY: Final = ("NO_PROXY", "no_proxy")


def _with_host(no_proxy: str, host: str) -> str:
    hosts = [item.strip() for item in no_proxy.split(",") if item.strip()]
    return ",".join(hosts if host in hosts else [*hosts, host])


class OtlpReceiver:
    """A loopback OTLP/HTTP trace receiver feeding one graded session.

    ``sink`` receives each request's new entries (all tagged ``session_id``), e.g. a
    GradeSession's ``ingest``. Accepts ``POST /v1/traces`` in protobuf or JSON (gzip or
    deflate encoded too); ``/v1/metrics`` and ``/v1/logs`` are accepted and ignored so an
    agent exporting everything to one endpoint keeps working. A malformed payload gets
    HTTP 400 with the reason, which is also kept in :attr:`problems`.
    """

    def __init__(
        self,
        session_id: str,
        sink: Callable[[list[AuditEntry]], object],
        *,
        mapping: ToolMapping | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.session_id = session_id
        self.mapping = mapping
        self.problems: list[str] = []
        self._sink = sink
        self._host = host
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        # Across requests: each span's parent, the name and attributes of the tool and turn
        # spans (what decides whether a tool span is another layer of the call around it) and
        # which spans were recorded, so a call traced in two processes (exported in two
        # requests) is recorded once.
        self._parent: dict[str, str | None] = {}
        self._facts: dict[str, tuple[str, Mapping[str, Any]]] = {}
        self._recorded: set[str] = set()
        #: Where the model spans' conversation goes (a GradeSession's hold_conversation),
        #: and the messages already taken (each request repeats the history before it).
        self.conversation_sink: Callable[[Conversation], object] | None = None
        self._said: set[tuple[str, str]] = set()
        self._model_spans: set[str] = set()

    @property
    def endpoint(self) -> str:
        """The base URL to give exporters (``OTEL_EXPORTER_OTLP_ENDPOINT``)."""
        if self._server is None:
            raise OtlpError("the OTLP receiver is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def traces_endpoint(self) -> str:
        """The traces URL (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)."""
        return f"{self.endpoint}/v1/traces"

    def env(self) -> dict[str, str]:
        """The variables that point an OpenTelemetry SDK's OTLP/HTTP exporter here.

        ``NO_PROXY`` gains the receiver's host: an exporter honours the environment's
        ``HTTP_PROXY``, and no proxy can reach this loopback port.
        """
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.traces_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            **{name: _with_host(os.environ.get(name, ""), self._host) for name in _NO_PROXY},
        }

    def start(self) -> OtlpReceiver:
        """Listen on an ephemeral loopback port; returns self."""
        if self._server is not None:
            return self
        receiver = self

        class Handler(_Handler):
            owner = receiver

        self._server = ThreadingHTTPServer((self._host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="cleo-grade-otlp", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop listening (requests in flight finish first)."""
        if self._server is None:
            return
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()
        self._server = None
        self._thread = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def receive(self, spans: Sequence[SpanData]) -> list[AuditEntry]:
        """Turn one request's spans into entries and hand the new ones to the sink."""
        with self._lock:
            for span in spans:
                if span.span_id:
                    self._parent[span.span_id] = span.parent_span_id
                    if is_tool_span(span.name, span.attributes) or is_turn_span(
                        span.name, span.attributes
                    ):
                        self._facts[span.span_id] = (span.name, span.attributes)
            fresh = [s for s in outermost_tool_spans(spans) if self._is_new_call(s)]
            entries = entries_from_spans(fresh, session_id=self.session_id, mapping=self.mapping)
            self._recorded.update(s.span_id for s in fresh if s.span_id)
            talk = self._conversation(spans)
        if entries:
            self._sink(entries)
        if talk is not None and self.conversation_sink is not None:
            self.conversation_sink(talk)
        return entries

    def _conversation(self, spans: Sequence[SpanData]) -> Conversation | None:
        """The conversation of the model spans not received before (None: none)."""
        if self.conversation_sink is None:
            return None
        from pytest_cleo_grade.capture._genai import conversation_from_spans, is_model_span

        new = [s for s in spans if is_model_span(s) and s.span_id not in self._model_spans]
        self._model_spans.update(s.span_id for s in new if s.span_id)
        talk = conversation_from_spans(new, seen=self._said)
        return None if talk.empty else talk

    def _ancestors(self, span_id: str) -> Iterable[str]:
        seen: set[str] = set()
        parent = self._parent.get(span_id)
        while parent and parent not in seen:
            yield parent
            seen.add(parent)
            parent = self._parent.get(parent)

    def _ancestor_facts(self, span_id: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        for ancestor in self._ancestors(span_id):
            # A span never received, or neither a tool nor a turn: passed through.
            yield self._facts.get(ancestor, ("", {}))

    def _is_new_call(self, span: SpanData) -> bool:
        if not span.span_id:
            return True
        if span.span_id in self._recorded:
            return False
        identity = call_identity_of(span.name, span.attributes)
        if identity is None:
            return False
        if repeats_enclosing_call(identity, self._ancestor_facts(span.span_id)):
            return False
        # A tool span that ends after one inside it was already recorded (exported earlier):
        # not new when that one is a layer of this call, but new when it is a sub-agent's.
        return not any(self._layer_of(recorded, span.span_id) for recorded in self._recorded)

    def _layer_of(self, inner_id: str, outer_id: str) -> bool:
        """Whether the span ``inner_id`` is the call of ``outer_id`` seen at a deeper layer."""
        facts = self._facts.get(inner_id)
        identity = None if facts is None else call_identity_of(*facts)
        if identity is None:
            return False
        for ancestor in self._ancestors(inner_id):
            name, attributes = self._facts.get(ancestor, ("", {}))
            if is_turn_span(name, attributes):
                return False
            around = call_identity_of(name, attributes)
            if around is not None:
                if not same_call(identity, around):
                    return False
                if ancestor == outer_id:
                    return True
                identity = around
        return False


class _Handler(BaseHTTPRequestHandler):
    owner: OtlpReceiver
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test run's output is no place for an access log

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0].rstrip("/")
        body = self._body()
        if body is None:
            return
        if path in ("/v1/metrics", "/v1/logs"):
            self._reply(200, b"", self._content_type())
            return
        if path != "/v1/traces":
            self._reply(404, b"not an OTLP path (POST /v1/traces)", "text/plain")
            return
        kind = self._content_type()
        try:
            if kind == "application/json":
                try:
                    document = parse_json_strict(body.decode("utf-8"))
                except (UnicodeDecodeError, ValueError) as exc:
                    raise OtlpError(f"OTLP JSON: not valid JSON: {exc}") from None
                spans = spans_from_json(document)
            else:
                spans = spans_from_protobuf(body)
            where = "OTLP JSON" if kind == "application/json" else "OTLP protobuf"
            for span in spans:
                _refuse_non_finite_arguments(span, where)
            self.owner.receive(spans)
        except CleoGradeError as exc:
            self.owner.problems.append(str(exc))
            self._reply(400, str(exc).encode("utf-8"), "text/plain")
            return
        self._reply(200, b"{}" if kind == "application/json" else b"", kind)

    def _content_type(self) -> str:
        value = self.headers.get("Content-Type") or "application/x-protobuf"
        return value.split(";", 1)[0].strip().lower()

    def _body(self) -> bytes | None:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if length < 0 or length > _MAX_BODY:
            self._reply(400, b"bad Content-Length", "text/plain")
            return None
        body = self.rfile.read(length)
        encoding = (self.headers.get("Content-Encoding") or "").strip().lower()
        try:
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
        except (OSError, zlib.error, EOFError):
            self._reply(400, f"body is not valid {encoding}".encode(), "text/plain")
            return None
        return body

    def _reply(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
