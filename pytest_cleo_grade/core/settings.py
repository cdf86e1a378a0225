"""Settings shared by the plugin, the CLI and the marker: types, defaults, value checks.

Standard library only: pytest loads the plugin's option layer in every run of every project
where the package is installed, and a run that grades nothing must not pay for pydantic.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from pytest_cleo_grade.core._defaults import DEFAULT_DB, DEFAULT_HISTORY, DEFAULT_RUBRIC
from pytest_cleo_grade.core._scale import THRESHOLD_FORMS, parse_grade_threshold
from pytest_cleo_grade.core.expectations import (
    TRAJECTORY_MODES,
    Expected,
    TrajectoryMode,
    parse_expectations,
    parse_trajectory_mode,
)

__all__ = [
    "AUTO_RUNS",
    "CACHE_MODES",
    "CAPTURE_KINDS",
    "DEFAULT_DB",
    "DEFAULT_HISTORY",
    "DEFAULT_RUBRIC",
    "EXPORT_KINDS",
    "MARKER_KWARGS",
    "MAX_RUNS",
    "MODES",
    "MODE_FORMS",
    "THOROUGHNESS",
    "JudgeCacheMode",
    "MarkerOptions",
    "Mode",
    "PluginOptions",
    "expanded",
    "marker_key",
    "parse_capture",
    "parse_exports",
    "parse_flag",
    "parse_mode",
    "parse_rubric_weights",
    "parse_runs",
    "parse_runs_or_auto",
    "relative_weights",
    "rubric_weights_text",
    "unresolved_leaf",
]

Mode = Literal["fail", "report"]
JudgeCacheMode = Literal["on", "off", "refresh"]
MODES: Final[tuple[Mode, ...]] = ("fail", "report")
MODE_FORMS: Final = "fail (a grade below the threshold fails the test) or report (annotate only)"
#: The model-comparison rubric's thoroughness modes.
THOROUGHNESS: Final = ("quick", "medium", "thorough")
CACHE_MODES: Final[tuple[JudgeCacheMode, ...]] = ("on", "off", "refresh")
#: What ``--cleo-grade-capture`` can install for every graded test.
CAPTURE_KINDS: Final = ("otel",)
#: Where ``--cleo-grade-export`` can send every grade (off by default).
EXPORT_KINDS: Final = ("langfuse", "otel")
#: A typo such as runs=80000 should be an error, not a night of judge calls.
MAX_RUNS: Final = 1000


def expanded(text: str) -> str:
    """A path option's text with ``~`` and ``$VAR`` expanded, as pytest's own path options
    (``--junitxml``, ``cache_dir``) expand theirs: a quoted ``~`` reaches pytest unexpanded."""
    return os.path.expanduser(os.path.expandvars(text))


def unresolved_leaf(path: Path) -> Path:
    """``path`` made absolute with its directories resolved but not its last component.

    ``Path.resolve()`` follows a link at the end too, and the file written would then be the
    link's target, a file no writer checks: a planted ``.cleo/metrics/GRADES.jsonl`` link
    would carry grades out of the project. Writers refuse the links they see (``files``).
    """
    if path.name in {"", ".", ".."}:
        return path.resolve()
    return path.parent.resolve() / path.name


def parse_mode(value: str) -> Mode:
    """``fail`` or ``report``; ValueError names the accepted forms."""
    for mode in MODES:
        if value == mode:
            return mode
    raise ValueError(f"invalid mode {value!r}: expected {MODE_FORMS}")


@dataclass(frozen=True, slots=True)
class PluginOptions:
    """The run-wide settings after CLI > ini > default precedence, all validated."""

    fail_under: float | None
    fail_under_source: str | None
    mode: Mode
    gate: float | None
    db_path: Path
    history_path: Path
    rubric: str = DEFAULT_RUBRIC
    rubric_source: str = "default"
    rubric_file: Path | None = None
    judge_cache: JudgeCacheMode = "on"
    judge_url: str | None = None
    judge_model: str | None = None
    compare: tuple[str, str] | None = None
    allow_empty: bool = False
    #: Capture adapters installed for every graded test (``--cleo-grade-capture``).
    capture: tuple[str, ...] = ()
    #: The user's tool mapping, ini lines ``TOOL = DOMAIN.OPERATION [GATEWAY]``.
    tool_map: tuple[str, ...] = ()
    #: Where every grade is also sent (``--cleo-grade-export``): langfuse, otel.
    exports: tuple[str, ...] = ()
    #: Where the controller writes the HTML report at the end of the run (``--cleo-grade-html``).
    html_path: Path | None = None


@dataclass(frozen=True, slots=True)
class MarkerOptions:
    """What a test's cleo_grade markers set (None: not set by a marker)."""

    fail_under: float | None = None
    mode: Mode | None = None
    rubric: str | None = None
    task: str | None = None
    variant: str | None = None
    query: str | None = None
    thoroughness: str | None = None
    allow_empty: bool | None = None
    #: Repeats (issue 15): how many times the test runs, and what decides it over its runs.
    runs: int | Literal["auto"] | None = None
    #: Adaptive repeats (runs="auto"): the most and the fewest runs.
    max_runs: int | None = None
    min_runs: int | None = None
    min_pass_rate: float | None = None
    pass_k: tuple[int, float] | None = None
    judge_cache_across_runs: bool | None = None
    #: Trajectory expectations (the trajectory rubric): the calls expected, and how compared.
    expect: tuple[Expected, ...] | None = None
    expect_mode: TrajectoryMode | None = None
    #: A comparison test that is one of the additional queries after a CONDITIONAL decision.
    follow_up: bool | None = None


