"""Every capture adapter under pytest-xdist: tests spread over two workers grade and persist
exactly like the same calls recorded by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.capture_scenario import grade_by_hand
from tests.processes import NO_UNRELATED_PLUGINS

pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra")
pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra")
HINTED = pytest.importorskip("tests.capture.test_mcp", reason="needs the mcp extra").HINTED

ROOT = Path(__file__).resolve().parents[2]

SUITE = """
# Each test imports its framework itself: both workers collect this module, and only the
# one that runs a test needs its framework (mcp, pydantic-ai: about a second each to import).
import json

from tests.capture_scenario import CALLS, MISSING_TASK


def test_pydantic_ai(graded_session):
    from pytest_cleo_grade.capture.pydantic_ai import audit_agent
    from tests.capture.test_pydantic_ai import build_agent, scripted

    agent = build_agent()
    with audit_agent(agent), agent.override(model=scripted(CALLS)):
        agent.run_sync("fix the login bug")


def test_mcp(graded_session):
    import anyio
    from mcp import Client

    from pytest_cleo_grade.capture.mcp import audited_client
    from tests.capture_servers import mcp_tasks
    from tests.capture.test_mcp import agent as mcp_agent

    async def main():
        async with Client(mcp_tasks.build()) as client:
            await mcp_agent(audited_client(client))

    anyio.run(main)


def test_otel(graded_session):
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    tracer = trace.get_tracer("agent")
    for name, arguments in CALLS:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                      "gen_ai.tool.call.arguments": json.dumps(arguments)}
        with tracer.start_as_current_span("execute_tool " + name, attributes=attributes) as s:
            if arguments.get("taskId") == MISSING_TASK:
                s.set_attribute("error.type", "KeyError")
                s.set_status(Status(StatusCode.ERROR, "task not found"))
"""


@pytest.mark.e2e
def test_each_adapter_under_two_workers_persists_the_hand_recorded_grade(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_agents=SUITE)
    result = pytester.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "--cleo-grade-capture=otel", *NO_UNRELATED_PLUGINS
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    by_test = {line["testId"].rpartition("::")[2]: line for line in lines}
    assert sorted(by_test) == ["test_mcp", "test_otel", "test_pydantic_ai"]
    for name, grade in by_test.items():
        expected = grade_by_hand(grade["sessionId"], HINTED if name == "test_mcp" else None)
        assert grade["entryCount"] == 6, (name, grade)
        assert (grade["totalScore"], grade["flags"]) == (expected.total_score, expected.flags)
        assert grade["dimensions"] == expected.to_json_dict()["dimensions"], name
        # The ignored "not found" costs errorProtocol points through every adapter.
        assert grade["dimensions"]["errorProtocol"]["score"] < 20
