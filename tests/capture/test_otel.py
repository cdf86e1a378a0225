"""capture.otel: the SDK span processor records tool spans of every convention, once each."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra (opentelemetry-sdk)")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import Status, StatusCode, Tracer

from pytest_cleo_grade.capture.otel import (
    AuditSpanProcessor,
    CaptureError,
    install_otel_capture,
)
from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture_scenario import (
    CALLS,
    assert_same_grade,
    grade_by_hand,
    run_tool,
)
from tests.processes import NO_UNRELATED_PLUGINS


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    made = TracerProvider()
    yield made
    made.shutdown()


def genai_tool(tracer: Tracer, name: str, arguments: dict[str, Any]) -> None:
    """A tool call traced the way GenAI semantic conventions say (as agent frameworks do)."""
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.arguments": json.dumps(arguments),
    }
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes) as span:
        try:
            run_tool(name, arguments)
        except KeyError as exc:
            span.set_attribute("error.type", type(exc).__qualname__)
            span.record_exception(exc)
            span.set_status(Status(StatusCode.ERROR, str(exc)))


def openinference_tool(tracer: Tracer, name: str, arguments: dict[str, Any]) -> None:
    """The same call in OpenInference's convention; the failure set by the SDK itself."""
    attributes = {
        "openinference.span.kind": "TOOL",
        "tool.name": name,
        "input.value": json.dumps(arguments),
    }
    try:
        with tracer.start_as_current_span(name, attributes=attributes):
            run_tool(name, arguments)
    except KeyError:
        pass


def mcp_tool(tracer: Tracer, name: str, arguments: dict[str, Any]) -> None:
    """An MCP tools/call span: the name only in the span's name, as the SDK's client writes
    it, and the arguments in the attribute MCP's semantic conventions make opt-in."""
    attributes = {
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "1",
        "gen_ai.tool.call.arguments": json.dumps(arguments),
    }
    with tracer.start_as_current_span(f"MCP send tools/call {name}", attributes=attributes) as s:
        try:
            run_tool(name, arguments)
        except KeyError:
            s.set_attribute("error.type", "-32002")
            s.set_status(Status(StatusCode.ERROR, "Resource not found"))


@pytest.mark.parametrize("trace_tool", [genai_tool, openinference_tool, mcp_tool])
def test_tool_spans_grade_like_the_same_calls_recorded_by_hand(
    session: GradeSession, provider: TracerProvider, trace_tool: Any
) -> None:
    provider.add_span_processor(AuditSpanProcessor())
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent"):
        for name, arguments in CALLS:
            trace_tool(tracer, name, arguments)
    assert_same_grade(session.entries, grade_by_hand(session.id))
    assert {e.metadata.source for e in session.entries} == {"otel"}


def test_the_span_start_time_and_duration_become_the_entrys(
    session: GradeSession, provider: TracerProvider
) -> None:
    provider.add_span_processor(AuditSpanProcessor())
    span = provider.get_tracer("agent").start_span(
        "execute_tool tasks_find",
        attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "tasks_find"},
        start_time=1_772_366_400_000_000_000,
    )
    span.end(end_time=1_772_366_400_250_000_000)
    (entry,) = session.entries
    assert entry.to_json_dict()["timestamp"] == "2026-03-01T12:00:00.000Z"
    assert entry.result.duration == 250.0
    assert entry.model_dump()["metadata"]["spanId"] == format(
        span.get_span_context().span_id, "016x"
    )


def test_a_call_traced_at_three_levels_is_recorded_once(
    session: GradeSession, provider: TracerProvider
) -> None:
    provider.add_span_processor(AuditSpanProcessor())
    tracer = provider.get_tracer("agent")
    genai = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "tasks_find"}
    with (
        tracer.start_as_current_span("execute_tool tasks_find", attributes=genai),
        tracer.start_as_current_span("POST /mcp"),
        tracer.start_as_current_span(
            "tools/call tasks_find", attributes={"mcp.method.name": "tools/call"}
        ),
    ):
        pass
    with tracer.start_as_current_span(
        "tools/call session_list", attributes={"mcp.method.name": "tools/call"}
    ):
        pass
    assert [(e.domain, e.operation) for e in session.entries] == [
        ("tasks", "find"),
        ("session", "list"),
    ]


