"""Langfuse gets the weighted judge's seven scores on the session's trace, with described
configs; the trace comes from OpenTelemetry, the calls' spans, or the test itself."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest.importorskip("langfuse", reason="needs the langfuse extra (the Langfuse SDK)")

from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.reports.langfuse import export_grades, plan
from tests.fake_judge import FakeJudgeServer, serve
from tests.fake_langfuse import FakeLangfuse
from tests.plugin_suites import make_suite

TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


@pytest.fixture
def judge() -> Iterator[FakeJudgeServer]:
    yield from serve()


SUITE = """
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

tracer = TracerProvider().get_tracer("agent")


def test_agent(graded_session):
    \"\"\"File the login bug.\"\"\"
    with tracer.start_as_current_span("invoke_agent"):
        graded_session.add_message("user", "Please file the login bug")
        graded_session.record("tasks", "add", {"title": "login bug"}, gateway="cleo_mutate")
        TRACES.append(format(trace.get_current_span().get_span_context().trace_id, "032x"))
    graded_session.set_output("Filed T1")


TRACES = []


def test_zz_trace_written(graded_session):
    graded_session.record("session", "list", gateway="cleo_query")
    graded_session.trace_id = "TRACE_ID"
    with open("trace.txt", "w") as handle:
        handle.write(TRACES[0])
""".replace("TRACE_ID", TRACE)


def test_the_seven_scores_go_on_the_trace_the_agent_ran_in_with_described_configs(
    fake: FakeLangfuse,
    judge: FakeJudgeServer,
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    make_suite(pytester, SUITE)
    result = pytester.runpytest(
        "--cleo-grade-export=langfuse",
        "--cleo-grade-rubric=weighted",
        f"--cleo-grade-judge-url={judge.base_url}",
        "--cleo-grade-judge-model=fake-judge",
    )
    result.assert_outcomes(passed=2)
    agent_trace = (pytester.path / "trace.txt").read_text()
    by_test: dict[str, list[dict[str, object]]] = {}
    for score in fake.scores():
        metadata = score["metadata"]
        assert isinstance(metadata, dict)
        by_test.setdefault(str(metadata["testId"]).rsplit("::", 1)[1], []).append(score)
    assert len(by_test["test_agent"]) == 7
    # On the trace, not on the session: Langfuse's "scores on trace".
    assert {s.get("traceId") for s in by_test["test_agent"]} == {agent_trace}
    assert {s.get("sessionId") for s in by_test["test_agent"]} == {None}
    # The test's own trace id wins.
    assert {s.get("traceId") for s in by_test["test_zz_trace_written"]} == {TRACE}
    configs = {c["name"]: c for c in fake.configs}
    assert configs["goal_achievement"]["dataType"] == "CATEGORICAL"
    assert [c["label"] for c in configs["goal_achievement"]["categories"]] == [
        "failed",
        "partial",
        "complete",
        "exceeded",
    ]
    assert configs["goal_achievement"]["description"] == (
        "Did the session accomplish the user's goal?"
    )
    assert configs["overall_quality"]["description"] == "Weighted aggregate of all dimensions"
    assert all(config.get("description") for config in configs.values())


def test_a_grade_naming_no_trace_goes_on_its_session(fake: FakeLangfuse) -> None:
    from pytest_cleo_grade import grade_entries
    from tests.entries import NOW, sequence

    grade = grade_entries(sequence(("session", "list")), session_id="s1", now=NOW)
    assert {s.trace_id for s in plan(grade)} == {None}
    export_grades([grade], public_key="pk-test", secret_key="sk-test", base_url=fake.base_url)
    assert {(s.get("sessionId"), s.get("traceId")) for s in fake.scores()} == {("s1", None)}


def test_a_grade_whose_calls_name_a_trace_goes_on_it() -> None:
    grade = GradeResult.model_validate(
        {
            "sessionId": "s1",
            "totalScore": 1,
            "dimensions": {},
            "timestamp": "2026-03-01T12:00:00Z",
            "entryCount": 1,
            "traceId": TRACE,
        }
    )
    assert {s.trace_id for s in plan(grade)} == {TRACE}
    assert plan(grade)[0].metadata["sessionId"] == "s1"
