"""The plugin's capture wiring: --cleo-grade-capture=otel, the ini tool map, the session's
OTLP endpoint and subprocess environment, driven through real pytest runs."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra (opentelemetry-sdk)")

from tests.capture.test_otlp import AGENT

ROOT = Path(__file__).resolve().parents[2]

#: Shared by the suites: the scenario's calls and the check that the session grades exactly
#: like the same calls recorded by hand (with an ignored not-found costing points).
HEADER = """
import json
from tests.capture_scenario import CALLS, MISSING_TASK, assert_same_grade, grade_by_hand

def check(graded_session):
    assert_same_grade(graded_session.entries, grade_by_hand(graded_session.id))
"""


# The inner runs that set OpenTelemetry's global tracer provider (the capture, the suite, its
# conftest) run in a subprocess: a process sets it once, and this one is the test run's.


@pytest.fixture
def importable(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    return pytester


@pytest.mark.e2e
def test_capture_otel_records_an_instrumented_agents_spans_with_no_conftest(
    importable: pytest.Pytester,
) -> None:
    importable.makepyfile(
        HEADER
        + """
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

def agent():
    tracer = trace.get_tracer("agent")
    for name, arguments in CALLS:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                      "gen_ai.tool.call.arguments": json.dumps(arguments)}
        with tracer.start_as_current_span("execute_tool " + name, attributes=attributes) as s:
            if arguments.get("taskId") == MISSING_TASK:
                s.set_attribute("error.type", "KeyError")
                s.set_status(Status(StatusCode.ERROR, "task not found"))

def test_agent(graded_session):
    agent()
    check(graded_session)

def test_spans_outside_graded_tests_are_not_recorded():
    agent()
"""
    )
    result = importable.runpytest_subprocess("--cleo-grade-capture=otel", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


@pytest.mark.e2e
def test_without_capture_otel_spans_are_not_entries(importable: pytest.Pytester) -> None:
    importable.makepyfile(
        """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

def test_agent(graded_session):
    trace.set_tracer_provider(TracerProvider())
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "admin_help"}
    with trace.get_tracer("agent").start_as_current_span("execute_tool", attributes=attributes):
        pass
    assert graded_session.entries == []
    graded_session.record("admin", "help")
"""
    )
    importable.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.e2e
def test_a_provider_that_is_not_the_sdks_errors_at_setup_with_its_one_line_once(
    importable: pytest.Pytester,
) -> None:
    # Failed inside the except that caught the capture's error, the line was shown twice,
    # joined by "During handling of the above exception, another exception occurred:".
    importable.makeconftest(
        "from opentelemetry import trace\ntrace.set_tracer_provider(trace.NoOpTracerProvider())\n"
    )
    importable.makepyfile("def test_two(graded_session):\n    pass\n")
    result = importable.runpytest_subprocess("--cleo-grade-capture=otel", "-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    lines = result.stdout.lines
    start = lines.index(next(line for line in lines if "ERROR at setup of test_two" in line))
    assert lines[start + 1].startswith(
        "cleo-grade: the global tracer provider is NoOpTracerProvider, not the OpenTelemetry SDK"
    )
    assert "short test summary info" in lines[start + 2]  # the one line, and nothing else


@pytest.mark.e2e
def test_an_agent_in_a_subprocess_is_graded_through_the_sessions_otlp_endpoint(
    importable: pytest.Pytester,
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the exporter")
    agent = importable.path / "agent.py"
    agent.write_text(AGENT)
    importable.makepyfile(
        HEADER
        + """
import os, subprocess, sys

def test_agent(graded_session):
    env = {**os.environ, **graded_session.subprocess_env(otlp=True)}
    subprocess.run([sys.executable, "agent.py", json.dumps(CALLS)], env=env, check=True)
    check(graded_session)
