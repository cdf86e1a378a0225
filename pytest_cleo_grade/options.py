"""The plugin's command-line options, ini keys and marker: registration and validation."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

import pytest

# Thresholds are parsed with pytest_cleo_grade.thresholds, imported where used: it pulls in
# pydantic, which a run that sets no option and grades nothing should not pay for.

__all__ = [
    "MARKER_DOC",
    "MODES",
    "MarkerOptions",
    "Mode",
    "PluginOptions",
    "add_options",
    "load_options",
    "marker_options",
]

Mode = Literal["fail", "report"]
MODES: Final[tuple[Mode, ...]] = ("fail", "report")
MODE_FORMS: Final = "fail (a grade below the threshold fails the test) or report (annotate only)"
DEFAULT_DB: Final = Path(".cleo") / "audit.db"
#: history.DEFAULT_HISTORY, spelled out so that loading the options imports no pydantic.
DEFAULT_HISTORY: Final = Path(".cleo") / "metrics" / "GRADES.jsonl"

MARKER_DOC: Final = (
    "cleo_grade(fail_under=GRADE, mode='fail'|'report'): grade threshold and mode of a test "
    "using the graded_session fixture (GRADE: letter A-F or percentage such as 85 or '85%')"
)


def _threshold_arg(value: str) -> float:
    from pytest_cleo_grade.thresholds import parse_grade_threshold

    try:
        return parse_grade_threshold(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _mode_arg(value: str) -> Mode:
    for mode in MODES:
        if value == mode:
            return mode
    raise argparse.ArgumentTypeError(f"invalid mode {value!r}: expected {MODE_FORMS}")


def add_options(parser: pytest.Parser) -> None:
    """Register every option in one group, each with its ini twin."""
    group = parser.getgroup("cleo-grade", "grade AI agents' audit logs (pytest-cleo-grade)")
    group.addoption(
        "--cleo-grade-fail-under",
        dest="cleo_grade_fail_under",
        metavar="GRADE",
        type=_threshold_arg,
        default=None,
        help="fail a graded test whose grade is below GRADE: a letter A-F (F = no minimum) or "
        "a percentage such as 85, 85%% or 85.5 (ini: cleo_grade_fail_under; the cleo_grade "
        "marker's fail_under beats both)",
    )
    group.addoption(
        "--cleo-grade-mode",
        dest="cleo_grade_mode",
        metavar="MODE",
        type=_mode_arg,
        default=None,
        help="fail: a grade below the threshold fails the test (default); report: only "
        "annotate (ini: cleo_grade_mode)",
    )
    group.addoption(
        "--cleo-grade-gate",
        dest="cleo_grade_gate",
        metavar="GRADE",
        type=_threshold_arg,
        default=None,
        help="exit with status 1 when the mean percentage of the graded tests is below GRADE "
        "(ini: cleo_grade_gate)",
    )
    group.addoption(
        "--cleo-grade-db",
        dest="cleo_grade_db",
        metavar="PATH",
        default=None,
        help=f"audit store (default: {DEFAULT_DB} under the rootdir; ini: cleo_grade_db)",
    )
    group.addoption(
        "--cleo-grade-history",
        dest="cleo_grade_history",
        metavar="PATH",
        default=None,
        help=f"grade history JSONL (default: {DEFAULT_HISTORY} under the rootdir; "
        "ini: cleo_grade_history)",
    )
    parser.addini(
        "cleo_grade_fail_under", "default grade threshold of graded tests (letter or percent)"
    )
    parser.addini("cleo_grade_mode", "fail (default) or report")
    parser.addini("cleo_grade_gate", "minimum mean grade of the run (letter or percent)")
    parser.addini("cleo_grade_db", f"audit store path (default: {DEFAULT_DB})")
    parser.addini("cleo_grade_history", f"grade history path (default: {DEFAULT_HISTORY})")


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """The run-wide settings after CLI > ini > default precedence, all validated."""

    fail_under: float | None
    fail_under_source: str | None
    mode: Mode
    gate: float | None
    db_path: Path
    history_path: Path


def _ini(config: pytest.Config, name: str) -> str | None:
    text = str(config.getini(name)).strip()
    return text or None


def _usage(where: str, message: str) -> pytest.UsageError:
    return pytest.UsageError(f"cleo-grade: {where}: {message}")


def _ini_threshold(config: pytest.Config, name: str) -> float | None:
    text = _ini(config, name)
    if text is None:
        return None
    from pytest_cleo_grade.thresholds import parse_grade_threshold

    try:
        return parse_grade_threshold(text)
    except ValueError as exc:
        raise _usage(f"ini option {name}", str(exc)) from None


def _path(config: pytest.Config, option: str, ini: str, default: Path) -> Path:
    value: str | None = config.getoption(option)
    if value:
        # Like --junitxml, a path on the command line is relative to where pytest was run.
        return (config.invocation_params.dir / value).resolve()
    text = _ini(config, ini)
    if text:
        base = config.inipath.parent if config.inipath else config.rootpath
        return (base / text).resolve()
    return (config.rootpath / default).resolve()


def load_options(config: pytest.Config) -> PluginOptions:
    """Combine command line and ini (CLI wins); UsageError names the bad ini key."""
    fail_under: float | None = config.getoption("cleo_grade_fail_under")
    source: str | None = "--cleo-grade-fail-under"
    if fail_under is None:
        fail_under = _ini_threshold(config, "cleo_grade_fail_under")
        source = "ini cleo_grade_fail_under" if fail_under is not None else None
    mode: Mode | None = config.getoption("cleo_grade_mode")
    if mode is None:
        text = _ini(config, "cleo_grade_mode")
        try:
            mode = _mode_arg(text) if text is not None else "fail"
        except argparse.ArgumentTypeError as exc:
            raise _usage("ini option cleo_grade_mode", str(exc)) from None
    gate: float | None = config.getoption("cleo_grade_gate")
    if gate is None:
        gate = _ini_threshold(config, "cleo_grade_gate")
    return PluginOptions(
        fail_under=fail_under,
        fail_under_source=source,
        mode=mode,
        gate=gate,
        db_path=_path(config, "cleo_grade_db", "cleo_grade_db", DEFAULT_DB),
        history_path=_path(config, "cleo_grade_history", "cleo_grade_history", DEFAULT_HISTORY),
    )


@dataclass(frozen=True, slots=True)
class MarkerOptions:
    """What a test's cleo_grade markers set (None: not set by a marker)."""

    fail_under: float | None = None
    mode: Mode | None = None