def test_a_call_graded_from_the_mcp_sdks_span_alone_says_what_it_could_not_see(
    session: GradeSession, provider: TracerProvider, recwarn: pytest.WarningsRecorder
) -> None:
    # The MCP SDK's server span of a tool error: `error.type` only, no arguments, no text.
    provider.add_span_processor(AuditSpanProcessor())
    tracer = provider.get_tracer("mcp")
    attributes = {"mcp.method.name": "tools/call", "gen_ai.tool.name": "tasks_show"}
    with tracer.start_as_current_span("tools/call tasks_show", attributes=attributes) as span:
        span.set_attribute("error.type", "tool_error")
        span.set_status(Status(StatusCode.ERROR))
    genai_tool(tracer, "tasks_find", {"query": "login"})  # a span with its arguments
    messages = [str(w.message) for w in recwarn if w.category is CleoGradeWarning]
    assert len(messages) == 1
    assert messages[0].startswith("cleo-grade: otel: tool 'tasks_show': the MCP SDK's span")
    assert "no parameters" in messages[0] and "exit 1 even if it was a not-found" in messages[0]
    assert [(e.operation, e.result.exit_code) for e in session.entries] == [
        ("show", 1),
        ("find", 0),
    ]


def test_a_span_that_becomes_a_tool_span_after_it_started_still_counts_its_call_once(
    session: GradeSession, provider: TracerProvider
) -> None:
    # Instrumentation that starts the span bare and sets the tool attributes next.
    provider.add_span_processor(AuditSpanProcessor())
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("tool") as outer:
        outer.set_attribute("gen_ai.operation.name", "execute_tool")
        outer.set_attribute("gen_ai.tool.name", "tasks_add")
        with tracer.start_as_current_span(
            "tools/call tasks_add", attributes={"mcp.method.name": "tools/call"}
        ):
            pass
    assert [(e.domain, e.operation) for e in session.entries] == [("tasks", "add")]
    assert session.entries[0].metadata.model_extra["spanId"] == format(
        outer.get_span_context().span_id, "016x"
    )


def test_a_cleo_error_envelope_in_the_tool_result_is_a_not_found(
    session: GradeSession, provider: TracerProvider
) -> None:
    provider.add_span_processor(AuditSpanProcessor())
    envelope = {"success": False, "error": {"code": "E_NOT_FOUND", "exitCode": 4}}
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "cleo_query",
        "gen_ai.tool.call.arguments": json.dumps(
            {"domain": "tasks", "operation": "show", "params": {"taskId": "T9"}}
        ),
        "gen_ai.tool.call.result": json.dumps(envelope),
    }
    with provider.get_tracer("agent").start_as_current_span("execute_tool", attributes=attributes):
        pass
    (entry,) = session.entries
    assert (entry.domain, entry.operation, entry.metadata.gateway) == (
        "tasks",
        "show",
        "cleo_query",
    )
    assert (entry.result.success, entry.result.exit_code) == (False, 4)
    assert entry.params == {"taskId": "T9"}


def test_other_spans_and_spans_outside_a_session_record_nothing(
    tmp_path: Path, provider: TracerProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    provider.add_span_processor(AuditSpanProcessor())
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span(
        "execute_tool tasks_find", attributes={"gen_ai.operation.name": "execute_tool"}
    ):
        pass
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as session:
        with tracer.start_as_current_span("chat gpt", attributes={"gen_ai.operation.name": "chat"}):
            pass
        assert session.entries == []
    assert not (tmp_path / ".cleo").exists()


def test_install_records_until_uninstalled_and_keeps_other_processors(
    session: GradeSession, provider: TracerProvider
) -> None:
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "admin_help"}
    uninstall = install_otel_capture(provider)
    again = install_otel_capture(provider)
    with tracer.start_as_current_span("execute_tool admin_help", attributes=attributes):
        pass
    uninstall()
    with tracer.start_as_current_span("execute_tool admin_help", attributes=attributes):
        pass
    again()
    with tracer.start_as_current_span("execute_tool admin_help", attributes=attributes):
        pass
    assert len(session.entries) == 2
    assert len(exporter.get_finished_spans()) == 3


