"""pytest glue for pytest-cleo-grade (the ``pytest11`` entry point ``cleo_grade``)."""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final, NamedTuple

import pytest

from pytest_cleo_grade.core.errors import (
    CleoGradeError,
    CleoGradeWarning,
    warnings_shown_not_raised,
)
from pytest_cleo_grade.core.settings import MarkerOptions, PluginOptions, expanded, unresolved_leaf
from pytest_cleo_grade.grading._runs import RepeatInfo, base_test_id, encode_repeat
from pytest_cleo_grade.plugin._options import MARKER_DOC, add_options, load_options, marker_options
from pytest_cleo_grade.plugin._repeat_options import (
    RepeatOptions,
    add_repeat_options,
    load_repeat_options,
)
from pytest_cleo_grade.plugin._repeats import (
    REPEAT_ATTRIBUTE,
    RUN_FIXTURE,
    STRICT_XFAIL_ATTRIBUTE,
    RepeatSummary,
    asked_runs,
    parametrize_runs,
)
from pytest_cleo_grade.plugin._reporter import Reporter
from pytest_cleo_grade.plugin._state import GRADE_ATTRIBUTE

if TYPE_CHECKING:
    import pluggy

    from pytest_cleo_grade.capture.mapping import ToolMapping  # noqa: F401 - MAPPING_KEY
    from pytest_cleo_grade.grading._grader import TestGrader
    from pytest_cleo_grade.grading._verdict import GradedTest
    from pytest_cleo_grade.grading.session import GradeSession
    from pytest_cleo_grade.store._shared import SharedStore

# pytest loads this module in every run of every project where the package is installed, so
# it imports only pytest and the option layer; pydantic, SQLite and the rubric load when a
# test first requests ``graded_session`` (or a gate is set). Unused, the plugin costs nothing.

__all__ = ["GRADE_ATTRIBUTE", "cleo_grade_run", "graded_session"]

OPTIONS_KEY = pytest.StashKey[PluginOptions]()
REPORTER_KEY = pytest.StashKey[Reporter]()
MARKER_KEY = pytest.StashKey[MarkerOptions]()
SESSION_KEY = pytest.StashKey["GradeSession"]()
ENV_BEFORE_KEY = pytest.StashKey[dict[str, str | None]]()
GRADED_KEY = pytest.StashKey["GradedTest"]()
STORE_KEY = pytest.StashKey["SharedStore"]()
MARKER_ERROR_KEY = pytest.StashKey[str]()
PROPERTIES_KEY = pytest.StashKey[list[tuple[str, object]]]()
FAILED_FOR_GRADE_KEY = pytest.StashKey[bool]()
RUBRICS_KEY = pytest.StashKey["pluggy.PluginManager"]()
GRADE_ERROR_KEY = pytest.StashKey[str]()
REPEAT_OPTIONS_KEY = pytest.StashKey[RepeatOptions]()
#: The tool mapping configured before this run set the ini's (restored at unconfigure).
MAPPING_KEY = pytest.StashKey["ToolMapping | None"]()


def _shared_store(config: pytest.Config) -> SharedStore:
    store = config.stash.get(STORE_KEY, None)
    if store is None:
        from pytest_cleo_grade.store._shared import SharedStore

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


def _rubric_file_problem(path: Path) -> str | None:
    """Why the rubric file cannot be used (one line naming the file and field), or None."""
    from pytest_cleo_grade.rubrics.rules import check_rubric_file
    from pytest_cleo_grade.rubrics.trajectory import check_trajectory_file

    try:
        if not check_trajectory_file(path):
            check_rubric_file(path)
    except CleoGradeError as exc:
        return str(exc)
    return None


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)
    add_repeat_options(parser)


class _RunFile(NamedTuple):
    """A file the run writes (or appends to) or reads, with the option naming it."""

    option: str
    role: str
    path: Path
    writes: bool
    ours: bool = True


