"""The rule files' budget kind: tokens, calls, seconds and cost (a price table) held to limits."""

from __future__ import annotations

import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from pytest_cleo_grade.core._conversation import Conversation, Message, ModelCall
from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.rubrics.rules import grade_rules, load_rule_file
from tests.entries import BASE_TIME, NOW, entry


def budget(
    limit: str = "max_tokens = 1000",
    flag: str = "spent {used} {unit}, over the budget of {limit}",
    points: int = -15,
    prices: bool = True,
) -> str:
    """A rule file holding one budget rule with ``limit``."""
    table = '[prices]\n"gpt-x" = { input = 2.0, output = 10.0 }\n' if prices else ""
    return f"""
name = "frugal"
{table}
[[dimensions]]
name = "cost"
max = 20
start = 20

[[dimensions.rules]]
id = "cost.tokens"
kind = "budget"
{limit}
points = {points}
evidence = "{{used}} {{unit}}, within {{limit}}"
flag = "{flag}"
"""


CALLS = [entry("tasks", "find", at=0), entry("tasks", "add", at=20)]


def talk(tokens_in: int = 900, tokens_out: int = 300, model: str = "gpt-x") -> Conversation:
    return Conversation(
        messages=[
            Message(timestamp=BASE_TIME - timedelta(seconds=5), role="user", text="add it"),
            Message(timestamp=BASE_TIME + timedelta(seconds=25), role="assistant", text="ok"),
        ],
        model_calls=[
            ModelCall(
                id="c1",
                timestamp=BASE_TIME,
                model=model,
                input_tokens=tokens_in,
                output_tokens=tokens_out,
            )
        ],
    )


def spec_of(tmp_path: Path, text: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "rules.toml"
    path.write_text(textwrap.dedent(text))
    return load_rule_file(path)


def test_an_agent_spending_more_tokens_than_allowed_loses_the_points_with_the_flag(
    tmp_path: Path,
) -> None:
    spec = spec_of(tmp_path, budget())
    result = grade_rules(spec, CALLS, session_id="s1", now=NOW, conversation=talk())
    assert result.total_score == 5
    assert result.flags == ["spent 1200 tokens, over the budget of 1000"]
    assert [(p.rule, p.points) for p in result.points][:2] == [
        ("cost.start", 20),
        ("cost.tokens", -15),
    ]


def test_within_budget_the_evidence_says_by_how_much(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, budget("max_tokens = 5000"))
    result = grade_rules(spec, CALLS, session_id="s1", now=NOW, conversation=talk())
    assert result.total_score == 20
    assert result.dimensions["cost"].evidence == ["1200 tokens, within 5000"]


def test_a_token_budget_without_captured_usage_is_an_error_not_a_pass(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, budget("max_tokens = 5000"))
    with pytest.raises(RubricError, match="reported no tokens to hold to 5000"):
        grade_rules(spec, CALLS, session_id="s1", now=NOW)


@pytest.mark.parametrize(
    ("limit", "flag"),
    [
        ("max_calls = 1", "2 calls over 1"),
        ("max_model_calls = 0", "1 model calls over 0"),
        # From the user's message (5 s before the first call) to the answer (25 s after).
        ("max_seconds = 29.5", "30 seconds over 29.5"),
        # 900 in at 2.0 and 300 out at 10.0 per million tokens: 0.0048.
        ("max_cost = 0.004", "0.0048 cost over 0.004"),
    ],
)
def test_each_limit_holds_the_session_to_its_figure(tmp_path: Path, limit: str, flag: str) -> None:
    spec = spec_of(tmp_path, budget(limit, flag="{used} {unit} over {limit}"))
    result = grade_rules(spec, CALLS, session_id="s1", now=NOW, conversation=talk())
    assert result.flags == [flag]


def test_without_a_conversation_seconds_are_the_first_to_the_last_call(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, budget("max_seconds = 10"))
    result = grade_rules(spec, CALLS, session_id="s1", now=NOW)
    assert result.flags == ["spent 20 seconds, over the budget of 10"]


def test_a_model_missing_from_the_price_table_is_named(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, budget("max_cost = 1"))
    with pytest.raises(RubricError, match="no price for model 'other' in \\[prices\\]"):
        grade_rules(spec, CALLS, session_id="s1", now=NOW, conversation=talk(model="other"))


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (budget(""), "a budget rule needs a limit"),
        (budget(points=5), "a budget rule deducts points"),
        (budget("max_cost = 1", prices=False), "max_cost needs a \\[prices\\] table"),
        (budget("max_tokens = -1"), "greater than or equal to 0"),
    ],
    ids=["no-limit", "award", "no-prices", "negative"],
)
def test_bad_budget_rules_are_refused_naming_the_problem(
    tmp_path: Path, text: str, problem: str
) -> None:
    with pytest.raises(RubricError, match=problem):
        spec_of(tmp_path, text)


def test_a_token_budget_needs_no_price_table(tmp_path: Path) -> None:
    spec_of(tmp_path, budget(prices=False))
