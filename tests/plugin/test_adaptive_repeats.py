"""runs="auto": a repeated test stops when its verdict is settled, and says so."""

from __future__ import annotations

import json
import re
import tempfile
import xml.etree.ElementTree as ET

import pytest

from pytest_cleo_grade.cli import main

AGENTS = """
import pytest

AGENTS = {
    "passing": lambda run: True,
    "failing": lambda run: False,
    "borderline": lambda run: run % 2 == 1,
}

@pytest.mark.parametrize("agent", list(AGENTS))
@pytest.mark.cleo_grade(MARKER expect=["a.b", "c.d"], mode="exact", fail_under=90)
def test_agent(graded_session, cleo_grade_run, agent):
    graded_session.record("a", "b")
    if AGENTS[agent](cleo_grade_run):
        graded_session.record("c", "d")
"""


def graded_runs(pytester: pytest.Pytester, history: str = ".cleo/metrics/GRADES.jsonl") -> dict:
    counts: dict[str, int] = {}
    for line in (pytester.path / history).read_text().splitlines():
        test = json.loads(line)["testId"]
        counts[test] = counts.get(test, 0) + 1
    return counts


def decisions(xml: str) -> dict[str, str]:
    found = {}
    for case in ET.fromstring(xml).iter("testcase"):
        agent = re.match(r"test_agent\[(\w+)-run-\d+\]", case.get("name", ""))
        for prop in case.iter("property"):
            if agent and prop.get("name") == "cleo_decision":
                found[agent[1]] = str(prop.get("value"))
    return found


def test_a_clear_agent_is_decided_in_far_fewer_runs_than_max_runs(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_agents=AGENTS.replace("MARKER", 'runs="auto", max_runs=20,'))
    result = pytester.runpytest("-rs", "--junitxml=out.xml")
    # passing: 4 runs pass, 16 skipped; failing: 3 runs pass as samples, the 4th fails the
    # test; borderline: 20 runs, the 20th carries the failing decision.
    result.assert_outcomes(passed=4 + 3 + 19, failed=2, skipped=32)
    assert graded_runs(pytester) == {
        "test_agents.py::test_agent[passing]": 4,
        "test_agents.py::test_agent[failing]": 4,
        "test_agents.py::test_agent[borderline]": 20,
    }
    result.stdout.fnmatch_lines_random(
        [
            "test_agents.py::test_agent[passing]: stable pass, PASSED (mean 100% reaches 90% (A))",
            "    adaptive runs: settled after 4 runs: SPRT accepts pass "
            "(pass rate 70% vs 30%, alpha = beta = 0.05)",
            "    adaptive runs: settled after 4 runs: SPRT accepts fail *",
            "    adaptive runs: not settled after max_runs=20: decided over all runs",
            "SKIPPED [[]16] test_agents.py:*: cleo-grade: test_agents.py::test_agent[[]passing] is "
            "decided (settled after 4 runs: SPRT accepts pass *)",
        ]
    )
    assert decisions((pytester.path / "out.xml").read_text()) == {
        "passing": "pass",
        "failing": "fail",
        "borderline": "fail",
    }


def test_adaptive_and_fixed_runs_give_the_same_verdicts(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agents=AGENTS.replace("MARKER", "runs=20,"))
    pytester.runpytest("--junitxml=fixed.xml", "--cleo-grade-history=fixed.jsonl")
    pytester.makepyfile(test_agents=AGENTS.replace("MARKER", ""))
    # The option and the ini: runs=auto for every graded test, at most 12 runs.
    pytester.makeini("[pytest]\ncleo_grade_max_runs = 12\n")
    result = pytester.runpytest(
        "--cleo-grade-runs=auto", "--junitxml=auto.xml", "--cleo-grade-history=auto.jsonl"
    )
    result.assert_outcomes(passed=4 + 3 + 11, failed=2, skipped=16)
    fixed = decisions((pytester.path / "fixed.xml").read_text())
    assert fixed == decisions((pytester.path / "auto.xml").read_text())
    assert graded_runs(pytester, "auto.jsonl")["test_agents.py::test_agent[borderline]"] == 12


def test_min_runs_holds_a_clear_agent_longer(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(runs="auto", min_runs=7, max_runs=9, expect=["a.b"])
        def test_agent(graded_session):
            graded_session.record("a", "b")
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=7, skipped=2)
    result.stdout.fnmatch_lines(["    adaptive runs: settled after 7 runs: *"])


def test_an_adaptive_series_is_a_whole_baseline(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_agents=AGENTS.replace("MARKER", 'runs="auto",'))
    result = pytester.runpytest("--cleo-grade-save-baseline=b.json")
    assert "baseline not saved" not in result.stdout.str()
    assert main(["baseline", "show", str(pytester.path / "b.json")]) == 0
    shown = capsys.readouterr().out
    assert "test_agents.py::test_agent[passing]: 100.0% over 4 runs" in shown
    assert "test_agents.py::test_agent[borderline]: 83.3% over 20 runs" in shown


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ('runs="often"', "invalid runs 'often': expected a whole number from 1 to 1000, or 'auto'"),
        ("runs=3, max_runs=5", "max_runs= and min_runs= belong to adaptive repeats: runs='auto'"),
        ('runs="auto", min_runs=9, max_runs=5', "min_runs= is above max_runs="),
        ('runs="auto", max_runs=0', "invalid max_runs 0"),
    ],
)
def test_bad_adaptive_markers_are_usage_errors(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.cleo_grade({marker}, expect=["a.b"])
        def test_agent(graded_session):
            graded_session.record("a", "b")
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_bad_runs_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_agents=AGENTS.replace("MARKER", ""))
    result = pytester.runpytest("--cleo-grade-runs=sometimes")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*invalid runs 'sometimes'*or 'auto'*"])


@pytest.mark.e2e
def test_under_xdist_the_controller_decides_and_workers_skip_the_rest(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_agents=AGENTS.replace("MARKER", 'runs="auto", max_runs=20,'))
    # The controller tells the workers in a temporary directory of its own: gone at the end.
    temporary = pytester.mkdir("temporary")
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    result = pytester.runpytest("-n", "2", "--junitxml=out.xml")
    assert list(temporary.iterdir()) == []
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 2
    # Workers may start a few runs before the decision reaches them, never all of them.
    assert outcomes.get("skipped", 0) >= 10
    assert decisions((pytester.path / "out.xml").read_text()) == {
        "passing": "pass",
        "failing": "fail",
        "borderline": "fail",
    }
    result.stdout.fnmatch_lines_random(
        ["    adaptive runs: settled after 4 runs: SPRT accepts pass *"]
    )


def test_pass_k_sets_the_target_rate_and_the_fewest_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(runs="auto", max_runs=12, pass_k=(6, 0.5), expect=["a.b"])
        def test_agent(graded_session):
            graded_session.record("a", "b")
        """
    )
    result = pytester.runpytest()
    # Target 0.5 ** (1/6) = 0.89: H1 0.99 (clamped) vs H0 0.69, log(0.99/0.69) = 0.361 a
    # pass: 9 passes reach log(19) = 2.944.
    result.assert_outcomes(passed=9, skipped=3)
    result.stdout.fnmatch_lines(
        ["    adaptive runs: settled after 9 runs: *(pass rate 99% vs 69%*"]
    )