def parse_runs(value: object) -> int:
    """A run count: a whole number from 1 to 1000 (an int, or its text from the command line)."""
    number = value
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
    if isinstance(number, int) and not isinstance(number, bool) and 1 <= number <= MAX_RUNS:
        return number
    raise ValueError(f"invalid runs {value!r}: expected a whole number from 1 to {MAX_RUNS}")


#: ``runs="auto"``: adaptive repeats, stopped when the verdict is settled.
AUTO_RUNS: Final = "auto"


def parse_runs_or_auto(value: object) -> int | Literal["auto"]:
    """``runs=``: a run count, or ``"auto"`` (adaptive repeats, up to ``max_runs``)."""
    if isinstance(value, str) and value.strip() == AUTO_RUNS:
        return AUTO_RUNS
    try:
        return parse_runs(value)
    except ValueError:
        raise ValueError(
            f"invalid runs {value!r}: expected a whole number from 1 to {MAX_RUNS}, or 'auto'"
        ) from None


def _count(name: str) -> Callable[[object], int]:
    def parse(value: object) -> int:
        try:
            return parse_runs(value)
        except ValueError:
            raise ValueError(
                f"invalid {name} {value!r}: expected a whole number from 1 to {MAX_RUNS}"
            ) from None

    return parse


def _rate(value: object, name: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    raise ValueError(f"invalid {name} {value!r}: expected a fraction from 0 to 1, e.g. 0.8")


def _marker_pass_rate(value: object) -> float:
    return _rate(value, "min_pass_rate")


def _marker_pass_k(value: object) -> tuple[int, float]:
    if isinstance(value, tuple | list) and len(value) == 2:
        k, minimum = value
        if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
            return k, _rate(minimum, "pass_k minimum")
    raise ValueError(f"invalid pass_k {value!r}: expected (k, minimum), e.g. (4, 0.9)")


def parse_capture(value: str) -> tuple[str, ...]:
    """Comma-separated capture adapters (``otel``), or ``none``; ValueError names the choices."""
    kinds = tuple(dict.fromkeys(part.strip().lower() for part in value.split(",") if part.strip()))
    if kinds == ("none",):
        return ()
    unknown = [kind for kind in kinds if kind not in CAPTURE_KINDS]
    if unknown or not kinds:
        raise ValueError(f"invalid capture {value!r}: expected {', '.join(CAPTURE_KINDS)} or none")
    return kinds


def parse_exports(value: str) -> tuple[str, ...]:
    """Comma-separated exports (``langfuse``, ``otel``), or ``none``; ValueError otherwise."""
    kinds = tuple(dict.fromkeys(part.strip().lower() for part in value.split(",") if part.strip()))
    if kinds == ("none",):
        return ()
    unknown = [kind for kind in kinds if kind not in EXPORT_KINDS]
    if unknown or not kinds:
        raise ValueError(f"invalid export {value!r}: expected {', '.join(EXPORT_KINDS)} or none")
    return kinds


def parse_flag(value: str) -> bool:
    """An ini/CLI boolean: true/false, yes/no, on/off, 1/0 (any case); ValueError otherwise."""
    text = value.strip().lower()
    if text in {"true", "yes", "on", "1"}:
        return True
    if text in {"false", "no", "off", "0"}:
        return False
    raise ValueError(f"invalid boolean {value!r}: expected true or false")


def _marker_flag(value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"invalid value {value!r}: expected True or False")


def _marker_threshold(value: object) -> float:
    if isinstance(value, str | int | float):
        return parse_grade_threshold(value)
    raise ValueError(f"invalid grade {value!r}: expected {THRESHOLD_FORMS}")


def _marker_mode(value: object) -> Mode:
    if isinstance(value, str):
        try:
            return parse_mode(value)
        except ValueError as exc:
            raise ValueError(f"{exc}{_OTHER_MODES}") from None
    raise ValueError(f"invalid mode {value!r}: expected {MODE_FORMS}{_OTHER_MODES}")


#: What else the marker's mode= reads (see _marker_value): said by its errors too.
_OTHER_MODES: Final = (
    f", or a thoroughness ({', '.join(THOROUGHNESS)}), or a trajectory mode "
    f"({', '.join(TRAJECTORY_MODES)})"
)


def _marker_text(name: str) -> Callable[[object], str]:
    def validate(value: object) -> str:
        if isinstance(value, str) and value.strip():
            return value.strip()
        raise ValueError(f"invalid {name} {value!r}: expected a non-empty string")

    return validate


#: The smallest weight of a combined rubric, as a share of all of them.
_SMALLEST_SHARE: Final = 1e-6


def parse_rubric_weights(text: str) -> dict[str, float] | None:
    """The parts of a combined rubric, ``cleo:0.7,trajectory:0.3``; None for one rubric.

    Weights are relative (``cleo:7,rules:3`` is the same combination) and must be positive
    and finite; a rubric may appear once.
    """
    if ":" not in text and "," not in text:
        return None
    parts: dict[str, float] = {}
    for piece in text.split(","):
        name, sep, weight_text = piece.partition(":")
        name = name.strip()
        if not name or not sep:
            raise ValueError(
                f"invalid rubric {text!r}: expected NAME or NAME:WEIGHT,NAME:WEIGHT "
                "(e.g. cleo:0.7,rules:0.3)"
            )
        try:
            weight = float(weight_text)
        except ValueError:
            raise ValueError(
                f"invalid rubric {text!r}: the weight of {name} is not a number"
            ) from None
        if not 0 < weight < float("inf"):
            raise ValueError(
                f"invalid rubric {text!r}: the weight of {name} must be a finite number above 0"
            )
        if name in parts:
            raise ValueError(f"invalid rubric {text!r}: {name} is named twice")
        parts[name] = weight
    for name, share in relative_weights(parts).items():
        # The combination's name keeps 6 decimals: a smaller share would read as weight 0.
        if share < _SMALLEST_SHARE:
            raise ValueError(
                f"invalid rubric {text!r}: the weight of {name} is less than a millionth of "
                "the total"
            )
    return parts


def rubric_weights_text(parts: Mapping[str, float]) -> str:
    """The canonical text of a combination (weights summing to 1, in the order given)."""
    shares = relative_weights(parts)
    return ",".join(f"{name}:{round(share, 6):g}" for name, share in shares.items())


def relative_weights(parts: Mapping[str, float]) -> dict[str, float]:
    """The weights scaled to sum to 1 (scaled by the largest first: 1e308 twice is no inf)."""
    top = max(parts.values())
    scaled = {name: weight / top for name, weight in parts.items()}
    total = sum(scaled.values())
    return {name: weight / total for name, weight in scaled.items()}


def _marker_rubric(value: object) -> str:
    """A rubric name, or ``{"cleo": 0.7, "rules": 0.3}`` combining rubrics by weight."""
    if isinstance(value, Mapping):
        if not value:
            raise ValueError("invalid rubric {}: name at least one rubric")
        text = ",".join(f"{name}:{weight}" for name, weight in value.items())
        for name, weight in value.items():
            if not isinstance(name, str) or not name.strip() or "," in name or ":" in name:
                raise ValueError(f"invalid rubric {value!r}: {name!r} is not a rubric name")
            if isinstance(weight, bool) or not isinstance(weight, int | float):
                raise ValueError(f"invalid rubric {value!r}: the weight of {name} is not a number")
        parts = parse_rubric_weights(text)
        assert parts is not None
        return rubric_weights_text(parts)
    text = _marker_text("rubric")(value)
    parts = parse_rubric_weights(text)
    return text if parts is None else rubric_weights_text(parts)


def _marker_thoroughness(value: object) -> str:
    if isinstance(value, str) and value in THOROUGHNESS:
        return value
    raise ValueError(f"invalid thoroughness {value!r}: expected {', '.join(THOROUGHNESS)}")


#: The marker's keyword arguments and their validators; a new argument is one more entry.
MARKER_KWARGS: Final[Mapping[str, Callable[[object], Any]]] = {
    "fail_under": _marker_threshold,
    "mode": _marker_mode,
    "rubric": _marker_rubric,
    "task": _marker_text("task"),
    "variant": _marker_text("variant"),
    "query": _marker_text("query"),
    "thoroughness": _marker_thoroughness,
    "allow_empty": _marker_flag,
    "runs": parse_runs_or_auto,
    "max_runs": _count("max_runs"),
    "min_runs": _count("min_runs"),
    "min_pass_rate": _marker_pass_rate,
    "pass_k": _marker_pass_k,
    "judge_cache_across_runs": _marker_flag,
    "expect": parse_expectations,
    "expect_mode": parse_trajectory_mode,
    "follow_up": _marker_flag,
}


def marker_key(key: str, value: object) -> str:
    """``mode=`` means three things: fail|report (the grading mode, since the first release),
    as issue 6 spells the comparison marker quick|medium|thorough, and a trajectory mode
    (exact, in_order, any_order, subset, superset). The value sets are disjoint, so
    ``mode=`` is read as ``thoroughness=`` or ``expect_mode=`` by its value.
    """
    if key == "mode" and isinstance(value, str) and value in THOROUGHNESS:
        return "thoroughness"
    if key == "mode" and isinstance(value, str) and value in TRAJECTORY_MODES:
        return "expect_mode"
    return key
