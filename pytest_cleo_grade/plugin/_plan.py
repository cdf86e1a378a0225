"""One plan per graded test, made once at setup and read by every later phase.

The plan says how the test is graded and decided: its grader (rubric, settings, the run's
rubric plugins), its threshold and where that was set, its mode, whether an empty session is
graded, and, for one run of a repeated test, which run it is. It is made again only when the
test's markers changed after it was made (a fixture's or the body's ``request.applymarker``):
the cleo_grade marks it was made from are kept, and compared by identity, so the common case
re-reads and re-checks nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pytest

from pytest_cleo_grade.core.settings import MarkerOptions, Mode
from pytest_cleo_grade.grading._runs import RepeatInfo, base_test_id, is_adaptive, runs_for
from pytest_cleo_grade.plugin._markers import read_marker, rubric_manager
from pytest_cleo_grade.plugin._repeats import RUN_FIXTURE
from pytest_cleo_grade.plugin._state import item_state, run_state

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._grader import TestGrader

__all__ = ["PLAN_KEY", "Plan", "current_plan", "plan_of", "uses_graded_session"]


@dataclass(frozen=True, slots=True)
class Plan:
    """How one test is graded and decided (marker > command line > ini > default)."""

    #: The cleo_grade marks the plan was made from (compared by identity).
    marks: tuple[pytest.Mark, ...]
    marker: MarkerOptions
    grader: TestGrader
    threshold: float | None
    #: Where the threshold was set, as a message names it (None: the default).
    threshold_source: str | None
    mode: Mode
    allow_empty: bool
    #: Which run of a repeated test this item is (None: a test that runs once).
    repeat: RepeatInfo | None
    #: Listed in the quarantine file: graded report-only, shown as quarantined, not gated.
    quarantined: bool = False


PLAN_KEY = pytest.StashKey[Plan]()


def uses_graded_session(item: pytest.Item) -> bool:
    return "graded_session" in getattr(item, "fixturenames", ())


def plan_of(item: pytest.Item) -> Plan:
    """The test's plan: the one made at setup, or made now (a test whose body asked for its
    session with ``request.getfixturevalue``, after its setup)."""
    plan = item.stash.get(PLAN_KEY, None)
    if plan is None:
        state = item_state(item)
        plan = item.stash[PLAN_KEY] = _make(item, state.marker or MarkerOptions(), state.marks)
    return plan


def current_plan(item: pytest.Item) -> Plan:
    """The plan for the markers the test has now: the same object unless they changed since
    it was made. A bad new marker fails the test with the message collection would give."""
    plan = plan_of(item)
    marks = tuple(item.iter_markers("cleo_grade"))
    same = len(marks) == len(plan.marks)
    if same and all(a is b for a, b in zip(marks, plan.marks, strict=True)):
        return plan
    try:
        marker = read_marker(item)
    except pytest.UsageError as exc:
        problem = str(exc)
    else:
        plan = item.stash[PLAN_KEY] = _make(item, marker, marks)
        return plan
    pytest.fail(problem, pytrace=False)  # outside the except: its message once


def _make(item: pytest.Item, marker: MarkerOptions, marks: tuple[pytest.Mark, ...]) -> Plan:
    from pytest_cleo_grade.grading._grader import TestGrader, plan_for, threshold_for

    options = run_state(item.config).options
    threshold, source, mode = threshold_for(options, marker)
    repeats = run_state(item.config).repeats
    quarantined = bool(repeats.quarantined) and _test_id(item) in repeats.quarantined
    if quarantined:
        mode = "report"  # its grade never fails it: the summary says it is quarantined
    repeat = _repeat(item, marker, threshold, "quarantined" if quarantined else mode)
    doc = getattr(getattr(item, "obj", None), "__doc__", None)
    grading = plan_for(
        options,
        marker,
        name=getattr(item, "originalname", item.name),
        doc=doc if isinstance(doc, str) else None,
    )
    if repeat is not None and not marker.judge_cache_across_runs:
        # Runs of one test are independent samples: no run is served another run's reply.
        grading = dataclasses.replace(grading, cache_scope=f"run-{repeat.run}")
    manager = None if grading.plain_cleo else rubric_manager(item.config)
    allow_empty = options.allow_empty if marker.allow_empty is None else marker.allow_empty
    return Plan(
        marks=marks,
        marker=marker,
        grader=TestGrader(grading, manager),
        threshold=threshold,
        threshold_source=source,
        mode=mode,
        allow_empty=allow_empty,
        repeat=repeat,
        quarantined=quarantined,
    )


def _test_id(item: pytest.Item) -> str:
    """The id the history and the quarantine file know the test by (a run's without it)."""
    callspec = getattr(item, "callspec", None)
    run = None if callspec is None else callspec.params.get(RUN_FIXTURE)
    return base_test_id(item.nodeid, run) if isinstance(run, int) else item.nodeid


def _repeat(
    item: pytest.Item, marker: MarkerOptions, threshold: float | None, mode: str
) -> RepeatInfo | None:
    """The run this item is (test id, index, count, the policy deciding it), or None."""
    callspec = getattr(item, "callspec", None)
    run = None if callspec is None else callspec.params.get(RUN_FIXTURE)
    if not isinstance(run, int):
        return None
    from pytest_cleo_grade.grading._stats import RepeatPolicy

    options = run_state(item.config).repeats
    runs = runs_for(marker.runs, options.runs, marker.max_runs or options.max_runs)
    policy = RepeatPolicy(min_pass_rate=marker.min_pass_rate, pass_k=marker.pass_k)
    min_runs = None
    if is_adaptive(marker.runs, options.runs):
        from pytest_cleo_grade.grading._sequential import DEFAULT_MIN_RUNS

        min_runs = marker.min_runs or options.min_runs or DEFAULT_MIN_RUNS
        if marker.pass_k is not None:
            min_runs = max(min_runs, marker.pass_k[0])  # pass^k needs k runs at least
    test_id = base_test_id(item.nodeid, run)
    return RepeatInfo(test_id, run, runs, threshold, policy, mode, min_runs)