def test_a_new_provider_where_a_freed_one_was_still_gets_its_processor(
    session: GradeSession,
) -> None:
    # Installs were keyed by id(provider): a provider made at a freed one's address (CPython
    # soon reuses it) was taken for it, got no processor, and its spans were not recorded.
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "admin_help"}
    seen: set[int] = set()
    made_at_a_freed_address = False
    made = 0
    # What the process held before is left out of the collections below (each would walk
    # the whole heap of a long test run); each provider made here is still collected.
    gc.freeze()
    try:
        while not made_at_a_freed_address and made < 500:
            provider = TracerProvider(shutdown_on_exit=False)  # no atexit hook keeping it
            made_at_a_freed_address = id(provider) in seen
            seen.add(id(provider))
            uninstall = install_otel_capture(provider)
            tracer = provider.get_tracer("agent")
            with tracer.start_as_current_span("execute_tool x", attributes=attributes):
                pass
            uninstall()
            provider.shutdown()
            del provider, tracer
            gc.collect()
            made += 1
    finally:
        gc.unfreeze()
    assert made_at_a_freed_address, "no provider was made at a freed one's address"
    assert len(session.entries) == made


def test_install_refuses_a_provider_that_is_not_the_sdks() -> None:
    with pytest.raises(CaptureError, match="object: it is not the OpenTelemetry SDK"):
        install_otel_capture(object())


def test_a_sub_agents_tool_spans_inside_a_tool_span_are_calls_of_their_own(
    session: GradeSession, provider: TracerProvider
) -> None:
    # A tool that runs a sub-agent: the sub-agent's turn stands between the outer tool span
    # and its own (whose MCP span inside is still that same call, counted once).
    provider.add_span_processor(AuditSpanProcessor())
    tracer = provider.get_tracer("agent")
    delegate = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "delegate"}
    agent = {"gen_ai.operation.name": "invoke_agent"}
    find = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "tasks_find",
        "gen_ai.tool.call.arguments": '{"query": "login"}',
    }
    mcp = {"mcp.method.name": "tools/call", "gen_ai.tool.call.arguments": '{"query": "login"}'}
    with (
        tracer.start_as_current_span("execute_tool delegate", attributes=delegate),
        tracer.start_as_current_span("invoke_agent", attributes=agent),
        tracer.start_as_current_span("execute_tool tasks_find", attributes=find),
        tracer.start_as_current_span("tools/call tasks_find", attributes=mcp),
    ):
        pass
    # (Recorded as each ends, the inner first; the order is the session's, by start time.)
    assert sorted(e.operation for e in session.entries) == ["delegate", "find"]


def test_a_tool_calling_another_tool_in_its_code_makes_two_calls(
    session: GradeSession, provider: TracerProvider
) -> None:
    # No turn between them, but another tool: a call the outer tool's code made itself.
    provider.add_span_processor(AuditSpanProcessor())
    tracer = provider.get_tracer("agent")
    research = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "research"}
    show = {"mcp.method.name": "tools/call", "gen_ai.tool.call.arguments": '{"taskId": "T1"}'}
    with (
        tracer.start_as_current_span("execute_tool research", attributes=research),
        tracer.start_as_current_span("tools/call tasks_show", attributes=show),
    ):
        pass
    assert sorted((e.domain, e.operation) for e in session.entries) == [
        ("tasks", "show"),
        ("tool", "research"),
    ]


def otel_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A project with otel capture on, whose pytest runs in a subprocess (each its own
    process-wide tracer provider, which a process sets once) that imports these tests'
    helpers."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    pytester.makeini("[pytest]\nfilterwarnings = error\ncleo_grade_capture = otel\n")


