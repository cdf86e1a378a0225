"""Options for repeated runs and the baseline gate: registration and reading (CLI beats ini)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from pytest_cleo_grade.core.settings import (
    expanded,
    parse_flag,
    parse_runs,
    parse_runs_or_auto,
    unresolved_leaf,
)
from pytest_cleo_grade.plugin._options import add_scalar_ini

__all__ = ["RepeatOptions", "add_repeat_options", "load_repeat_options"]


@dataclass(frozen=True, slots=True)
class RepeatOptions:
    """The run-wide settings of issue 15: repeats and the baseline gate."""

    runs: int | Literal["auto"] | None = None
    #: Adaptive repeats (runs=auto): the most and the fewest runs of a test.
    max_runs: int | None = None
    min_runs: int | None = None
    #: A baseline file, or ``"latest"`` (the previous run in the grade history).
    baseline: Path | str | None = None
    save_baseline: Path | None = None
    #: The raw ``--cleo-grade-fail-on-regression`` expression (parsed by the baseline module).
    fail_on_regression: str | None = None
    baseline_required: bool = False
    #: The quarantine file (``--cleo-grade-quarantine``) and the test ids it lists.
    quarantine_path: Path | None = None
    quarantined: frozenset[str] = frozenset()


def _runs_arg(value: str) -> int | Literal["auto"]:
    try:
        return parse_runs_or_auto(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count_arg(value: str) -> int:
    try:
        return parse_runs(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _tolerance_arg(value: str) -> str:
    from pytest_cleo_grade.grading._baseline import parse_tolerances

    try:
        parse_tolerances(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_repeat_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("cleo-grade", "grade AI agents' audit logs (pytest-cleo-grade)")
    group.addoption(
        "--cleo-grade-runs",
        dest="cleo_grade_runs",
        metavar="N",
        type=_runs_arg,
        default=None,
        help="run every graded test N times and decide it once over its runs; auto: until "
        "its verdict is settled, at most --cleo-grade-max-runs (ini: cleo_grade_runs; the "
        "cleo_grade marker's runs= beats both)",
    )
    for name, default in (("max", "20"), ("min", "3")):
        group.addoption(
            f"--cleo-grade-{name}-runs",
            dest=f"cleo_grade_{name}_runs",
            metavar="N",
            type=_count_arg,
            default=None,
            help=f"with runs=auto: the {'most' if name == 'max' else 'fewest'} runs of a test "
            f"(default {default}; ini: cleo_grade_{name}_runs; the marker's {name}_runs= "
            "beats both)",
        )
        add_scalar_ini(parser, f"cleo_grade_{name}_runs", f"runs=auto: the {name} runs", "count")
    group.addoption(
        "--cleo-grade-baseline",
        dest="cleo_grade_baseline",
        metavar="PATH|latest",
        default=None,
        help="compare this run's grades per test and dimension with a baseline file, or with "
        "the previous run in the grade history (latest) (ini: cleo_grade_baseline)",
    )
    group.addoption(
        "--cleo-grade-save-baseline",
        dest="cleo_grade_save_baseline",
        metavar="PATH",
        default=None,
        help="write this run's grades as a baseline file (JSON, meant to be committed; "
        "ini: cleo_grade_save_baseline)",
    )
    group.addoption(
        "--cleo-grade-fail-on-regression",
        dest="cleo_grade_fail_on_regression",
        metavar="EXPR",
        type=_tolerance_arg,
        default=None,
        help="fail the run when a grade drops against the baseline beyond a tolerance: "
        "total:5 (points), total:5%% (relative), sessionDiscipline:10, comma-separated "
        "(ini: cleo_grade_fail_on_regression)",
    )
    group.addoption(
        "--cleo-grade-baseline-required",
        dest="cleo_grade_baseline_required",
        action="store_const",
        const=True,
        default=None,
        help="a missing baseline file fails the run instead of being a note "
        "(ini: cleo_grade_baseline_required)",
    )
    group.addoption(
        "--cleo-grade-quarantine",
        dest="cleo_grade_quarantine",
        metavar="PATH",
        default=None,
        help="the quarantine file (cleo-grade flaky --write-quarantine): the tests it lists "
        "are graded report-only and shown as quarantined (ini: cleo_grade_quarantine)",
    )
    add_scalar_ini(parser, "cleo_grade_quarantine", "quarantine file: listed tests are report-only")
    add_scalar_ini(
        parser, "cleo_grade_runs", "how many times each graded test runs (default 1)", "count"
    )
    add_scalar_ini(
        parser, "cleo_grade_baseline", "baseline file (or latest) the run is compared with"
    )
    add_scalar_ini(
        parser, "cleo_grade_save_baseline", "baseline file this run's grades are written to"
    )
    add_scalar_ini(parser, "cleo_grade_fail_on_regression", "tolerated drops against the baseline")
    add_scalar_ini(
        parser, "cleo_grade_baseline_required", "a missing baseline fails the run", "flag"
    )


def _ini(config: pytest.Config, name: str) -> str | None:
    text = str(config.getini(name)).strip()
    return text or None


def _usage(name: str, exc: Exception) -> pytest.UsageError:
    return pytest.UsageError(f"cleo-grade: ini option {name}: {exc}")


def _resolve(config: pytest.Config, value: str, from_ini: bool) -> Path | str:
    if value == "latest":
        return value
    base = config.invocation_params.dir
    if from_ini:
        base = config.inipath.parent if config.inipath else config.rootpath
    return unresolved_leaf(base / expanded(value))


def load_repeat_options(config: pytest.Config) -> RepeatOptions:
    """Command line, else ini; UsageError names the bad ini key."""
    runs: int | Literal["auto"] | None = config.getoption("cleo_grade_runs")
    if runs is None and (text := _ini(config, "cleo_grade_runs")) is not None:
        try:
            runs = parse_runs_or_auto(text)
        except ValueError as exc:
            raise _usage("cleo_grade_runs", exc) from None
    bounds: dict[str, int | None] = {}
    for name in ("max", "min"):
        value: int | None = config.getoption(f"cleo_grade_{name}_runs")
        if value is None and (text := _ini(config, f"cleo_grade_{name}_runs")) is not None:
            try:
                value = parse_runs(text)
            except ValueError as exc:
                raise _usage(f"cleo_grade_{name}_runs", exc) from None
        bounds[name] = value
    baseline: Path | str | None = None
    if value := config.getoption("cleo_grade_baseline"):
        baseline = _resolve(config, value, from_ini=False)
    elif (text := _ini(config, "cleo_grade_baseline")) is not None:
        baseline = _resolve(config, text, from_ini=True)
    save_path: Path | None = None
    if save := config.getoption("cleo_grade_save_baseline"):
        save_path = unresolved_leaf(config.invocation_params.dir / expanded(save))
    elif (text := _ini(config, "cleo_grade_save_baseline")) is not None:
        save_path = Path(_resolve(config, text, from_ini=True))
    expression: str | None = config.getoption("cleo_grade_fail_on_regression")
    if expression is None and (text := _ini(config, "cleo_grade_fail_on_regression")):
        try:
            _tolerance_arg(text)
        except argparse.ArgumentTypeError as exc:
            raise _usage("cleo_grade_fail_on_regression", exc) from None
        expression = text
    required: bool | None = config.getoption("cleo_grade_baseline_required")
    if required is None:
        text = _ini(config, "cleo_grade_baseline_required")
        try:
            required = parse_flag(text) if text is not None else False
        except ValueError as exc:
            raise _usage("cleo_grade_baseline_required", exc) from None
    quarantine_path: Path | None = None
    if value := config.getoption("cleo_grade_quarantine"):
        quarantine_path = Path(_resolve(config, value, from_ini=False))
    elif (text := _ini(config, "cleo_grade_quarantine")) is not None:
        quarantine_path = Path(_resolve(config, text, from_ini=True))
    quarantined: frozenset[str] = frozenset()
    if quarantine_path is not None and quarantine_path.exists():
        from pytest_cleo_grade.core.errors import HistoryError
        from pytest_cleo_grade.store._quarantine import read_quarantine

        try:
            quarantined = read_quarantine(quarantine_path).ids
        except HistoryError as exc:
            raise pytest.UsageError(f"cleo-grade: --cleo-grade-quarantine: {exc}") from None
    return RepeatOptions(
        max_runs=bounds["max"],
        min_runs=bounds["min"],
        quarantine_path=quarantine_path,
        quarantined=quarantined,
        runs=runs,
        baseline=baseline,
        save_baseline=save_path,
        fail_on_regression=expression,
        baseline_required=required,
    )
