"""OpenTelemetry: a span processor that records every ended tool span as an audit entry.

Needs the ``otel`` extra (``opentelemetry-sdk``). Tool spans are GenAI ``execute_tool``
spans, the OpenInference ``TOOL`` kind and MCP ``tools/call`` spans (see
:mod:`pytest_cleo_grade.capture._spans`); each becomes an entry of the graded session active
in this process, mapped by :mod:`pytest_cleo_grade.capture.mapping`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

try:
    from opentelemetry import context as context_api
    from opentelemetry import trace as trace_api
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
    from opentelemetry.trace import StatusCode
except ImportError as exc:  # pragma: no cover - depends on the environment
    from pytest_cleo_grade.core.errors import missing_extra

    raise missing_extra(
        "pytest_cleo_grade.capture.otel", "OpenTelemetry's SDK", "otel", exc
    ) from exc

from pytest_cleo_grade.capture import _direct as direct
from pytest_cleo_grade.capture._direct import CallIdentity, same_call
from pytest_cleo_grade.capture._spans import SpanData, call_identity_of, is_turn_span, tool_call_of
from pytest_cleo_grade.capture.mapping import (
    Call,
    StartedIn,
    ToolMapping,
    record_call,
    record_call_started_in,
    session_at_start,
)
from pytest_cleo_grade.core.errors import CleoGradeError

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


@dataclass(frozen=True)
class _Open:
    """An open span: its parent's span id, the span, the direct call it started in, and the
    graded session active when it started (whose call it is, wherever it ends)."""

    parent: int | None
    span: Span
    inside: direct.DirectCall | None
    session: StartedIn


#: How many recorded spans are remembered. The SDK hands an ended span to every processor of
#: its provider, one after the other, at once: a span's repeats come before thousands of other
#: spans can end, so forgetting the oldest loses nothing.
RECORDED_SPANS_KEPT: Final = 4096

# Process-wide, not per processor: a processor added by hand beside the one
# --cleo-grade-capture=otel installs (or added twice) sees the same spans, and each span is
# one call however many AuditSpanProcessors see it end.
_claims = direct.SpanClaims(RECORDED_SPANS_KEPT)


def _first_to_record(trace_id: int, span_id: int) -> bool:
    """Claim a span for recording: True for the first processor to ask, False after."""
    return _claims.first((trace_id, span_id))


def _is_model(attributes: Mapping[str, Any]) -> bool:
    # Cheap, before building the span's facts: the GenAI operation or OpenInference kind.
    kind = attributes.get("openinference.span.kind")
    return attributes.get("gen_ai.operation.name") in (
        "chat",
        "text_completion",
        "generate_content",
    ) or (isinstance(kind, str) and kind.upper() == "LLM")


def _facts(span: ReadableSpan) -> tuple[str, dict[str, Any]]:
    return span.name, dict(span.attributes or {})


#: Every AuditSpanProcessor not shut down (weakly: a dropped provider's goes with it), so that
#: one can see the open spans of another when deciding whether a span is nested.
_processors: weakref.WeakSet[AuditSpanProcessor] = weakref.WeakSet()
_processors_lock = threading.Lock()


class AuditSpanProcessor(SpanProcessor):
    """Records each ended tool span into the graded session active in this process.

    A call traced more than once (an agent's ``execute_tool`` span around an MCP client's
    ``tools/call`` span around the server's) is recorded once, from the outermost tool
    span; a call another adapter records itself (inside
    :func:`~pytest_cleo_grade.capture._direct.direct_call`) is left to that adapter, with the
    tool spans around and inside it that are the same call. A tool span below a model or agent
    turn (a sub-agent run by a tool) is a call of its own and is recorded. A span is the call
    of the session active when it started: one a test left open and that ends during the
    next test goes to the first test's session (stored, in no grade), not the next one's.
    ``recorder`` receives each Call (default: record it with ``mapping``, see
    :func:`~pytest_cleo_grade.capture.mapping.record_call_started_in`; then each span is
    recorded once however many AuditSpanProcessors see it). While ``enabled`` is false the
    processor records nothing (the SDK cannot remove a processor once added).
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
        #: Every open span by span id. Whether a span is a tool span is asked when a span
        #: inside it ends, not when it starts: instrumentation may set the tool attributes
        #: after starting the span.
        self._open: dict[int, _Open] = {}
        #: Open tool spans that are a call an adapter records directly.
        self._direct: set[int] = set()
        #: Open spans around a direct call, not tool spans when it started, that are that call
        #: if they turn out to be tool spans of it (attributes set after the start).
        self._around_direct: dict[int, CallIdentity] = {}
        #: The span ids of the layers folded into an open tool span (its call's MCP client
        #: span, say), named on its entry: a server in another process that recorded the
        #: call names the client's span as its caller (see _one_call).
        self._layers: dict[int, list[str]] = {}
        #: (role, text) of the messages already recorded: each model request repeats the
        #: conversation before it.
        self._said: set[tuple[str, str]] = set()
        direct.add_listener(self._direct_call_started)
        with _processors_lock:
            _processors.add(self)

    def _direct_call_started(self, call: direct.DirectCall) -> None:
        # The span current when an adapter starts recording a call directly is the one
        # around the call (an agent's execute_tool span, say): it and the tool spans around
        # it that are the same call must not record the call again. A model or agent turn
        # above it ends that: the tool span around that turn ran a sub-agent, another call.
        context = trace_api.get_current_span().get_span_context()
        if not context.is_valid:
            return
        identity = call.identity
        with self._lock:
            span_id: int | None = context.span_id
            while span_id is not None and span_id in self._open:
                entry = self._open[span_id]
                name, attributes = _facts(entry.span)
                if is_turn_span(name, attributes):
                    return
                found = call_identity_of(name, attributes)
                if found is None:
                    self._around_direct.setdefault(span_id, identity)
                elif same_call(found, identity):
                    self._direct.add(span_id)
                    # An adapter that did not name its tool: the span around it names it.
                    identity = found if identity.tool is None else identity
                else:
                    return
                span_id = entry.parent

    def _open_span(self, span_id: int) -> _Open | None:
        """An open span by id: this processor's, else another's. A call traced on two
        providers (an agent's span on one around a library's span on its own, each with an
        AuditSpanProcessor) has its outer span in the other processor's table only."""
        found = self._open.get(span_id)
        if found is None:
            with _processors_lock:
                others = tuple(_processors)
            for other in others:
                # A plain dict read, safe without the other's lock; _Open is immutable.
                found = other._open.get(span_id) if other is not self else None
                if found is not None:
                    break
        return found

    def _ancestors(self, entry: _Open) -> Iterator[tuple[str, dict[str, Any]]]:
        # The spans around one, nearest first, up to the direct call it started in: the
        # nearest tool span (or a turn) in there decides; past it, the direct call does.
        parent_id = entry.parent
        while parent_id is not None:
            parent = self._open_span(parent_id)
            if parent is None:
                return
            if entry.inside is not None and parent.inside is not entry.inside:
                return
            yield _facts(parent.span)
            parent_id = parent.parent

    def _same_call_as_around(self, entry: _Open, identity: CallIdentity) -> bool:
        """Whether an ended tool span is one more layer of a call around it."""
        for name, attributes in self._ancestors(entry):
            if is_turn_span(name, attributes):
                return False  # a sub-agent's call: the turn decided on it
            around = call_identity_of(name, attributes)
            if around is not None:
                return same_call(identity, around)
        # Directly inside the direct call (no turn, no tool span between): the same call,
        # unless the adapter named another tool.
        return entry.inside is not None and same_call(identity, entry.inside.identity)

    def _nearest_tool_span(self, entry: _Open) -> int | None:
        """The id of the nearest open tool span around ``entry`` (the call it is a layer of)."""
        parent_id = entry.parent
        while parent_id is not None:
            parent = self._open.get(parent_id)
            if parent is None:
                return None
            if call_identity_of(*_facts(parent.span)) is not None:
                return parent_id
            parent_id = parent.parent
        return None

    def on_start(self, span: Span, parent_context: context_api.Context | None = None) -> None:
        if not self.enabled:
            return
        parent = span.parent
        with self._lock:
            self._open[span.context.span_id] = _Open(
                parent.span_id if parent else None,
                span,
                direct.current_direct_call(),
                session_at_start(),
            )

    def on_end(self, span: ReadableSpan) -> None:
        context = span.context
        if context is None:
            return
        name, attributes = _facts(span)
        if self.enabled and _is_model(attributes):
            self._record_conversation(span)
        identity = call_identity_of(name, attributes)
        with self._lock:
            entry = self._open.pop(context.span_id, None)
            recorded_directly = context.span_id in self._direct
            self._direct.discard(context.span_id)
            around = self._around_direct.pop(context.span_id, None)
            if identity is None or not self.enabled:
                return
            if around is not None and same_call(identity, around):
                recorded_directly = True
            nested = entry is not None and self._same_call_as_around(entry, identity)
            layers = self._layers.pop(context.span_id, [])
            if nested and entry is not None:
                owner = self._nearest_tool_span(entry)
                if owner is not None:
                    self._layers.setdefault(owner, []).extend(
                        [format(context.span_id, "016x"), *layers]
                    )
        if nested or recorded_directly or direct.is_expected_call(identity):
            return
        call = tool_call_of(span_data(span), source=self.source)
        if call is None:
            return
        if layers:
            call = dataclasses.replace(call, extra={**call.extra, "layerSpanIds": layers})
        if self._recorder is not None:
            self._recorder(call)
            return
        if not _first_to_record(context.trace_id, context.span_id):
            return  # another AuditSpanProcessor of this provider recorded it
        if entry is None:
            # Started before this processor was enabled: where it started is not known.
            record_call(call, mapping=self.mapping)
        else:
            record_call_started_in(call, entry.session, mapping=self.mapping)

    def _record_conversation(self, span: ReadableSpan) -> None:
        """A model span's messages and usage, into the active session's conversation."""
        from pytest_cleo_grade.capture._conversation import record_conversation
        from pytest_cleo_grade.capture._genai import conversation_from_spans

        talk = conversation_from_spans([span_data(span)], seen=self._said)
        if not talk.empty:
            record_conversation(talk.messages, talk.model_calls)

    def shutdown(self) -> None:
        self.enabled = False
        direct.remove_listener(self._direct_call_started)
        with _processors_lock:
            _processors.discard(self)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


# Keyed by the provider itself, weakly: an id() outlives its object, and a new provider
# made at a freed one's address would have been taken for it and never got a processor.
_installed: weakref.WeakKeyDictionary[TracerProvider, tuple[AuditSpanProcessor, list[object]]] = (
    weakref.WeakKeyDictionary()
)
_install_lock = threading.Lock()


#: OpenTelemetry's own context-manager decorator (private, in 1.45): as a decorator, the
#: manager it makes also spans the whole of an async function; else contextlib's (sync only).
_span_manager: Callable[[Callable[..., Iterator[Any]]], Callable[..., Any]] = getattr(
    importlib.import_module("opentelemetry.util._decorator"),
    "_agnosticcontextmanager",
    contextlib.contextmanager,
)


class _FollowingTracer(trace_api.Tracer):
    """A tracer of the stand-in provider: each span goes to the provider that is the global
    one when it starts, the stand-in until the program sets its own. A ProxyTracer keeps the
    first real tracer it gets, so one handed out before the program's set would otherwise
    send to the stand-in for ever, never to the program's exporters."""

    def __init__(self, stand_in: _StandInProvider, scope: tuple[Any, ...]) -> None:
        self._stand_in = stand_in
        self._scope = scope
        self._resolved: tuple[object, trace_api.Tracer] | None = None

    def _tracer(self) -> trace_api.Tracer:
        current = getattr(trace_api, "_TRACER_PROVIDER", None)
        resolved = self._resolved
        if resolved is not None and resolved[0] is current:
            return resolved[1]
        if current is None or current is self._stand_in:
            tracer = TracerProvider.get_tracer(self._stand_in, *self._scope)
        else:
            tracer = current.get_tracer(*self._scope)
        self._resolved = (current, tracer)
        return tracer

    def start_span(self, *args: Any, **kwargs: Any) -> trace_api.Span:
        return self._tracer().start_span(*args, **kwargs)

    @_span_manager
    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Iterator[trace_api.Span]:
        # The tracer is resolved as the block, or the function it decorates, starts: used as
        # a decorator (``@tracer.start_as_current_span(...)``), the manager is made once and
        # re-entered on every call, so resolving it here would bind it to the stand-in.
        with self._tracer().start_as_current_span(*args, **kwargs) as span:
            yield span

    def __getattr__(self, name: str) -> Any:
        # The SDK tracer's other attributes (resource, sampler), for code that reads them.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._tracer(), name)


class _StandInProvider(TracerProvider):
    """The global provider set up when the program has none, until it sets its own."""

    def get_tracer(
        self,
        instrumenting_module_name: str,
        instrumenting_library_version: str | None = None,
        schema_url: str | None = None,
        attributes: Any = None,
    ) -> trace_api.Tracer:
        scope = (instrumenting_module_name, instrumenting_library_version, schema_url, attributes)
        return _FollowingTracer(self, scope)


_stand_in_lock = threading.Lock()
_observing_sets = False


def _stand_in() -> _StandInProvider | None:
    """Make a stand-in the global provider without using up OpenTelemetry's set-once, so that
    the program's own ``set_tracer_provider`` later still takes effect; None when this
    OpenTelemetry does not look as expected (then the caller sets one the public way).

    Private names of ``opentelemetry.trace`` (the same from 1.45 on, this extra's floor):
    ``_TRACER_PROVIDER`` (the global, read by ``get_tracer_provider`` and the proxies),
    ``_TRACER_PROVIDER_SET_ONCE`` (its ``Once``: ``_lock``, ``_done``) and
    ``_set_tracer_provider`` (every set goes through it: watched to give the program's
    provider its processor). Each is checked before use.
    """
    once: Any = getattr(trace_api, "_TRACER_PROVIDER_SET_ONCE", None)
    lock: Any = getattr(once, "_lock", None)
    setter: Any = getattr(trace_api, "_set_tracer_provider", None)
    usable = (
        hasattr(lock, "__enter__")
        and isinstance(getattr(once, "_done", None), bool)
        and callable(setter)
        and hasattr(trace_api, "_TRACER_PROVIDER")
    )
    if not usable:
        return None
    _observe_sets(setter)
    with lock:  # the program's set takes it too: never replace a provider it just set
        if once._done or getattr(trace_api, "_TRACER_PROVIDER", None) is not None:
            return None
        created = _StandInProvider()
        setattr(trace_api, "_TRACER_PROVIDER", created)  # noqa: B010 - a module global
    return created


def _observe_sets(setter: Callable[..., object]) -> None:
    """Wrap OpenTelemetry's setter (once per process) to follow the program's provider."""
    global _observing_sets
    with _stand_in_lock:
        if _observing_sets:
            return
        _observing_sets = True

        def observed(*args: Any, **kwargs: Any) -> None:
            setter(*args, **kwargs)
            _follow_global()

        setattr(trace_api, "_set_tracer_provider", observed)  # noqa: B010 - a module global


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
        # instrumented code produces spans to grade (it exports nowhere else), as a stand-in
        # the program can still replace with its own.
        stand_in = _stand_in()
        if stand_in is not None:
            return stand_in
        # Then the public way, which uses up the one set a process gets.
        trace_api.set_tracer_provider(TracerProvider())
        chosen = trace_api.get_tracer_provider()
        if isinstance(chosen, TracerProvider):
            return chosen
        current = chosen
    raise CaptureError(
        f"cleo-grade: the global tracer provider is {type(current).__name__}, not the "
        "OpenTelemetry SDK's; add capture.otel.AuditSpanProcessor() to yours instead"
    )


def _install_on(sdk: TracerProvider, mapping: ToolMapping | None) -> Callable[[], None]:
    token = object()
    with _install_lock:
        found = _installed.get(sdk)
        if found is None:
            processor = AuditSpanProcessor(mapping=mapping)
            sdk.add_span_processor(processor)
            found = _installed[sdk] = (processor, [])
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


#: Installs on the stand-in that also go to the program's provider once it sets one: each
#: token's mapping and the uninstalls to run.
_following: dict[object, tuple[ToolMapping | None, list[Callable[[], None]]]] = {}
_following_lock = threading.Lock()


def _follow_global() -> None:
    """The program set its provider: give it the processor of every install on the stand-in
    (the SDK's only; another implementation is refused at the next test's install)."""
    current = getattr(trace_api, "_TRACER_PROVIDER", None)
    if not isinstance(current, TracerProvider) or isinstance(current, _StandInProvider):
        return
    with _following_lock:
        for mapping, undo in _following.values():
            undo.append(_install_on(current, mapping))
        _following.clear()  # the global is set once: nothing more to follow


def install_otel_capture(
    provider: Any = None, *, mapping: ToolMapping | None = None
) -> Callable[[], None]:
    """Record tool spans of ``provider`` (default: the global SDK tracer provider, set up
    when none is) into the active graded session; returns the callable that stops it.

    One processor per provider, added once and shared: each install enables it and its
    uninstall disables it again once every install is undone. Raises CaptureError when the
    provider is not the SDK's. With no provider and none set up, a stand-in is the global one
    until the program sets its own, which then gets the processor too.
    """
    sdk = _sdk_provider(provider)
    undo = [_install_on(sdk, mapping)]
    token = object()
    if isinstance(sdk, _StandInProvider):
        with _following_lock:
            _following[token] = (mapping, undo)
        _follow_global()  # the program's set may have come in between

    def uninstall() -> None:
        with _following_lock:
            _following.pop(token, None)
        for each in undo:
            each()

    return uninstall
