"""``--cleo-grade-export=otel``: every grade as a ``gen_ai.evaluation.result`` event, on the
test's span when there is one, else on a span of its own (the real OpenTelemetry SDK)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra (opentelemetry-sdk)")

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once

from pytest_cleo_grade import grade_entries
from pytest_cleo_grade.reports.otel import EVENT_NAME, export_grade
from tests.entries import NOW, entry, sequence
from tests.processes import NO_UNRELATED_PLUGINS


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


RESULT = grade_entries(sequence(("session", "list"), ("tasks", "list")), session_id="s1", now=NOW)


def event_of(span: ReadableSpan) -> dict[str, object]:
    [event] = [e for e in span.events if e.name == EVENT_NAME]
    return dict(event.attributes or {})


def test_without_a_current_span_the_grade_gets_a_span_of_its_own(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    export_grade(RESULT, "test_a.py::test_x", tracer_provider=provider)
    [span] = exporter.get_finished_spans()
    assert span.name == "cleo-grade test_a.py::test_x"
    attributes = event_of(span)
    assert attributes["gen_ai.evaluation.name"] == "cleo"
    assert attributes["gen_ai.evaluation.score.value"] == 60.0
    assert attributes["gen_ai.evaluation.score.label"] == "C"
    assert attributes["gen_ai.evaluation.explanation"] == "; ".join(RESULT.flags)
    assert attributes["cleo.dimension.sessionDiscipline"] == 10.0
    assert attributes["cleo.test_id"] == "test_a.py::test_x"


def test_inside_the_tests_span_the_event_is_parented_to_it(
    spans: tuple[TracerProvider, InMemorySpanExporter],
) -> None:
    provider, exporter = spans
    tracer = provider.get_tracer("pytest")
    with tracer.start_as_current_span("test_x"):
        export_grade(RESULT, "test_a.py::test_x", tracer_provider=provider)
    [span] = exporter.get_finished_spans()
    assert span.name == "test_x"
    assert event_of(span)["gen_ai.evaluation.score.label"] == "C"


def test_a_clean_grade_says_no_flags(spans: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = spans
    calls = [entry("admin", "help", at=0)]
    clean = grade_entries(calls, session_id="s1", now=NOW).model_copy(update={"flags": []})
    export_grade(clean, None, tracer_provider=provider)
    assert event_of(exporter.get_finished_spans()[0])["gen_ai.evaluation.explanation"] == "no flags"


SUITE = """
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

EXPORTER = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
trace.set_tracer_provider(provider)

@pytest.fixture(autouse=True)
def test_span(request):
    # What an OpenTelemetry pytest instrumentation does: one span around each test.
    with trace.get_tracer("pytest").start_as_current_span(request.node.name):
        yield

def test_agent(graded_session):
    graded_session.record("session", "list", gateway="cleo_query")

def test_zz_check():
    [span] = [s for s in EXPORTER.get_finished_spans() if s.name == "test_agent"]
    [event] = span.events
    assert event.name == "gen_ai.evaluation.result"
    assert event.attributes["gen_ai.evaluation.score.label"] == "C"
    assert event.attributes["cleo.test_id"] == "test_export.py::test_agent"
"""


@pytest.fixture
def no_global_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """The OpenTelemetry API's global tracer provider unset, for an inner run in this process
    (as in a fresh one): SUITE sets it, and the API lets a process set it once only. What
    OpenTelemetry's own test utilities reset; undone afterwards."""
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)


#: For inner runs in this process, which would otherwise inherit this project's
#: ``filterwarnings = error``: a fresh process shows warnings by default.
DEFAULT_WARNINGS = ("-W", "default")


@pytest.mark.usefixtures("no_global_provider")
def test_the_plugin_exports_each_grade_on_the_tests_span(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_export=SUITE)
    result = pytester.runpytest("--cleo-grade-export=otel", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


NO_SDK = "*otel export: no OpenTelemetry SDK tracer provider is set up, so the grade events*"
UNGRADED_SUITE = (
    "def test_agent(graded_session):\n"
    "    graded_session.record('session', 'list', gateway='cleo_query')\n"
)


@pytest.mark.usefixtures("no_global_provider")
def test_the_plugin_says_when_no_sdk_is_set_up_to_take_the_events(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_export=UNGRADED_SUITE)
    result = pytester.runpytest(
        "--cleo-grade-export=otel", "-p", "no:cacheprovider", *DEFAULT_WARNINGS
    )
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines([NO_SDK])
    with_sdk = pytester.makepyfile(test_export=SUITE)
    assert with_sdk.exists()
    result = pytester.runpytest(
        "--cleo-grade-export=otel", "-p", "no:cacheprovider", *DEFAULT_WARNINGS
    )
    result.assert_outcomes(passed=2)
    result.stdout.no_fnmatch_line("*no OpenTelemetry SDK tracer provider*")


@pytest.mark.e2e
def test_an_xdist_worker_under_w_error_says_when_no_sdk_is_set_up(
    pytester: pytest.Pytester,
) -> None:
    # On a worker, -W error raised the warning and the suppression meant for it lost it.
    # One worker is a worker as well as two (the run has one test).
    pytester.makepyfile(test_export=UNGRADED_SUITE)
    result = pytester.runpytest_subprocess(
        "--cleo-grade-export=otel",
        "-p",
        "no:cacheprovider",
        "-n",
        "1",
        "-W",
        "error",
        *NO_UNRELATED_PLUGINS,
    )
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines([NO_SDK])


@pytest.mark.usefixtures("no_global_provider")
def test_without_the_option_nothing_is_exported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_export=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)


def test_a_bad_export_name_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_a():\n    pass\n")
    result = pytester.runpytest("--cleo-grade-export=datadog")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "invalid export 'datadog': expected langfuse, otel or none" in result.stderr.str()


def test_a_span_the_sampler_drops_is_said_to_be_unsampled_not_missing_an_sdk() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    from pytest_cleo_grade.reports.otel import NO_SDK, NOT_SAMPLED, unrecorded_reason

    provider = TracerProvider(sampler=ALWAYS_OFF)
    try:
        assert export_grade(RESULT, "t::a", tracer_provider=provider) is False
        assert unrecorded_reason(provider) == NOT_SAMPLED
    finally:
        provider.shutdown()
    # No SDK provider (the API's default proxy): nothing records it.
    from opentelemetry.trace import NoOpTracerProvider

    assert unrecorded_reason(NoOpTracerProvider()) == NO_SDK
