"""A test's cleo_grade markers and the run's rubric: read, checked across arguments, and the
rubric plugin manager that knows every rubric (conftest ones included)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_cleo_grade.core.errors import (
    CleoGradeError,
    CleoGradeWarning,
    warnings_shown_not_raised,
)
from pytest_cleo_grade.core.settings import MarkerOptions
from pytest_cleo_grade.plugin._options import marker_options
from pytest_cleo_grade.plugin._state import run_state

if TYPE_CHECKING:
    import pluggy

__all__ = [
    "check_marker",
    "read_marker",
    "rubric_file_problem",
    "rubric_manager",
    "unknown_rubric",
    "warn_if_never_graded",
]


def rubric_manager(config: pytest.Config) -> pluggy.PluginManager:
    """The run's rubric plugin manager, built on first use; conftest rubrics join it.

    Called again before grading: conftest modules below the rootdir load during collection,
    and registering one already registered is a no-op.
    """
    from pytest_cleo_grade.rubrics.registry import make_plugin_manager, register_plugins_with_hooks

    state = run_state(config)
    manager = state.rubrics
    if manager is None:
        manager = state.rubrics = make_plugin_manager()
    register_plugins_with_hooks(manager, config.pluginmanager.get_plugins())
    return manager


def unknown_rubric(config: pytest.Config, name: str) -> str | None:
    """Why ``name`` cannot grade (the registry's message listing the rubrics), or None."""
    from pytest_cleo_grade.rubrics.registry import get_rubric

    try:
        get_rubric(name, manager=rubric_manager(config))
    except CleoGradeError as exc:
        return str(exc)
    return None


def rubric_file_problem(path: Path) -> str | None:
    """Why the rubric file cannot be used (one line naming the file and field), or None."""
    from pytest_cleo_grade.rubrics.rules import check_rubric_file
    from pytest_cleo_grade.rubrics.trajectory import check_trajectory_file

    try:
        if not check_trajectory_file(path):
            check_rubric_file(path)
    except CleoGradeError as exc:
        return str(exc)
    return None


def warn_if_never_graded(item: pytest.Item) -> None:
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


def check_marker(item: pytest.Item, marker: MarkerOptions) -> None:
    """Cross-argument checks: a known rubric, and what a comparison test needs."""
    where = f"cleo-grade: {item.nodeid}: @pytest.mark.cleo_grade"
    if marker.rubric is not None and marker.rubric != "cleo":
        problem = unknown_rubric(item.config, marker.rubric)
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
    if marker.max_runs is not None or marker.min_runs is not None:
        from pytest_cleo_grade.grading._runs import is_adaptive

        if not is_adaptive(marker.runs, run_state(item.config).repeats.runs):
            raise pytest.UsageError(
                f"{where}: max_runs= and min_runs= belong to adaptive repeats: runs='auto'"
            )
        if (marker.min_runs or 1) > (
            marker.max_runs or run_state(item.config).repeats.max_runs or 20
        ):
            raise pytest.UsageError(f"{where}: min_runs= is above max_runs=")
    if marker.pass_k is not None:
        from pytest_cleo_grade.grading._runs import runs_for

        options = run_state(item.config).repeats
        runs = runs_for(marker.runs, options.runs, marker.max_runs or options.max_runs)
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
        for name in ("query", "thoroughness", "follow_up"):
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


def read_marker(item: pytest.Item) -> MarkerOptions:
    """The test's cleo_grade markers, read and checked (UsageError naming the test when
    one is wrong); MarkerOptions() for a test without any."""
    if item.get_closest_marker("cleo_grade") is None:
        return MarkerOptions()
    marker = marker_options(item)
    check_marker(item, marker)
    return marker
