"""How the plugin grades one test: the CLEO rubric, a named rubric, or seed 002's comparison.

No pytest here: the plugin turns options and markers into a :class:`GradingPlan`, and this
module turns a plan and a finished :class:`~pytest_cleo_grade.graded.GradedSession` into a
GradeResult. Every failure is a CleoGradeError (RubricError, JudgeError...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from pytest_cleo_grade.errors import RubricError
from pytest_cleo_grade.graded import GradedSession
from pytest_cleo_grade.models import GradeResult
from pytest_cleo_grade.rubrics.base import DEFAULT_RUBRIC, GradeContext, RubricConfig, stamp_rubric
from pytest_cleo_grade.session import GradeSession

if TYPE_CHECKING:
    import pluggy

    from pytest_cleo_grade.rubrics.judge import Judge, JudgeReply

__all__ = ["GradingPlan", "comparison_judge", "grade_session"]

#: How a comparison test gets its Q-01..Q-06 scores when the test gives none.
NO_JUDGE_HINT: Final = (
    "pass scores to graded_session.set_output(text, scores={'Q-01': 4, ...}) or configure "
    "a judge (--cleo-grade-judge-url and --cleo-grade-judge-model, or the [judge] table of "
    "--cleo-grade-rubric-file)"
)


@dataclass(frozen=True, slots=True)
class GradingPlan:
    """What grades one test: the rubric (or a comparison ``variant``) and its settings."""

    rubric: str = DEFAULT_RUBRIC
    config: RubricConfig = dataclasses.field(default_factory=RubricConfig)
    task: str | None = None
    variant: str | None = None
    query: str | None = None
    thoroughness: str | None = None

    @property
    def label(self) -> str:
        """The rubric as a message names it: ``weighted``, ``comparison (variant haiku)``."""
        if self.variant is not None:
            return f"comparison (variant {self.variant})"
        return self.rubric

    @property
    def plain_cleo(self) -> bool:
        """The default path: CLEO's rubric, exactly as before rubrics were pluggable."""
        return self.variant is None and self.rubric == DEFAULT_RUBRIC


def comparison_judge(config: RubricConfig) -> Judge:
    """The judge a comparison test without scores asks: ``config.judge``, else the HTTP
    judge of the weighted rubric's judge settings (rubric file ``[judge]`` table and the
    URL/model overrides). RubricError when neither says where to send the prompt.
    """
    if config.judge is not None:
        return config.judge
    from pytest_cleo_grade.rubrics.judge import build_judge
    from pytest_cleo_grade.rubrics.weighted import WeightedJudgeRubric

    # configure() merges the rubric file and the overrides exactly as the weighted rubric
    # does; without a cache path it opens no judge cache.
    settings = WeightedJudgeRubric().configure(dataclasses.replace(config, cache_path=None))
    try:
        return build_judge(settings.spec.judge)
    except RubricError as exc:
        raise RubricError(f"no Q-01..Q-06 scores and no judge: {exc}; {NO_JUDGE_HINT}") from exc


def _grade_comparison(session: GradedSession, plan: GradingPlan) -> GradeResult:
    from pytest_cleo_grade.comparison.rubric import ComparisonRubric

    if session.output is None:
        raise RubricError(
            f"comparison test of variant {plan.variant!r} gave no output: call "
            "graded_session.set_output(text) with the agent's output before the test ends"
        )
    extra: dict[str, Any] = {
        "output": session.output,
        "mode": plan.thoroughness,
        "variant": plan.variant,
        "query": plan.query,
        **(session.run_facts or {}),
    }
    judge = None
    if session.scores is not None:
        extra["scores"] = session.scores
    else:
        judge = _MeteredJudge(comparison_judge(plan.config))
    rubric = ComparisonRubric(judge=judge)
    context = GradeContext(task=plan.task, extra=extra)
    result = rubric.grade(session.entries, session_id=session.id, context=context)
    if judge is not None:
        # The endpoint's tokens belong in the run's judge usage, as the weighted rubric's do.
        result = result.model_copy(update={"judgeUsage": judge.usage()})
    return stamp_rubric(result, rubric)


class _MeteredJudge:
    """A judge that counts its requests and the token usage its replies report."""

    def __init__(self, judge: Judge) -> None:
        from pytest_cleo_grade.rubrics.judge import TokenUsage

        self._judge = judge
        self._tokens = TokenUsage()
        self._requests = 0

    def __call__(self, prompt: str, /) -> JudgeReply:
        from pytest_cleo_grade.rubrics.judge import ask

        reply = ask(self._judge, prompt)
        self._requests += 1
        if reply.usage is not None:
            self._tokens = self._tokens + reply.usage
        return reply

    def usage(self) -> dict[str, Any]:
        """The ``judgeUsage`` extra (the weighted rubric's keys; never cached)."""
        return {
            "promptTokens": self._tokens.prompt_tokens,
            "completionTokens": self._tokens.completion_tokens,
            "totalTokens": self._tokens.total_tokens,
            "requests": self._requests,
            "cachedReplies": 0,
            "cached": False,
        }


def grade_session(
    session: GradedSession, plan: GradingPlan, *, manager: pluggy.PluginManager | None = None
) -> GradeResult:
    """Grade the session's entries as ``plan`` says and remember the result on the session.

    ``manager`` is the run's rubric plugin manager (conftest rubrics included).
    """
    if plan.plain_cleo:
        # GradeSession's own grade(): the fixture's grade() would come back here.
        result = GradeSession.grade(session)
        session.result = result
        return result
    if plan.variant is not None:
        result = _grade_comparison(session, plan)
    else:
        from pytest_cleo_grade.rubrics.registry import grade_with_rubric

        result = grade_with_rubric(
            plan.rubric,
            session.entries,
            session_id=session.id,
            config=plan.config,
            context=GradeContext(task=plan.task),
            manager=manager,
        )
    session.result = result
    return result
