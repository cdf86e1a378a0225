"""The comparison rubric behind the package's Rubric protocol, fed through the grade context."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_cleo_grade.judges.protocol import JudgeReply
from pytest_cleo_grade.rubrics.comparison import ComparisonError, ComparisonRubric
from pytest_cleo_grade.rubrics.protocol import (
    ConfigurableRubric,
    GradeContext,
    Rubric,
    RubricConfig,
    stamp_rubric,
)
from tests.entries import NOW, entry
from tests.rubrics.test_comparison_structural import QUICK_OUTPUT

FOURS = {"Q-01": 4, "Q-02": 4, "Q-03": 4, "Q-04": 4, "Q-05": 4, "Q-06": 4}
ENTRIES = [entry("memory", "find", at=0), entry("tools", "Read", at=3)]


def context(**extra: Any) -> GradeContext:
    base = {"output": QUICK_OUTPUT, "mode": "quick", "variant": "haiku", "query": "TQ-1"}
    return GradeContext(task_id="T42", extra={**base, **extra})


def test_the_comparison_rubric_satisfies_the_rubric_protocols() -> None:
    rubric = ComparisonRubric()
    assert isinstance(rubric, Rubric)
    assert isinstance(rubric, ConfigurableRubric)
    assert (rubric.name, rubric.version) == ("comparison", "1.0.0")
    assert dict(rubric.dimensions) == {"structural": 6, "substantive": 30}


def test_grading_through_the_context_gives_the_comparison_extras() -> None:
    rubric = ComparisonRubric()
    result = rubric.grade(ENTRIES, session_id="s1", now=NOW, context=context(scores=FOURS))
    stamped = stamp_rubric(result, rubric).to_json_dict()
    assert (stamped["totalScore"], stamped["maxScore"], stamped["taskId"]) == (30, 36, "T42")
    assert (stamped["rubric"], stamped["rubricVersion"], stamped["variant"]) == (
        "comparison",
        "1.0.0",
        "haiku",
    )
    assert sum(rubric.dimensions.values()) == stamped["maxScore"]
    # Every point explained: one item per structural check and per substantive metric.
    for name, dimension in result.dimensions.items():
        items = [p for p in result.points if p.dimension == name]
        assert sum(p.points for p in items) == dimension.score
    assert [p.rule for p in result.points][-6:] == [f"substantive.Q-0{i}" for i in range(1, 7)]


def test_a_configured_judge_scores_when_the_test_gives_no_scores() -> None:
    def judge(prompt: str) -> JudgeReply:
        assert "Query: TQ-1" in prompt
        return JudgeReply(text=json.dumps({**FOURS, "Q-02": 2}))

    rubric = ComparisonRubric().configure(RubricConfig(judge=judge))
    result = rubric.grade(ENTRIES, session_id="s1", now=NOW, context=context())
    assert result.dimensions["substantive"].score == 22


@pytest.mark.parametrize(
    ("ctx", "message"),
    [
        pytest.param(None, "must give output, mode, variant, query", id="no-context"),
        pytest.param(
            GradeContext(extra={"output": "", "mode": "quick"}),
            "must give variant, query",
            id="missing-keys",
        ),
        pytest.param(context(mode="deep", scores=FOURS), "not 'deep'", id="bad-mode"),
        pytest.param(context(), "no Q-01..Q-06 scores given and no judge", id="no-scores"),
    ],
)
def test_missing_context_is_a_rubric_error_saying_what_to_give(
    ctx: GradeContext | None, message: str
) -> None:
    with pytest.raises(ComparisonError, match=message):
        ComparisonRubric().grade(ENTRIES, session_id="s1", now=NOW, context=ctx)
