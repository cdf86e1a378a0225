"""Settings that would change nothing are never silent: a rubric file selects its rubric, and
judge options no graded test's rubric reads are said to do nothing."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import pytest

from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.core.settings import DEFAULT_RUBRIC, PluginOptions, parse_rubric_weights

__all__ = ["JUDGE_FREE_RUBRICS", "rubric_from_file", "unused_judge_options"]

#: The built-in rubrics that never ask a judge: judge options beside only these do nothing.
#: (A rubric of a plugin may read the judge settings, so only these are known not to.)
JUDGE_FREE_RUBRICS = frozenset({DEFAULT_RUBRIC, "rules", "trajectory"})


def _file_option(config: pytest.Config) -> str:
    """Where the rubric file was set, as the user wrote it."""
    if config.getoption("cleo_grade_rubric_file"):
        return "--cleo-grade-rubric-file"
    return "ini cleo_grade_rubric_file"


def rubric_from_file(config: pytest.Config, options: PluginOptions) -> PluginOptions:
    """The run's options once its rubric file is taken into account.

    A rubric file given without a rubric names the rubric it is written for (a rule file
    grades with ``rules``, a ``[trajectory]`` file with ``trajectory``, any other with
    ``weighted``): graded by CLEO's rubric instead, the file would change nothing. Beside a
    rubric named ``cleo`` it is a usage error saying how to use it.
    """
    path = options.rubric_file
    if path is None:
        return options
    where = _file_option(config)
    if options.rubric_source == "default":
        from pytest_cleo_grade.rubrics.registry import rubric_for_file

        try:
            kind = rubric_for_file(path)
        except CleoGradeError:
            return options  # the file's own problem is told where it is checked
        return dataclasses.replace(options, rubric=kind, rubric_source=f"{where} ({kind} file)")
    if options.rubric == DEFAULT_RUBRIC:
        raise pytest.UsageError(
            f"cleo-grade: {where} {path}: rubric {DEFAULT_RUBRIC!r} ({options.rubric_source}) "
            "reads no rubric file; name the rubric the file is for "
            "(--cleo-grade-rubric=rules, weighted or trajectory), or leave the rubric out: "
            "a rubric file alone selects its rubric"
        )
    return options


def _judge_free(rubric: str) -> bool:
    try:
        parts = parse_rubric_weights(rubric)
    except ValueError:
        return False
    return all(name in JUDGE_FREE_RUBRICS for name in (parts or {rubric: 1.0}))


def unused_judge_options(
    config: pytest.Config, options: PluginOptions, rubrics: Iterable[tuple[str, bool]]
) -> str | None:
    """One line when judge options were given and no graded test's rubric asks a judge.

    ``rubrics`` holds each graded test's rubric and whether it is a comparison variant (whose
    scores a judge gives).
    """
    given = [
        f"--cleo-grade-{name.replace('_', '-')}"
        for name in ("judge_url", "judge_model", "judge_cache")
        if config.getoption(f"cleo_grade_{name}") is not None
    ]
    if not given or options.compare is not None:
        return None
    seen = set()
    for rubric, variant in rubrics:
        if variant or not _judge_free(rubric):
            return None
        seen.add(rubric)
    if not seen:
        return None  # nothing graded: nothing for any option to act on
    names = ", ".join(sorted(seen))
    return (
        f"cleo-grade: {' and '.join(given)} changed nothing: no graded test's rubric asks a "
        f"judge (rubric {names}); the weighted rubric does (--cleo-grade-rubric=weighted or "
        'a marker\'s rubric="weighted")'
    )
