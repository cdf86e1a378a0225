"""pytest glue for pytest-cleo-grade (the ``pytest11`` entry point ``cleo_grade``).

The hooks and the fixture, in the order a test meets them: options and the run's state at
configure (``_state.RunState``, the process's role chosen once), markers checked at
collection, one plan per graded test made at setup (``_plan.Plan``), the grade decided as the
call ends and carried on the call report, and the one controller (``_controller.Controller``)
that collects, saves, summarises and gates on the process that decides.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Generator, Iterator
from datetime import UTC
from typing import TYPE_CHECKING, Final

import pytest

from pytest_cleo_grade.core._links import docs_page
from pytest_cleo_grade.core.errors import (
    CleoGradeError,
    CleoGradeWarning,
    warnings_shown_not_raised,
)
from pytest_cleo_grade.core.settings import PluginOptions
from pytest_cleo_grade.grading._run_ids import POSITION_KEY
from pytest_cleo_grade.grading._runs import QUARANTINED, encode_repeat
from pytest_cleo_grade.plugin._markers import (
    check_marker,
    rubric_file_problem,
    unknown_rubric,
    warn_if_never_graded,
)
from pytest_cleo_grade.plugin._options import MARKER_DOC, add_options, load_options, marker_options
from pytest_cleo_grade.plugin._plan import PLAN_KEY, current_plan, plan_of, uses_graded_session
from pytest_cleo_grade.plugin._repeat_options import add_repeat_options, load_repeat_options
from pytest_cleo_grade.plugin._repeats import asked_runs, parametrize_runs
from pytest_cleo_grade.plugin._run_files import check_run_files
from pytest_cleo_grade.plugin._run_options import (
    POSITIONS_KEY,
    Positions,
    add_run_options,
    load_run_options,
)
from pytest_cleo_grade.plugin._state import (
    GRADE_ATTRIBUTE,
    ITEM_KEY,
    REPEAT_ATTRIBUTE,
    RUN_KEY,
    STRICT_XFAIL_ATTRIBUTE,
    UNUSED_JUDGE_OUTPUT,
    ItemState,
    Role,
    RunState,
    item_state,
    run_state,
)

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._verdict import GradedTest
    from pytest_cleo_grade.grading.session import GradeSession
    from pytest_cleo_grade.plugin._plan import Plan
    from pytest_cleo_grade.store import AuditStore

# pytest loads this module in every run of every project where the package is installed, so
# it imports only pytest and the option layer; pydantic, SQLite and the rubric load when a
# test first requests ``graded_session`` (or a gate is set). Unused, the plugin costs nothing.

__all__ = ["GRADE_ATTRIBUTE", "cleo_grade_run", "graded_session"]


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    add_repeat_options(parser)
    add_run_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC)
    options = load_options(config)
    repeat_options = load_repeat_options(config)
    role = Role.of(config)
    state = config.stash[RUN_KEY] = RunState(options, repeat_options, role)
    if repeat_options.baseline is None:
        # Without a baseline these compare nothing: a CI job whose baseline path was lost
        # (an empty variable) would pass having compared nothing.
        for option, given in (
            ("fail-on-regression", repeat_options.fail_on_regression is not None),
            ("baseline-required", repeat_options.baseline_required),
        ):
            if given:
                raise pytest.UsageError(
                    f"cleo-grade: --cleo-grade-{option} needs --cleo-grade-baseline=PATH|latest"
                )
    check_run_files(config, options, repeat_options)
    run_options = load_run_options(config)
    config.pluginmanager.register(Positions(config), "cleo_grade_positions")
    if options.rubric_file is not None and role.decides:
        # Here, not only at collection: an xdist controller collects nothing, and its
        # workers could only error every graded test (status 1, not the usage error's 4).
        problem = rubric_file_problem(options.rubric_file)
        if problem is not None:
            raise pytest.UsageError(f"cleo-grade: rubric file {problem}")
    if options.rubric_file is not None:
        from pytest_cleo_grade.plugin._unused import rubric_from_file

        # A rubric file alone selects its rubric: under CLEO's it would change nothing.
        state.options = options = rubric_from_file(config, options)
    _configure_capture(config, state)
    if role is Role.WORKER:
        # A worker's grades reach the controller on its test reports; the controller alone
        # persists, summarises and gates. What the worker's selection left out is all it
        # tells besides, and only a run that saves a baseline needs it.
        if repeat_options.save_baseline is not None:
            from pytest_cleo_grade.plugin._baseline import DeselectedOnWorker

            config.pluginmanager.register(DeselectedOnWorker(config), "cleo_grade_deselected")
        return
    from pytest_cleo_grade.plugin._controller import Controller

    state.controller = Controller(
        config, options, repeat_options, lambda: _store(config), run_options=run_options
    )
    config.pluginmanager.register(state.controller, "cleo_grade_controller")


def _store(config: pytest.Config) -> AuditStore:
    """The process's audit store connection, opened on first use (one per process: opening
    one per test cost about 1 ms, and a kept connection keeps SQLite from removing its WAL)."""
    state = run_state(config)
    if state.store is None:
        from pytest_cleo_grade.store._shared import SharedStore

        state.store = SharedStore(state.options.db_path)
    return state.store.get()


def _configure_capture(config: pytest.Config, state: RunState) -> None:
    """Set the ini's tool mapping for every adapter; check a capture's extra is installed.

    Imported only when configured: a run that sets neither pays nothing for them.
    """
    options = state.options
    if options.tool_map:
        from pytest_cleo_grade.capture import mapping

        # pytest hands over an ini value's lines without its blank lines and comments, so an
        # error names the entry's position in the value, and the file, never a line number.
        key = "cleo_grade_tool_map"
        if config.getoption(key):
            where, item = "--cleo-grade-tool-map", "occurrence"
        elif any(o.startswith(f"{key}=") for o in config.getoption("override_ini") or ()):
            where, item = f"-o {key}", "entry"
        else:
            where, item = f"{config.inipath}: {key}" if config.inipath else key, "entry"
        try:
            chosen = mapping.ToolMapping.parse(options.tool_map, where=where, item=item)
        except mapping.MappingError as exc:
            raise pytest.UsageError(f"cleo-grade: {exc}") from None
        state.mapping_before = mapping.configure(chosen)
        state.mapping_set = True
    if "otel" in options.capture:
        try:
            import pytest_cleo_grade.capture.otel  # noqa: F401 - fails early without the extra
        except ImportError as exc:
            raise pytest.UsageError(f"cleo-grade: --cleo-grade-capture=otel: {exc}") from None


def _install_capture(options: PluginOptions) -> Callable[[], None] | None:
    """Install the run's capture adapters for one graded test; returns their uninstall."""
    if "otel" not in options.capture:
        return None
    from pytest_cleo_grade.capture.otel import install_otel_capture

    try:
        return install_otel_capture()
    except CleoGradeError as exc:
        problem = str(exc)
    # Failed outside the except: inside it, pytest shows the handled error as the failure's
    # context ("During handling of the above exception, ..."), the one line twice.
    pytest.fail(problem, pytrace=False)


