"""pytest glue for pytest-cleo-grade (the ``pytest11`` entry point ``cleo_grade``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Final

import pytest

from pytest_cleo_grade.errors import (
    CleoGradeError,
    CleoGradeWarning,
    warnings_shown_not_raised,
)
from pytest_cleo_grade.options import (
    MARKER_DOC,
    MarkerOptions,
    PluginOptions,
    add_options,
    load_options,
    marker_options,
)

if TYPE_CHECKING:
    import pluggy

    from pytest_cleo_grade.graded import GradedSession, SharedStore
    from pytest_cleo_grade.grading import GradingPlan
    from pytest_cleo_grade.models import GradeResult
    from pytest_cleo_grade.report import GradedTest, RunGrade

# pytest loads this module in every run of every project where the package is installed, so
# it imports only pytest and the option layer; pydantic, SQLite and the rubric load when a
# test first requests ``graded_session`` (or a gate is set). Unused, the plugin costs nothing.

__all__ = ["GRADE_ATTRIBUTE", "GradeReporter", "graded_session"]

#: The TestReport attribute carrying a graded test's JSON to the controller. pytest copies a
#: report's extra attributes through its (xdist) serialisation, as it does for ``wasxfail``.
GRADE_ATTRIBUTE: Final = "cleo_grade"

OPTIONS_KEY = pytest.StashKey[PluginOptions]()
REPORTER_KEY = pytest.StashKey["GradeReporter"]()
MARKER_KEY = pytest.StashKey[MarkerOptions]()
SESSION_KEY = pytest.StashKey["GradedSession"]()
GRADED_KEY = pytest.StashKey["GradedTest"]()
STORE_KEY = pytest.StashKey["SharedStore"]()
MARKER_ERROR_KEY = pytest.StashKey[str]()
PROPERTIES_KEY = pytest.StashKey[list[tuple[str, object]]]()
FAILED_FOR_GRADE_KEY = pytest.StashKey[bool]()
RUBRICS_KEY = pytest.StashKey["pluggy.PluginManager"]()
GRADE_ERROR_KEY = pytest.StashKey[str]()


def _shared_store(config: pytest.Config) -> SharedStore:
    store = config.stash.get(STORE_KEY, None)
    if store is None:
        from pytest_cleo_grade.graded import SharedStore

        store = config.stash[STORE_KEY] = SharedStore(config.stash[OPTIONS_KEY].db_path)
    return store


def _rubric_manager(config: pytest.Config) -> pluggy.PluginManager:
    """The run's rubric plugin manager, built on first use; conftest rubrics join it.

    Called again before grading: conftest modules below the rootdir load during collection,
    and registering one already registered is a no-op.
    """
    from pytest_cleo_grade.rubrics.registry import make_plugin_manager, register_plugins_with_hooks

    manager = config.stash.get(RUBRICS_KEY, None)
    if manager is None:
        manager = config.stash[RUBRICS_KEY] = make_plugin_manager()
    register_plugins_with_hooks(manager, config.pluginmanager.get_plugins())
    return manager


def _unknown_rubric(config: pytest.Config, name: str) -> str | None:
    """Why ``name`` cannot grade (the registry's message listing the rubrics), or None."""
    from pytest_cleo_grade.rubrics.registry import get_rubric

    try:
        get_rubric(name, manager=_rubric_manager(config))
    except CleoGradeError as exc:
        return str(exc)
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC)
    options = load_options(config)
    config.stash[OPTIONS_KEY] = options
    # Writers live on the controller only: a worker's grades reach the controller on its
    # test reports, and the controller persists, summarises and gates.
    if not hasattr(config, "workerinput"):
        reporter = GradeReporter(config, options)
        config.stash[REPORTER_KEY] = reporter
        config.pluginmanager.register(reporter, "cleo_grade_reporter")
        if options.compare is not None:
            from pytest_cleo_grade.plugin_compare import ComparisonReporter

            config.pluginmanager.register(
                ComparisonReporter(config, reporter, options.compare), "cleo_grade_comparison"
            )


