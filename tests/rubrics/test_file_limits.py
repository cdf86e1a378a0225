"""Hostile or mistyped rubric files: deep nesting and out-of-bounds judge settings are one-line
errors naming the file (and the field), from the library, the CLI and a pytest run."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.rubrics.weighted.spec import MAX_NESTING, load_rubric_file
from tests.processes import NO_UNRELATED_PLUGINS

DEPTH = 100_000

DEEP_FILES = {
    "deep.json": "[" * DEPTH + "]" * DEPTH,
    "deep-object.json": '{"a":' * DEPTH + "1" + "}" * DEPTH,
    "deep.toml": "x = " + "[" * DEPTH + "]" * DEPTH + "\n",
    "deep-inline.toml": "x = " + "{a = " * DEPTH + "1" + "}" * DEPTH + "\n",
    # Shallow enough for the parsers, deeper than any rubric: stopped before validation.
    "deeper-than-a-rubric.json": '{"dimensions": ' + "[" * 200 + "]" * 200 + "}",
}

VALID_DIMENSIONS = """
[[dimensions]]
name = "shipped"
type = "numeric"
weight = 1.0
"""


@pytest.mark.parametrize("name", sorted(DEEP_FILES))
def test_a_deeply_nested_rubric_file_is_a_one_line_error_naming_the_file(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    path.write_text(DEEP_FILES[name])
    with pytest.raises(RubricError) as info:
        load_rubric_file(path)
    message = str(info.value)
    assert message == (
        f"{path}: arrays or tables nested more than {MAX_NESTING} levels deep: not a rubric file"
    )


def test_the_nesting_of_a_real_rubric_file_is_far_below_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(
        "[judge]\nbase_url = 'http://127.0.0.1:9'\nmodel = 'm'\n"
        + VALID_DIMENSIONS
        + "guidance = ['0.0-0.5: poor', '0.5-1.0: fine']\n"
    )
    assert load_rubric_file(path).spec.dimensions[0].name == "shipped"


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("timeout = 601", "judge.timeout: Input should be less than or equal to 600"),
        ("timeout = 0", "judge.timeout: Input should be greater than 0"),
        ("retries = 11", "judge.retries: Input should be less than or equal to 10"),
        ("backoff = 61", "judge.backoff: Input should be less than or equal to 60"),
        ("max_reply_bytes = 10", "judge.max_reply_bytes: Input should be greater than or equal"),
        (
            "max_reply_bytes = 100_000_000",
            "judge.max_reply_bytes: Input should be less than or equal to 67108864",
        ),
        (
            "max_consecutive_failures = 0",
            "judge.max_consecutive_failures: Input should be greater than or equal to 1",
        ),
    ],
    ids=[
        "timeout-too-long",
        "timeout-zero",
        "retries",
        "backoff",
        "reply-cap-too-small",
        "reply-cap-too-large",
        "breaker-zero",
    ],
)
def test_judge_request_settings_out_of_bounds_name_the_file_and_the_field(
    tmp_path: Path, setting: str, problem: str
) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(f"[judge]\n{setting}\n{VALID_DIMENSIONS}")
    with pytest.raises(RubricError) as info:
        load_rubric_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: {problem}")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        (
            "rubric.toml",
            f"[judge]\ntemperature = true\n{VALID_DIMENSIONS}",
            "judge.temperature: Input should be a valid number",
        ),
        (
            "rubric.toml",
            f"[judge]\nmax_tokens = 1.5\n{VALID_DIMENSIONS}",
            "judge.max_tokens: Input should be a valid integer",
        ),
        (
            "rubric.toml",
            f"[judge]\nretries = true\n{VALID_DIMENSIONS}",
            "judge.retries: Input should be a valid integer",
        ),
        (
            "rubric.toml",
            f"[judge]\nmodel = 7\n{VALID_DIMENSIONS}",
            "judge.model: Input should be a valid string",
        ),
        (
            "rubric.toml",
            f"[budget]\nchars_per_token = 4.0\n{VALID_DIMENSIONS}",
            "budget.chars_per_token: Input should be a valid integer",
        ),
        (
            "rubric.json",
            '{"dimensions": [{"name": "shipped", "type": "numeric", "weight": "1"}]}',
            "dimensions[0] (shipped).weight: Input should be a valid number",
        ),
        (
            "rubric.json",
            '{"dimensions": [{"name": "shipped", "type": "numeric", "weight": true}]}',
            "dimensions[0] (shipped).weight: Input should be a valid number",
        ),
    ],
    ids=[
        "temperature-bool",
        "max-tokens-float",
        "retries-bool",
        "model-int",
        "budget-float",
        "weight-string",
        "weight-bool",
    ],
)
def test_a_loosely_typed_field_is_a_one_line_error_naming_the_file_and_the_field(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RubricError) as info:
        load_rubric_file(path)
    message = str(info.value)
    assert message == f"{path}: {problem}"


def test_an_integer_is_taken_where_a_float_is_asked(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(
        "[judge]\ntemperature = 1\ntimeout = 30\n"
        '[[dimensions]]\nname = "shipped"\ntype = "numeric"\nweight = 1\nmax = 5\n'
    )
    spec = load_rubric_file(path).spec
    assert (spec.judge.temperature, spec.judge.timeout, spec.dimensions[0].weight) == (1, 30, 1)


def test_judge_request_settings_within_bounds_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(
        "[judge]\ntimeout = 600\nretries = 10\nbackoff = 60\nmax_reply_bytes = 1024\n"
        f"max_consecutive_failures = 5\n{VALID_DIMENSIONS}"
    )
    judge = load_rubric_file(path).spec.judge
    assert (judge.timeout, judge.retries, judge.backoff) == (600, 10, 60)
    assert (judge.max_reply_bytes, judge.max_consecutive_failures) == (1024, 5)


@pytest.fixture
def cleo_grade(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> Callable[..., tuple[int, str, str]]:
    """``cleo-grade ARGS`` run in ``tmp_path``, in this process (a traceback, a RecursionError
    would surface here as the exception): (status, stdout, stderr)."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str) -> tuple[int, str, str]:
        status = main(list(args))
        out, err = capsys.readouterr()
        return status, out, err

    return run


