"""The weighted judge rubric: normalisation, the overall formula, points, replies, re-asks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_cleo_grade.core.errors import JudgeError
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.judges.http import OpenAICompatibleJudge
from pytest_cleo_grade.judges.protocol import (
    JudgeReply,
    JudgeReplyError,
    TokenUsage,
    judge_usage_totals,
)
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.rubrics.protocol import GradeContext
from pytest_cleo_grade.rubrics.weighted.rubric import DEFAULT_SPEC, WeightedJudgeRubric, parse_reply
from tests.entries import NOW, entry
from tests.fake_judge import FakeJudgeServer, Reply, serve, verdict_json

ENTRIES = [
    entry("session", "list", at=0),
    entry("tasks", "find", at=1, params={"query": "login bug"}),
    entry("tasks", "show", at=2, params={"taskId": "T1"}, success=False, exit_code=4),
    entry("session", "end", at=3),
]


class Recorder:
    """A judge answering from a list of replies (the last one repeats), keeping the prompts."""

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies) or [verdict_json()]
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        index = min(len(self.prompts), len(self.replies)) - 1
        return self.replies[index]


def grade(judge: Any, entries: list[dict[str, Any]] | None = None, **kwargs: Any) -> GradeResult:
    rubric = WeightedJudgeRubric(judge=judge)
    result = rubric.grade(
        ENTRIES if entries is None else entries, session_id="s1", now=NOW, **kwargs
    )
    # Every judged point is explained: one item per dimension, its score; the automatic
    # signals beside them (rule DIMENSION.signal.NAME) carry no points.
    judged = [p for p in result.points if ".signal." not in p.rule]
    assert [(p.dimension, p.points) for p in judged] == [
        (name, dimension.score) for name, dimension in result.dimensions.items()
    ]
    assert all(p.points == 0 for p in result.points if ".signal." in p.rule)
    return result


def without(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(verdict_json())
    del data[name]
    return data


@pytest.fixture
def server() -> Iterator[FakeJudgeServer]:
    yield from serve()


def test_default_rubric_has_seed_004s_six_dimensions_weights_and_maxima() -> None:
    rubric = WeightedJudgeRubric()
    assert rubric.name == "weighted"
    assert dict(rubric.dimensions) == {
        "goal_achievement": 30.0,
        "tool_efficiency": 20.0,
        "process_adherence": 20.0,
        "context_efficiency": 15.0,
        "error_handling": 10.0,
        "output_quality": 5.0,
    }
    kinds = {d.name: d.type for d in DEFAULT_SPEC.dimensions}
    assert kinds["goal_achievement"] == kinds["error_handling"] == "categorical"
    assert [c.label for c in DEFAULT_SPEC.dimensions[4].categories] == [  # type: ignore[union-attr]
        "poor",
        "struggled",
        "recovered",
        "prevented",
    ]


def test_total_is_the_weighted_sum_of_normalised_scores_in_points() -> None:
    # 0.3*2/3 + 0.2*0.8 + 0.2*0.6 + 0.15*0.5 + 0.1*2/3 + 0.05*1.0 = 0.6716666...
    result = grade(Recorder(verdict_json()))
    assert result.total_score == 67.17
    assert result.max_score == 100
    assert {name: (d.score, d.max) for name, d in result.dimensions.items()} == {
        "goal_achievement": (20.0, 30.0),
        "tool_efficiency": (16.0, 20.0),
        "process_adherence": (12.0, 20.0),
        "context_efficiency": (7.5, 15.0),
        "error_handling": (6.67, 10.0),
        "output_quality": (5.0, 5.0),
    }
    assert result.model_extra is not None
    assert result.model_extra["overallQuality"] == pytest.approx(0.671667)
    assert result.letter == "C"


@pytest.mark.parametrize(
    ("scores", "dimension", "points", "total"),
    [
        # 0.15 x 0.009 x 100 = 0.135 exactly; in floats 0.13499999..., rounded to 0.13 (the
        # total too: every other dimension scores 0).
        (
            {
                "goal_achievement": "failed",
                "tool_efficiency": 0,
                "process_adherence": 0,
                "context_efficiency": 0.009,
                "error_handling": "poor",
                "output_quality": 0,
            },
            "context_efficiency",
            0.14,
            0.14,
        ),
        ({"context_efficiency": 0.779}, "context_efficiency", 11.69, 71.35),  # 11.685
        ({"output_quality": 0.715}, "output_quality", 3.58, 65.74),  # 3.575; 65.741666...
    ],
)
def test_points_and_the_total_round_half_up_from_the_exact_values(
    scores: dict[str, float], dimension: str, points: float, total: float
) -> None:
    result = grade(Recorder(verdict_json(**scores)))
    assert (result.dimensions[dimension].score, result.total_score) == (points, total)


@pytest.mark.parametrize(
    ("category", "points"),
    [("failed", 0.0), ("partial", 10.0), ("complete", 20.0), ("exceeded", 30.0)],
)
def test_a_category_is_worth_its_value_over_categories_minus_one(
    category: str, points: float
) -> None:
    result = grade(Recorder(verdict_json(goal_achievement=category)))
    assert result.dimensions["goal_achievement"].score == points


@pytest.mark.parametrize("given", [2, "2", 2.0, "Complete", " complete "], ids=repr)
def test_a_category_may_be_answered_by_name_or_by_its_number(given: object) -> None:
    result = grade(Recorder(verdict_json(goal_achievement=given)))
    assert result.dimensions["goal_achievement"].score == 20.0
    assert result.model_extra is not None
    assert result.model_extra["judgeScores"]["goal_achievement"] == "complete"


@pytest.mark.parametrize(
    ("scores", "total", "letter"),
    [
        (
            {
                "goal_achievement": "exceeded",
                "tool_efficiency": 1,
                "process_adherence": 1,
                "context_efficiency": 1,
                "error_handling": "prevented",
                "output_quality": 1,
            },
            100.0,
            "A",
        ),
        (
            {
                "goal_achievement": "failed",
                "tool_efficiency": 0,
                "process_adherence": 0,
                "context_efficiency": 0,
                "error_handling": "poor",
                "output_quality": 0,
            },
            0.0,
            "F",
        ),
        ({"goal_achievement": "exceeded", "error_handling": "prevented"}, 80.5, "B"),
    ],
    ids=["best", "worst", "mixed"],
)
def test_letter_comes_from_the_same_cut_offs_as_cleo(
    scores: dict[str, Any], total: float, letter: str
) -> None:
    result = grade(Recorder(verdict_json(**scores)))
    assert result.total_score == total
    assert result.letter == letter


def test_evidence_is_the_judges_observations_then_its_rationale() -> None:
    result = grade(Recorder(verdict_json()))
    assert result.dimensions["tool_efficiency"].evidence == [
        "tool_efficiency observed",
        "rationale: tool_efficiency because",
        # Then the automatic signal beside it (session.list and tasks.find in ENTRIES).
        "auto-signal: 1 list call, 1 find call",
    ]


def test_result_records_rubric_version_task_id_entry_count_and_raw_judge_scores() -> None:
    result = grade(Recorder(verdict_json()), context=GradeContext(task="fix it", task_id="T9"))
    data = result.to_json_dict()
    assert data["rubric"] == "weighted"
    assert data["rubricVersion"] == "1.0.0"
    assert data["taskId"] == "T9"
    assert data["entryCount"] == 4
    assert data["flags"] == []
    assert data["judgeScores"]["error_handling"] == "recovered"
    assert data["judgeScores"]["process_adherence"] == 0.6
    assert list(data["dimensions"]) == [d.name for d in DEFAULT_SPEC.dimensions]
    assert GradeResult.from_mapping(data) == result


def test_prompt_carries_task_session_one_line_per_entry_and_every_dimension_scale() -> None:
    judge = Recorder()
    grade(judge, context=GradeContext(task="Fix the login bug"))
    [prompt] = judge.prompts
    assert "Fix the login bug" in prompt
    assert "Session: s1 (4 calls in all)" in prompt
    log = [line for line in prompt.splitlines() if line.startswith("#")]
    assert log == [
        '#0 {"at":0,"call":"session.list","via":"cleo_query","ok":true}',
        '#1 {"at":1,"call":"tasks.find","via":"cleo_query","ok":true,'
        '"params":{"query":"login bug"}}',
        '#2 {"at":2,"call":"tasks.show","via":"cleo_query","ok":false,"exit":4,'
        '"params":{"taskId":"T1"},"error":"E_NOT_FOUND"}',
        '#3 {"at":3,"call":"session.end","via":"cleo_query","ok":true}',
    ]
    for dimension in DEFAULT_SPEC.dimensions:
        assert f"{dimension.name}:" in prompt
    assert "exceeded (3)" in prompt
    assert "number from 0 to 1" in prompt
    assert "chunk" not in prompt.split("Dimensions:")[0]


def test_entries_of_other_sessions_stay_out_of_the_prompt_and_the_count() -> None:
    judge = Recorder()
    other = entry("tasks", "add", at=5, params={"title": "SECRET-OTHER"}, session="s2")
    result = grade(judge, [*ENTRIES, other])
    assert result.entry_count == 4
    assert "SECRET-OTHER" not in judge.prompts[0]


def test_long_params_are_cut_visibly_in_the_prompt() -> None:
    judge = Recorder()
    grade(judge, [entry("tasks", "add", params={"description": "x" * 5000})])
    assert "...(+" in judge.prompts[0]
    assert "x" * 2100 not in judge.prompts[0]


def test_an_empty_session_scores_zero_with_cleos_flag_without_asking_the_judge() -> None:
    judge = Recorder()
    result = grade(judge, [])
    assert judge.prompts == []
    assert result.total_score == 0
    assert result.flags == [
        "No audit entries found for session (use --grade flag when starting session)"
    ]
    assert [d.max for d in result.dimensions.values()] == [30.0, 20.0, 20.0, 15.0, 10.0, 5.0]


def test_invalid_json_is_asked_again_once_and_the_second_reply_is_used() -> None:
    judge = Recorder("I think it went well!", verdict_json())
    result = grade(judge)
    assert len(judge.prompts) == 2
    assert "could not be used: not valid JSON" in judge.prompts[1]
    assert "I think it went well!" in judge.prompts[1]
    assert result.total_score == 67.17
    assert result.model_extra is not None
    assert result.model_extra["judgeUsage"]["requests"] == 2


def test_two_invalid_replies_raise_a_judge_error_carrying_the_raw_reply() -> None:
    bad = verdict_json(goal_achievement="brilliant")
    judge = Recorder("not json", bad)
    with pytest.raises(JudgeReplyError) as info:
        grade(judge)
    assert isinstance(info.value, JudgeError)
    assert info.value.raw == bad
    message = str(info.value)
    assert "session s1 is invalid after one re-ask" in message
    assert "goal_achievement.score: 'brilliant' is not one of failed (0)" in message
    assert len(judge.prompts) == 2


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("[1, 2]", "expected a JSON object, got list"),
        (verdict_json(tool_efficiency=1.5), "tool_efficiency.score: 1.5 is outside 0..1"),
        (verdict_json(tool_efficiency=-0.1), "tool_efficiency.score: -0.1 is outside 0..1"),
        (verdict_json(tool_efficiency="high"), "tool_efficiency.score: expected a number"),
        (verdict_json(error_handling=4), "error_handling.score: 4 is not one of"),
        (verdict_json(error_handling=1.5), "error_handling.score: 1.5 is not one of"),
        (verdict_json(error_handling=True), "error_handling.score"),
        (
            json.dumps(
                {k: v for k, v in json.loads(verdict_json()).items() if k != "output_quality"}
            ),
            "output_quality: missing",
        ),
        (
            json.dumps({**json.loads(verdict_json()), "context_efficiency": 0.5}),
            "context_efficiency",
        ),
        ('{"tool_efficiency": {"score": NaN}}', "tool_efficiency.score: Input should be a finite"),
    ],
    ids=[
        "array",
        "above-range",
        "below-range",
        "numeric-as-word",
        "unknown-category-number",
        "fractional-category",
        "boolean",
        "missing-dimension",
        "bare-score",
        "nan",
    ],
)
def test_replies_out_of_range_or_off_the_categories_are_rejected(reply: str, problem: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_reply(DEFAULT_SPEC, reply)
    assert problem in str(info.value)


def test_a_fenced_reply_with_extra_keys_and_a_single_evidence_string_is_accepted() -> None:
    data = json.loads(verdict_json())
    data["overall_quality"] = {"score": 0.7}
    data["output_quality"]["evidence"] = "one observation"
    verdicts = parse_reply(DEFAULT_SPEC, f"```json\n{json.dumps(data)}\n```")
    assert verdicts["output_quality"].evidence == ("one observation",)
    assert "overall_quality" not in verdicts


def test_grading_through_an_http_endpoint_sums_the_reported_token_usage(
    server: FakeJudgeServer,
) -> None:
    server.push(Reply("not json", prompt_tokens=900, completion_tokens=10))
    server.push(Reply(verdict_json(), prompt_tokens=1000, completion_tokens=80))
    judge = OpenAICompatibleJudge(base_url=server.base_url, model="m")
    result = grade(judge)
    assert result.total_score == 67.17
    assert result.model_extra is not None
    assert result.model_extra["judgeUsage"] == {
        "promptTokens": 1900,
        "completionTokens": 90,
        "totalTokens": 1990,
        "requests": 2,
        "cachedReplies": 0,
        "cached": False,
    }
    assert server.count == 2


def test_a_judge_reply_object_without_usage_counts_no_tokens() -> None:
    result = grade(lambda prompt: JudgeReply(verdict_json()))
    assert result.model_extra is not None
    assert result.model_extra["judgeUsage"]["totalTokens"] == 0


def test_usage_totals_sum_judged_grades_and_ignore_the_others() -> None:
    first = grade(lambda prompt: JudgeReply(verdict_json(), TokenUsage(100, 10, 110)))
    second = grade(Recorder("oops", verdict_json()))
    cleo = grade_entries(ENTRIES, session_id="s1", now=NOW)
    assert judge_usage_totals([first, second, cleo]) == {
        "grades": 2,
        "promptTokens": 100,
        "completionTokens": 10,
        "totalTokens": 110,
        "requests": 3,
        "cachedReplies": 0,
    }


@pytest.mark.parametrize("entries", [ENTRIES, []], ids=["judged", "empty"])
def test_weighted_results_validate_against_the_published_grade_schema(
    entries: list[dict[str, Any]],
) -> None:
    schema = json.loads(
        (Path(__file__).resolve().parents[2] / "schemas" / "grade.schema.json").read_text()
    )
    jsonschema.validate(grade(Recorder(verdict_json()), entries).to_json_dict(), schema)
