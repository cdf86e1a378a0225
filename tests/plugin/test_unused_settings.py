"""A setting that would change nothing is never silent: a rubric file selects its rubric (or is a
usage error saying how), judge options no rubric reads are a warning."""

from __future__ import annotations

import textwrap
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

ONE_TEST = """
def test_agent(graded_session):
    graded_session.record("session", "list")
    graded_session.record("tasks", "find", {"query": "login"})
"""

RULES = """
name = "two-calls"
version = "1.0.0"

[[dimensions]]
name = "looks"
max = 10

[[dimensions.rules]]
id = "found"
kind = "called"
match = { calls = ["tasks.find"] }
points = 10
flag = "Never looked"
"""


def _properties(path: Path) -> dict[str, str]:
    case = ET.parse(path).find(".//testcase")
    assert case is not None
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_a_rule_file_given_alone_grades_with_the_rules_rubric(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(ONE_TEST)
    (pytester.path / "rules.toml").write_text(RULES)
    result = pytester.runpytest("--cleo-grade-rubric-file=rules.toml", "--junitxml=out.xml")
    result.assert_outcomes(passed=1)
    props = _properties(pytester.path / "out.xml")
    # CLEO's rubric would have given 40/100 with five dimensions; the file's gives 10/10.
    assert props["cleo_rubric"] == "rules"
    assert props["cleo_score"] == "10/10"


def test_a_rule_file_in_the_ini_file_alone_grades_with_the_rules_rubric(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(ONE_TEST)
    (pytester.path / "rules.toml").write_text(RULES)
    pytester.makeini("[pytest]\ncleo_grade_rubric_file = rules.toml\n")
    pytester.runpytest("--junitxml=out.xml").assert_outcomes(passed=1)
    assert _properties(pytester.path / "out.xml")["cleo_rubric"] == "rules"


def test_a_trajectory_file_given_alone_grades_with_the_trajectory_rubric(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(ONE_TEST)
    (pytester.path / "expected.toml").write_text(
        '[trajectory]\nmode = "exact"\nexpect = ["session.list", "tasks.find"]\n'
    )
    result = pytester.runpytest("--cleo-grade-rubric-file=expected.toml", "--junitxml=out.xml")
    result.assert_outcomes(passed=1)
    assert _properties(pytester.path / "out.xml")["cleo_rubric"] == "trajectory"


@pytest.mark.parametrize(
    ("args", "ini", "named"),
    [
        (
            ["--cleo-grade-rubric=cleo", "--cleo-grade-rubric-file=rules.toml"],
            "",
            "--cleo-grade-rubric",
        ),
        (
            ["--cleo-grade-rubric-file=rules.toml"],
            "cleo_grade_rubric = cleo\n",
            "ini cleo_grade_rubric",
        ),
    ],
    ids=["command-line", "ini"],
)
def test_a_rubric_file_beside_cleos_rubric_named_is_a_usage_error_saying_how(
    pytester: pytest.Pytester, args: list[str], ini: str, named: str
) -> None:
    pytester.makepyfile(ONE_TEST)
    (pytester.path / "rules.toml").write_text(RULES)
    pytester.makeini("[pytest]\n" + ini)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: cleo-grade: --cleo-grade-rubric-file */rules.toml: rubric 'cleo' ({named}) "
            "reads no rubric file; name the rubric the file is for (--cleo-grade-rubric=rules, "
            "weighted or trajectory), or leave the rubric out: a rubric file alone selects its "
            "rubric"
        ]
    )


@pytest.mark.parametrize(
    "option",
    [
        "--cleo-grade-judge-url=http://127.0.0.1:9/v1",
        "--cleo-grade-judge-model=gpt-test",
        "--cleo-grade-judge-cache=off",
    ],
)
def test_judge_options_beside_rubrics_that_ask_no_judge_are_a_warning(
    pytester: pytest.Pytester, option: str
) -> None:
    pytester.makepyfile(ONE_TEST)
    result = pytester.runpytest(option, "-W", "default")
    result.assert_outcomes(passed=1, warnings=1)
    name = option.split("=")[0]
    result.stdout.fnmatch_lines(
        [
            f"*CleoGradeWarning: cleo-grade: {name} changed nothing: no graded test's rubric asks "
            "a judge (rubric cleo); the weighted rubric does*"
        ]
    )


@pytest.mark.e2e
def test_under_xdist_judge_options_beside_rubrics_that_ask_no_judge_are_one_warning(
    pytester: pytest.Pytester,
) -> None:
    # The controller collects nothing: its workers' collections tell it, and it says it once.
    pytester.makepyfile(ONE_TEST + ONE_TEST.replace("test_agent", "test_other"))
    result = pytester.runpytest("-n", "2", "--cleo-grade-judge-model=gpt-test", "-W", "default")
    result.assert_outcomes(passed=2)
    said = [line for line in result.outlines if "--cleo-grade-judge-model changed nothing" in line]
    assert len(said) == 1, result.outlines
    assert "no graded test's rubric asks a judge (rubric cleo)" in said[0]


def test_judge_options_are_quiet_when_a_marker_picks_the_weighted_rubric(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_suite=ONE_TEST
        + textwrap.dedent(
            """
            import pytest

            @pytest.mark.cleo_grade(rubric="weighted")
            def test_judged(graded_session):
                graded_session.record("session", "list")
            """
        )
    )
    result = pytester.runpytest(
        "--cleo-grade-judge-model=gpt-test", "--deselect=test_suite.py::test_judged"
    )
    # Deselected: nothing of the run asks a judge, so the option is said to do nothing.
    result.stdout.fnmatch_lines(["*--cleo-grade-judge-model changed nothing*"])
    result = pytester.runpytest("--cleo-grade-judge-model=gpt-test", "-k", "agent or judged")
    # The judged test fails for want of an endpoint; the option is not said to do nothing.
    assert "changed nothing" not in result.stdout.str()
