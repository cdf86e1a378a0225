"""Operational metrics from what a session captured: latency, tokens, calls; in the comparison."""

from __future__ import annotations

from datetime import timedelta

from pytest_cleo_grade.core._conversation import Conversation, Message, ModelCall
from pytest_cleo_grade.core.models import coerce_entries
from pytest_cleo_grade.rubrics._session_metrics import (
    LATENCY_FALLBACK,
    LATENCY_MEASURED,
    session_metrics,
)
from pytest_cleo_grade.rubrics.comparison.rubric import ComparisonRubric
from pytest_cleo_grade.rubrics.protocol import GradeContext
from tests.entries import BASE_TIME, NOW, entry

CALLS = coerce_entries([entry("tasks", "find", at=2), entry("tasks", "show", at=4)])


def talk() -> Conversation:
    return Conversation(
        messages=[
            Message(timestamp=BASE_TIME, role="user", text="find T1"),
            Message(timestamp=BASE_TIME + timedelta(seconds=9), role="assistant", text="T1 is x"),
        ],
        model_calls=[
            ModelCall(id="a", timestamp=BASE_TIME, input_tokens=100, output_tokens=10),
            ModelCall(id="b", timestamp=BASE_TIME, input_tokens=200, output_tokens=20),
        ],
    )


def test_latency_runs_from_the_users_message_to_the_final_output() -> None:
    metrics = session_metrics(CALLS, talk())
    assert metrics.latency_seconds == 9
    assert metrics.latency_text == LATENCY_MEASURED
    assert (metrics.tokens, metrics.tool_calls, metrics.model_calls) == (330, 2, 2)


def test_without_a_user_message_latency_falls_back_to_the_calls_and_says_so() -> None:
    metrics = session_metrics(CALLS, None)
    assert metrics.latency_seconds == 2.003  # the first call's start to the last one's end
    assert metrics.latency_text == LATENCY_FALLBACK
    assert metrics.tokens is None


def test_the_comparison_takes_op_01_and_op_04_from_the_captured_conversation() -> None:
    context = GradeContext(
        extra={
            "output": "## Memory\n...",
            "mode": "quick",
            "variant": "haiku",
            "query": "TQ-1",
            "scores": {f"Q-0{i}": 3 for i in range(1, 7)},
        },
        conversation=talk(),
    )
    result = ComparisonRubric().grade(CALLS, session_id="s1", now=NOW, context=context)
    extra = result.model_extra or {}
    assert extra["operational"]["OP-01"] == 9
    assert extra["operational"]["OP-02"] == 2
    assert extra["operational"]["OP-04"] == 330
    assert extra["operationalMeasured"] == {
        "OP-01": LATENCY_MEASURED,
        "OP-04": "summed over 2 model calls",
    }