def pytest_unconfigure(config: pytest.Config) -> None:
    state = config.stash.get(RUN_KEY, None)
    if state is None:
        return
    del config.stash[RUN_KEY]
    if state.mapping_set:
        from pytest_cleo_grade.capture import mapping

        mapping.configure(state.mapping_before)
    if state.controller is not None:
        config.pluginmanager.unregister(state.controller)
    if state.store is not None:
        state.store.close()


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # runs=N: one item per run, so runs spread over xdist workers like any tests. trylast:
    # after the test's own parametrize marks, so the run comes last (test_x[a-run-3]).
    repeats = run_state(metafunc.config).repeats
    parametrize_runs(metafunc, repeats.runs, repeats.max_runs)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Validating markers at collection turns a typo into one usage error before any test runs.
    # Rubric names are checked here too: every conftest (and its rubrics) is loaded by now.
    state = run_state(config)
    on_worker = state.role is Role.WORKER
    options = state.options
    run_problem = None
    if options.rubric != "cleo":
        run_problem = unknown_rubric(config, options.rubric)
        if run_problem is not None:
            run_problem = f"cleo-grade: {options.rubric_source}: {run_problem}"
            if not on_worker:
                raise pytest.UsageError(run_problem)
    if run_problem is None and options.rubric_file is not None:
        # A broken rubric file is one usage error, not the same failure in every graded test.
        run_problem = rubric_file_problem(options.rubric_file)
        if run_problem is not None:
            run_problem = f"cleo-grade: rubric file {run_problem}"
            if not on_worker:
                raise pytest.UsageError(run_problem)
    for item in items:
        try:
            marks = tuple(item.iter_markers("cleo_grade"))
            if marks:
                test = item_state(item)
                test.marker, test.marks = marker_options(item), marks
                check_marker(item, test.marker)
            if run_problem is not None and uses_graded_session(item):
                raise pytest.UsageError(run_problem)
        except pytest.UsageError as exc:
            if not on_worker:
                raise
            # A usage error on an xdist worker would crash it (the controller collects
            # nothing); the test errors at setup with the same message instead.
            item_state(item).marker_error = str(exc)


