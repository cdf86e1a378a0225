"""The plugin's command-line options, ini keys and marker: registration and reading.

The settings types and value checks they produce live in :mod:`pytest_cleo_grade.core.settings`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import pytest

from pytest_cleo_grade.core.settings import (
    CACHE_MODES,
    DEFAULT_DB,
    DEFAULT_HISTORY,
    DEFAULT_RUBRIC,
    MARKER_KWARGS,
    JudgeCacheMode,
    MarkerOptions,
    Mode,
    PluginOptions,
    expanded,
    marker_key,
    parse_capture,
    parse_exports,
    parse_flag,
    parse_mode,
    unresolved_leaf,
)

# Thresholds are parsed with pytest_cleo_grade.grading._verdict, imported where used: it pulls in
# pydantic, which a run that sets no option and grades nothing should not pay for.

__all__ = ["MARKER_DOC", "add_options", "load_options", "marker_options"]

MARKER_DOC: Final = (
    "cleo_grade(fail_under=GRADE, mode='fail'|'report', rubric=NAME, task=TEXT, variant=NAME, "
    "query=NAME, thoroughness='quick'|'medium'|'thorough', allow_empty=True, runs=N, "
    "min_pass_rate=RATE, pass_k=(K, RATE), judge_cache_across_runs=True, expect=[CALL, ...], "
    "expect_mode='exact'|'in_order'|'any_order'|'subset'|'superset', follow_up=True): how a "
    "test using the graded_session fixture is graded (GRADE: letter A, B, C, D or F, or a "
    "percentage such as 85 or '85%'; mode= also accepts a thoroughness or a trajectory mode; "
    "expect= grades with the trajectory rubric; runs=N runs it N times, decided over its runs "
    "by the mean, the pass rate or pass^k; follow_up=True marks a comparison test as one of "
    "the additional queries after a CONDITIONAL decision)"
)


def _threshold_arg(value: str) -> float:
    from pytest_cleo_grade.grading._verdict import parse_grade_threshold

    try:
        return parse_grade_threshold(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _mode_arg(value: str) -> Mode:
    try:
        return parse_mode(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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


def judge_url_arg(value: str) -> str:
    """The judge URL option's check (judges.http's), imported only when the option is given:
    a run that judges nothing loads no HTTP client."""
    from pytest_cleo_grade.judges.http import judge_url_arg as check

    return check(value)


def _text_arg(option: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        if value.strip():
            return value.strip()
        raise argparse.ArgumentTypeError(f"{option} must not be empty")

    return parse


def _capture_arg(value: str) -> tuple[str, ...]:
    try:
        return parse_capture(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _export_arg(value: str) -> tuple[str, ...]:
    try:
        return parse_exports(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


#: The TOML types a native table may give each kind of value (pytest 9.2+).
_TOML_TYPES: Final[dict[str, Any]] = {
    "number": str | int | float,
    "count": str | int,
    "flag": str | bool,
}


def add_scalar_ini(parser: pytest.Parser, name: str, help: str, kind: str = "text") -> None:
    """An ini key holding one value, read as text by the plugin's own parsers.

    pytest 9.2+ also lets a native TOML table (``[tool.pytest]``) write a ``number``, a
    ``count`` or a ``flag`` as TOML types it: ``cleo_grade_fail_under = 85``,
    ``cleo_grade_runs = 3``, ``cleo_grade_allow_empty = true`` (a plain string key would
    refuse those). Older pytest reads strings only.
    """
    if kind != "text" and pytest.version_tuple >= (9, 2):
        parser.addini(name, help, type=_TOML_TYPES[kind], default="")
    else:
        parser.addini(name, help)


def add_options(parser: pytest.Parser) -> None:
    """Register every option in one group, each with its ini twin."""
    group = parser.getgroup("cleo-grade", "grade AI agents' audit logs (pytest-cleo-grade)")
    group.addoption(
        "--cleo-grade-fail-under",
        dest="cleo_grade_fail_under",
        metavar="GRADE",
        type=_threshold_arg,
        default=None,
        help="fail a graded test whose grade is below GRADE: a letter A, B, C, D or F (F = no "
        "minimum) or a percentage such as 85, 85%% or 85.5 (ini: cleo_grade_fail_under; the "
        "cleo_grade marker's fail_under beats both)",
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
    group.addoption(
        "--cleo-grade-allow-empty",
        dest="cleo_grade_allow_empty",
        action="store_const",
        const=True,
        default=None,
        help="grade a test that captured no entries 0/100 as the CLEO Grade Specification "
        "does, instead of failing it for capturing nothing (ini: cleo_grade_allow_empty; "
        "the cleo_grade marker's allow_empty beats both)",
    )
    group.addoption(
        "--cleo-grade-capture",
        dest="cleo_grade_capture",
        metavar="KINDS",
        type=_capture_arg,
        default=None,
        help="capture adapters installed for every graded test: otel (record the tool spans "
        "of the OpenTelemetry SDK's tracer provider) or none (ini: cleo_grade_capture)",
    )
    group.addoption(
        "--cleo-grade-tool-map",
        dest="cleo_grade_tool_map",
        metavar="'TOOL = DOMAIN.OPERATION [GATEWAY]'",
        action="append",
        default=None,
        help="route a tool's calls to a CLEO operation for every capture adapter; repeatable, "
        "'* = GATEWAY' sets the default gateway; replaces the ini's lines (ini: "
        "cleo_grade_tool_map, one per line)",
    )
    group.addoption(
        "--cleo-grade-export",
        dest="cleo_grade_export",
        metavar="KINDS",
        type=_export_arg,
        default=None,
        help="also send every grade to: langfuse (scores, keys from LANGFUSE_* variables), "
        "otel (gen_ai.evaluation.result events), comma-separated, or none; never fails the "
        "run (ini: cleo_grade_export)",
    )
    group.addoption(
        "--cleo-grade-html",
        dest="cleo_grade_html",
        metavar="PATH",
        default=None,
        help="write one self-contained HTML report of the run's grades, their history and "
        "points to PATH at the end of the run (ini: cleo_grade_html)",
    )
    add_scalar_ini(parser, "cleo_grade_html", "HTML report written at the end of the run")
    add_scalar_ini(
        parser, "cleo_grade_capture", "capture adapters for every graded test: otel or none"
    )
    add_scalar_ini(
        parser, "cleo_grade_export", "where grades are also sent: langfuse, otel or none"
    )
    parser.addini(  # a list: the one key that is not a scalar
        "cleo_grade_tool_map",
        "tool mapping, one 'TOOL = DOMAIN.OPERATION [GATEWAY]' per line ('* = GATEWAY': the "
        "default gateway)",
        type="linelist",
    )
    _add_rubric_options(group)
    add_scalar_ini(
        parser,
        "cleo_grade_allow_empty",
        "grade an empty session 0/100 instead of failing the test",
        "flag",
    )
    add_scalar_ini(
        parser,
        "cleo_grade_fail_under",
        "default grade threshold of graded tests (letter or percent)",
        "number",
    )
    add_scalar_ini(parser, "cleo_grade_mode", "fail (default) or report")
    add_scalar_ini(
        parser, "cleo_grade_gate", "minimum mean grade of the run (letter or percent)", "number"
    )
    add_scalar_ini(parser, "cleo_grade_db", f"audit store path (default: {DEFAULT_DB})")
    add_scalar_ini(parser, "cleo_grade_history", f"grade history path (default: {DEFAULT_HISTORY})")
    add_scalar_ini(
        parser, "cleo_grade_rubric", f"rubric grading the tests (default: {DEFAULT_RUBRIC})"
    )
    add_scalar_ini(
        parser,
        "cleo_grade_rubric_file",
        "TOML or JSON file of the weighted, rules or trajectory rubric",
    )
    add_scalar_ini(parser, "cleo_grade_judge_cache", "judge cache: on (default), off or refresh")
    add_scalar_ini(parser, "cleo_grade_judge_url", "OpenAI-compatible base URL of the judge")
    add_scalar_ini(parser, "cleo_grade_judge_model", "model the judge endpoint runs")
    add_scalar_ini(
        parser, "cleo_grade_compare", "BASE:CAND variants compared at the end of the run"
    )


def _add_rubric_options(group: pytest.OptionGroup) -> None:
    group.addoption(
        "--cleo-grade-rubric",
        dest="cleo_grade_rubric",
        metavar="NAME",
        type=_text_arg("--cleo-grade-rubric"),
        default=None,
        help=f"rubric grading the tests, or NAME:WEIGHT,NAME:WEIGHT combining rubrics "
        f"(default: {DEFAULT_RUBRIC}; see `cleo-grade rubrics`; ini: cleo_grade_rubric; the "
        "cleo_grade marker's rubric beats both)",
    )
    group.addoption(
        "--cleo-grade-rubric-file",
        dest="cleo_grade_rubric_file",
        metavar="PATH",
        default=None,
        help="TOML or JSON file of the weighted rubric (and its judge), the rules or the "
        "trajectory rubric "
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
        type=judge_url_arg,
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
        "the model-comparison verdict table and decision; exit status 1 on NO-GO "
        "(ini: cleo_grade_compare)",
    )


def _ini(config: pytest.Config, name: str) -> str | None:
    text = str(config.getini(name)).strip()
    return text or None


def _usage(where: str, message: str) -> pytest.UsageError:
    return pytest.UsageError(f"cleo-grade: {where}: {message}")


def _ini_threshold(config: pytest.Config, name: str) -> float | None:
    text = _ini(config, name)
    if text is None:
        return None
    from pytest_cleo_grade.grading._verdict import parse_grade_threshold

    try:
        return parse_grade_threshold(text)
    except ValueError as exc:
        raise _usage(f"ini option {name}", str(exc)) from None


def _path(config: pytest.Config, option: str, ini: str, default: Path) -> Path:
    value: str | None = config.getoption(option)
    where = "--" + option.replace("_", "-")
    if value == "":
        raise _usage(where, "an empty path (name a file)")
    if value:
        # Like --junitxml, a path on the command line is relative to where pytest was run.
        return _file(unresolved_leaf(config.invocation_params.dir / expanded(value)), where)
    text = _ini(config, ini)
    if text:
        base = config.inipath.parent if config.inipath else config.rootpath
        return _file(unresolved_leaf(base / expanded(text)), f"ini option {ini}")
    return unresolved_leaf(config.rootpath / default)


def _file(path: Path, where: str) -> Path:
    """A path that can name a file: ``/`` cannot (no last component to create or open)."""
    if not path.name:
        raise _usage(where, f"{path} is a directory, not a file")
    return path


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
    allow_empty: bool | None = config.getoption("cleo_grade_allow_empty")
    if allow_empty is None:
        text = _ini(config, "cleo_grade_allow_empty")
        try:
            allow_empty = parse_flag(text) if text is not None else False
        except ValueError as exc:
            raise _usage("ini option cleo_grade_allow_empty", str(exc)) from None
    return PluginOptions(
        fail_under=fail_under,
        fail_under_source=source,
        mode=mode,
        gate=gate,
        db_path=_path(config, "cleo_grade_db", "cleo_grade_db", DEFAULT_DB),
        history_path=_path(config, "cleo_grade_history", "cleo_grade_history", DEFAULT_HISTORY),
        allow_empty=allow_empty,
        capture=_setting(config, "cleo_grade_capture", _capture_arg)[0] or (),
        exports=_setting(config, "cleo_grade_export", _export_arg)[0] or (),
        tool_map=tuple(
            str(line)
            for line in config.getoption("cleo_grade_tool_map")
            or config.getini("cleo_grade_tool_map")
        ),
        html_path=_optional_path(config, "cleo_grade_html"),
        **_rubric_options(config),
    )


def _rubric_options(config: pytest.Config) -> dict[str, Any]:
    rubric, rubric_source = _setting(
        config, "cleo_grade_rubric", _text_arg("ini option cleo_grade_rubric")
    )
    cache, _ = _setting(config, "cleo_grade_judge_cache", _cache_arg)
    url, _ = _setting(config, "cleo_grade_judge_url", judge_url_arg)
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
            key = marker_key(given, value)
            if key in seen:
                raise _usage(where, f"{seen[key]}= and {given}= both set {key}; use one")
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
