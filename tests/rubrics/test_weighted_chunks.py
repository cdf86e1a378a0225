"""Long sessions: the token estimate, chunk boundaries, and seed 004's chunk aggregation."""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest

from pytest_cleo_grade.rubrics.weighted.rubric import (
    DEFAULT_SPEC,
    Budget,
    WeightedJudgeRubric,
    estimate_tokens,
    split_into_chunks,
)
from tests.entries import NOW, entry
from tests.fake_judge import verdict_json

CHUNK_LINE = re.compile(r"^#(\d+) ", re.MULTILINE)
CHUNK_NOTE = re.compile(r"This is chunk (\d+) of (\d+) of the log")


def long_session(count: int) -> list[dict[str, Any]]:
    # Each rendered line is about 200 characters (~50 tokens).
    return [
        entry("tasks", "find", at=i, params={"query": f"item {i:04d} " + "q" * 80})
        for i in range(count)
    ]


def rubric_with_budget(judge: Any, **budget: int) -> WeightedJudgeRubric:
    spec = DEFAULT_SPEC.model_copy(update={"budget": Budget(**budget)})
    return WeightedJudgeRubric(spec, judge=judge)


class ByChunk:
    """Answers each chunk with its own reply (chunk number → reply), keeping the prompts."""

    def __init__(self, replies: dict[int, str]) -> None:
        self.replies = replies
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        found = CHUNK_NOTE.search(prompt)
        return self.replies[int(found.group(1)) if found else 1]


@pytest.mark.parametrize(
    ("text", "tokens"), [("", 0), ("abc", 1), ("abcd", 1), ("abcde", 2), ("x" * 400, 100)]
)
def test_tokens_are_estimated_at_four_characters_each_rounded_up(text: str, tokens: int) -> None:
    assert estimate_tokens(text) == tokens


def test_default_budget_is_80k_tokens_with_70k_token_chunks() -> None:
    budget = DEFAULT_SPEC.budget
    assert (budget.max_prompt_tokens, budget.chunk_tokens, budget.chars_per_token) == (
        80_000,
        70_000,
        4,
    )


def test_chunks_end_at_line_boundaries_and_stay_within_their_budget() -> None:
    lines = [f"line {i} " + "x" * (i * 7 % 50) for i in range(200)]
    chunks = split_into_chunks(lines, chunk_tokens=100)
    assert [line for chunk in chunks for line in chunk] == lines
    for chunk in chunks:
        assert sum(estimate_tokens(line + "\n") for line in chunk) <= 100
    # Greedy: the next chunk's first line would not have fitted in the previous chunk.
    for before, after in itertools.pairwise(chunks):
        used = sum(estimate_tokens(line + "\n") for line in before)
        assert used + estimate_tokens(after[0] + "\n") > 100


def test_a_line_longer_than_a_chunk_is_a_chunk_of_its_own_never_cut() -> None:
    lines = ["short", "y" * 1000, "short again"]
    assert split_into_chunks(lines, chunk_tokens=50) == [["short"], ["y" * 1000], ["short again"]]


def test_a_session_within_the_budget_is_judged_in_one_prompt() -> None:
    judge = ByChunk({1: verdict_json()})
    result = rubric_with_budget(judge, max_prompt_tokens=80_000, chunk_tokens=70_000).grade(
        long_session(100), session_id="s1", now=NOW
    )
    assert len(judge.prompts) == 1
    assert estimate_tokens(judge.prompts[0]) <= 80_000
    assert CHUNK_NOTE.search(judge.prompts[0]) is None
    assert result.model_extra is not None
    assert "chunkScores" not in result.model_extra


