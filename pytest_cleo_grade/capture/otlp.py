"""OTLP: tool spans from other processes (a loopback OTLP/HTTP receiver) and from files.

:class:`OtlpReceiver` listens on 127.0.0.1 for the test's duration; an agent in any
language that exports traces with OTLP/HTTP (``OTEL_EXPORTER_OTLP_ENDPOINT`` set to
:attr:`OtlpReceiver.endpoint`) has its tool spans graded. JSON payloads need nothing beyond
the standard library; protobuf payloads need the ``otel`` extra (``opentelemetry-proto``).
:func:`load_otlp_file` reads the OTLP JSON files an OpenTelemetry Collector's file exporter
writes (``cleo-grade import --format otlp``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import json
import math
import os
import secrets
import selectors
import socket
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final

from pytest_cleo_grade.capture._direct import CallIdentity, same_call
from pytest_cleo_grade.capture._otlp_body import BodyError, decode_body, read_body
from pytest_cleo_grade.capture._otlp_values import (
    OtlpError,
    _attributes,
    _hex_id,
    _int,
    _list,
    _object,
    _pb_value,
)
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
        from pytest_cleo_grade.core.errors import install_command

        raise OtlpError(
            f"OTLP protobuf needs opentelemetry-proto (the otel extra): {install_command('otel')}"
            " (or export with OTEL_EXPORTER_OTLP_PROTOCOL=http/json)"
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
#: The request header that may carry the session's token (``OTEL_EXPORTER_OTLP_HEADERS``);
#: the token can also open the path (``/<token>/v1/traces``), as :attr:`endpoint` has it.
TOKEN_HEADER: Final = "x-cleo-grade-token"
#: Connections waiting to be accepted: a suite's agents exporting all at once (200 in the
#: tests) must never find the queue full and be reset (the standard library's default is 5).
_QUEUE: Final = 1024
#: An idle keep-alive connection is closed after this long (its thread ends with it).
_IDLE_SECONDS: Final = 60
#: How long :meth:`OtlpReceiver.stop` waits for requests being handled to finish.
_STOP_WAIT_SECONDS: Final = 10.0
#: The OTLP paths under the endpoint, by signal.
_SIGNALS: Final = {"/v1/traces": "traces", "/v1/logs": "logs", "/v1/metrics": "metrics"}


def _with_host(no_proxy: str, host: str) -> str:
    hosts = [item.strip() for item in no_proxy.split(",") if item.strip()]
    return ",".join(hosts if host in hosts else [*hosts, host])


class _Server(ThreadingHTTPServer):
    request_queue_size = _QUEUE
    daemon_threads = True


class OtlpReceiver:
    """A loopback OTLP/HTTP receiver feeding one graded session, for its holder's eyes only.

    ``sink`` receives each request's new entries (all tagged ``session_id``). Every request
    must carry the receiver's :attr:`token`, in the path (:attr:`endpoint` includes it) or
    in the ``x-cleo-grade-token`` header (:meth:`env` sets ``OTEL_EXPORTER_OTLP_HEADERS``);
    any other gets 401 and is counted in :attr:`unauthorized`, never read. Accepts
    ``POST /v1/traces`` and ``/v1/logs`` in protobuf or JSON, gzip or deflate encoded,
    fixed-length or chunked; ``/v1/metrics`` is accepted and ignored. An export the receiver
    cannot take (malformed, too large, a path it does not know) is answered 4xx with the
    reason, kept in :attr:`problems` and handed to ``refused``: a session told so is not
    graded on the rest. ``replace(old, new)`` takes an entry amended afterwards (a tool's
    exception logged after its span was exported).
    """

    def __init__(
        self,
        session_id: str,
        sink: Callable[[list[AuditEntry]], object],
        *,
        mapping: ToolMapping | None = None,
        host: str = "127.0.0.1",
        token: str | None = None,
        refused: Callable[[str], object] | None = None,
        replace: Callable[[AuditEntry, AuditEntry], object] | None = None,
        max_body: int = _MAX_BODY,
    ) -> None:
        self.session_id = session_id
        self.mapping = mapping
        #: The secret an export must carry (URL-safe text).
        self.token = token or secrets.token_urlsafe(24)
        #: Why exports were refused (4xx), in order.
        self.problems: list[str] = []
        #: Exports refused for want of the token (401), counted by reason.
        self.unauthorized: Counter[str] = Counter()
        #: The largest body taken, compressed or decompressed.
        self.max_body = max_body
        self._sink = sink
        self._refused = refused
        self._replace = replace
        self._host = host
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None
        self._lock = threading.Lock()
        # Requests being handled (stop() waits for them) and the open connections (stop()
        # ends the idle ones, whose threads would wait for another request).
        self._busy = threading.Condition()
        self._in_flight = 0
        self._stopping = False
        self._connections: set[socket.socket] = set()
        # Across requests: each span's parent and children, the name and attributes of the
        # tool and turn spans (what decides whether a tool span is another layer of the call
        # around it), and the recorded spans with their entries, so a call traced in two
        # processes (exported in two requests) is recorded once.
        self._parent: dict[str, str | None] = {}
        self._children: dict[str, list[str]] = {}
        self._facts: dict[str, tuple[str, Mapping[str, Any]]] = {}
        self._recorded: dict[str, tuple[SpanData, AuditEntry] | None] = {}
        #: Tool exceptions logged (``/v1/logs``) by the span they were emitted in.
        self._exceptions: dict[str, list[tuple[str, Mapping[str, Any]]]] = {}
        #: The tool-call log records already recorded (an exporter retries a whole batch).
        self._logged: set[Any] = set()
        #: Where the model spans' conversation goes (a GradeSession's hold_conversation),
        #: and the messages already taken (each request repeats the history before it).
        self.conversation_sink: Callable[[Conversation], object] | None = None
        self._said: set[tuple[str, str]] = set()
        self._model_spans: set[str] = set()

    @property
    def endpoint(self) -> str:
        """The base URL to give exporters (``OTEL_EXPORTER_OTLP_ENDPOINT``), token included."""
        if self._server is None:
            raise OtlpError("the OTLP receiver is not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/{self.token}"

    @property
    def traces_endpoint(self) -> str:
        """The traces URL (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``)."""
        return f"{self.endpoint}/v1/traces"

    @property
    def logs_endpoint(self) -> str:
        """The logs URL (``OTEL_EXPORTER_OTLP_LOGS_ENDPOINT``)."""
        return f"{self.endpoint}/v1/logs"

    def env(self) -> dict[str, str]:
        """The variables that point an OpenTelemetry SDK's OTLP/HTTP exporter here.

        The token travels twice: in the endpoints' path and in ``OTEL_EXPORTER_OTLP_HEADERS``
        (for an exporter given another URL). ``NO_PROXY`` gains the receiver's host: an
        exporter honours the environment's ``HTTP_PROXY``, and no proxy can reach this
        loopback port.
        """
        return {
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": self.traces_endpoint,
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT": self.logs_endpoint,
            "OTEL_EXPORTER_OTLP_HEADERS": f"{TOKEN_HEADER}={self.token}",
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

        self._server = _Server((self._host, 0), Handler)
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._serve, name="cleo-grade-otlp", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        # serve_forever() looks for a stop every half second: a self-pipe ends the wait at
        # once, so a test's teardown does not wait on it.
        server, wake = self._server, self._wake
        assert server is not None and wake is not None
        with selectors.DefaultSelector() as selector:
            selector.register(server.fileno(), selectors.EVENT_READ, "accept")
            selector.register(wake[0], selectors.EVENT_READ, "stop")
            while True:
                ready = {key.data for key, _ in selector.select()}
                if "stop" in ready:
                    return
                server.handle_request()

    def stop(self) -> None:
        """Stop listening; requests being handled finish first, idle connections are closed."""
        if self._server is None:
            return
        assert self._wake is not None
        with self._busy:
            self._stopping = True
        os.write(self._wake[1], b"x")
        if self._thread is not None:
            self._thread.join()
        self._server.server_close()
        with self._busy:
            self._busy.wait_for(lambda: self._in_flight == 0, timeout=_STOP_WAIT_SECONDS)
            idle = list(self._connections)
        for connection in idle:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for fd in self._wake:
            os.close(fd)
        self._server = None
        self._thread = None
        self._wake = None

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # -- what the handler tells the receiver ---------------------------------------------

    @contextlib.contextmanager
    def _request(self) -> Iterator[bool]:
        """Count a request in flight; yields False once stop() began (the request is late)."""
        with self._busy:
            self._in_flight += 1
            late = self._stopping
        try:
            yield not late
        finally:
            with self._busy:
                self._in_flight -= 1
                self._busy.notify_all()

    def _opened(self, connection: socket.socket) -> None:
        with self._busy:
            self._connections.add(connection)

    def _closed(self, connection: socket.socket) -> None:
        with self._busy:
            self._connections.discard(connection)

    def refuse(self, reason: str) -> None:
        """Note an export that was not taken (the session it feeds is then not graded)."""
        with self._lock:
            self.problems.append(reason)
        if self._refused is not None:
            self._refused(reason)

    def _unauthorized(self, reason: str) -> None:
        with self._lock:
            self.unauthorized[reason] += 1

    # -- spans and log records to entries ------------------------------------------------

    def receive(self, spans: Sequence[SpanData]) -> list[AuditEntry]:
        """Turn one request's spans into entries and hand the new ones to the sink."""
        with self._lock:
            spans = [self._with_logged_exceptions(span) for span in spans]
            for span in spans:
                if not span.span_id:
                    continue
                # A span naming itself as its parent is a root (a broken exporter's), never
                # one more layer of itself.
                parent = span.parent_span_id if span.parent_span_id != span.span_id else None
                if span.span_id not in self._parent and parent:
                    self._children.setdefault(parent, []).append(span.span_id)
                self._parent[span.span_id] = parent
                if is_tool_span(span.name, span.attributes) or is_turn_span(
                    span.name, span.attributes
                ):
                    self._facts[span.span_id] = (span.name, span.attributes)
            fresh = sorted(
                (s for s in outermost_tool_spans(spans) if self._is_new_call(s)),
                key=lambda s: s.start_ns,
            )
            # Built before anything is noted as recorded: a span that cannot become an
            # entry refuses the whole export.
            made = [
                (span, entries_from_spans([span], session_id=self.session_id, mapping=self.mapping))
                for span in fresh
            ]
            entries = [entry for _, built in made for entry in built]
            for span, built in made:
                if span.span_id:
                    self._recorded[span.span_id] = (span, built[0]) if built else None
            talk = self._conversation(spans)
        if entries:
            self._sink(entries)
        if talk is not None and self.conversation_sink is not None:
            self.conversation_sink(talk)
        return entries

    def receive_logs(self, records: Sequence[Any]) -> list[AuditEntry]:
        """Turn one logs request's tool records into entries (see ``_otlp_logs``)."""
        from pytest_cleo_grade.capture._otlp_logs import TOOL_EXCEPTION, claude_code_call

        entries: list[AuditEntry] = []
        amended: list[tuple[AuditEntry, AuditEntry]] = []
        with self._lock:
            for record in records:
                if record.event_name == TOOL_EXCEPTION and record.span_id:
                    event = (TOOL_EXCEPTION, record.attributes)
                    self._exceptions.setdefault(record.span_id, []).append(event)
                    done = self._recorded.get(record.span_id)
                    if done is not None:
                        amended.append(self._amend(record.span_id, done, event))
                    continue
                call = claude_code_call(record)
                if call is None:
                    continue
                key = call.extra.get("toolUseId") or (
                    record.time_ns,
                    call.tool,
                    json.dumps(record.attributes, sort_keys=True, default=str),
                )
                if key in self._logged:
                    continue
                try:
                    entry = build_entry(call, session_id=self.session_id, mapping=self.mapping)
                except EntryError as exc:
                    raise EntryError(f"log record of tool {call.tool}: {exc}") from exc
                entries.append(entry)
                self._logged.add(key)
        if entries:
            self._sink(entries)
        for old, new in amended:
            if self._replace is None:
                self.refuse(
                    f"a tool's exception was logged after its call {old.domain}.{old.operation} "
                    "was recorded, and this receiver cannot amend the entry"
                )
            else:
                self._replace(old, new)
        return entries

    def _amend(
        self, span_id: str, done: tuple[SpanData, AuditEntry], event: tuple[str, Mapping[str, Any]]
    ) -> tuple[AuditEntry, AuditEntry]:
        span, old = done
        span = dataclasses.replace(span, events=[*span.events, event])
        [new] = entries_from_spans([span], session_id=self.session_id, mapping=self.mapping)
        self._recorded[span_id] = (span, new)
        return old, new

    def _with_logged_exceptions(self, span: SpanData) -> SpanData:
        logged = self._exceptions.get(span.span_id) if span.span_id else None
        return span if not logged else dataclasses.replace(span, events=[*span.events, *logged])

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
        seen: set[str] = {span_id}
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
        return not self._holds_recorded_layer(span.span_id, identity)

    def _holds_recorded_layer(self, outer_id: str, identity: CallIdentity) -> bool:
        """Whether a recorded span below ``outer_id`` is its call seen at a deeper layer.

        Walks down from the span, not over every recorded span: through spans that are
        neither a tool nor a turn (or were never received), into tool spans of the same
        call; a turn, or a tool span of another call, ends the way down (a sub-agent's calls
        are calls of their own). Each span is visited at most once.
        """
        stack = [(child, identity) for child in self._children.get(outer_id, ())]
        seen = {outer_id}
        while stack:
            span_id, around = stack.pop()
            if span_id in seen:
                continue
            seen.add(span_id)
            name, attributes = self._facts.get(span_id, ("", {}))
            if is_turn_span(name, attributes):
                continue
            inner = call_identity_of(name, attributes)
            if inner is not None:
                if not same_call(inner, around):
                    continue
                if span_id in self._recorded:
                    return True
                around = inner
            stack.extend((child, around) for child in self._children.get(span_id, ()))
        return False