def _marker_threshold(value: object) -> float:
    from pytest_cleo_grade.thresholds import THRESHOLD_FORMS, parse_grade_threshold

    if isinstance(value, str | int | float):
        return parse_grade_threshold(value)
    raise ValueError(f"invalid grade {value!r}: expected {THRESHOLD_FORMS}")


def _marker_mode(value: object) -> Mode:
    if isinstance(value, str):
        try:
            return _mode_arg(value)
        except argparse.ArgumentTypeError as exc:
            raise ValueError(str(exc)) from None
    raise ValueError(f"invalid mode {value!r}: expected {MODE_FORMS}")


#: The marker's keyword arguments and their validators; a new argument is one more entry.
MARKER_KWARGS: Final[Mapping[str, Callable[[object], Any]]] = {
    "fail_under": _marker_threshold,
    "mode": _marker_mode,
}


def marker_options(item: pytest.Item) -> MarkerOptions:
    """Validate and merge a test's cleo_grade markers, the closest marker winning per key.

    Raises UsageError naming the test, the marker argument and its accepted forms.
    """
    values: dict[str, Any] = {}
    for mark in item.iter_markers("cleo_grade"):
        where = f"{item.nodeid}: @pytest.mark.cleo_grade"
        if mark.args:
            raise _usage(
                where,
                f"takes keyword arguments only ({', '.join(MARKER_KWARGS)}), "
                f"got positional {mark.args!r}",
            )
        for key, value in mark.kwargs.items():
            validate = MARKER_KWARGS.get(key)
            if validate is None:
                raise _usage(
                    where,
                    f"unknown argument {key!r}; accepted: {', '.join(MARKER_KWARGS)}",
                )
            if key in values:
                continue  # iter_markers yields the closest marker first
            try:
                values[key] = validate(value)
            except ValueError as exc:
                raise _usage(f"{where}({key}=...)", str(exc)) from None
    return MarkerOptions(**values)