def _run_files(
    config: pytest.Config, options: PluginOptions, repeats: RepeatOptions
) -> list[_RunFile]:
    """Every file this run writes or reads by path: ours, and the reports of pytest (JUnit
    XML) and pytest-html (when installed) that the grades go into."""
    baseline = repeats.baseline if isinstance(repeats.baseline, Path) else None  # or "latest"
    ours = (
        ("history", "grade history", options.history_path, True),
        ("save-baseline", "saved baseline", repeats.save_baseline, True),
        ("html", "HTML report", options.html_path, True),
        ("rubric-file", "rubric file", options.rubric_file, False),
        ("baseline", "baseline", baseline, False),
    )
    files = [
        _RunFile(f"--cleo-grade-{name} (ini cleo_grade_{name.replace('-', '_')})", role, path, w)
        for name, role, path, w in ours
        if path is not None
    ]
    # pytest's own path options are relative to where pytest runs, expanded as ours are.
    for dest, option, role in (
        ("htmlpath", "--html (pytest-html)", "pytest-html report"),
        ("xmlpath", "--junitxml", "JUnit XML report"),
    ):
        value = getattr(config.option, dest, None)
        if isinstance(value, str) and value:
            path = unresolved_leaf(config.invocation_params.dir / expanded(value))
            files.append(_RunFile(option, role, path, writes=True, ours=False))
    return files


def _refuse_writing_over_the_store(options: PluginOptions, files: list[_RunFile]) -> None:
    """A usage error when a file the run writes is the audit store or one of its side
    files: the history's lock waited forever on the store's, a baseline replaced the store,
    and lines appended to ``-wal`` vanished when SQLite removed it. The paths have their
    directories resolved (``unresolved_leaf``); a link at the leaf is refused by writers."""
    from pytest_cleo_grade.core._files import SQLITE_SIDE_FILES

    db = options.db_path
    store = {db, *(db.with_name(db.name + suffix) for suffix in SQLITE_SIDE_FILES)}
    for file in files:
        if file.writes and file.path in store:
            raise pytest.UsageError(
                f"cleo-grade: {file.option} {file.path}: is the audit store's file "
                f"(--cleo-grade-db {db}); writing it would destroy the store: choose another path"
            )


#: Pairs of roles left alone at the start: the writer refuses them itself with a warning or a
#: note, and the run keeps its outcome (the report or a saved baseline over the history, the
#: report over the baseline read); saving over the baseline compared with updates it on
#: purpose; a baseline read from the history file is only read.
_NOT_REFUSED_AT_START: Final = {
    frozenset(pair)
    for pair in (
        ("HTML report", "grade history"),
        ("HTML report", "baseline"),
        ("saved baseline", "grade history"),
        ("saved baseline", "baseline"),
        ("grade history", "baseline"),
    )
}


def _refuse_one_file_for_two(files: list[_RunFile]) -> None:
    """A usage error when two of the run's paths name one file and one of them is written:
    the page replaced the baseline the run had just saved, or the rubric file (the next run
    failed on invalid TOML), and pytest-html's page was lost under ours. Before any test
    runs, as for the store; ``./x``, ``d/../x``, a linked directory or a link to the other
    file are the same file (``files.replaced_input``, both ways: pytest-html and JUnit XML
    write through a link)."""
    pairs = [
        (first, second)
        for index, first in enumerate(files)
        for second in files[index + 1 :]
        if (first.writes or second.writes)
        and (first.ours or second.ours)
        and frozenset((first.role, second.role)) not in _NOT_REFUSED_AT_START
    ]
    if not pairs:
        return
    from pytest_cleo_grade.core._files import replaced_input

    for first, second in pairs:
        if (
            replaced_input(first.path, [second.path]) is None
            and replaced_input(second.path, [first.path]) is None
        ):
            continue
        raise pytest.UsageError(_one_file_for_two(first, second))


