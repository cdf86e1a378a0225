"""Each grade as an OpenTelemetry ``gen_ai.evaluation.result`` event (GenAI semantic
conventions): score value (the percentage), label (the letter) and explanation (the flags).

The event goes on the test's span when one is active where the test is graded (an
instrumented pytest run, or a test body that opened a span around its teardown); otherwise on
a short span of its own, ``cleo-grade <test id>``. It is a span event: the SDK's span events
are stable, while its Logs-based Events API is still private (``opentelemetry._events``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from pytest_cleo_grade.core.models import GradeResult

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = [
    "EVENT_NAME",
    "evaluation_attributes",
    "export_grade",
    "require_otel",
    "unrecorded_reason",
]

EVENT_NAME: Final = "gen_ai.evaluation.result"
#: The most flags the explanation joins (attribute values should stay small).
_FLAGS: Final = 20


def evaluation_attributes(result: GradeResult, test_id: str | None) -> dict[str, Any]:
    """The event's attributes: the GenAI evaluation keys, then ours (``cleo.*``)."""
    rubric = (result.model_extra or {}).get("rubric", "cleo")
    flags = result.flags[:_FLAGS]
    more = f"; ... {len(result.flags) - _FLAGS} more" if len(result.flags) > _FLAGS else ""
    attributes: dict[str, Any] = {
        "gen_ai.evaluation.name": str(rubric),
        "gen_ai.evaluation.score.value": float(result.percent),
        "gen_ai.evaluation.score.label": result.letter,
        "gen_ai.evaluation.explanation": "; ".join(flags) + more if flags else "no flags",
        "cleo.session_id": result.session_id,
        "cleo.score": float(result.total_score),
        "cleo.max_score": float(result.max_score),
        "cleo.entry_count": result.entry_count,
    }
    if test_id is not None:
        attributes["cleo.test_id"] = test_id
    for name, dimension in result.dimensions.items():
        attributes[f"cleo.dimension.{name}"] = float(dimension.score)
    return attributes


def require_otel() -> None:
    """MissingExtraError (one line with the install command) without OpenTelemetry's API."""
    from pytest_cleo_grade.core.errors import missing_extra

    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as exc:
        raise missing_extra("the OpenTelemetry export", "OpenTelemetry", "otel", exc) from None


def export_grade(
    result: GradeResult, test_id: str | None, *, tracer_provider: TracerProvider | None = None
) -> bool:
    """Add the grade's event to the current span, or to a span of its own; False when no
    span records it (no OpenTelemetry SDK is set up: the event would go nowhere)."""
    require_otel()
    from opentelemetry import trace

    attributes = evaluation_attributes(result, test_id)
    current = trace.get_current_span()
    if current.is_recording():
        current.add_event(EVENT_NAME, attributes)
        return True
    tracer = trace.get_tracer("pytest-cleo-grade", tracer_provider=tracer_provider)
    with tracer.start_as_current_span(f"cleo-grade {test_id or result.session_id}") as span:
        span.add_event(EVENT_NAME, attributes)
        return bool(span.is_recording())


#: Why no span recorded the event when no SDK provider is set up.
NO_SDK: Final = (
    "no OpenTelemetry SDK tracer provider is set up, so the grade events go nowhere (set one "
    "up with an exporter, or run under opentelemetry-instrument)"
)
#: Why, when an SDK provider is set up: its sampler dropped the trace.
NOT_SAMPLED: Final = (
    "the tracer provider's sampler dropped the grade's span, so its event was not recorded "
    "(sample these traces, e.g. a parent-based or always-on sampler, to keep the events)"
)


def unrecorded_reason(tracer_provider: TracerProvider | None = None) -> str:
    """Why :func:`export_grade` found no span to record its event: a configured SDK whose
    sampler dropped the span is not "no SDK", and the advice differs."""
    from opentelemetry import trace

    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    try:
        from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
    except ImportError:  # the API alone: nothing records
        return NO_SDK
    return NOT_SAMPLED if isinstance(provider, SdkTracerProvider) else NO_SDK