"""
    )
    importable.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


def test_the_ini_tool_map_routes_tools_for_every_adapter(importable: pytest.Pytester) -> None:
    importable.makeini(
        "[pytest]\nfilterwarnings = error\n"
        "cleo_grade_tool_map =\n    lookup = tasks.show cleo_query\n    * = cleo_mutate\n"
    )
    importable.makepyfile(
        """
from pytest_cleo_grade.capture import Call, record_call

def test_agent(graded_session):
    record_call(Call("lookup", {"taskId": "T1"}))
    record_call(Call("tasks_add", {"title": "x"}))
    routed = [(e.domain, e.operation, e.metadata.gateway) for e in graded_session.entries]
    assert routed == [("tasks", "show", "cleo_query"), ("tasks", "add", "cleo_mutate")]
    assert "CLEO_GRADE_TOOL_MAP" in graded_session.subprocess_env()
"""
    )
    importable.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        (["--cleo-grade-capture=zipkin"], "", "invalid capture 'zipkin': expected otel or none"),
        (
            ["--cleo-grade-tool-map", "lookup = tasks"],
            "",
            "--cleo-grade-tool-map, occurrence 1: 'tasks' is not DOMAIN.OPERATION",
        ),
        ([], "cleo_grade_capture = nope\n", "ini option cleo_grade_capture: invalid capture"),
        (
            [],
            "cleo_grade_tool_map =\n    lookup tasks.show\n",
            "tox.ini: cleo_grade_tool_map, entry 1: expected 'TOOL = DOMAIN.OPERATION",
        ),
    ],
)
def test_bad_capture_settings_are_one_usage_error(
    pytester: pytest.Pytester, args: list[str], ini: str, message: str
) -> None:
    pytester.makeini("[pytest]\n" + ini)
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest(*args)
    assert result.ret != 0
    assert message in (result.stderr.str() + result.stdout.str())


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        pytest.param(
            [],
            "    # search tools\n    search = tasks.find cleo_query\n\n    create = tasksadd\n",
            "{ini}: cleo_grade_tool_map, entry 2: 'tasksadd' is not DOMAIN.OPERATION",
            id="ini-entry-not-line",
        ),
        pytest.param(
            [],
            "    lookup = tasks.show cleo_qeury\n",
            "{ini}: cleo_grade_tool_map, entry 1: gateway 'cleo_qeury' is not one of cleo_mutate,"
            " cleo_query, mutate, query; did you mean 'cleo_query'?",
            id="ini-gateway-typo",
        ),
        pytest.param(
            [],
            "    lookup = tasks.show\n    * = Query\n",
            "{ini}: cleo_grade_tool_map, entry 2: gateway 'Query' is not one of cleo_mutate,"
            " cleo_query, mutate, query; did you mean 'query'?",
            id="ini-default-gateway-case",
        ),
        pytest.param(
            [
                "--cleo-grade-tool-map",
                "a = tasks.find",
                "--cleo-grade-tool-map",
                "b = tasks.x Mutate",
            ],
            "    a = bad\n",
            "--cleo-grade-tool-map, occurrence 2: gateway 'Mutate' is not one of cleo_mutate,"
            " cleo_query, mutate, query; did you mean 'mutate'?",
            id="option-occurrence",
        ),
        pytest.param(
            ["-o", "cleo_grade_tool_map=a = tasksfind"],
            "    a = tasks.find\n",
            "-o cleo_grade_tool_map, entry 1: 'tasksfind' is not DOMAIN.OPERATION",
            id="override",
        ),
    ],
)
def test_a_bad_tool_map_entry_is_one_usage_error_naming_its_place(
    pytester: pytest.Pytester, args: list[str], ini: str, message: str
) -> None:
    # pytest drops an ini value's blank lines and comments before the plugin sees it: the
    # error counts entries, names the file, and never gives a line number that is not one.
    path = pytester.makefile(".ini", pytest="[pytest]\ncleo_grade_tool_map =\n" + ini)
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.errlines if line.strip()]
    assert errors == ["ERROR: cleo-grade: " + message.format(ini=path)]