def pytest_collection_finish(session: pytest.Session) -> None:
    # After deselection (-k, --deselect): the tests that run are the ones whose rubrics count.
    config = session.config
    message = _unused_judge_options(config, session.items)
    if message is None:
        return
    if run_state(config).role is Role.WORKER:
        # The xdist controller collects nothing: a worker's collection tells it, and it says
        # the line once (each worker collects the same tests).
        config.workeroutput[UNUSED_JUDGE_OUTPUT] = message  # type: ignore[attr-defined]
    elif (controller := run_state(config).controller) is not None:
        controller.problem(message)


def _unused_judge_options(config: pytest.Config, items: list[pytest.Item]) -> str | None:
    """Judge options beside rubrics that ask no judge: one warning, not a silent no-op."""
    if all(
        config.getoption(f"cleo_grade_judge_{name}") is None for name in ("url", "model", "cache")
    ):
        return None  # the common run: no judge option given
    options = run_state(config).options
    from pytest_cleo_grade.plugin._unused import unused_judge_options

    rubrics = []
    for item in items:
        if not uses_graded_session(item):
            continue
        test = item.stash.get(ITEM_KEY, None)
        marker = test.marker if test is not None and test.marker is not None else None
        rubric = (marker.rubric if marker is not None else None) or options.rubric
        rubrics.append((rubric, marker is not None and marker.variant is not None))
    return unused_judge_options(config, options, rubrics)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    test = item.stash.get(ITEM_KEY, None)
    if uses_graded_session(item):
        # The test's one plan, made before its fixtures: every later phase reads it.
        plan_of(item)
    if test is not None and test.marker_error is not None:
        pytest.fail(test.marker_error, pytrace=False)


def _warn(message: str) -> None:
    warnings.warn(CleoGradeWarning(message), stacklevel=2)


@pytest.fixture
def cleo_grade_run(request: pytest.FixtureRequest) -> int | None:
    """The run index (1..N) of a test repeated with runs=N, or None for a single run."""
    run: int | None = getattr(request, "param", None)
    if run is not None:
        _skip_if_decided(request)
    return run


def _skip_if_decided(request: pytest.FixtureRequest) -> None:
    """runs="auto": a run of a test already decided is not needed (skipped, saying why)."""
    repeat = plan_of(request.node).repeat if isinstance(request.node, pytest.Item) else None
    if repeat is None or repeat.min_runs is None:
        return
    state = run_state(request.config)
    reason = None
    if state.controller is not None:
        reason = state.controller.decided(repeat.test_id)
    else:
        from pytest_cleo_grade.plugin._controller import DECIDED_INPUT
        from pytest_cleo_grade.plugin._repeats import decided_elsewhere

        workerinput = getattr(request.config, "workerinput", {})
        reason = decided_elsewhere(workerinput.get(DECIDED_INPUT), repeat.test_id)
    if reason is not None:
        pytest.skip(f"cleo-grade: {repeat.test_id} is decided ({reason})")