def _one_file_for_two(first: _RunFile, second: _RunFile) -> str:
    """The usage error's line: the written file first, the other's path when spelt apart."""
    writer, other = (second, first) if second.writes else (first, second)
    same = "" if other.path == writer.path else f" {other.path}"
    harm = (
        "one would destroy the other"
        if other.writes
        else f"writing the {writer.role} would destroy the {other.role}"
    )
    return (
        f"cleo-grade: {writer.option} {writer.path}: is also the file of {other.option}{same}; "
        f"{harm}: choose another path"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", MARKER_DOC)
    options = load_options(config)
    config.stash[OPTIONS_KEY] = options
    repeat_options = config.stash[REPEAT_OPTIONS_KEY] = load_repeat_options(config)
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
    files = _run_files(config, options, repeat_options)
    _refuse_writing_over_the_store(options, files)
    _refuse_one_file_for_two(files)
    if options.rubric_file is not None and not hasattr(config, "workerinput"):
        # Here, not only at collection: an xdist controller collects nothing, and its
        # workers could only error every graded test (status 1, not the usage error's 4).
        problem = _rubric_file_problem(options.rubric_file)
        if problem is not None:
            raise pytest.UsageError(f"cleo-grade: rubric file {problem}")
    _configure_capture(config, options)
    # Writers live on the controller only: a worker's grades reach the controller on its
    # test reports, and the controller persists, summarises and gates.
    if hasattr(config, "workerinput") and repeat_options.save_baseline is not None:
        from pytest_cleo_grade.plugin._baseline import DeselectedOnWorker

        config.pluginmanager.register(DeselectedOnWorker(config), "cleo_grade_deselected")
    if not hasattr(config, "workerinput"):
        reporter = Reporter(config, options, lambda: _shared_store(config).get())
        config.stash[REPORTER_KEY] = reporter
        config.pluginmanager.register(reporter, "cleo_grade_reporter")
        # Repeats and the baseline gate: controller-side too, idle unless used.
        config.pluginmanager.register(RepeatSummary(), "cleo_grade_repeats")
        if repeat_options.baseline is not None or repeat_options.save_baseline is not None:
            from pytest_cleo_grade.plugin._baseline import BaselineGate

            gate = BaselineGate(repeat_options, options.history_path)
            config.pluginmanager.register(gate, "cleo_grade_baseline")
        if config.pluginmanager.hasplugin("html"):
            # pytest-html's hooks exist only when it is installed: register ours only then.
            from pytest_cleo_grade.plugin._pytest_html import HtmlReportColumns

            baseline = config.pluginmanager.get_plugin("cleo_grade_baseline")
            columns = HtmlReportColumns(reporter, baseline)
            config.pluginmanager.register(columns, "cleo_grade_html_columns")


def _configure_capture(config: pytest.Config, options: PluginOptions) -> None:
    """Set the ini's tool mapping for every adapter; check a capture's extra is installed.

    Imported only when configured: a run that sets neither pays nothing for them.
    """
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
        config.stash[MAPPING_KEY] = mapping.configure(chosen)
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
    if MAPPING_KEY in config.stash:
        from pytest_cleo_grade.capture import mapping

        mapping.configure(config.stash[MAPPING_KEY])
        del config.stash[MAPPING_KEY]
    reporter = config.stash.get(REPORTER_KEY, None)
    if reporter is not None:
        del config.stash[REPORTER_KEY]
        config.pluginmanager.unregister(reporter)
        for name in ("cleo_grade_repeats", "cleo_grade_baseline", "cleo_grade_html_columns"):
            plugin = config.pluginmanager.get_plugin(name)
            if plugin is not None:
                config.pluginmanager.unregister(plugin)
    store = config.stash.get(STORE_KEY, None)
    if store is not None:
        store.close()


@pytest.hookimpl(trylast=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # runs=N: one item per run, so runs spread over xdist workers like any tests. trylast:
    # after the test's own parametrize marks, so the run comes last (test_x[a-run-3]).
    parametrize_runs(metafunc, metafunc.config.stash[REPEAT_OPTIONS_KEY].runs)


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
    if run_problem is None and options.rubric_file is not None:
        # A broken rubric file is one usage error, not the same failure in every graded test.
        run_problem = _rubric_file_problem(options.rubric_file)
        if run_problem is not None:
            run_problem = f"cleo-grade: rubric file {run_problem}"
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


def _warn_if_never_graded(item: pytest.Item) -> None:
    """A cleo_grade marker on the test itself that no graded_session applied: the author
    believes the test is gated, and it is not. Told once the body ran, so a test that asks
    for the session itself (``request.getfixturevalue``) is not wrongly warned about. (A
    module's or class's marker covers tests that do not grade too: only the test's own
    marker is a mistake.)"""
    own = any(mark.name == "cleo_grade" for mark in getattr(item, "own_markers", ()))
    if own and "graded_session" not in getattr(item, "fixturenames", ("graded_session",)):
        with warnings_shown_not_raised():
            item.warn(
                CleoGradeWarning(
                    f"cleo-grade: {item.nodeid}: @pytest.mark.cleo_grade on a test that did "
                    "not use the graded_session fixture: nothing was graded, the marker had "
                    "no effect"
                )
            )


def _check_marker(item: pytest.Item, marker: MarkerOptions) -> None:
    """Cross-argument checks: a known rubric, and what a comparison test needs."""
    where = f"cleo-grade: {item.nodeid}: @pytest.mark.cleo_grade"
    if marker.rubric is not None and marker.rubric != "cleo":
        problem = _unknown_rubric(item.config, marker.rubric)
        if problem is not None:
            raise pytest.UsageError(f"{where}(rubric=...): {problem}")
    if marker.variant is not None and (marker.expect is not None or marker.expect_mode is not None):
        # A comparison grades the output, never a trajectory: expectations would be dropped
        # silently, and the test would pass without them being checked.
        given = (
            "expect="
            if marker.expect is not None
            else f"the trajectory mode {marker.expect_mode!r} (expect_mode= or mode=)"
        )
        raise pytest.UsageError(
            f"{where}: variant= grades with the comparison rubric, which checks no expected "
            f"calls; drop {given} or grade the trajectory in a test without variant="
        )
    if marker.expect_mode is not None and marker.expect is None:
        raise pytest.UsageError(f"{where}: a trajectory mode needs expect=[...] (the calls)")
    if marker.min_pass_rate is not None and marker.pass_k is not None:
        raise pytest.UsageError(
            f"{where}: min_pass_rate= and pass_k= each decide a repeated test; give one"
        )
    if marker.pass_k is not None:
        from pytest_cleo_grade.grading._runs import runs_for

        runs = runs_for(marker.runs, item.config.stash[REPEAT_OPTIONS_KEY].runs)
        if marker.pass_k[0] > runs:
            raise pytest.UsageError(
                f"{where}: pass_k=({marker.pass_k[0]}, {marker.pass_k[1]:g}) needs at least "
                f"{marker.pass_k[0]} runs; the test runs {runs} (runs=N)"
            )
    if marker.expect is not None and marker.rubric is not None:
        from pytest_cleo_grade.grading._grader import uses_trajectory

        if not uses_trajectory(marker.rubric):
            raise pytest.UsageError(
                f"{where}: expect= is graded by the trajectory rubric, and "
                f"rubric={marker.rubric!r} "
                "does not include it: drop rubric= or combine, e.g. "
                "rubric={'cleo': 0.7, 'trajectory': 0.3}"
            )
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


def _refresh_marker(item: pytest.Item) -> bool:
    """Read the test's cleo_grade markers again as its body starts: a fixture may have added
    one (``request.applymarker``), or a later collection hook; the threshold and the rubric
    it sets must decide the grade. A bad one fails the test with the same message as at
    collection. True when the marker changed since the test's session was set up."""
    if item.get_closest_marker("cleo_grade") is None:
        return False
    try:
        marker = marker_options(item)
        _check_marker(item, marker)
    except pytest.UsageError as exc:
        problem = str(exc)
    else:
        changed = item.stash.get(MARKER_KEY, None) != marker
        item.stash[MARKER_KEY] = marker
        return changed
    pytest.fail(problem, pytrace=False)  # outside the except: its message once (_install_capture)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    message = item.stash.get(MARKER_ERROR_KEY, None)
    if message is not None:
        pytest.fail(message, pytrace=False)


def _warn(message: str) -> None:
    warnings.warn(CleoGradeWarning(message), stacklevel=2)


def _grader(item: pytest.Item) -> TestGrader:
    """The test's grader: its plan (marker > command line > ini > default) and rubrics."""
    from pytest_cleo_grade.grading._grader import TestGrader, plan_for

    marker = item.stash.get(MARKER_KEY, MarkerOptions())
    doc = getattr(getattr(item, "obj", None), "__doc__", None)
    plan = plan_for(
        item.config.stash[OPTIONS_KEY],
        marker,
        name=getattr(item, "originalname", item.name),
        doc=doc if isinstance(doc, str) else None,
    )
    repeat = _repeat_info(item)
    if repeat is not None and not marker.judge_cache_across_runs:
        # Runs of one test are independent samples: no run is served another run's reply.
        plan = dataclasses.replace(plan, cache_scope=f"run-{repeat.run}")
    manager = None if plan.plain_cleo else _rubric_manager(item.config)
    return TestGrader(plan, manager)


@pytest.fixture
def cleo_grade_run(request: pytest.FixtureRequest) -> int | None:
    """The run index (1..N) of a test repeated with runs=N, or None for a single run."""
    run: int | None = getattr(request, "param", None)
    return run


def _repeat_info(item: pytest.Item) -> RepeatInfo | None:
    """The run this item is (test id, index, count, the policy deciding it), or None."""
    callspec = getattr(item, "callspec", None)
    run = None if callspec is None else callspec.params.get(RUN_FIXTURE)
    if not isinstance(run, int):
        return None
    from pytest_cleo_grade.grading._grader import threshold_for
    from pytest_cleo_grade.grading._runs import runs_for
    from pytest_cleo_grade.grading._stats import RepeatPolicy

    marker = item.stash.get(MARKER_KEY, MarkerOptions())
    runs = runs_for(marker.runs, item.config.stash[REPEAT_OPTIONS_KEY].runs)
    threshold, _, mode = threshold_for(item.config.stash[OPTIONS_KEY], marker)
    policy = RepeatPolicy(min_pass_rate=marker.min_pass_rate, pass_k=marker.pass_k)
    return RepeatInfo(base_test_id(item.nodeid, run), run, runs, threshold, policy, mode)


@pytest.fixture
def graded_session(
    request: pytest.FixtureRequest, cleo_grade_run: int | None
) -> Iterator[GradeSession]:
    """A grade-mode session for this test; the test body's entries are graded when it ends."""
    from pytest_cleo_grade.grading.session import GradeSession, SessionSettings

    options = request.config.stash[OPTIONS_KEY]
    settings = SessionSettings(db_path=options.db_path, history_path=options.history_path)
    grader = _grader(request.node)
    session = GradeSession(settings, grader=grader)
    try:
        # Borrow the process's open store: opening one per test cost about 1 ms.
        session = GradeSession(settings, store=_shared_store(request.config).get(), grader=grader)
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
    request.node.stash[SESSION_KEY] = session
    if cleo_grade_run is None and "graded_session" not in request.node.fixturenames:
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
                    f"cleo-grade: {request.node.nodeid}: {calls} recorded after the test was "
                    "graded (in a fixture's teardown, or by a child process still running, "
                    "say): stored, but in no grade"
                )
        _warn_unused_faults(request.node.nodeid, session.id)
        _flush(session)
        session.close(flush=False)
        del request.node.stash[SESSION_KEY]
        if session.env_before is not None:
            request.node.stash[ENV_BEFORE_KEY] = session.env_before


def _warn_runs_not_applied(request: pytest.FixtureRequest) -> None:
    """runs=N makes one item per run at collection, from the test's arguments: a session
    asked for with ``request.getfixturevalue`` comes too late, and the test runs once."""
    runs = asked_runs(request.node, request.config.stash[REPEAT_OPTIONS_KEY].runs)
    if runs > 1:
        with warnings_shown_not_raised():
            _warn(
                f"cleo-grade: {request.node.nodeid}: runs={runs} is not applied: the test "
                "asks for graded_session with request.getfixturevalue, after its runs were "
                "made; take it as an argument to run it "
                f"{runs} times"
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
                    "none reached an adapter that can intercept it (docs/capture.md, fault "
                    "injection)"
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
        before = item.stash.get(ENV_BEFORE_KEY, None)
        if before is not None:
            del item.stash[ENV_BEFORE_KEY]
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
    from pytest_cleo_grade.grading._grader import GradingFailed, grade_test, threshold_for

    options = item.config.stash[OPTIONS_KEY]
    marker = item.stash.get(MARKER_KEY, MarkerOptions())
    threshold, source, mode = threshold_for(options, marker)
    allow_empty = options.allow_empty if marker.allow_empty is None else marker.allow_empty
    try:
        with warnings_shown_not_raised():
            graded = grade_test(
                session,
                nodeid=item.nodeid,
                threshold=threshold,
                threshold_source=source,
                mode=mode,
                allow_empty=allow_empty,
            )
    except GradingFailed as exc:
        # A test that cannot be graded (unreadable entries, a judge failure, nothing
        # captured) decides nothing about the agent, and a silently ungraded test would pass
        # a gate it never faced: it fails, whatever the mode.
        return str(exc)
    repeat = _repeat_info(item)
    if repeat is not None:
        # One run of a repeated test: stored under the test's id with its run index.
        extra = {"testId": repeat.test_id, "run": repeat.run, "runs": repeat.runs}
        graded = dataclasses.replace(graded, result=graded.result.model_copy(update=extra))
    item.stash[GRADED_KEY] = graded
    if "otel" in options.exports:
        _export_otel(item, graded)
    return graded


def _export_otel(item: pytest.Item, graded: GradedTest) -> None:
    """The grade as an OpenTelemetry event, where the test ran (its span is current here)."""
    try:
        from pytest_cleo_grade.reports.otel import export_grade, unrecorded_reason

        if not export_grade(graded.result, item.nodeid):
            _export_problem(item.config, f"cleo-grade: otel export: {unrecorded_reason()}")
    except Exception as exc:  # an export never fails a run
        _export_problem(item.config, f"cleo-grade: otel export failed: {type(exc).__name__}: {exc}")


def _export_problem(config: pytest.Config, message: str) -> None:
    reporter = config.stash.get(REPORTER_KEY, None)
    if reporter is not None:
        reporter.problem(message)
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


def _start_call(item: pytest.Item, session: GradeSession) -> None:
    """Forget an earlier run of this item (a rerun plugin runs it again), and plan the grade
    with the markers as they are now."""
    item.stash[FAILED_FOR_GRADE_KEY] = False
    if GRADED_KEY in item.stash:
        del item.stash[GRADED_KEY]
    if GRADE_ERROR_KEY in item.stash:
        del item.stash[GRADE_ERROR_KEY]
    if _refresh_marker(item):
        # The session's grader was planned from the marker its setup saw (rubric=, expect=).
        session.grader = _grader(item)


def _late_session(item: pytest.Item, session: GradeSession | None) -> GradeSession | None:
    """The test's session; one the body made itself (``request.getfixturevalue``) is graded
    as any other, never left ungraded to pass whatever its calls."""
    if session is not None:
        return session
    late = item.stash.get(SESSION_KEY, None)
    if late is not None:
        _start_call(item, late)
    return late


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    session = item.stash.get(SESSION_KEY, None)
    if session is not None:
        _start_call(item, session)
    try:
        outcome = yield
    except (pytest.skip.Exception, pytest.xfail.Exception):
        raise  # a skipped test is never graded; pytest.xfail() is an expected failure
    except (Exception, pytest.fail.Exception, SystemExit):
        # A test that failed on its own keeps its failure; its grade is still recorded.
        # sys.exit() in the body is such a failure (pytest reports it as one); an interrupt
        # (KeyboardInterrupt) is not graded.
        session = _late_session(item, session)
        if session is not None:
            problem = _grade_item(item, session)
            if isinstance(problem, str):
                item.stash[GRADE_ERROR_KEY] = problem
        raise
    session = _late_session(item, session)
    if session is None:
        return outcome
    if _skipped_by_unittest(item):
        return outcome
    if _refresh_marker(item):
        # A marker the body added (request.applymarker) decides the grade too.
        session.grader = _grader(item)
    graded = _grade_item(item, session)
    if isinstance(graded, str):
        item.stash[FAILED_FOR_GRADE_KEY] = True
        pytest.fail(graded, pytrace=False)
    if graded.mode == "fail" and not graded.passed and _repeat_info(item) is None:
        # (A run of a repeated test is a sample: its test is decided once over all runs.)
        from pytest_cleo_grade.reports._display import failure_message

        # Raised here, in the call phase, the grade surfaces as FAILED (not a teardown
        # ERROR) with a proper crash line, serially and under xdist alike.
        item.stash[FAILED_FOR_GRADE_KEY] = True
        pytest.fail(failure_message(graded), pytrace=False)
    return outcome


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
    run that completes the test its XFAIL or strict XPASS (repeats.RepeatAggregator)."""
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
    ends_run = call.when == "call" or (call.when == "setup" and not report.passed)
    if ends_run and (repeat := _repeat_info(item)) is not None:
        setattr(report, REPEAT_ATTRIBUTE, encode_repeat(repeat))
    graded = item.stash.get(GRADED_KEY, None)
    problem = item.stash.get(GRADE_ERROR_KEY, None)
    if call.when == "call" and graded is None and problem is None and MARKER_KEY in item.stash:
        _warn_if_never_graded(item)
    if call.when == "call" and problem is not None and report.failed:
        report.sections.append(("CLEO grade", problem))
    if call.when == "call" and graded is not None:
        # A strict XPASS carries no wasxfail (pytest fails it instead): the same agent's
        # grade must not count or not by the marker's strictness.
        strict_xpass = (
            report.failed
            and isinstance(report.longrepr, str)
            and report.longrepr.startswith(_STRICT_XPASS)
        )
        if strict_xpass and ends_run and _repeat_info(item) is not None:
            _run_of_a_strict_xfail(report)
            strict_xpass = False
        excluded = getattr(report, "wasxfail", None) is not None or strict_xpass
        if report.skipped and not excluded:
            # Skipped after all (a unittest skip reported late): never graded or counted.
            del item.stash[GRADED_KEY]
            return report
        if excluded:
            # Shown with its grade, but an expected failure is left out of the run's mean.
            graded = dataclasses.replace(
                graded, excluded="xfailed" if report.skipped else "xpassed"
            )
        from pytest_cleo_grade.grading._verdict import encode_graded_test
        from pytest_cleo_grade.reports._display import junit_properties

        properties = [(name, _utf8_text(value)) for name, value in junit_properties(graded.result)]
        # item.user_properties feeds the teardown report, which junitxml reads; the call
        # report gets them too for hooks that look there. A rerun replaces, never repeats.
        for stale in item.stash.get(PROPERTIES_KEY, []):
            item.user_properties.remove(stale)
        item.stash[PROPERTIES_KEY] = properties
        item.user_properties.extend(properties)
        report.user_properties.extend(properties)
        setattr(report, GRADE_ATTRIBUTE, encode_graded_test(graded))
        if report.failed and not item.stash.get(FAILED_FOR_GRADE_KEY, False):
            from pytest_cleo_grade.reports._display import grade_section

            # The test failed for its own reason; show its grade beside that failure.
            report.sections.append(("CLEO grade", grade_section(graded)))
    return report