def test_a_session_over_the_budget_is_split_and_every_entry_is_judged_once_in_order() -> None:
    judge = ByChunk(dict.fromkeys(range(1, 20), verdict_json()))
    rubric_with_budget(judge, max_prompt_tokens=4_000, chunk_tokens=1_000).grade(
        long_session(100), session_id="s1", now=NOW
    )
    count = len(judge.prompts)
    assert count > 1
    positions: list[int] = []
    for number, prompt in enumerate(judge.prompts, start=1):
        assert CHUNK_NOTE.search(prompt).groups() == (str(number), str(count))  # type: ignore[union-attr]
        log = [line for line in prompt.splitlines() if CHUNK_LINE.match(line)]
        assert sum(estimate_tokens(line + "\n") for line in log) <= 1_000
        positions += [int(CHUNK_LINE.match(line).group(1)) for line in log]  # type: ignore[union-attr]
        # Every chunk carries the task, the scales and the output format.
        assert "The agent's task:" in prompt
        assert "exceeded (3)" in prompt
        assert "Session: s1 (100 calls in all)" in prompt
    assert positions == list(range(100))  # numbered from #0, as cleo-grade show numbers them


def test_the_80k_threshold_is_on_the_whole_prompt() -> None:
    session = long_session(40)
    judge = ByChunk({1: verdict_json()})
    rubric_with_budget(judge, max_prompt_tokens=100_000, chunk_tokens=1_000).grade(
        session, session_id="s1", now=NOW
    )
    whole = estimate_tokens(judge.prompts[0])
    for budget, expected_chunks in [(whole, 1), (whole - 1, 2)]:
        judge = ByChunk(dict.fromkeys(range(1, 10), verdict_json()))
        rubric_with_budget(judge, max_prompt_tokens=budget, chunk_tokens=1_000).grade(
            session, session_id="s1", now=NOW
        )
        assert len(judge.prompts) == expected_chunks


def test_numeric_scores_are_averaged_and_categories_come_from_the_final_chunk() -> None:
    judge = ByChunk(
        {
            1: verdict_json(
                goal_achievement="failed",
                tool_efficiency=0.2,
                process_adherence=1.0,
                context_efficiency=0.4,
                error_handling="poor",
                output_quality=0.0,
            ),
            2: verdict_json(
                goal_achievement="complete",
                tool_efficiency=0.6,
                process_adherence=0.5,
                context_efficiency=0.8,
                error_handling="prevented",
                output_quality=1.0,
            ),
        }
    )
    # 16 entries of ~50 tokens in chunks of 500 tokens: two chunks.
    result = rubric_with_budget(judge, max_prompt_tokens=1_500, chunk_tokens=500).grade(
        long_session(16), session_id="s1", now=NOW
    )
    assert len(judge.prompts) == 2
    extra = result.model_extra
    assert extra is not None
    assert extra["judgeScores"] == {
        "goal_achievement": "complete",
        "tool_efficiency": pytest.approx(0.4),
        "process_adherence": 0.75,
        "context_efficiency": pytest.approx(0.6),
        "error_handling": "prevented",
        "output_quality": 0.5,
    }
    assert extra["chunkScores"] == [
        {
            "goal_achievement": "failed",
            "tool_efficiency": 0.2,
            "process_adherence": 1.0,
            "context_efficiency": 0.4,
            "error_handling": "poor",
            "output_quality": 0.0,
        },
        {
            "goal_achievement": "complete",
            "tool_efficiency": 0.6,
            "process_adherence": 0.5,
            "context_efficiency": 0.8,
            "error_handling": "prevented",
            "output_quality": 1.0,
        },
    ]
    # 0.3*2/3 + 0.2*0.4 + 0.2*0.75 + 0.15*0.6 + 0.1*1 + 0.05*0.5 = 0.645
    assert result.total_score == 64.5
    assert result.dimensions["process_adherence"].evidence == [
        "chunk 1/2: process_adherence observed",
        "chunk 2/2: process_adherence observed",
        "rationale: mean of 2 chunks (1, 0.5); chunk 1/2: process_adherence because; "
        "chunk 2/2: process_adherence because",
    ]
    assert result.dimensions["goal_achievement"].evidence == [
        "chunk 2/2: goal_achievement observed",
        "rationale: from the final chunk (2/2): goal_achievement because",
    ]
    assert extra["judgeUsage"]["requests"] == 2