def pytest_unconfigure(config: pytest.Config) -> None:
    reporter = config.stash.get(REPORTER_KEY, None)
    if reporter is not None:
        del config.stash[REPORTER_KEY]
        config.pluginmanager.unregister(reporter)
    comparison = config.pluginmanager.get_plugin("cleo_grade_comparison")
    if comparison is not None:
        config.pluginmanager.unregister(comparison)
    store = config.stash.get(STORE_KEY, None)
    if store is not None:
        store.close()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Validating markers at collection turns a typo into one usage error before any test runs.
    # Rubric names are checked here too: every conftest (and its rubrics) is loaded by now.
    on_worker = hasattr(config, "workerinput")
    options = config.stash[OPTIONS_KEY]
    run_problem = None
    if options.rubric != "cleo":
        run_problem = _unknown_rubric(config, options.rubric)
        if run_problem is not None:
            run_problem = f"cleo-grade: {options.rubric_source}: {run_problem}"
            if not on_worker:
                raise pytest.UsageError(run_problem)
    for item in items:
        try:
            if item.get_closest_marker("cleo_grade") is not None:
                item.stash[MARKER_KEY] = marker_options(item)
                _check_marker(item, item.stash[MARKER_KEY])
            if run_problem is not None and "graded_session" in getattr(item, "fixturenames", ()):
                raise pytest.UsageError(run_problem)
        except pytest.UsageError as exc:
            if not on_worker:
                raise
            # A usage error on an xdist worker would crash it (the controller collects
            # nothing); the test errors at setup with the same message instead.
            item.stash[MARKER_ERROR_KEY] = str(exc)


def _check_marker(item: pytest.Item, marker: MarkerOptions) -> None:
    """Cross-argument checks: a known rubric, and what a comparison test needs."""
    where = f"cleo-grade: {item.nodeid}: @pytest.mark.cleo_grade"
    if marker.rubric is not None and marker.rubric != "cleo":
        problem = _unknown_rubric(item.config, marker.rubric)
        if problem is not None:
            raise pytest.UsageError(f"{where}(rubric=...): {problem}")
    if marker.variant is None:
        for name in ("query", "thoroughness"):
            if getattr(marker, name) is not None:
                raise pytest.UsageError(
                    f"{where}: {name}= belongs to a comparison test; add variant=NAME"
                )
        return
    if marker.thoroughness is None:
        raise pytest.UsageError(
            f"{where}: a comparison test (variant=) needs thoroughness='quick', 'medium' or "
            "'thorough' (or mode= with one of these)"
        )
    if marker.rubric is not None:
        raise pytest.UsageError(
            f"{where}: variant= grades with the comparison rubric; drop rubric={marker.rubric!r}"
        )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    message = item.stash.get(MARKER_ERROR_KEY, None)
    if message is not None:
        pytest.fail(message, pytrace=False)


def _warn(message: str) -> None:
    warnings.warn(CleoGradeWarning(message), stacklevel=2)


@pytest.fixture
def graded_session(request: pytest.FixtureRequest) -> Iterator[GradedSession]:
    """A grade-mode session for this test; the test body's entries are graded when it ends."""
    from pytest_cleo_grade.graded import GradedSession
    from pytest_cleo_grade.session import SessionSettings

    options = request.config.stash[OPTIONS_KEY]
    settings = SessionSettings(db_path=options.db_path, history_path=options.history_path)
    session = GradedSession(settings)
    try:
        # Borrow the process's open store: opening one per test cost about 1 ms.
        session = GradedSession(settings, store=_shared_store(request.config).get())
        session.start()
    except CleoGradeError as exc:
        # An unwritable store must not decide the test: grade from a private store instead.
        factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
        fallback = factory.mktemp("cleo-grade") / "audit.db"
        with warnings_shown_not_raised():
            _warn(f"cleo-grade: {exc}; recording this test into {fallback} instead")
        session.close()
        session = GradedSession(
            SessionSettings(db_path=fallback, history_path=options.history_path),
            session_id=session.id,
        )
        session.start()
    item = request.node
    session.grader = lambda: _grade_now(item, session)
    request.node.stash[SESSION_KEY] = session
    try:
        yield session
    finally:
        session.close()
        del request.node.stash[SESSION_KEY]


def _threshold(item: pytest.Item, options: PluginOptions) -> tuple[float | None, str | None, str]:
    marker = item.stash.get(MARKER_KEY, MarkerOptions())
    mode = marker.mode or options.mode
    if marker.fail_under is not None:
        return marker.fail_under, "@pytest.mark.cleo_grade(fail_under=...)", mode
    return options.fail_under, options.fail_under_source, mode


