"""OpenTelemetry: a span processor that records every ended tool span as an audit entry.

Needs the ``otel`` extra (``opentelemetry-sdk``). Tool spans are GenAI ``execute_tool``
spans, the OpenInference ``TOOL`` kind and MCP ``tools/call`` spans (see
:mod:`pytest_cleo_grade.capture.spans`); each becomes an entry of the graded session active
in this process, mapped by :mod:`pytest_cleo_grade.capture.mapping`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

try:
    from opentelemetry import context as context_api
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
    from opentelemetry.trace import StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "pytest_cleo_grade.capture.otel needs OpenTelemetry's SDK: "
        "pip install 'pytest-cleo-grade[otel]'"
    ) from exc

from pytest_cleo_grade.capture import direct
from pytest_cleo_grade.capture.mapping import Call, ToolMapping, record_call
from pytest_cleo_grade.capture.spans import SpanData, is_tool_span, tool_call_of
from pytest_cleo_grade.errors import CleoGradeError

__all__ = ["AuditSpanProcessor", "CaptureError", "install_otel_capture", "span_data"]


class CaptureError(CleoGradeError):
    """A capture adapter cannot be installed where it was asked to be."""


def span_data(span: ReadableSpan) -> SpanData:
    """The facts of an SDK span that the mapping reads."""
    context = span.context
    parent = span.parent
    return SpanData(
        name=span.name,
        attributes=dict(span.attributes or {}),
        start_ns=span.start_time or 0,
        end_ns=span.end_time or span.start_time or 0,
        error=span.status.status_code is StatusCode.ERROR,
        status_message=span.status.description,
        events=[(event.name, dict(event.attributes or {})) for event in span.events],
        trace_id=format(context.trace_id, "032x") if context is not None else "",
        span_id=format(context.span_id, "016x") if context is not None else "",
        parent_span_id=format(parent.span_id, "016x") if parent is not None else None,
        resource=dict(span.resource.attributes) if span.resource is not None else {},
    )


class AuditSpanProcessor(SpanProcessor):
    """Records each ended tool span into the graded session active in this process.

    A call traced more than once (an agent's ``execute_tool`` span around an MCP client's
    ``tools/call`` span around the server's) is recorded once, from the outermost tool
    span; a call another adapter records itself (inside
    :func:`~pytest_cleo_grade.capture.direct.direct_call`) is left to that adapter, with
    every tool span around and inside it. ``recorder`` receives each Call (default: record it
    with ``mapping``, see :func:`~pytest_cleo_grade.capture.mapping.record_call`). While
    ``enabled`` is false the processor records nothing (the SDK cannot remove a processor once
    added).
    """

    def __init__(
        self,
        *,
        mapping: ToolMapping | None = None,
        recorder: Callable[[Call], object] | None = None,
        source: str = "otel",
    ) -> None:
        self.mapping = mapping
        self.source = source
        self.enabled = True
        self._recorder = recorder
        self._lock = threading.Lock()
        #: Every open span -> (its parent's span id, the span). Whether a span is a tool
        #: span is asked when a span inside it ends, not when it starts: instrumentation may
        #: set the tool attributes after starting the span.
        self._open: dict[int, tuple[int | None, Span]] = {}
        #: Open spans whose call an adapter records directly.
        self._direct: set[int] = set()
        direct.add_listener(self._direct_call_started)

    def _direct_call_started(self) -> None:
        # The span current when an adapter starts recording a call directly is the one
        # around the call (an agent's execute_tool span, say): it and its tool ancestors
        # must not record the call again.
        context = trace_api.get_current_span().get_span_context()
        if context.is_valid:
            with self._lock:
                self._mark_direct(context.span_id)

    def _mark_direct(self, span_id: int | None) -> None:
        while span_id is not None and span_id in self._open and span_id not in self._direct:
            self._direct.add(span_id)
            span_id = self._open[span_id][0]

    def _inside_a_tool_span(self, parent_id: int | None) -> bool:
        while parent_id is not None and parent_id in self._open:
            parent_id, parent = self._open[parent_id]
            if is_tool_span(parent.name, dict(parent.attributes or {})):
                return True
        return False

    def on_start(self, span: Span, parent_context: context_api.Context | None = None) -> None:
        if not self.enabled:
            return
        parent = span.parent
        with self._lock:
            self._open[span.context.span_id] = (parent.span_id if parent else None, span)
            if direct.in_direct_call():
                self._mark_direct(span.context.span_id)

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None:
            return
        with self._lock:
            parent_id, _ = self._open.pop(context.span_id, (None, None))
            nested = self._inside_a_tool_span(parent_id)
            recorded_directly = context.span_id in self._direct
            self._direct.discard(context.span_id)
        if nested or recorded_directly or not self.enabled:
            return
        if not is_tool_span(span.name, dict(span.attributes or {})):
            return
        call = tool_call_of(span_data(span), source=self.source)
        if call is None:
            return
        if self._recorder is not None:
            self._recorder(call)
        else:
            record_call(call, mapping=self.mapping)

    def shutdown(self) -> None:
        self.enabled = False
        direct.remove_listener(self._direct_call_started)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


_installed: dict[int, tuple[AuditSpanProcessor, list[object]]] = {}
_install_lock = threading.Lock()


def _sdk_provider(provider: Any) -> TracerProvider:
    if provider is not None:
        if not isinstance(provider, TracerProvider):
            raise CaptureError(
                f"cleo-grade: cannot capture spans from {type(provider).__name__}: "
                "it is not the OpenTelemetry SDK's TracerProvider"
            )
        return provider
    current = trace_api.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    if isinstance(current, trace_api.ProxyTracerProvider):
        # Nobody set up the SDK: the agent's spans would go nowhere. Set one up so that
        # instrumented code produces spans to grade (it exports nowhere else).
        created = TracerProvider()
        trace_api.set_tracer_provider(created)
        chosen = trace_api.get_tracer_provider()
        if isinstance(chosen, TracerProvider):
            return chosen
        current = chosen
    raise CaptureError(
        f"cleo-grade: the global tracer provider is {type(current).__name__}, not the "
        "OpenTelemetry SDK's; add capture.otel.AuditSpanProcessor() to yours instead"
    )


def install_otel_capture(
    provider: Any = None, *, mapping: ToolMapping | None = None
) -> Callable[[], None]:
    """Record tool spans of ``provider`` (default: the global SDK tracer provider, set up
    when none is) into the active graded session; returns the callable that stops it.

    One processor per provider, added once and shared: each install enables it and its
    uninstall disables it again once every install is undone. Raises CaptureError when the
    provider is not the SDK's.
    """
    sdk = _sdk_provider(provider)
    token = object()
    with _install_lock:
        found = _installed.get(id(sdk))
        if found is None:
            processor = AuditSpanProcessor(mapping=mapping)
            sdk.add_span_processor(processor)
            found = _installed[id(sdk)] = (processor, [])
        processor, holders = found
        holders.append(token)
        processor.mapping = mapping
        processor.enabled = True

    def uninstall() -> None:
        with _install_lock:
            if any(holder is token for holder in holders):
                holders[:] = [holder for holder in holders if holder is not token]
            if not holders:
                processor.enabled = False

    return uninstall