@pytest.mark.e2e
def test_a_span_started_in_one_test_and_ended_in_the_next_is_the_first_tests_call(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The span was recorded into whatever session was active when it ended: the next test's,
    # graded for a delete it never made (and before its session.list, losing points).
    otel_project(pytester, monkeypatch)
    pytester.makepyfile(
        """
import json, threading
from opentelemetry import trace
from pytest_cleo_grade.store._store import AuditStore

go = threading.Event()
left = []
sessions = []

def tool_span(name, args, wait=None):
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                  "gen_ai.tool.call.arguments": json.dumps(args)}
    with trace.get_tracer("agent").start_as_current_span("execute_tool " + name,
                                                         attributes=attributes):
        if wait is not None:
            wait.wait(10)

def test_a_leaves_a_call_running(graded_session):
    sessions.append(graded_session.id)
    tool_span("session_list", {})
    thread = threading.Thread(target=tool_span, args=("tasks_delete", {"taskId": "T1"}, go))
    thread.start()
    left.append(thread)

def test_b_ends_it(graded_session):
    tool_span("session_list", {})
    go.set()
    left[0].join()
    assert [e.operation for e in graded_session.entries] == ["list"]
    with AuditStore(".cleo/audit.db") as store:
        assert [e.operation for e in store.session_entries(sessions[0])] == ["list", "delete"]
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", *NO_UNRELATED_PLUGINS).assert_outcomes(
        passed=2
    )


def test_processors_beside_each_other_record_each_span_once(
    session: GradeSession, provider: TracerProvider
) -> None:
    # A processor added by hand beside the installed one (or added twice) saw the same span
    # and recorded it again: one call, two entries.
    uninstall = install_otel_capture(provider)
    by_hand = AuditSpanProcessor()
    provider.add_span_processor(by_hand)
    provider.add_span_processor(by_hand)
    tracer = provider.get_tracer("agent")
    genai_tool(tracer, "session_list", {})
    uninstall()
    genai_tool(tracer, "tasks_find", {"query": "login"})  # the hand-added one alone records
    assert [(e.domain, e.operation) for e in session.entries] == [
        ("session", "list"),
        ("tasks", "find"),
    ]
    by_hand.shutdown()


def test_a_call_traced_on_two_providers_each_with_a_processor_is_recorded_once(
    session: GradeSession, provider: TracerProvider
) -> None:
    # The agent traces on one provider, a library on its own (docs/capture.md: give it a
    # processor by hand): the outer span was in the other processor's table only, so the
    # inner span did not count as nested and the call was recorded by each.
    library = TracerProvider()
    library.add_span_processor(AuditSpanProcessor())
    provider.add_span_processor(AuditSpanProcessor())
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "tasks_find",
        "gen_ai.tool.call.arguments": json.dumps({"query": "login"}),
    }
    with provider.get_tracer("agent").start_as_current_span(
        "execute_tool tasks_find", attributes=attributes
    ):
        mcp_tool(library.get_tracer("mcp"), "tasks_find", {"query": "login"})
    assert [(e.domain, e.operation) for e in session.entries] == [("tasks", "find")]
    library.shutdown()


APP_TRACING = """
import json
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

early = trace.get_tracer("early")  # a proxy tracer, as a library takes one at import

def tool(tracer, name):
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    with tracer.start_as_current_span("execute_tool " + name, attributes=attributes):
        pass

def setup_tracing():  # the program's own tracing, set up lazily (in main(), a fixture)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    assert trace.get_tracer_provider() is provider
    return exporter
"""


@pytest.mark.e2e
def test_the_programs_own_provider_set_during_a_graded_test_takes_effect_and_is_graded(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The capture set the global provider at the test's setup, using up the one set a process
    # gets: the program's own was refused ("Overriding of current TracerProvider is not
    # allowed") and its exporter received nothing once grading was on.
    otel_project(pytester, monkeypatch)
    pytester.makepyfile(
        APP_TRACING
        + """
def test_the_program_sets_up_tracing(graded_session, caplog):
    tool(early, "session_list")  # before: no provider of the program's yet
    exporter = setup_tracing()
    tool(trace.get_tracer("app"), "tasks_find")
    tool(early, "admin_help")  # the proxy tracer taken before the set follows it
    assert [s.name for s in exporter.get_finished_spans()] == [
        "execute_tool tasks_find", "execute_tool admin_help"]
    assert [(e.domain, e.operation) for e in graded_session.entries] == [
        ("session", "list"), ("tasks", "find"), ("admin", "help")]
    assert "Overriding" not in caplog.text

def test_the_next_test_is_graded_through_the_programs_provider(graded_session):
    tool(trace.get_tracer("app"), "session_list")
    tool(early, "tasks_show")
    assert [e.operation for e in graded_session.entries] == ["list", "show"]
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", *NO_UNRELATED_PLUGINS).assert_outcomes(
        passed=2
    )


@pytest.mark.e2e
def test_a_tracer_decorating_tools_before_the_programs_set_follows_its_provider(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tool module loaded during a graded test takes its tracer from the stand-in and wraps
    # its tools with @tracer.start_as_current_span(...): the manager made once is re-entered
    # on every call, and stayed on the stand-in: the program's exporter got nothing, and from
    # the next test on the calls were not graded at all.
    otel_project(pytester, monkeypatch)
    pytester.makepyfile(
        APP_TRACING
        + """
import asyncio

tools = {}

def load_tools():  # the agent's tool module, imported lazily
    tracer = trace.get_tracer("tools")
    def make(name):
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        @tracer.start_as_current_span("execute_tool " + name, attributes=attributes)
        def tool():
            return "ok"
        return tool
    for name in ("session_list", "tasks_find", "admin_help"):
        tools[name] = make(name)
    @tracer.start_as_current_span("execute_tool tasks_show", attributes={
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "tasks_show"})
    async def show():
        await asyncio.sleep(0)  # sleep-ok: an async tool's one await (no wait)
    tools["tasks_show"] = show

def test_the_tools_are_loaded(graded_session):
    load_tools()
    tools["session_list"]()
    assert [e.operation for e in graded_session.entries] == ["list"]

def test_the_program_sets_up_tracing(graded_session):
    exporter = setup_tracing()
    tools["tasks_find"]()
    asyncio.run(tools["tasks_show"]())
    assert [s.name for s in exporter.get_finished_spans()] == [
        "execute_tool tasks_find", "execute_tool tasks_show"]
    assert [e.operation for e in graded_session.entries] == ["find", "show"]

def test_the_next_test_is_graded(graded_session):
    tools["admin_help"]()
    assert [e.operation for e in graded_session.entries] == ["help"]
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", *NO_UNRELATED_PLUGINS).assert_outcomes(
        passed=3
    )


@pytest.mark.e2e
def test_an_opentelemetry_without_the_expected_internals_gets_a_provider_set_the_public_way(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The stand-in relies on private names of opentelemetry.trace; where they differ, the
    # capture sets an SDK provider as before (the program cannot set its own after it).
    otel_project(pytester, monkeypatch)
    pytester.makeconftest(
        """
from opentelemetry import trace

class OtherOnce:  # a set-once whose insides are not the ones the capture knows
    def __init__(self, once):
        self.do_once = once.do_once

trace._TRACER_PROVIDER_SET_ONCE = OtherOnce(trace._TRACER_PROVIDER_SET_ONCE)
"""
    )
    pytester.makepyfile(
        APP_TRACING
        + """
from opentelemetry.sdk.trace import TracerProvider

def test_an_agent_without_a_provider_is_graded(graded_session):
    tool(early, "session_list")
    assert type(trace.get_tracer_provider()) is TracerProvider
    assert [e.operation for e in graded_session.entries] == ["list"]
"""
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider", *NO_UNRELATED_PLUGINS).assert_outcomes(
        passed=1
    )
