"""The plugin's state: one object per run, one per test, and each test's plan, under three
stash keys (the suite's positions, ``_run_options.POSITIONS_KEY``, are a fourth).

pytest's own junitxml keeps one reporter per node; here each graded test has a frozen plan
(``_plan.Plan``, made once at setup, under its own key) and an :class:`ItemState` for what
its phases leave for the next one. The run has one :class:`RunState`, made in
``pytest_configure``, which also fixes the process's role once. Nothing here imports
pydantic or SQLite: a run that grades nothing never loads them.
"""

from __future__ import annotations

import enum
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

import pytest

from pytest_cleo_grade.core.settings import MarkerOptions, PluginOptions
from pytest_cleo_grade.plugin._repeat_options import RepeatOptions

if TYPE_CHECKING:
    import pluggy

    from pytest_cleo_grade.capture.mapping import ToolMapping
    from pytest_cleo_grade.grading._verdict import GradedTest
    from pytest_cleo_grade.grading.session import GradeSession
    from pytest_cleo_grade.store._shared import SharedStore

__all__ = [
    "GRADE_ATTRIBUTE",
    "ITEM_KEY",
    "REPEAT_ATTRIBUTE",
    "RUN_KEY",
    "STRICT_XFAIL_ATTRIBUTE",
    "UNUSED_JUDGE_OUTPUT",
    "Decider",
    "ItemState",
    "Role",
    "RunState",
    "item_state",
    "run_state",
]

#: The TestReport attribute carrying a graded test's JSON to the controller. pytest copies a
#: report's extra attributes through its (xdist) serialisation, as it does for ``wasxfail``.
GRADE_ATTRIBUTE: Final = "cleo_grade"
#: The TestReport attribute telling the controller which test and run a report belongs to.
REPEAT_ATTRIBUTE: Final = "cleo_grade_repeat"
#: The xdist worker output key of the line saying judge options changed nothing (workers
#: collect; the controller, which says it, does not).
UNUSED_JUDGE_OUTPUT: Final = "cleo_grade_unused_judge_options"
#: Set on a run of an ``xfail(strict=True)`` test that did not fail (shown as an XPASS).
STRICT_XFAIL_ATTRIBUTE: Final = "cleo_grade_strict_xfail"


class Decider(Protocol):
    """What the glue asks of the controller (``_controller.Controller``)."""

    def problem(self, message: str) -> None:
        """Say ``message`` once, as a warning at the end of the run."""

    def decided(self, test_id: str) -> str | None:
        """Why an adaptive test (runs="auto") needs no more runs, or None."""


class Role(enum.Enum):
    """What this pytest process does for the run, chosen once in ``pytest_configure``."""

    #: A run without pytest-xdist workers: it grades, and it collects, saves and decides.
    PLAIN = "plain"
    #: The pytest-xdist controller: grades arrive on its workers' reports; it decides.
    CONTROLLER = "controller"
    #: A pytest-xdist worker: it grades its tests and sends the grades on their reports.
    WORKER = "worker"

    @classmethod
    def of(cls, config: pytest.Config) -> Role:
        if hasattr(config, "workerinput"):
            return cls.WORKER
        distributed = getattr(config.option, "numprocesses", None) or getattr(
            config.option, "tx", None
        )
        return cls.CONTROLLER if distributed else cls.PLAIN

    @property
    def decides(self) -> bool:
        """Whether this process aggregates, saves the grades and sets the run's verdicts."""
        return self is not Role.WORKER


@dataclass(eq=False)
class RunState:
    """The run's settings and shared resources (one per pytest process)."""

    options: PluginOptions
    repeats: RepeatOptions
    role: Role
    #: The controller object (None on an xdist worker, which decides nothing).
    controller: Decider | None = None
    #: The process's audit store connection, opened on first use.
    store: SharedStore | None = None
    #: A plain run's graded tests by their call report: the report's own process decides,
    #: so the grade is handed over as it is, never encoded for a report and decoded again
    #: (GRADE_ATTRIBUTE is for an xdist worker's reports). Weak: gone with the report.
    local_grades: weakref.WeakKeyDictionary[pytest.TestReport, GradedTest] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    #: The run's rubric plugin manager, built on first use.
    rubrics: pluggy.PluginManager | None = None
    #: The tool mapping configured before this run set the ini's (restored at unconfigure).
    mapping_before: ToolMapping | None = None
    mapping_set: bool = False


@dataclass(eq=False)
class ItemState:
    """What one test's phases leave for the next: set at collection, setup, call, report."""

    #: The test's cleo_grade markers as validated at collection (None: it has none), and
    #: the marks they were read from (the plan is made again only when these change).
    marker: MarkerOptions | None = None
    marks: tuple[pytest.Mark, ...] = ()
    #: A marker problem found on an xdist worker: the test errors at setup with it.
    marker_error: str | None = None
    session: GradeSession | None = None
    #: The CLEO variables before the session set them, put back after every fixture.
    env_before: dict[str, str | None] | None = None
    graded: GradedTest | None = None
    #: Why the test could not be graded (it then fails, whatever the mode).
    grade_error: str | None = None
    #: Whether the test fails for its grade (not for a reason of its own).
    failed_for_grade: bool = False
    #: The JUnit properties this test's grade added (a rerun replaces, never repeats them).
    properties: list[tuple[str, object]] = field(default_factory=list)


RUN_KEY = pytest.StashKey[RunState]()
ITEM_KEY = pytest.StashKey[ItemState]()


def run_state(config: pytest.Config) -> RunState:
    return config.stash[RUN_KEY]


def item_state(item: pytest.Item) -> ItemState:
    """The test's state, made on first use."""
    state = item.stash.get(ITEM_KEY, None)
    if state is None:
        state = item.stash[ITEM_KEY] = ItemState()
    return state