@pytest.fixture
def graded_session(
    request: pytest.FixtureRequest, cleo_grade_run: int | None
) -> Iterator[GradeSession]:
    """A grade-mode session for this test; the test body's entries are graded when it ends."""
    from pytest_cleo_grade.grading.session import GradeSession, SessionSettings

    item: pytest.Item = request.node
    options = run_state(request.config).options
    settings = SessionSettings(db_path=options.db_path, history_path=options.history_path)
    grader = plan_of(item).grader
    session = GradeSession(settings, grader=grader)
    try:
        # Borrow the process's open store: opening one per test cost about 1 ms.
        session = GradeSession(settings, store=_store(request.config), grader=grader)
        session.start()
    except CleoGradeError as exc:
        # An unwritable store must not decide the test: grade from a private store instead.
        factory: pytest.TempPathFactory = request.getfixturevalue("tmp_path_factory")
        fallback = factory.mktemp("cleo-grade") / "audit.db"
        with warnings_shown_not_raised():
            _warn(f"cleo-grade: {exc}; recording this test into {fallback} instead")
        session.close()
        session = GradeSession(
            SessionSettings(db_path=fallback, history_path=options.history_path),
            session_id=session.id,
            grader=grader,
        )
        session.start()
    test = item_state(item)
    test.session = session
    if cleo_grade_run is None and not uses_graded_session(item):
        _warn_runs_not_applied(request)
    uninstall = _install_capture(options)
    try:
        yield session
    finally:
        if uninstall is not None:
            uninstall()
        # One transaction for everything the test recorded in this process, after it was
        # graded (a fixture's teardown included); a failure is a warning, the grade stands.
        late = session.recorded_since_graded()
        if late:
            calls = "1 call was" if late == 1 else f"{late} calls were"
            with warnings_shown_not_raised():
                _warn(
                    f"cleo-grade: {item.nodeid}: {calls} recorded after the test was "
                    "graded (in a fixture's teardown, or by a child process still running, "
                    "say): stored, but in no grade"
                )
        _warn_unused_faults(item.nodeid, session.id)
        _flush(session)
        session.close(flush=False)
        _warn_unauthorized_exports(item.nodeid, session)
        _warn_refused_after_grade(item.nodeid, session)
        test.session = None
        if session.env_before is not None:
            test.env_before = session.env_before


def _warn_runs_not_applied(request: pytest.FixtureRequest) -> None:
    """runs=N makes one item per run at collection, from the test's arguments: a session
    asked for with ``request.getfixturevalue`` comes too late, and the test runs once."""
    repeats = run_state(request.config).repeats
    runs = asked_runs(request.node, repeats.runs, repeats.max_runs)
    if runs > 1:
        with warnings_shown_not_raised():
            _warn(
                f"cleo-grade: {request.node.nodeid}: runs={runs} is not applied: the test "
                "asks for graded_session with request.getfixturevalue, after its runs were "
                "made; take it as an argument to run it "
                f"{runs} times"
            )


def _warn_unauthorized_exports(nodeid: str, session: GradeSession) -> None:
    """Exports the session's OTLP receiver refused for want of its token: never graded, but
    an agent misconfigured (or another process trying its luck) must not go unnoticed."""
    refused = session.otlp_unauthorized()
    total = sum(refused.values())
    if not total:
        return
    why = ", ".join(f"{count} {reason}" for reason, count in sorted(refused.items()))
    exports = "1 export" if total == 1 else f"{total} exports"
    with warnings_shown_not_raised():
        _warn(
            f"cleo-grade: {nodeid}: the OTLP receiver refused {exports} (HTTP 401, not "
            f"graded): {why}; only a process given graded_session.subprocess_env() (or the "
            "otlp_endpoint URL, which holds the session's token) can export into this test"
        )


def _warn_refused_after_grade(nodeid: str, session: GradeSession) -> None:
    """A call or export refused after the test was decided (an export still arriving while
    the test was graded): the grade stands, but must not seem to have seen it."""
    late = session.refused_since_graded()
    if late:
        from pytest_cleo_grade.core._text import terminal_text

        more = f" (and {len(late) - 1} more)" if len(late) > 1 else ""
        with warnings_shown_not_raised():
            _warn(
                terminal_text(
                    f"cleo-grade: {nodeid}: refused after the test was graded, so not in its "
                    f"grade: {late[0]}{more}"
                )
            )


