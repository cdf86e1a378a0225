"""Grading one test, pytest-free: the plan (rubric, settings, threshold) and the grade.

The plugin turns its options and the test's markers into a :class:`GradingPlan` with
:func:`plan_for`, hands the fixture's session a :class:`TestGrader` (so
``graded_session.grade()`` uses the test's own rubric), and calls :func:`grade_test` when the
test body ends. Every failure is a CleoGradeError (RubricError, JudgeError, EntryError...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final

from pytest_cleo_grade.core._links import docs_page
from pytest_cleo_grade.core._text import terminal_lines, terminal_text
from pytest_cleo_grade.core.errors import CleoGradeError, RubricError
from pytest_cleo_grade.core.expectations import Expected, TrajectoryMode
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.core.settings import (
    DEFAULT_RUBRIC,
    MarkerOptions,
    Mode,
    PluginOptions,
    parse_rubric_weights,
)
from pytest_cleo_grade.grading._verdict import GradedTest
from pytest_cleo_grade.grading.session import GradeSession, cleo_grader
from pytest_cleo_grade.rubrics.protocol import GradeContext, RubricConfig
from pytest_cleo_grade.rubrics.trajectory import TRAJECTORY_RUBRIC

if TYPE_CHECKING:
    import pluggy

    from pytest_cleo_grade.judges.protocol import Judge

__all__ = [
    "GradingFailed",
    "GradingPlan",
    "TestGrader",
    "comparison_judge",
    "grade_test",
    "not_recorded",
    "plan_for",
    "threshold_for",
    "uses_trajectory",
]

#: How a comparison test gets its Q-01..Q-06 scores when the test gives none.
NO_JUDGE_HINT: Final = (
    "pass scores to graded_session.set_output(text, scores={'Q-01': 4, ...}) or configure "
    "a judge (--cleo-grade-judge-url and --cleo-grade-judge-model, or the [judge] table of "
    "--cleo-grade-rubric-file)"
)


#: Why a test that recorded nothing fails, and how calls reach its session.
NOTHING_CAPTURED: Final = (
    "nothing was captured: the session has 0 audit entries, so there is nothing to grade. "
    "Calls reach the session through graded_session.record() or graded_session.dispatcher, "
    "pytest_cleo_grade.capture.audit.record(), a framework adapter (pytest_cleo_grade.capture: "
    "OpenTelemetry with --cleo-grade-capture=otel, MCP, pydantic-ai, LangChain, OpenAI Agents, "
    "Claude), "
    "or graded_session.ingest(FILE). A child process or an MCP stdio server records only "
    "with the session's variables: pass env=graded_session.subprocess_env() to the MCP "
    "stdio client (it forwards only a few variables by default) or "
    "env={**os.environ, **graded_session.subprocess_env()} to subprocess. To grade an empty "
    "session 0/100 as the CLEO Grade Specification does, mark the test "
    "@pytest.mark.cleo_grade(allow_empty=True) or pass --cleo-grade-allow-empty. What to "
    f"check, in order: {docs_page('capture.md', 'my-test-recorded-nothing')}"
)


def not_recorded(reasons: list[str]) -> str:
    """Why a session some of whose calls could not be recorded is not graded."""
    # Not "N calls": a reason may be a whole file graded_session.ingest() could not read.
    count = len(reasons)
    return (
        "not every call of the test could be recorded, so its session is not graded on the "
        f"rest (even where the code under test caught the error): {terminal_text(reasons[0])}"
        + ("" if count == 1 else f" (and {count - 1} more)")
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
    #: A comparison test of the follow-up round (marker ``follow_up=True``).
    follow_up: bool = False
    #: Keeps judge replies apart in the cache (a repeated test's run index), or None.
    cache_scope: str | None = None
    #: The trajectory rubric's expected calls and mode (the marker's expect=, mode=).
    expect: tuple[Expected, ...] | None = None
    expect_mode: TrajectoryMode | None = None

    def context_extra(self) -> dict[str, Any]:
        """What rubrics read from GradeContext.extra: the cache scope, the expectations."""
        extra: dict[str, Any] = {}
        if self.cache_scope:
            extra["cacheScope"] = self.cache_scope
        if self.expect is not None:
            extra["expect"] = self.expect
        if self.expect_mode is not None:
            extra["expectMode"] = self.expect_mode
        return extra

    @property
    def label(self) -> str:
        """The rubric as a message names it: ``weighted``, ``comparison (variant haiku)``."""
        if self.variant is not None:
            # A marker's name, printed in the failure message: escaped like its reason.
            return f"comparison (variant {terminal_text(self.variant)})"
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
    from pytest_cleo_grade.rubrics.weighted.rubric import WeightedJudgeRubric

    # configure() merges the rubric file and the overrides exactly as the weighted rubric
    # does; without a cache path it opens no judge cache.
    settings = WeightedJudgeRubric().configure(dataclasses.replace(config, cache_path=None))
    from pytest_cleo_grade.judges.connect import DefaultConnector

    try:
        return (config.connector or DefaultConnector()).judge(settings.spec.judge)
    except RubricError as exc:
        raise RubricError(f"no Q-01..Q-06 scores and no judge: {exc}; {NO_JUDGE_HINT}") from exc


def _grade_comparison(
    session: GradeSession,
    plan: GradingPlan,
    now: datetime | None,
    manager: pluggy.PluginManager | None,
) -> GradeResult:
    from pytest_cleo_grade.rubrics.registry import grade_with_rubric

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
    if plan.follow_up:
        extra["round"] = "follow-up"
    if plan.cache_scope:
        extra["cacheScope"] = plan.cache_scope  # a repeated test's runs are judged apart
    judge = None
    if session.scores is not None:
        extra["scores"] = session.scores
    else:
        judge = comparison_judge(plan.config)
    # The registered comparison rubric, like any other; the judge arrives through its config,
    # with the judge cache (cache_path, cache_mode), and the rubric reports judgeUsage.
    return grade_with_rubric(
        "comparison",
        session.entries,
        session_id=session.id,
        now=now,
        context=GradeContext(task=plan.task, extra=extra, conversation=session.conversation),
        config=dataclasses.replace(plan.config, judge=judge),
        manager=manager,
    )


class TestGrader:
    """The Grader of one test's session: its plan, with the run's rubric plugin manager."""

    __test__ = False  # not a pytest test class, whatever its name says

    def __init__(self, plan: GradingPlan, manager: pluggy.PluginManager | None = None) -> None:
        self.plan = plan
        self.manager = manager

    def __call__(self, session: GradeSession, /, *, now: datetime | None = None) -> GradeResult:
        plan = self.plan
        if plan.plain_cleo:
            return cleo_grader(session, now=now)
        if plan.variant is not None:
            return _grade_comparison(session, plan, now, self.manager)
        from pytest_cleo_grade.rubrics.registry import grade_with_rubric

        return grade_with_rubric(
            plan.rubric,
            session.entries,
            session_id=session.id,
            now=now,
            config=plan.config,
            context=GradeContext(
                task=plan.task, extra=plan.context_extra(), conversation=session.conversation
            ),
            manager=self.manager,
        )


class GradingFailed(CleoGradeError):
    """A test's session could not be graded; the message says which test and why."""


