"""The conversation model: roles, the caps, the goal, the final output, token totals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from pytest_cleo_grade.core._conversation import (
    MAX_ITEMS,
    MAX_TEXT_CHARS,
    Conversation,
    Message,
    ModelCall,
    bounded,
    merge,
    normalise_role,
)

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def message(role: str, text: str, at: int = 0, call: str | None = None) -> Message:
    return Message(timestamp=T0 + timedelta(seconds=at), role=role, text=text, model_call=call)


@pytest.mark.parametrize(
    ("given", "role"),
    [("user", "user"), ("Human", "user"), ("ai", "assistant"), ("developer", "system")],
)
def test_framework_spellings_of_roles_become_the_four(given: str, role: str) -> None:
    assert normalise_role(given) == role


def test_an_unknown_role_is_refused_naming_the_four() -> None:
    with pytest.raises(ValidationError, match="is not one of user, assistant, system, tool"):
        message("narrator", "once upon a time")


def test_a_long_text_is_cut_visibly_at_the_stated_cap() -> None:
    long = message("user", "x" * (MAX_TEXT_CHARS + 10))
    assert long.text == "x" * MAX_TEXT_CHARS + "...(+10 chars)"


def test_the_goal_is_the_first_user_message_and_the_output_falls_back_to_the_last_answer() -> None:
    talk = Conversation(
        messages=[
            message("system", "be brief"),
            message("user", "add a task", 1),
            message("assistant", "working on it", 2),
            message("user", "thanks", 3),
            message("assistant", "Done: T1 added", 4),
        ]
    )
    assert talk.goal == "add a task"
    assert talk.final_output == "Done: T1 added"
    assert talk.model_copy(update={"output": "T1"}).final_output == "T1"


def test_tokens_are_summed_over_the_model_calls() -> None:
    calls = [
        ModelCall(id="a", timestamp=T0, model="m", input_tokens=100, output_tokens=20),
        ModelCall(id="b", timestamp=T0, input_tokens=50, output_tokens=5, cached_tokens=40),
        ModelCall(id="c", timestamp=T0),
    ]
    assert Conversation(model_calls=calls).tokens() == {
        "input": 150,
        "output": 25,
        "cached": 40,
        "total": 175,
    }


def test_merging_orders_by_time_keeps_a_model_call_once_and_the_last_output() -> None:
    first = Conversation(
        messages=[message("user", "late", 5)],
        model_calls=[ModelCall(id="a", timestamp=T0)],
        output="one",
    )
    second = Conversation(
        messages=[message("user", "early", 1)],
        model_calls=[ModelCall(id="a", timestamp=T0)],
        output="two",
        dropped=2,
    )
    merged = merge([first, second])
    assert [m.text for m in merged.messages] == ["early", "late"]
    assert [c.id for c in merged.model_calls] == ["a"]
    assert (merged.output, merged.dropped) == ("two", 2)


def test_items_over_the_cap_are_counted_not_kept() -> None:
    messages = [message("user", str(i), i) for i in range(MAX_ITEMS + 3)]
    talk = bounded(messages, [], None)
    assert len(talk.messages) == MAX_ITEMS
    assert talk.dropped == 3
    assert talk.messages[-1].text == str(MAX_ITEMS - 1)


def test_negative_token_counts_are_invalid() -> None:
    with pytest.raises(ValidationError, match="input_tokens"):
        ModelCall(id="a", timestamp=T0, input_tokens=-1)