@pytest.mark.parametrize("name", ["deep.json", "deep.toml"])
def test_rubrics_check_of_a_deeply_nested_file_exits_2_with_one_line(
    tmp_path: Path, cleo_grade: Callable[..., tuple[int, str, str]], name: str
) -> None:
    (tmp_path / name).write_text(DEEP_FILES[name])
    status, out, err = cleo_grade("rubrics", "--check", name)
    assert status == 2, err
    assert out == ""
    assert "Traceback" not in err
    assert "RecursionError" not in err
    [line] = err.splitlines()
    assert f"{name}: arrays or tables nested more than {MAX_NESTING} levels deep" in line


# Both parsers refuse a whole number of more digits than Python converts with a ValueError whose
# text points at sys.set_int_max_str_digits(); the reader of the file needs its own words.
HUGE = "9" * 5000


@pytest.mark.parametrize(
    ("name", "content", "kind"),
    [
        ("rubric.json", '{"dimensions": [], "n": ' + HUGE + "}", "JSON"),
        ("rubric.toml", f"n = {HUGE}\n", "TOML"),
        ("rules.toml", f"[[rules]]\nid = 'r'\npoints = {HUGE}\n", "TOML"),
    ],
)
def test_rubrics_check_of_a_file_with_a_huge_number_exits_2_with_one_line(
    tmp_path: Path,
    cleo_grade: Callable[..., tuple[int, str, str]],
    name: str,
    content: str,
    kind: str,
) -> None:
    (tmp_path / name).write_text(content)
    status, _, err = cleo_grade("rubrics", "--check", name)
    assert status == 2, err
    [line] = err.splitlines()
    assert line.endswith(f"{name}: invalid {kind}: a number with more than 4300 digits"), line


@pytest.mark.parametrize(
    ("name", "content", "problem"),
    [
        ("rubric.json", DEEP_FILES["deep.json"], "arrays or tables nested more than 32"),
        ("rubric.toml", DEEP_FILES["deep.toml"], "arrays or tables nested more than 32"),
        (
            "rubric.toml",
            f"[judge]\ntimeout = 601\n{VALID_DIMENSIONS}",
            "judge.timeout: Input should be less than or equal to 600",
        ),
    ],
    ids=["deep-json", "deep-toml", "timeout-out-of-bounds"],
)
def test_a_pytest_run_with_a_broken_rubric_file_is_one_usage_error(
    pytester: pytest.Pytester, name: str, content: str, problem: str
) -> None:
    (pytester.path / name).write_text(content)
    pytester.makepyfile(
        test_agent=textwrap.dedent(
            """
            def test_agent(graded_session):
                graded_session.record("tasks", "add", {"title": "x"})
            """
        )
    )
    result = pytester.runpytest("--cleo-grade-rubric=weighted", f"--cleo-grade-rubric-file={name}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    output = result.stdout.str() + result.stderr.str()
    assert "RecursionError" not in output
    assert "Traceback" not in output
    result.stderr.fnmatch_lines([f"ERROR: cleo-grade: rubric file */{name}: {problem}*"])


def broken_and_missing_rubric_suite(pytester: pytest.Pytester) -> None:
    (pytester.path / "rubric.toml").write_text(DEEP_FILES["deep.toml"])
    pytester.makepyfile(
        test_agent="def test_agent(graded_session):\n    graded_session.record('tasks', 'add')\n"
    )


def assert_one_usage_error(result: pytest.RunResult, name: str) -> None:
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: cleo-grade: rubric file *{name}*"])
    assert "error" not in result.stdout.str().lower()  # no test ran, so none errored


@pytest.mark.parametrize("name", ["rubric.toml", "missing.toml"])
def test_a_broken_or_missing_rubric_file_stops_a_serial_run(
    pytester: pytest.Pytester, name: str
) -> None:
    broken_and_missing_rubric_suite(pytester)
    result = pytester.runpytest("--cleo-grade-rubric=weighted", f"--cleo-grade-rubric-file={name}")
    assert_one_usage_error(result, name)


@pytest.mark.e2e
def test_a_broken_or_missing_rubric_file_stops_an_xdist_run_too(
    pytester: pytest.Pytester,
) -> None:
    # The xdist controller collects nothing: the check at collection ran on the workers only,
    # and every graded test errored (status 1) instead of one usage error (status 4). One
    # worker is as much a worker as two (the suite has one test).
    broken_and_missing_rubric_suite(pytester)
    for name in ("rubric.toml", "missing.toml"):
        result = pytester.runpytest_subprocess(
            "-n",
            "1",
            *NO_UNRELATED_PLUGINS,
            "--cleo-grade-rubric=weighted",
            f"--cleo-grade-rubric-file={name}",
        )
        assert_one_usage_error(result, name)