class _Handler(BaseHTTPRequestHandler):
    owner: OtlpReceiver
    protocol_version = "HTTP/1.1"
    # An answer is one small write: no waiting for the client's ACK of the headers.
    disable_nagle_algorithm = True
    timeout = _IDLE_SECONDS

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a test run's output is no place for an access log

    def setup(self) -> None:
        super().setup()
        self.owner._opened(self.connection)

    def finish(self) -> None:
        self.owner._closed(self.connection)
        super().finish()

    def do_POST(self) -> None:
        owner = self.owner
        with owner._request() as open_:
            path, problem = self._authorized_path()
            if path is not None and not open_:
                # On a connection kept alive past the end of the test: its session is
                # being closed, so the export cannot be graded, and the test is told.
                if self._read(keep=False, refuse=False) is not None:
                    owner.refuse("OTLP export refused (HTTP 503): it arrived after the test ended")
                    self._reply(503, b"the test this receiver served has ended", "text/plain")
                return
            if path is None:
                # Read (and drop) the body: closing on unread data resets the connection
                # before the client can read why. Nothing of it reaches the session.
                if self._read(keep=False, refuse=False) is None:
                    return
                owner._unauthorized(problem)
                self._reply(
                    401,
                    b"cleo-grade: this OTLP receiver takes exports only with its session's "
                    b"token (graded_session.subprocess_env() hands it out)",
                    "text/plain",
                )
                return
            self._handle(path.rstrip("/") or "/")

    def _handle(self, path: str) -> None:
        owner = self.owner
        signal = _SIGNALS.get(path)
        body = self._read(keep=signal in ("traces", "logs"))
        if body is None:
            return
        if signal is None:
            reason = f"POST {path[:80]} is not an OTLP path (/v1/traces, /v1/logs)"
            owner.refuse(f"OTLP export refused (HTTP 404): {reason}")
            self._reply(404, reason.encode(), "text/plain")
            return
        kind = self._content_type()
        if signal == "metrics":
            self._reply(200, b"{}" if kind == "application/json" else b"", kind)
            return
        try:
            body = decode_body(body, self.headers.get("Content-Encoding"), limit=owner.max_body)
            if signal == "traces":
                owner.receive(_decoded_spans(body, kind))
            else:
                owner.receive_logs(_decoded_logs(body, kind))
        except BodyError as exc:
            owner.refuse(f"OTLP export refused (HTTP {exc.status}): {exc}")
            self._reply(exc.status, str(exc).encode("utf-8"), "text/plain")
            return
        except CleoGradeError as exc:
            owner.refuse(f"OTLP export refused (HTTP 400): {exc}")
            self._reply(400, str(exc).encode("utf-8"), "text/plain")
            return
        self._reply(200, b"{}" if kind == "application/json" else b"", kind)

    def _authorized_path(self) -> tuple[str | None, str]:
        """The path below the token when the request carries it; else None and why not."""
        token = self.owner.token.encode("ascii")
        path = self.path.split("?", 1)[0]
        first, _, rest = path.lstrip("/").partition("/")
        if hmac.compare_digest(first.encode("utf-8", "surrogateescape"), token):
            return f"/{rest}", ""
        given = self.headers.get(TOKEN_HEADER)
        if given is None:
            scheme, _, credentials = (self.headers.get("Authorization") or "").partition(" ")
            given = credentials.strip() if scheme.lower() == "bearer" else None
        if given is not None:
            if hmac.compare_digest(given.strip().encode("utf-8", "surrogateescape"), token):
                return path, ""
            return None, "carried a wrong token"
        if path.rstrip("/") not in _SIGNALS:
            return None, "carried a wrong token in the path"
        return None, "carried no token"

    def _read(self, *, keep: bool, refuse: bool = True) -> bytes | None:
        """The request's body (None: it could not be read, and was answered)."""
        try:
            return read_body(self.rfile, self.headers, limit=self.owner.max_body, keep=keep)
        except BodyError as exc:
            if refuse:
                self.owner.refuse(f"OTLP export refused (HTTP {exc.status}): {exc}")
            # What is left of the body is not read: this connection takes no other request.
            self.close_connection = True
            self._reply(exc.status, str(exc).encode("utf-8"), "text/plain", close=True)
            return None
        except OSError as exc:  # the client went away, or stalled past the idle time
            if refuse:
                self.owner.refuse(f"OTLP export could not be read: {exc}")
            self.close_connection = True
            return None

    def _content_type(self) -> str:
        value = self.headers.get("Content-Type") or "application/x-protobuf"
        return value.split(";", 1)[0].strip().lower()

    def _reply(self, status: int, body: bytes, content_type: str, *, close: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


def _decoded_spans(body: bytes, kind: str) -> list[SpanData]:
    if kind == "application/json":
        spans = spans_from_json(_json_document(body))
    else:
        spans = spans_from_protobuf(body)
    where = "OTLP JSON" if kind == "application/json" else "OTLP protobuf"
    for span in spans:
        _refuse_non_finite_arguments(span, where)
    return spans


def _decoded_logs(body: bytes, kind: str) -> list[Any]:
    from pytest_cleo_grade.capture._otlp_logs import logs_from_json, logs_from_protobuf

    if kind == "application/json":
        return logs_from_json(_json_document(body))
    return logs_from_protobuf(body)


def _json_document(body: bytes) -> Any:
    try:
        return parse_json_strict(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise OtlpError(f"OTLP JSON: not valid JSON: {exc}") from None
