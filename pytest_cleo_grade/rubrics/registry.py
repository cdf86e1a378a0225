"""The rubric registry: a pluggy manager, the built-in rubrics, and grading by rubric name."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import pluggy
from pydantic import ValidationError

from pytest_cleo_grade.core.errors import CleoGradeError, RubricError
from pytest_cleo_grade.core.models import AuditEntry, GradeResult, format_validation_error
from pytest_cleo_grade.core.settings import parse_rubric_weights
from pytest_cleo_grade.rubrics import hookspecs
from pytest_cleo_grade.rubrics._document import read_document
from pytest_cleo_grade.rubrics.cleo import (
    CLEO_DIMENSIONS,
    DIMENSION_MAX,
    RUBRIC_VERSION,
    grade_entries,
)
from pytest_cleo_grade.rubrics.combined import CombinedRubric
from pytest_cleo_grade.rubrics.comparison.rubric import ComparisonRubric
from pytest_cleo_grade.rubrics.hookspecs import PROJECT_NAME, hookimpl
from pytest_cleo_grade.rubrics.protocol import (
    DEFAULT_RUBRIC,
    ConfigurableRubric,
    GradeContext,
    Rubric,
    RubricConfig,
    stamp_rubric,
)
from pytest_cleo_grade.rubrics.rules import RulesRubric, is_rule_document
from pytest_cleo_grade.rubrics.trajectory import TrajectoryRubric, is_trajectory_document
from pytest_cleo_grade.rubrics.weighted.rubric import WeightedJudgeRubric

__all__ = [
    "BUILTIN_PLUGIN_NAME",
    "CleoRubric",
    "collect_rubrics",
    "default_plugin_manager",
    "get_rubric",
    "grade_with_rubric",
    "hookimpl",
    "make_plugin_manager",
    "register_plugin",
    "register_plugins_with_hooks",
    "rubric_for_file",
    "rubric_names",
]

BUILTIN_PLUGIN_NAME: Final = "cleo_grade.builtin"
_HOOK_NAMES: Final = frozenset(
    name for name in dir(hookspecs) if name.startswith(f"{PROJECT_NAME}_")
)


class CleoRubric:
    """CLEO's 5-dimension rubric (the CLEO spec) behind the Rubric protocol; output unchanged."""

    name: Final = DEFAULT_RUBRIC
    version: Final = RUBRIC_VERSION
    dimensions: Final[Mapping[str, float]] = dict.fromkeys(CLEO_DIMENSIONS, DIMENSION_MAX)

    def grade(
        self,
        entries: Iterable[AuditEntry | Mapping[str, Any]],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        """Exactly :func:`~pytest_cleo_grade.rubrics.cleo.grade_entries` (``taskId`` from
        the context)."""
        task_id = context.task_id if context is not None else None
        return grade_entries(entries, session_id=session_id, now=now, task_id=task_id)


class _BuiltinRubrics:
    """The plugin that registers the rubrics shipped with the package."""

    @hookimpl
    def cleo_grade_register_rubrics(self, register: Any) -> None:
        register(CleoRubric())
        register(WeightedJudgeRubric())
        register(RulesRubric())
        register(TrajectoryRubric())
        register(ComparisonRubric())


class _RubricPluginManager(pluggy.PluginManager):
    """Also accepts unmarked hook functions named like a hook spec (as pytest does).

    A conftest.py can then define ``cleo_grade_register_rubrics`` without importing the
    marker; other names stay untouched, so fixtures and pytest hooks are never mistaken for
    rubric hooks.
    """

    def parse_hookimpl_opts(self, plugin: object, name: str) -> pluggy.HookimplOpts | None:
        opts = super().parse_hookimpl_opts(plugin, name)
        if opts is None and name in _HOOK_NAMES and inspect.isroutine(getattr(plugin, name)):
            return pluggy.HookimplOpts(
                wrapper=False,
                hookwrapper=False,
                optionalhook=False,
                tryfirst=False,
                trylast=False,
                specname=None,
            )
        return opts


def make_plugin_manager(*, entry_points: bool = True) -> pluggy.PluginManager:
    """A fresh rubric plugin manager: hook specs, built-in rubrics, and (unless
    ``entry_points`` is false) the plugins published under the ``cleo_grade`` entry-point group.

    The pytest plugin builds one per run and registers conftest modules on it with
    :func:`register_plugin`; the CLI builds one per command.
    """
    manager = _RubricPluginManager(PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    manager.register(_BuiltinRubrics(), name=BUILTIN_PLUGIN_NAME)
    if entry_points:
        try:
            manager.load_setuptools_entrypoints(PROJECT_NAME)
            manager.check_pending()
        except Exception as exc:
            # A broken third-party plugin must say which one, in one line.
            raise RubricError(
                f"cannot load rubric plugins (entry-point group {PROJECT_NAME}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
    return manager


@functools.cache
def default_plugin_manager() -> pluggy.PluginManager:
    """A shared manager with the built-ins and entry-point plugins (no conftest modules)."""
    return make_plugin_manager()


def register_plugin(manager: pluggy.PluginManager, plugin: object, name: str | None = None) -> None:
    """Register ``plugin`` (a conftest module, any object with the hook) on ``manager``.

    Registering the same object again is a no-op, so callers need not track it.
    """
    if manager.is_registered(plugin):
        return
    try:
        manager.register(plugin, name=name)
        manager.check_pending()
    except (pluggy.PluginValidationError, ValueError) as exc:
        manager.unregister(plugin)
        raise RubricError(f"cannot register rubric plugin {name or plugin!r}: {exc}") from exc


def register_plugins_with_hooks(manager: pluggy.PluginManager, candidates: Iterable[object]) -> int:
    """Register those of ``candidates`` that define a rubric hook; returns how many are new.

    The pytest plugin passes ``config.pluginmanager.get_plugins()``: every conftest module
    that defines ``cleo_grade_register_rubrics`` joins the rubric registry, the rest (pytest's
    own plugins, conftests without the hook) are left alone.
    """
    added = 0
    for candidate in candidates:
        if manager.is_registered(candidate):
            continue
        if any(inspect.isroutine(getattr(candidate, name, None)) for name in _HOOK_NAMES):
            register_plugin(manager, candidate)
            added += 1
    return added


def _describe(rubric: object) -> str:
    kind = type(rubric)
    return f"{kind.__module__}.{kind.__qualname__}"


def collect_rubrics(manager: pluggy.PluginManager | None = None) -> dict[str, Rubric]:
    """Every registered rubric by name (RubricError for a non-rubric or a duplicate name)."""
    manager = manager or default_plugin_manager()
    found: dict[str, Rubric] = {}

    def register(rubric: Rubric) -> None:
        if not isinstance(rubric, Rubric) or isinstance(rubric, type):
            raise RubricError(
                f"{rubric!r} is not a rubric: a rubric object needs name, version, "
                "dimensions and grade()"
            )
        name = rubric.name
        if not isinstance(name, str) or not name:
            raise RubricError(f"rubric {_describe(rubric)} has no name")
        if name in found and found[name] is not rubric:
            raise RubricError(
                f"rubric name {name!r} is registered twice "
                f"(by {_describe(found[name])} and {_describe(rubric)})"
            )
        found[name] = rubric

    manager.hook.cleo_grade_register_rubrics(register=register)
    return found


def rubric_names(manager: pluggy.PluginManager | None = None) -> list[str]:
    """The registered rubric names, the default (``cleo``) first, then alphabetically."""
    return sorted(collect_rubrics(manager), key=lambda name: (name != DEFAULT_RUBRIC, name))


def rubric_for_file(path: str | Path) -> str:
    """The built-in rubric a rubric file is written for: ``trajectory`` (a ``[trajectory]``
    table), ``rules`` (dimensions with rules) or ``weighted`` (any other); RubricError when
    the file cannot be read or parsed."""
    data, _ = read_document(path)
    if is_trajectory_document(data):
        return "trajectory"
    return "rules" if is_rule_document(data) else "weighted"


def get_rubric(name: str, *, manager: pluggy.PluginManager | None = None) -> Rubric:
    """The rubric called ``name``; RubricError listing the available ones if there is none.

    ``cleo:0.7,rules:0.3`` names a combination of registered rubrics (a CombinedRubric).
    """
    rubrics = collect_rubrics(manager)
    try:
        weights = parse_rubric_weights(name)
    except ValueError as exc:
        raise RubricError(str(exc)) from None
    if weights is not None:
        parts = {part: (_named(rubrics, part), weight) for part, weight in weights.items()}
        return CombinedRubric(parts)
    return _named(rubrics, name)


def _named(rubrics: Mapping[str, Rubric], name: str) -> Rubric:
    try:
        return rubrics[name]
    except KeyError:
        available = ", ".join(sorted(rubrics, key=lambda n: (n != DEFAULT_RUBRIC, n)))
        raise RubricError(f"unknown rubric {name!r}; available rubrics: {available}") from None


def grade_with_rubric(
    name: str,
    entries: Iterable[AuditEntry | Mapping[str, Any]],
    *,
    session_id: str,
    now: datetime | None = None,
    context: GradeContext | None = None,
    config: RubricConfig | None = None,
    manager: pluggy.PluginManager | None = None,
) -> GradeResult:
    """Grade a session with the rubric called ``name``: the one call the plugin and CLI need.

    ``config`` configures rubrics that take settings (the weighted judge rubric: rubric file,
    judge, cache); ``context`` carries the task description and ``taskId``. The result
    records ``rubric`` and ``rubricVersion`` unless the rubric is the default ``cleo``, whose
    output is exactly :func:`~pytest_cleo_grade.rubrics.cleo.grade_entries`'. Every failure
    is a CleoGradeError (RubricError or JudgeError for rubric problems, EntryError for bad
    entries).
    """
    rubric = get_rubric(name, manager=manager)
    if config is not None and isinstance(rubric, ConfigurableRubric):
        rubric = rubric.configure(config)
    elif config is not None and config.rubric_file is not None:
        raise RubricError(
            f"{config.rubric_file}: rubric {name!r} reads no rubric file (rules, weighted "
            "and trajectory do)"
        )
    try:
        result = rubric.grade(entries, session_id=session_id, now=now, context=context)
    except CleoGradeError:
        raise
    except ValidationError as exc:
        # A result the model refuses (a negative total, say): one line, not pydantic's page.
        why = format_validation_error(exc, type(exc).__name__)
        raise RubricError(f"rubric {name!r} failed: {why}") from exc
    except Exception as exc:
        raise RubricError(f"rubric {name!r} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(result, GradeResult):
        raise RubricError(f"rubric {name!r} returned {type(result).__name__}, not a GradeResult")
    _check_scores(name, result)
    return stamp_rubric(result, rubric)


def _check_scores(name: str, result: GradeResult) -> None:
    """A score outside its range would pass or fail a gate on nonsense (a plugin's bug)."""
    for dimension, score in result.dimensions.items():
        if not 0 <= score.score <= score.max:
            raise RubricError(
                f"rubric {name!r} returned {score.score:g} for dimension {dimension!r}, "
                f"outside 0..{score.max:g}"
            )
    if not 0 <= result.total_score <= result.max_score:
        raise RubricError(
            f"rubric {name!r} returned a total of {result.total_score:g}, outside "
            f"0..{result.max_score:g}"
        )