def _warn_unused_faults(nodeid: str, session_id: str) -> None:
    """A fault no call used proves nothing: a test asserting recovery would pass vacuously."""
    from pytest_cleo_grade.capture import _faults as faults

    unused = sorted(
        {f"{fault.domain}.{fault.operation}" for fault in faults.never_used(session_id)}
    )
    if unused:
        from pytest_cleo_grade.core._text import terminal_text

        names = ", ".join(unused)
        with warnings_shown_not_raised():
            _warn(
                terminal_text(
                    f"cleo-grade: {nodeid}: graded_session.inject() failed no call of {names}: "
                    "none reached an adapter that can intercept it ("
                    f"{docs_page('capture.md', 'fault-injection')})"
                )
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    try:
        return (yield)
    finally:
        # monkeypatch (torn down after graded_session when requested first) puts back the
        # value a CLEO variable had during the test: the variables are restored once more,
        # after every fixture, so no later test runs in this one's session.
        test = item.stash.get(ITEM_KEY, None)
        before = None if test is None else test.env_before
        if test is not None and before is not None:
            test.env_before = None
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def _flush(session: GradeSession) -> None:
    """Write the entries the session holds; trouble is a warning, never the test's outcome."""
    try:
        session.flush()
    except CleoGradeError as exc:
        with warnings_shown_not_raised():
            _warn(f"cleo-grade: entries of session {session.id} not stored: {exc}")


def _grade_item(item: pytest.Item, session: GradeSession) -> GradedTest | str:
    """The test's grade, or why it could not be graded (then the test fails, in any mode)."""
    from pytest_cleo_grade.grading._grader import GradingFailed, grade_test

    plan = plan_of(item)
    try:
        with warnings_shown_not_raised():
            graded = grade_test(
                session,
                nodeid=item.nodeid,
                threshold=plan.threshold,
                threshold_source=plan.threshold_source,
                mode=plan.mode,
                allow_empty=plan.allow_empty,
            )
    except GradingFailed as exc:
        # A test that cannot be graded (unreadable entries, a judge failure, nothing
        # captured) decides nothing about the agent, and a silently ungraded test would pass
        # a gate it never faced: it fails, whatever the mode. It is reported as ungradable
        # (its status, its reason), apart from the agents that got worse; a run of a
        # repeated test is left to the repeats' decision, which counts it as not graded.
        if plan.repeat is None:
            item_state(item).graded = _placed(item, _ungradable(item, session, str(exc), plan))
        return str(exc)
    graded = _placed(item, graded)
    repeat = plan.repeat
    if repeat is not None:
        # One run of a repeated test: stored under the test's id with its run index.
        extra: dict[str, object] = {
            "testId": repeat.test_id,
            "run": repeat.run,
            "runs": repeat.runs,
        }
        if repeat.min_runs is not None:
            extra["adaptive"] = True  # its series may stop before ``runs`` (max_runs)
        graded = graded.replace(result=graded.result.model_copy(update=extra))
    item_state(item).graded = graded
    if "otel" in run_state(item.config).options.exports:
        _export_otel(item, graded)
    return graded


def _placed(item: pytest.Item, graded: GradedTest) -> GradedTest:
    """The grade with the test's place in the whole suite (extra ``position``)."""
    position = item.config.stash.get(POSITIONS_KEY, {}).get(item.nodeid)
    if position is None:
        return graded
    result = graded.result.model_copy(update={POSITION_KEY: position})
    return graded.replace(result=result)


def _ungradable(item: pytest.Item, session: GradeSession, reason: str, plan: Plan) -> GradedTest:
    from datetime import datetime

    from pytest_cleo_grade.grading._verdict import GradedTest, ungradable_result

    try:
        count = len(session.entries)
    except CleoGradeError:  # the entries may be what could not be read
        count = 0
    result = ungradable_result(
        session.id,
        reason=reason,
        timestamp=datetime.now(UTC),
        entry_count=count,
        test_id=item.nodeid,
    )
    return GradedTest(item.nodeid, result, plan.threshold, plan.threshold_source, plan.mode)


def _export_otel(item: pytest.Item, graded: GradedTest) -> None:
    """The grade as an OpenTelemetry event, where the test ran (its span is current here)."""
    try:
        from pytest_cleo_grade.reports.otel import export_grade, unrecorded_reason

        if not export_grade(graded.result, item.nodeid):
            _export_problem(item.config, f"cleo-grade: otel export: {unrecorded_reason()}")
    except ImportError as exc:  # the extra is missing: its one line, with the install command
        _export_problem(item.config, f"cleo-grade: otel export skipped: {exc}")
    except Exception as exc:  # an export never fails a run
        _export_problem(item.config, f"cleo-grade: otel export failed: {type(exc).__name__}: {exc}")


def _export_problem(config: pytest.Config, message: str) -> None:
    controller = run_state(config).controller
    if controller is not None:
        controller.problem(message)
        return
    # An xdist worker has no summary of its own: a warning reaches the controller. Shown, not
    # raised: -W error must neither fail the test nor (suppressed) lose the warning.
    with warnings_shown_not_raised():
        warnings.warn(message, CleoGradeWarning, stacklevel=1)


def _skipped_by_unittest(item: pytest.Item) -> bool:
    """A unittest TestCase that skipped itself (skipTest(), @skip...): pytest keeps the skip
    in the item and reports it after the call, which itself returned normally."""
    import unittest

    stored = getattr(item, "_excinfo", None) or ()
    return any(isinstance(info.value, pytest.skip.Exception | unittest.SkipTest) for info in stored)


def _start_call(item: pytest.Item, test: ItemState, session: GradeSession) -> None:
    """Forget an earlier run of this item (a rerun plugin runs it again), and grade with the
    plan for the markers as they are now (a fixture may have added one)."""
    test.failed_for_grade = False
    test.graded = None
    test.grade_error = None
    _follow_markers(item, session)


def _follow_markers(item: pytest.Item, session: GradeSession) -> None:
    """The session grades with the test's current plan (the same object unless a marker was
    added since it was made: then its rubric and threshold decide)."""
    grader = current_plan(item).grader
    if session.grader is not grader:
        session.grader = grader


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    test = item.stash.get(ITEM_KEY, None)
    session = None if test is None else test.session
    if test is not None and session is not None:
        _start_call(item, test, session)
    try:
        outcome = yield
    except (pytest.skip.Exception, pytest.xfail.Exception):
        raise  # a skipped test is never graded; pytest.xfail() is an expected failure
    except (Exception, pytest.fail.Exception, SystemExit) as exc:
        # A test that failed on its own keeps its failure; its grade is still recorded.
        # sys.exit() in the body is such a failure (pytest reports it as one); an interrupt
        # (KeyboardInterrupt) is not graded.
        test, late = _after_body(item, session)
        if late is not None and not _async_never_ran(item, exc):
            problem = _grade_item(item, late)
            if isinstance(problem, str):
                test.grade_error = problem
        raise
    test, late = _after_body(item, session)
    if late is None or _skipped_by_unittest(item):
        return outcome
    # A marker the body added (request.applymarker) decides the grade too.
    _follow_markers(item, late)
    graded = _grade_item(item, late)
    if isinstance(graded, str):
        test.failed_for_grade = True
        pytest.fail(graded, pytrace=False)
    if graded.mode == "fail" and not graded.passed and plan_of(item).repeat is None:
        # (A run of a repeated test is a sample: its test is decided once over all runs.)
        from pytest_cleo_grade.reports._display import failure_message

        # Raised here, in the call phase, the grade surfaces as FAILED (not a teardown
        # ERROR) with a proper crash line, serially and under xdist alike.
        test.failed_for_grade = True
        pytest.fail(failure_message(graded, _show_command(item, graded)), pytrace=False)
    return outcome


def _async_never_ran(item: pytest.Item, exc: BaseException) -> bool:
    """pytest failed an ``async def`` test that no async plugin ran: its body never ran, so
    pytest's own message (install an async plugin) is the whole story, not capture advice."""
    import inspect

    function = getattr(item, "obj", None)
    is_async = inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)
    return (
        is_async
        and isinstance(exc, pytest.fail.Exception)
        and "async def functions are not natively supported" in str(exc)
    )


