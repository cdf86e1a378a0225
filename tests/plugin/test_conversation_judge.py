"""The weighted judge of a pytest run sees the session's goal, conversation and output, and
a rerun of an unchanged suite costs no judge request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fake_judge import FakeJudgeServer, serve
from tests.plugin_suites import make_suite

TRANSCRIPT = (
    Path(__file__).resolve().parents[2] / "examples" / "sessions" / "claude-code-cleo.jsonl"
)


@pytest.fixture
def judge() -> Iterator[FakeJudgeServer]:
    yield from serve()


def judge_args(judge: FakeJudgeServer) -> list[str]:
    return [
        "--cleo-grade-rubric=weighted",
        f"--cleo-grade-judge-url={judge.base_url}",
        "--cleo-grade-judge-model=fake-judge",
    ]


def test_an_ingested_claude_code_transcript_is_judged_with_its_request_and_answer(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    make_suite(
        pytester,
        f"""
def test_replayed(graded_session):
    graded_session.ingest({str(TRANSCRIPT)!r}, format="claude-code")
""",
    )
    pytester.runpytest(*judge_args(judge)).assert_outcomes(passed=1)
    [received] = judge.received
    before_log = received.prompt.split("```jsonl")[0]
    assert '"Fix the login bug (use CLEO)"' in before_log
    assert "(not stated" not in received.prompt
    after_log = received.prompt.split("```jsonl")[1].split("Dimensions:")[0]
    assert '"Done: T10 tracks the redirect fix."' in after_log
    assert "Conversation: 10 messages, 9 model calls, 960 input and 320 output tokens" in (
        received.prompt
    )


#: An agent recording in real time: its calls' times and durations differ by milliseconds
#: from one run to the next, and its conversation is told to the session.
REAL_TIME = """
import time


def test_agent(graded_session):
    \"\"\"File the login bug.\"\"\"
    graded_session.add_message("user", "Please file the login bug")
    started = time.perf_counter()
    graded_session.record("session", "list", gateway="cleo_query",
                          duration=(time.perf_counter() - started) * 1000 + 0.37)
    graded_session.record("tasks", "add", {"title": "login bug"}, gateway="cleo_mutate",
                          duration=(time.perf_counter() - started) * 1000 + 0.11)
    graded_session.record("session", "end", gateway="cleo_mutate")
    graded_session.set_output("Filed as T1")
"""


def test_a_rerun_of_an_unchanged_suite_costs_no_judge_request(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    make_suite(pytester, REAL_TIME)
    args = [*judge_args(judge), "--cleo-grade-db=store.db"]
    pytester.runpytest(*args).assert_outcomes(passed=1)
    assert judge.count == 1
    assert '"Please file the login bug"' in judge.received[0].prompt
    assert '"Filed as T1"' in judge.received[0].prompt
    pytester.runpytest(*args).assert_outcomes(passed=1)
    assert judge.count == 1


BUDGET_FILE = """
name = "frugal"

[[dimensions]]
name = "cost"
max = 100
start = 100

[[dimensions.rules]]
id = "cost.tokens"
kind = "budget"
max_tokens = 1000
points = -60
flag = "spent {used} {unit}, over the budget of {limit}"
"""


def test_a_budget_rule_fails_an_agent_that_spends_more_tokens_than_allowed(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
def test_frugal(graded_session):
    graded_session.record("tasks", "find", gateway="cleo_query")
    graded_session.add_model_call("gpt-x", input_tokens=400, output_tokens=100)


def test_spendthrift(graded_session):
    graded_session.record("tasks", "find", gateway="cleo_query")
    graded_session.add_model_call("gpt-x", input_tokens=4000, output_tokens=900)
""",
    )
    pytester.makefile(".toml", budget=BUDGET_FILE)
    result = pytester.runpytest(
        "--cleo-grade-rubric=rules",
        "--cleo-grade-rubric-file=budget.toml",
        "--cleo-grade-fail-under=B",
    )
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*test_spendthrift*", "*spent 4900 tokens, over the budget of 1000*"]
    )


def test_the_html_report_of_a_run_shows_each_tests_conversation(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
def test_agent(graded_session):
    graded_session.add_message("user", "Please <b>file</b> the login bug")
    perfect(graded_session)
    graded_session.set_output("Filed as T1")
""",
    )
    pytester.runpytest("--cleo-grade-html=report.html").assert_outcomes(passed=1)
    page = (pytester.path / "report.html").read_text()
    assert "Conversation (1 message, 0 model calls" in page
    assert "<pre>Please &lt;b&gt;file&lt;/b&gt; the login bug</pre>" in page
    assert "<h4>Final output</h4><pre>Filed as T1</pre>" in page