def _plan(item: pytest.Item, options: PluginOptions) -> GradingPlan:
    """Marker > command line > ini > default, for each setting of this test's grading."""
    from pytest_cleo_grade.grading import GradingPlan

    marker = item.stash.get(MARKER_KEY, MarkerOptions())
    rubric = marker.rubric or options.rubric
    if marker.variant is None and rubric == "cleo":
        return GradingPlan()
    from pytest_cleo_grade.rubrics.base import RubricConfig

    overrides = {
        key: value
        for key, value in (("base_url", options.judge_url), ("model", options.judge_model))
        if value is not None
    }
    config = RubricConfig(
        rubric_file=options.rubric_file,
        cache_path=options.db_path,
        cache_mode=options.judge_cache,
        judge_overrides=overrides,
    )
    doc = getattr(getattr(item, "obj", None), "__doc__", None)
    return GradingPlan(
        rubric=rubric,
        config=config,
        task=marker.task or (doc.strip() if isinstance(doc, str) and doc.strip() else None),
        variant=marker.variant,
        query=marker.query or getattr(item, "originalname", item.name),
        thoroughness=marker.thoroughness,
    )


def _grading_failure(item: pytest.Item, plan: GradingPlan, exc: CleoGradeError) -> str:
    message = f"cleo-grade: {item.nodeid}: cannot grade with rubric {plan.label}: {exc}"
    raw = getattr(exc, "raw", None)
    if isinstance(raw, str):
        message += f"\njudge's last reply (first 500 characters):\n{raw[:500]}"
    return message


def _grade_now(item: pytest.Item, session: GradedSession) -> GradeResult:
    """``graded_session.grade()`` inside a test: the test's own rubric, errors raised."""
    from pytest_cleo_grade.grading import grade_session

    plan = _plan(item, item.config.stash[OPTIONS_KEY])
    manager = None if plan.plain_cleo else _rubric_manager(item.config)
    return grade_session(session, plan, manager=manager)


def _grade_item(item: pytest.Item, session: GradedSession) -> GradedTest | str | None:
    """The test's grade; a string says why a rubric could not grade it (the test fails)."""
    from pytest_cleo_grade.grading import grade_session
    from pytest_cleo_grade.report import GradedTest

    options = item.config.stash[OPTIONS_KEY]
    plan = _plan(item, options)
    with warnings_shown_not_raised():
        try:
            manager = None if plan.plain_cleo else _rubric_manager(item.config)
            result = grade_session(session, plan, manager=manager)
        except CleoGradeError as exc:
            if not plan.plain_cleo:
                # A judge or rubric that cannot grade decides nothing about the agent, but a
                # silently ungraded test would pass a gate it never faced: the test fails.
                return _grading_failure(item, plan, exc)
            _warn(f"cleo-grade: {item.nodeid}: cannot grade: {exc}")
            return None
    result = result.model_copy(update={"testId": item.nodeid})
    session.result = result
    threshold, source, mode = _threshold(item, options)
    graded = GradedTest(item.nodeid, result, threshold, source, mode)
    item.stash[GRADED_KEY] = graded
    return graded


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    session = item.stash.get(SESSION_KEY, None)
    if session is None:
        return (yield)
    # Forget an earlier run of this item (a rerun plugin runs it again).
    item.stash[FAILED_FOR_GRADE_KEY] = False
    if GRADED_KEY in item.stash:
        del item.stash[GRADED_KEY]
    if GRADE_ERROR_KEY in item.stash:
        del item.stash[GRADE_ERROR_KEY]
    try:
        outcome = yield
    except pytest.xfail.Exception:
        raise  # pytest.xfail() derives from pytest.fail's exception but is not a failure
    except (Exception, pytest.fail.Exception):
        # A test that failed on its own keeps its failure; its grade is still recorded.
        # Skips, xfail() calls and interrupts (other BaseExceptions) are not graded.
        problem = _grade_item(item, session)
        if isinstance(problem, str):
            item.stash[GRADE_ERROR_KEY] = problem
        raise
    graded = _grade_item(item, session)
    if isinstance(graded, str):
        item.stash[FAILED_FOR_GRADE_KEY] = True
        pytest.fail(graded, pytrace=False)
    if graded is not None and graded.mode == "fail" and not graded.passed:
        from pytest_cleo_grade.report import failure_message

        # Raised here, in the call phase, the grade surfaces as FAILED (not a teardown
        # ERROR) with a proper crash line, serially and under xdist alike.
        item.stash[FAILED_FOR_GRADE_KEY] = True
        pytest.fail(failure_message(graded), pytrace=False)
    return outcome


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    graded = item.stash.get(GRADED_KEY, None)
    problem = item.stash.get(GRADE_ERROR_KEY, None)
    if call.when == "call" and problem is not None and report.failed:
        report.sections.append(("CLEO grade", problem))
    if call.when == "call" and graded is not None:
        from pytest_cleo_grade.report import encode_graded_test, junit_properties

        properties = junit_properties(graded.result)
        # item.user_properties feeds the teardown report, which junitxml reads; the call
        # report gets them too for hooks that look there. A rerun replaces, never repeats.
        for stale in item.stash.get(PROPERTIES_KEY, []):
            item.user_properties.remove(stale)
        item.stash[PROPERTIES_KEY] = properties
        item.user_properties.extend(properties)
        report.user_properties.extend(properties)
        setattr(report, GRADE_ATTRIBUTE, encode_graded_test(graded))
        if report.failed and not item.stash.get(FAILED_FOR_GRADE_KEY, False):
            from pytest_cleo_grade.report import grade_section

            # The test failed for its own reason; show its grade beside that failure.
            report.sections.append(("CLEO grade", grade_section(graded)))
    return report