def _show_command(item: pytest.Item, graded: GradedTest) -> str:
    """``cleo-grade show SESSION`` as it works from where pytest was started (``--db`` when
    the store is not the CLI's default there): the grade is stored when the test ends."""
    import shlex
    from pathlib import Path

    command = f"cleo-grade show {shlex.quote(graded.result.session_id)}"
    db = run_state(item.config).options.db_path
    here = Path(item.config.invocation_params.dir)
    if db == here / ".cleo" / "audit.db":
        return command
    try:
        shown = str(db.relative_to(here))
    except ValueError:
        shown = str(db)
    return f"{command} --db {shlex.quote(shown)}"


def _after_body(
    item: pytest.Item, session: GradeSession | None
) -> tuple[ItemState, GradeSession | None]:
    """The test's state and its session once the body ended: a session the body asked for
    itself (``request.getfixturevalue``) is graded as any other, never left ungraded."""
    test = item_state(item)
    if session is None and test.session is not None:
        session = test.session
        _start_call(item, test, session)
    return test, session


def _utf8_text(value: object) -> object:
    """``value`` with any lone surrogate spelled ``\\udcff``: agent text from a file name
    that is not UTF-8 must travel to the xdist controller and into JUnit XML, both UTF-8."""
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


_STRICT_XPASS: Final = "[XPASS(strict)] "