def grade_test(
    session: GradeSession,
    *,
    nodeid: str,
    threshold: float | None,
    threshold_source: str | None,
    mode: Mode,
    allow_empty: bool = False,
) -> GradedTest:
    """Grade a finished test's session with its grader and judge it against its threshold.

    The result carries the test id (extra ``testId``) and becomes ``session.result``.
    GradingFailed names the test, the rubric and the reason (a judge's raw reply included);
    a session that captured nothing is one unless ``allow_empty`` (then it grades as its
    rubric says: 0/100 with CLEO's flag).
    """
    grader = session.grader
    label = grader.plan.label if isinstance(grader, TestGrader) else DEFAULT_RUBRIC
    refused = session.refusals()
    if refused:
        raise GradingFailed(f"cleo-grade: {nodeid}: {not_recorded(refused)}")
    session.begin_grade()
    try:
        result = grader(session)
    except CleoGradeError as exc:
        # The reason may quote a judge's reply or an endpoint's error body: shown, not obeyed.
        reason = terminal_text(exc)
        message = f"cleo-grade: {nodeid}: cannot grade with rubric {label}: {reason}"
        raw = getattr(exc, "raw", None)
        if isinstance(raw, str):
            # Each line marked as the reply's: a line of it must not read as pytest's own.
            quoted = "\n".join(f"  | {line}" for line in terminal_lines(raw[:500]).split("\n"))
            message += f"\njudge's last reply (first 500 characters):\n{quoted}"
        raise GradingFailed(message) from exc
    comparison = isinstance(grader, TestGrader) and grader.plan.variant is not None
    # A comparison grades the agent's output (set_output), which an empty log does not void.
    if result.entry_count == 0 and not allow_empty and not comparison:
        raise GradingFailed(f"cleo-grade: {nodeid}: {NOTHING_CAPTURED}")
    update: dict[str, Any] = {"testId": nodeid}
    trace = session.graded_trace()
    if trace is not None and "traceId" not in (result.model_extra or {}):
        update["traceId"] = trace  # where an export puts the grade (Langfuse: the trace)
    result = result.model_copy(update=update)
    session.note_graded(result)
    return GradedTest(nodeid, result, threshold, threshold_source, mode)


