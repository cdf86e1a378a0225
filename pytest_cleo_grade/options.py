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
    "CACHE_MODES",
    "MARKER_DOC",
    "MODES",
    "THOROUGHNESS",
    "MarkerOptions",
    "Mode",
    "PluginOptions",
    "add_options",
    "load_options",
    "marker_options",
]

Mode = Literal["fail", "report"]
JudgeCacheMode = Literal["on", "off", "refresh"]
MODES: Final[tuple[Mode, ...]] = ("fail", "report")
MODE_FORMS: Final = "fail (a grade below the threshold fails the test) or report (annotate only)"
#: Seed 002's thoroughness modes (comparison.metrics.MODES, spelled out: no pydantic here).
THOROUGHNESS: Final = ("quick", "medium", "thorough")
CACHE_MODES: Final[tuple[JudgeCacheMode, ...]] = ("on", "off", "refresh")
DEFAULT_RUBRIC: Final = "cleo"
DEFAULT_DB: Final = Path(".cleo") / "audit.db"
#: history.DEFAULT_HISTORY, spelled out so that loading the options imports no pydantic.
DEFAULT_HISTORY: Final = Path(".cleo") / "metrics" / "GRADES.jsonl"

MARKER_DOC: Final = (
    "cleo_grade(fail_under=GRADE, mode='fail'|'report', rubric=NAME, task=TEXT, variant=NAME, "
    "query=NAME, thoroughness='quick'|'medium'|'thorough'): how a test using the "
    "graded_session fixture is graded (GRADE: letter A-F or percentage such as 85 or '85%'; "
    "mode= also accepts a thoroughness)"
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


def _cache_arg(value: str) -> JudgeCacheMode:
    for mode in CACHE_MODES:
        if value == mode:
            return mode
    raise argparse.ArgumentTypeError(
        f"invalid judge cache mode {value!r}: expected one of {', '.join(CACHE_MODES)}"
    )


def _compare_arg(value: str) -> tuple[str, str]:
    base, sep, cand = value.partition(":")
    base, cand = base.strip(), cand.strip()
    if not sep or not base or not cand or ":" in cand:
        raise argparse.ArgumentTypeError(
            f"invalid comparison {value!r}: expected BASE:CAND, two variant names "
            "(without ':') separated by one colon, e.g. sonnet:haiku"
        )
    if base == cand:
        raise argparse.ArgumentTypeError(
            f"invalid comparison {value!r}: baseline and candidate are the same variant"
        )
    return base, cand


def _url_arg(value: str) -> str:
    from urllib.parse import urlsplit

    url = value.strip()
    parts = urlsplit(url)
    if parts.scheme in ("http", "https") and parts.netloc:
        return url
    raise argparse.ArgumentTypeError(
        f"invalid judge URL {value!r}: expected an http:// or https:// URL such as http://127.0.0.1:8000"
    )


def _text_arg(option: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.strip():
            return value.strip()
        raise argparse.ArgumentTypeError(f"{option} must not be empty")

    return parse


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
    _add_rubric_options(group)
    parser.addini(
        "cleo_grade_fail_under", "default grade threshold of graded tests (letter or percent)"
    )
    parser.addini("cleo_grade_mode", "fail (default) or report")
    parser.addini("cleo_grade_gate", "minimum mean grade of the run (letter or percent)")
    parser.addini("cleo_grade_db", f"audit store path (default: {DEFAULT_DB})")
    parser.addini("cleo_grade_history", f"grade history path (default: {DEFAULT_HISTORY})")
    parser.addini("cleo_grade_rubric", f"rubric grading the tests (default: {DEFAULT_RUBRIC})")
    parser.addini("cleo_grade_rubric_file", "TOML or JSON file configuring the weighted rubric")
    parser.addini("cleo_grade_judge_cache", "judge cache: on (default), off or refresh")
    parser.addini("cleo_grade_judge_url", "OpenAI-compatible base URL of the judge")
    parser.addini("cleo_grade_judge_model", "model the judge endpoint runs")
    parser.addini("cleo_grade_compare", "BASE:CAND variants compared at the end of the run")


def _add_rubric_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--cleo-grade-rubric",
        dest="cleo_grade_rubric",
        metavar="NAME",
        type=_text_arg("--cleo-grade-rubric"),
        default=None,
        help=f"rubric grading the tests (default: {DEFAULT_RUBRIC}; see `cleo-grade rubrics`; "
        "ini: cleo_grade_rubric; the cleo_grade marker's rubric beats both)",
    )
    group.addoption(
        "--cleo-grade-rubric-file",
        dest="cleo_grade_rubric_file",
        metavar="PATH",
        default=None,
        help="TOML or JSON file configuring the weighted rubric and its judge "
        "(ini: cleo_grade_rubric_file)",
    )
    group.addoption(
        "--cleo-grade-judge-cache",
        dest="cleo_grade_judge_cache",
        metavar="MODE",
        type=_cache_arg,
        default=None,
        help="on: reuse judge replies stored in the audit store (default); off: neither read "
        "nor write; refresh: ask again and overwrite (ini: cleo_grade_judge_cache)",
    )
    group.addoption(
        "--cleo-grade-judge-url",
        dest="cleo_grade_judge_url",
        metavar="URL",
        type=_url_arg,
        default=None,
        help="OpenAI-compatible base URL of the judge, overriding the rubric file's "
        "(ini: cleo_grade_judge_url)",
    )
    group.addoption(
        "--cleo-grade-judge-model",
        dest="cleo_grade_judge_model",
        metavar="MODEL",
        type=_text_arg("--cleo-grade-judge-model"),
        default=None,
        help="model the judge endpoint runs, overriding the rubric file's "
        "(ini: cleo_grade_judge_model)",
    )
    group.addoption(
        "--cleo-grade-compare",
        dest="cleo_grade_compare",
        metavar="BASE:CAND",
        type=_compare_arg,
        default=None,
        help="compare the variants of this run's comparison tests (marker variant=): print "
        "seed 002's verdict table and decision; exit status 1 on NO-GO "
        "(ini: cleo_grade_compare)",
    )


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


def _setting(
    config: pytest.Config, name: str, parse: Callable[[str], Any]
) -> tuple[Any, str | None]:
    """The CLI value of ``name``, else its validated ini twin, and where it came from."""
    value = config.getoption(name)
    if value is not None:
        return value, "--" + name.replace("_", "-")
    text = _ini(config, name)
    if text is None:
        return None, None
    try:
        return parse(text), f"ini {name}"
    except argparse.ArgumentTypeError as exc:
        raise _usage(f"ini option {name}", str(exc)) from None


def _optional_path(config: pytest.Config, name: str) -> Path | None:
    if config.getoption(name) or _ini(config, name):
        return _path(config, name, name, Path())
    return None


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
        **_rubric_options(config),
    )