def _run_of_a_strict_xfail(report: pytest.TestReport) -> None:
    """A run of a repeated ``xfail(strict=True)`` test that did not fail: not the test's
    failure, since a run never fails for its grade (the decision over all runs may still
    fail, the expected failure). It reads as a non-strict XPASS; the controller makes the
    run that completes the test its XFAIL or strict XPASS (``_repeats.Repeats``)."""
    assert isinstance(report.longrepr, str)
    report.outcome = "passed"
    report.wasxfail = report.longrepr[len(_STRICT_XPASS) :]
    report.longrepr = None
    setattr(report, STRICT_XFAIL_ATTRIBUTE, True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    plan = item.stash.get(PLAN_KEY, None)
    repeat = None if plan is None else plan.repeat
    ends_run = call.when == "call" or (call.when == "setup" and not report.passed)
    if ends_run and repeat is not None:
        setattr(report, REPEAT_ATTRIBUTE, encode_repeat(repeat))
    if call.when != "call":
        return report
    test = item.stash.get(ITEM_KEY, None)
    graded = None if test is None else test.graded
    problem = None if test is None else test.grade_error
    if test is None:
        return report
    if graded is None and problem is None and test.marker is not None:
        warn_if_never_graded(item)
    if problem is not None and report.failed:
        report.sections.append(("CLEO grade", problem))
    if graded is None:
        return report
    # A strict XPASS carries no wasxfail (pytest fails it instead): the same agent's grade
    # must not count or not by the marker's strictness.
    strict_xpass = (
        report.failed
        and isinstance(report.longrepr, str)
        and report.longrepr.startswith(_STRICT_XPASS)
    )
    if strict_xpass and repeat is not None:
        _run_of_a_strict_xfail(report)
        strict_xpass = False
    excluded = getattr(report, "wasxfail", None) is not None or strict_xpass
    if report.skipped and not excluded:
        # Skipped after all (a unittest skip reported late): never graded or counted.
        test.graded = None
        return report
    if excluded:
        # Shown with its grade, but an expected failure is left out of the run's mean.
        graded = graded.replace(excluded="xfailed" if report.skipped else "xpassed")
    elif plan is not None and plan.quarantined:
        # Report-only, and said so everywhere: never a silent pass of the gate.
        graded = graded.replace(excluded=QUARANTINED)
    from pytest_cleo_grade.grading._verdict import encode_graded_test
    from pytest_cleo_grade.reports._display import junit_properties

    properties = [
        (name, _utf8_text(value)) for name, value in junit_properties(graded.result, graded.status)
    ]
    if graded.excluded == QUARANTINED:
        properties.append(("cleo_quarantined", "true"))
    # item.user_properties feeds the teardown report, which junitxml reads; the call report
    # gets them too for hooks that look there. A rerun replaces, never repeats.
    for stale in test.properties:
        item.user_properties.remove(stale)
    test.properties = properties
    item.user_properties.extend(properties)
    report.user_properties.extend(properties)
    state = run_state(item.config)
    if state.role is Role.WORKER:
        setattr(report, GRADE_ATTRIBUTE, encode_graded_test(graded))
    else:
        state.local_grades[report] = graded
    if report.failed and not test.failed_for_grade and not graded.ungradable:
        from pytest_cleo_grade.reports._display import grade_section

        # The test failed for its own reason; show its grade beside that failure.
        report.sections.append(("CLEO grade", grade_section(graded)))
    # Handed on with the report: the item (kept by pytest until the session ends) need not
    # hold its grade as well.
    test.graded = None
    return report