def threshold_for(
    options: PluginOptions, marker: MarkerOptions
) -> tuple[float | None, str | None, Mode]:
    """The test's threshold, where it was set, and its mode: marker > command line > ini."""
    mode = marker.mode or options.mode
    if marker.fail_under is not None:
        return marker.fail_under, "@pytest.mark.cleo_grade(fail_under=...)", mode
    return options.fail_under, options.fail_under_source, mode


def plan_for(
    options: PluginOptions, marker: MarkerOptions, *, name: str, doc: str | None
) -> GradingPlan:
    """The test's grading plan: marker > command line > ini > default, for each setting.

    ``name`` is the test function's name (a comparison's default query); ``doc`` its
    docstring (the default task a judge is told about).
    """
    rubric = marker.rubric or options.rubric
    if marker.expect is not None and marker.rubric is None and not uses_trajectory(rubric):
        rubric = TRAJECTORY_RUBRIC  # expect= alone grades the trajectory
    if marker.variant is None and rubric == DEFAULT_RUBRIC:
        return GradingPlan()
    from pytest_cleo_grade.judges.connect import DefaultConnector

    overrides = {
        key: value
        for key, value in (("base_url", options.judge_url), ("model", options.judge_model))
        if value is not None
    }
    rubric_file = options.rubric_file
    if marker.expect is not None and rubric == TRAJECTORY_RUBRIC:
        # The marker's calls and mode replace a trajectory file's whole content, and a file
        # of the run's own rubric (rules, weighted) is not the trajectory's to read.
        rubric_file = None
    config = RubricConfig(
        rubric_file=rubric_file,
        cache_path=options.db_path,
        cache_mode=options.judge_cache,
        judge_overrides=overrides,
        connector=DefaultConnector(),
    )
    task = doc.strip() if isinstance(doc, str) and doc.strip() else None
    return GradingPlan(
        rubric=rubric,
        config=config,
        task=marker.task or task,
        variant=marker.variant,
        query=marker.query or name,
        thoroughness=marker.thoroughness,
        follow_up=bool(marker.follow_up),
        expect=marker.expect,
        expect_mode=marker.expect_mode,
    )


def uses_trajectory(rubric: str) -> bool:
    """Whether ``rubric`` (a name or a combination) includes the trajectory rubric."""
    try:
        parts = parse_rubric_weights(rubric)
    except ValueError:
        return False
    return TRAJECTORY_RUBRIC in (parts or {rubric: 1.0})