def _markup(line: str) -> dict[str, bool]:
    if "gate FAILED" in line:
        return {"red": True, "bold": True}
    if "gate passed" in line:
        return {"green": True}
    return {}


class GradeReporter:
    """Controller-side state: collects graded tests, persists them, summarises and gates."""

    def __init__(self, config: pytest.Config, options: PluginOptions) -> None:
        self.config = config
        self.options = options
        # Keyed by node id: a test run again in the same session (a rerun plugin) keeps only
        # its final grade, so every graded test is stored exactly once.
        self.graded: dict[str, GradedTest] = {}
        self.problems: list[str] = []
        self._persisted = False
        self._run: RunGrade | None = None
        self._order: dict[str, int] = {}

    # -- collecting and persisting -----------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        encoded = getattr(report, GRADE_ATTRIBUTE, None)
        if report.when != "call" or not isinstance(encoded, str):
            return
        from pytest_cleo_grade.report import decode_graded_test

        graded = decode_graded_test(encoded)
        self.graded.pop(graded.nodeid, None)
        self.graded[graded.nodeid] = graded

    def _persist(self) -> None:
        """Store every final grade once: the grades table, then one append to GRADES.jsonl.

        Done at the end of the run (one lock and one fsync for the history rather than one
        per test). A storage failure becomes a warning; outcomes are never touched.
        """
        if self._persisted or not self.graded:
            return
        self._persisted = True
        results = [test.result for test in self.in_collection_order()]
        try:
            _shared_store(self.config).get().add_grades(results)
        except (CleoGradeError, OSError) as exc:
            self.problems.append(f"cleo-grade: grades table not written: {exc}")
        from pytest_cleo_grade.history import append_grades

        try:
            append_grades(results, self.options.history_path)
        except CleoGradeError as exc:
            self.problems.append(f"cleo-grade: grade history not written: {exc}")

    # -- the run's grade -----------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._note_order(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        # The xdist controller collects nothing itself; every worker reports the same ids.
        self._note_order(ids)

    def _note_order(self, nodeids: Iterable[str]) -> None:
        for nodeid in nodeids:
            self._order.setdefault(nodeid, len(self._order))

    def in_collection_order(self) -> tuple[GradedTest, ...]:
        # Reports arrive in completion order under xdist; the table follows collection order
        # so that a parallel run prints what a serial run prints.
        last = len(self._order)
        tests = self.graded.values()
        return tuple(sorted(tests, key=lambda test: self._order.get(test.nodeid, last)))

    def _current_run(self) -> RunGrade | None:
        """The run's grade, or None when there is nothing to show (no grades, no gate)."""
        if self._run is not None:
            return self._run
        if not self.graded and self.options.gate is None:
            return None
        from pytest_cleo_grade.report import RunGrade

        return RunGrade(self.in_collection_order(), self.options.gate)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        result = yield
        # Decided once, after every report arrived (under xdist the controller's loop ends
        # when all workers are done); the summary prints this same verdict.
        self._run = self._current_run()
        if self._run is not None and self._run.gate_failed:
            session.testsfailed += 1
        return result

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self._persist()
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        run = self._current_run()
        if not path or run is None:
            return
        from pytest_cleo_grade.report import markdown_summary

        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(markdown_summary(run))
        except OSError as exc:
            self.problems.append(f"cleo-grade: GITHUB_STEP_SUMMARY not written: {exc}")

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        run = self._current_run()
        if run is not None:
            from pytest_cleo_grade.report import summary_line, summary_lines

            if self.config.get_verbosity() < 0:
                line = summary_line(run)
                terminalreporter.write_line(line, **_markup(line))
            else:
                terminalreporter.write_sep("-", "cleo-grade")
                for line in summary_lines(run):
                    terminalreporter.write_line(line, **_markup(line))
        for problem in self.problems:
            try:
                warnings.warn(CleoGradeWarning(problem), stacklevel=1)
            except CleoGradeWarning:
                # filterwarnings=error must not turn a storage hiccup into a crash.
                terminalreporter.write_line(f"CleoGradeWarning: {problem}", yellow=True)