def _rubric_options(config: pytest.Config) -> dict[str, Any]:
    rubric, rubric_source = _setting(
        config, "cleo_grade_rubric", _text_arg("ini option cleo_grade_rubric")
    )
    cache, _ = _setting(config, "cleo_grade_judge_cache", _cache_arg)
    url, _ = _setting(config, "cleo_grade_judge_url", _url_arg)
    model, _ = _setting(config, "cleo_grade_judge_model", str.strip)
    compare, _ = _setting(config, "cleo_grade_compare", _compare_arg)
    return {
        "rubric": rubric or DEFAULT_RUBRIC,
        "rubric_source": rubric_source or "default",
        "rubric_file": _optional_path(config, "cleo_grade_rubric_file"),
        "judge_cache": cache or "on",
        "judge_url": url or None,
        "judge_model": model or None,
        "compare": compare,
    }


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
            raise ValueError(f"{exc}, or a thoroughness ({', '.join(THOROUGHNESS)})") from None
    raise ValueError(f"invalid mode {value!r}: expected {MODE_FORMS}")


def _marker_text(name: str) -> Callable[[object], str]:
    def validate(value: object) -> str:
        if isinstance(value, str) and value.strip():
            return value.strip()
        raise ValueError(f"invalid {name} {value!r}: expected a non-empty string")

    return validate


def _marker_thoroughness(value: object) -> str:
    if isinstance(value, str) and value in THOROUGHNESS:
        return value
    raise ValueError(f"invalid thoroughness {value!r}: expected {', '.join(THOROUGHNESS)}")


#: The marker's keyword arguments and their validators; a new argument is one more entry.
MARKER_KWARGS: Final[Mapping[str, Callable[[object], Any]]] = {
    "fail_under": _marker_threshold,
    "mode": _marker_mode,
    "rubric": _marker_text("rubric"),
    "task": _marker_text("task"),
    "variant": _marker_text("variant"),
    "query": _marker_text("query"),
    "thoroughness": _marker_thoroughness,
}


def _marker_key(key: str, value: object) -> str:
    """``mode=`` means two things: fail|report (the grading mode, since the first release)
    and, as issue 6 spells the comparison marker, quick|medium|thorough. The value sets are
    disjoint, so a thoroughness given as ``mode=`` is read as ``thoroughness=``.
    """
    if key == "mode" and isinstance(value, str) and value in THOROUGHNESS:
        return "thoroughness"
    return key


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
        seen: dict[str, str] = {}
        for given, value in mark.kwargs.items():
            key = _marker_key(given, value)
            if key in seen:
                raise _usage(where, f"{seen[key]}= and {given}= both set the thoroughness; use one")
            seen[key] = given
            validate = MARKER_KWARGS.get(key)
            if validate is None:
                raise _usage(
                    where,
                    f"unknown argument {given!r}; accepted: {', '.join(MARKER_KWARGS)}",
                )
            if key in values:
                continue  # iter_markers yields the closest marker first
            try:
                values[key] = validate(value)
            except ValueError as exc:
                raise _usage(f"{where}({given}=...)", str(exc)) from None
    return MarkerOptions(**values)
