"""The weighted LLM-judge rubric: its rubric files (``spec``) and the rubric (``rubric``)."""

from __future__ import annotations

from pytest_cleo_grade.judges.protocol import judge_usage_totals
from pytest_cleo_grade.rubrics.weighted.rubric import WeightedJudgeRubric, build_prompt, parse_reply
from pytest_cleo_grade.rubrics.weighted.spec import RubricSpec

__all__ = ["RubricSpec", "WeightedJudgeRubric", "build_prompt", "judge_usage_totals", "parse_reply"]
