"""runs=N: each run its own item and graded line, the test decided once over its runs."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cleo_grade.grading._runs import base_test_id, run_of
from tests.fake_judge import FakeJudgeServer, serve
from tests.plugin_suites import REPLAY, make_suite

#: An agent that alternates by run index: odd runs 100 %, even runs 75 %.
FLIPPING = """
def agent_for(run):
    return perfect if run % 2 else seventy_five
"""


def flipping_suite(pytester: pytest.Pytester, name: str, marker: str, more: str = "") -> None:
    """A suite of one repeated test ``name`` running the flipping agent, and ``more``."""
    test = f"""
@pytest.mark.cleo_grade({marker})
def {name}(graded_session, cleo_grade_run):
    agent_for(cleo_grade_run)(graded_session)
"""
    make_suite(pytester, FLIPPING + test + more)


def _history(pytester: pytest.Pytester) -> list[dict[str, object]]:
    path = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_run_is_an_item_graded_and_stored_with_its_run_index(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        FLIPPING
        + """
@pytest.mark.cleo_grade(runs=4, fail_under="A")
@pytest.mark.parametrize("case", ["x"])
def test_agent(graded_session, cleo_grade_run, case):
    agent_for(cleo_grade_run)(graded_session)
""",
    )
    result = pytester.runpytest("-v")
    result.stdout.fnmatch_lines(
        [
            "*test_agent[[]x-run-1[]] PASSED*",
            "*test_agent[[]x-run-2[]] PASSED*",
            "*test_agent[[]x-run-3[]] PASSED*",
            "*test_agent[[]x-run-4[]] FAILED*",
        ]
    )
    result.assert_outcomes(passed=3, failed=1)
    lines = _history(pytester)
    assert sorted((line["run"], line["runs"], line["totalScore"]) for line in lines) == [
        (1, 4, 100),
        (2, 4, 75),
        (3, 4, 100),
        (4, 4, 75),
    ]
    assert {line["testId"] for line in lines} == {"test_agent.py::test_agent[x]"}
    result.stdout.fnmatch_lines(
        [
            "*cleo-grade: test_agent.py::test_agent[[]x[]]: flaky, FAILED over 4 runs: "
            "mean 87.5% is below 90% (A)*",
            "*cleo-grade repeats*",
            "test_agent.py::test_agent[[]x[]]: flaky, FAILED (mean 87.5% is below 90% (A))",
            "    4 runs, mean 87.5% sd 14.4 (95% bootstrap *), pass rate 2/4 (95% Wilson 15-85%), "
            "pass^4 0.00, pass@4 1.00 (unbiased)",
        ]
    )


def test_the_pass_rate_and_pass_k_policies_decide_the_test(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        FLIPPING
        + """
@pytest.mark.cleo_grade(runs=4, fail_under="A", min_pass_rate=0.5)
def test_rate(graded_session, cleo_grade_run):
    agent_for(cleo_grade_run)(graded_session)

@pytest.mark.cleo_grade(runs=4, fail_under="A", pass_k=(2, 0.2))
def test_pass_k(graded_session, cleo_grade_run):
    agent_for(cleo_grade_run)(graded_session)

@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_stable(graded_session):
    seventy_five(graded_session)
""",
    )
    result = pytester.runpytest("--junitxml=out.xml")
    # pass^2 = C(2,2)/C(4,2) = 1/6 < 0.2: the only failure.
    result.assert_outcomes(passed=10, failed=1)
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_pass_k: flaky, FAILED (pass^2 0.17 < 0.2)",
            "*",
            "test_agent.py::test_rate: flaky, PASSED (pass rate 2/4 >= 0.5)",
            "*",
            "test_agent.py::test_stable: stable pass, PASSED (mean 75% reaches 75% (B))",
        ]
    )
    root = ET.parse(pytester.path / "out.xml").getroot()
    decided = {}
    for case in root.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "cleo_verdict" in props:
            decided[case.get("name")] = props
    assert sorted(decided) == ["test_pass_k[run-4]", "test_rate[run-4]", "test_stable[run-3]"]
    assert decided["test_pass_k[run-4]"]["cleo_pass_hat_2"] == "0.17"
    assert decided["test_pass_k[run-4]"]["cleo_decision"] == "fail"
    assert decided["test_rate[run-4]"]["cleo_verdict"] == "flaky"
    assert decided["test_stable[run-3]"]["cleo_verdict"] == "stable pass"


@pytest.mark.e2e  # two xdist workers; the controller runs in this process
def test_runs_from_the_command_line_spread_over_xdist_workers_and_decide_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_suite(
        pytester,
        FLIPPING
        + """
import os

def test_agent(graded_session, cleo_grade_run):
    graded_session.record("session", "list", gateway="cleo_query")
    agent_for(cleo_grade_run)(graded_session)
    with open(f"worker-{cleo_grade_run}", "w") as handle:
        handle.write(os.environ.get("PYTEST_XDIST_WORKER", "none"))
""",
    )
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("-n", "2", "--cleo-grade-runs=6", "--cleo-grade-fail-under=A")
    result.assert_outcomes(passed=5, failed=1)
    workers = {Path(pytester.path / f"worker-{i}").read_text() for i in range(1, 7)}
    assert workers == {"gw0", "gw1"}
    assert len(_history(pytester)) == 6
    result.stdout.fnmatch_lines(["*test_agent: flaky, FAILED (mean 87.5% is below 90% (A))*"])
    text = summary.read_text()
    assert "### Repeated tests" in text
    assert "| `test_agent.py::test_agent` | flaky | **FAIL**" in text


@pytest.fixture
def judge() -> Iterator[FakeJudgeServer]:
    yield from serve()


def test_runs_are_judged_independently_and_a_rerun_of_the_suite_asks_the_judge_nothing(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    make_suite(
        pytester,
        REPLAY
        + """
@pytest.mark.cleo_grade(runs=3)
def test_independent(graded_session):
    replay(graded_session)

@pytest.mark.cleo_grade(runs=3, judge_cache_across_runs=True)
def test_shared(graded_session):
    replay(graded_session, "show")
""",
    )
    args = [
        "--cleo-grade-rubric=weighted",
        f"--cleo-grade-judge-url={judge.base_url}",
        "--cleo-grade-judge-model=fake-judge",
    ]
    pytester.runpytest(*args).assert_outcomes(passed=6)
    # Three identical runs judged three times; the shared test's runs once.
    assert judge.count == 4
    pytester.runpytest(*args).assert_outcomes(passed=6)
    assert judge.count == 4


def test_report_mode_shows_the_decision_without_failing_the_test(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
@pytest.mark.cleo_grade(runs=2, fail_under="A", mode="report")
def test_agent(graded_session):
    seventy_five(graded_session)
""",
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["test_agent.py::test_agent: stable fail, below (report mode) (mean 75% is below 90% (A))"]
    )


def test_a_run_failing_on_its_own_is_a_failed_run_and_the_test_fails_once(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
@pytest.mark.cleo_grade(runs=3, min_pass_rate=1.0)
def test_agent(graded_session, cleo_grade_run):
    perfect(graded_session)
    assert cleo_grade_run != 2, "the agent broke on run 2"
""",
    )
    result = pytester.runpytest("-v")
    # Run 2 fails on its own; the decision (2/3 < 1.0) rides on it only if it came last, so
    # run 3 carries it here: two failures in all, each with its own reason.
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_agent[[]run-2[]] FAILED*",
            "*test_agent[[]run-3[]] FAILED*",
            "test_agent.py::test_agent: flaky, FAILED (pass rate 2/3 < 1)",
        ]
    )


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("runs=0", "runs=...): invalid runs 0: expected a whole number from 1 to 1000"),
        ("runs=2.5", "invalid runs 2.5"),
        ("runs=2, min_pass_rate=1.5", "invalid min_pass_rate 1.5: expected a fraction from 0 to 1"),
        ("runs=2, pass_k=3", "invalid pass_k 3: expected (k, minimum)"),
        ("runs=2, pass_k=(0, 0.5)", "invalid pass_k (0, 0.5)"),
        # Arguments that cannot decide as written: k beyond the runs, two rules at once.
        ("runs=2, pass_k=(3, 0.5)", "pass_k=(3, 0.5) needs at least 3 runs; the test runs 2"),
        (
            "runs=4, min_pass_rate=0.5, pass_k=(2, 0.5)",
            "min_pass_rate= and pass_k= each decide a repeated test; give one",
        ),
    ],
)
def test_bad_repeat_arguments_are_usage_errors_naming_the_test(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    make_suite(
        pytester,
        f"""
@pytest.mark.cleo_grade({marker})
def test_agent(graded_session):
    perfect(graded_session)
""",
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_agent.py::test_agent*{message}*"])


def test_bad_run_counts_from_the_command_line_and_the_ini_file_are_usage_errors(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, "def test_agent(graded_session):\n    perfect(graded_session)\n")
    cli = pytester.runpytest("--cleo-grade-runs=0")
    assert cli.ret == pytest.ExitCode.USAGE_ERROR
    cli.stderr.fnmatch_lines(["*--cleo-grade-runs: invalid runs '0'*"])
    make_suite(
        pytester,
        "def test_agent(graded_session):\n    perfect(graded_session)\n",
        ini="cleo_grade_runs = many\n",
    )
    ini = pytester.runpytest()
    assert ini.ret == pytest.ExitCode.USAGE_ERROR
    ini.stderr.fnmatch_lines(["*ini option cleo_grade_runs: invalid runs 'many'*"])


def test_the_run_gate_counts_a_repeated_test_once_by_the_mean_of_its_runs(
    pytester: pytest.Pytester,
) -> None:
    flipping_suite(
        pytester,
        "test_repeated",
        "runs=2",
        """
def test_single(graded_session):
    forty(graded_session)
""",
    )
    # (87.5 + 40) / 2 = 63.75; counting each run would give (100 + 75 + 40) / 3 = 71.67.
    result = pytester.runpytest("--cleo-grade-gate=70")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "run grade C: mean 63.75% over 2 graded tests",
            "gate FAILED: mean 63.75% is below 70% (C)",
        ]
    )


def test_a_k_selection_of_some_runs_decides_the_test_over_the_selected_runs(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        FLIPPING
        + """
@pytest.mark.cleo_grade(runs=4, fail_under="A")
def test_agent(graded_session, cleo_grade_run):
    agent_for(cleo_grade_run)(graded_session)
""",
    )
    result = pytester.runpytest("-k", "run-1 or run-3")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_agent: stable pass, PASSED (mean 100% reaches 90% (A))",
            "    *",
            # A decision over part of the runs (-k, --lf) says so.
            "    decided over 2 of 4 runs: the others did not run (deselected by -k or --lf, *",
        ]
    )


def test_a_run_that_could_not_be_graded_is_named_beside_the_mean(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_agent(graded_session, cleo_grade_run):
    if cleo_grade_run != 2:
        perfect(graded_session)
""",
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        ["    1 run could not be graded (failed): the mean is over the other 2"]
    )


@pytest.mark.parametrize(
    ("nodeid", "run", "test_id"),
    [
        ("t.py::test_x[run-3]", 3, "t.py::test_x"),
        ("t.py::test_x[a-run-12]", 12, "t.py::test_x[a]"),
        ("t.py::test_x[run-2-b]", 2, "t.py::test_x[b]"),
        ("t.py::C::test[x-y-run-1]", 1, "t.py::C::test[x-y]"),
        # A parameter's own id may hold "run-N": the run is the last one.
        ("t.py::test_x[dry-run-1-run-2]", 2, "t.py::test_x[dry-run-1]"),
        ("t.py::test_x[run-1-run-1]", 1, "t.py::test_x[run-1]"),
    ],
)
def test_the_run_and_the_test_id_are_read_back_from_an_item_id(
    nodeid: str, run: int, test_id: str
) -> None:
    assert run_of(nodeid) == run
    assert base_test_id(nodeid, run) == test_id


def test_an_item_id_without_a_run_has_none() -> None:
    assert run_of("t.py::test_x[a-b]") is None


def test_repeated_comparison_tests_feed_the_comparisons_runs(pytester: pytest.Pytester) -> None:
    from tests.plugin.test_compare import suite

    make_suite(pytester, suite({}))
    result = pytester.runpytest("--cleo-grade-runs=2", "--cleo-grade-compare=sonnet:haiku")
    result.assert_outcomes(passed=20)
    result.stdout.fnmatch_lines(
        [
            "TQ-1   quick     4.00    4.00   0.00  Equivalent  2/2   [[]0.00, 0.00[]]    yes",
            "Decision: GO *",
        ]
    )


def test_a_later_run_of_some_runs_is_never_mixed_with_the_runs_before_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_cleo_grade.cli import main

    flipping_suite(pytester, "test_agent", "runs=4")
    pytester.runpytest().assert_outcomes(passed=4)
    # Only run 2 (75 %) again: the latest series is that one run, not run 2 with runs 3-4
    # of the run before.
    pytester.runpytest("-k", "run-2").assert_outcomes(passed=1)
    lines = _history(pytester)
    assert len({line["series"] for line in lines}) == 2
    assert [line["series"] == lines[-1]["series"] for line in lines] == [False] * 4 + [True]
    baseline = pytester.path / "b.json"
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    assert main(["baseline", "save", str(baseline), "--history", str(history)]) == 0
    saved = json.loads(baseline.read_text())["tests"]["test_agent.py::test_agent"]
    # A baseline takes the latest whole series, never a mix: the run looked at alone is none.
    assert saved["percents"] == [100.0, 75.0, 100.0, 75.0]
    report = pytester.path / "r.html"
    assert main(["report", "--html", str(report), "--history", str(history)]) == 0
    assert "(1 grade)" in capsys.readouterr().out


def test_an_xfail_marked_repeated_test_stays_xfailed_whatever_its_decision(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
@pytest.mark.xfail(reason="the agent cannot do this yet")
@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_agent(graded_session):
    forty(graded_session)
    assert False
""",
    )
    result = pytester.runpytest()
    result.assert_outcomes(xfailed=3)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["test_agent.py::test_agent: stable fail, below (expected to fail) (mean 40% *"]
    )
    result.stdout.no_fnmatch_line("*FAILED*")


@pytest.mark.parametrize("strict", [False, True])
def test_an_xfail_marked_repeated_test_whose_decision_fails_is_one_xfail(
    pytester: pytest.Pytester, strict: bool
) -> None:
    # The agent fails as expected (below B in every run) without the body raising: as a
    # single-run test is XFAIL, the repeated test is XFAIL once, carried by its last run;
    # its other runs are samples (XPASS, not counted), never strict-XPASS failures.
    make_suite(
        pytester,
        f"""
@pytest.mark.xfail(reason="known bad agent", strict={strict})
@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_agent(graded_session):
    forty(graded_session)
""",
    )
    result = pytester.runpytest("-rxX")
    result.assert_outcomes(xpassed=2, xfailed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["XFAIL test_agent.py::test_agent[[]run-3[]] - known bad agent"])
    result.stdout.no_fnmatch_line("*XPASS(strict)*")
    # One test left out of the run's mean, however many runs it had.
    result.stdout.fnmatch_lines(["no graded tests (1 xfail/xpass not counted)"])
    assert [line["excluded"] for line in _history(pytester)] == ["xpassed", "xpassed", "xfailed"]


@pytest.mark.parametrize(
    ("strict", "failed", "workers"),
    [(False, 0, None), (True, 1, None), pytest.param(True, 1, "2", marks=pytest.mark.e2e)],
)
def test_an_xfail_marked_repeated_test_whose_decision_passes_is_one_xpass(
    pytester: pytest.Pytester, strict: bool, failed: int, workers: str | None
) -> None:
    # Under xdist the runs' strictness travels to the controller with their reports, and the
    # run completing the test is whichever reports last.
    make_suite(
        pytester,
        f"""
@pytest.mark.xfail(reason="fixed by now?", strict={strict})
@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_agent(graded_session):
    perfect(graded_session)
""",
    )
    if workers is None:
        result = pytester.runpytest("-rfxX")
    else:
        result = pytester.runpytest("-rfxX", "-n", workers)  # the workers' processes only
    result.assert_outcomes(xpassed=3 - failed, failed=failed)
    assert result.ret == failed
    if strict:
        # As pytest reports a strict XPASS (pytest 8 leaves its reason out of the summary line).
        result.stdout.fnmatch_lines(
            ["[[]XPASS(strict)[]] fixed by now?", "FAILED test_agent.py::test_agent[[]run-?[]]*"]
        )


@pytest.mark.parametrize("crash", [1, 3])
def test_a_repeated_xfail_test_of_which_one_run_raised_is_one_xfail_whichever_run_it_was(
    pytester: pytest.Pytester, crash: int
) -> None:
    # Its grades pass the decision, but a run raised: the expected failure happened, as one
    # run raising is XFAIL. It depended on which run raised (the last: XFAIL; an earlier
    # one: a strict XPASS failure), so under xdist on scheduling; the raised run counted as
    # a passed run ("stable pass, 3/3").
    make_suite(
        pytester,
        f"""
@pytest.mark.xfail(reason="known crash", strict=True)
@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_agent(graded_session, cleo_grade_run):
    perfect(graded_session)
    if cleo_grade_run == {crash}:
        raise RuntimeError("boom")
""",
    )
    result = pytester.runpytest("-rfxX")
    assert result.ret == 0
    # The raised run is XFAIL on its own; the last run carries the test's XFAIL.
    result.assert_outcomes(xfailed=2 if crash == 1 else 1, xpassed=1 if crash == 1 else 2)
    result.stdout.fnmatch_lines(["XFAIL test_agent.py::test_agent[[]run-3[]] - known crash"])
    result.stdout.fnmatch_lines(["*pass rate 2/3*"])
    result.stdout.no_fnmatch_line("*XPASS(strict)*")


def test_a_parameter_id_holding_run_n_is_not_taken_for_the_run(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        FLIPPING
        + """
@pytest.mark.cleo_grade(runs=2, fail_under="A")
@pytest.mark.parametrize("mode", ["dry-run-1"])
def test_p(graded_session, cleo_grade_run, mode):
    agent_for(cleo_grade_run)(graded_session)
""",
    )
    result = pytester.runpytest("-v")
    # Runs 1 and 2 of test_p[dry-run-1]: 100 % and 75 %, mean 87.5 % below A.
    result.stdout.fnmatch_lines(
        ["test_agent.py::test_p[[]dry-run-1[]]: flaky, FAILED (mean 87.5% is below 90% (A))"]
    )
    result.assert_outcomes(passed=1, failed=1)


def test_a_run_skipped_in_setup_is_left_out_and_one_erroring_in_setup_is_a_failed_run(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
@pytest.fixture
def sandbox(cleo_grade_run, request):
    if cleo_grade_run == 3:
        if "skip" in request.node.name:
            pytest.skip("sandbox unavailable")
        raise RuntimeError("sandbox broke")

@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_skip(sandbox, graded_session):
    forty(graded_session)

@pytest.mark.cleo_grade(runs=3, fail_under="B", min_pass_rate=1.0)
def test_error(sandbox, graded_session):
    perfect(graded_session)
""",
    )
    result = pytester.runpytest("-v")
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_skip: stable fail, FAILED (mean 40% is below 75% (B))",
            "test_agent.py::test_error: flaky, FAILED (pass rate 2/3 < 1)",
        ]
    )
    result.stdout.no_fnmatch_line("*not decided*")
    assert result.ret == 1


def test_an_imperative_xfail_in_a_run_is_left_out_like_a_skip(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
@pytest.mark.cleo_grade(runs=3, fail_under="B", min_pass_rate=1.0)
def test_agent(graded_session, cleo_grade_run):
    perfect(graded_session)
    if cleo_grade_run == 1:
        pytest.xfail("known infrastructure issue")
""",
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, xfailed=1)
    result.stdout.fnmatch_lines(["test_agent.py::test_agent: stable pass, PASSED *"])


@pytest.mark.parametrize("last_attempt", ["forty", "perfect"])
def test_a_rerun_run_is_decided_on_its_last_attempt(
    pytester: pytest.Pytester, last_attempt: str
) -> None:
    make_suite(
        pytester,
        f"""
attempts = []

@pytest.mark.cleo_grade(runs=3, fail_under="A")
def test_agent(graded_session, cleo_grade_run):
    if cleo_grade_run == 3:
        attempts.append(1)
        if len(attempts) == 1:
            {"perfect" if last_attempt == "forty" else "forty"}(graded_session)
            raise ConnectionError("timeout")
        {last_attempt}(graded_session)
        return
    perfect(graded_session)
""",
    )
    result = pytester.runpytest("-p", "rerunfailures", "--reruns", "1")
    if last_attempt == "forty":
        # Mean of 100, 100, 40 = 80 %: below A, whatever the superseded attempt graded.
        result.assert_outcomes(passed=2, failed=1)
        assert "1 rerun" in result.stdout.lines[-1]
        result.stdout.fnmatch_lines(
            ["test_agent.py::test_agent: flaky, FAILED (mean 80% is below 90% (A))"]
        )
    else:
        result.assert_outcomes(passed=3)
        assert "1 rerun" in result.stdout.lines[-1]
        result.stdout.fnmatch_lines(["test_agent.py::test_agent: stable pass, PASSED *"])


def test_the_html_report_shows_each_repeated_tests_decision_as_the_terminal_does(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
@pytest.mark.cleo_grade(runs=3, fail_under="B", min_pass_rate=0.9)
def test_agent(graded_session, cleo_grade_run):
    perfect(graded_session)
    assert cleo_grade_run != 2, "the agent broke on run 2"
""",
    )
    result = pytester.runpytest("--cleo-grade-html=report.html")
    line = "flaky, FAILED (pass rate 2/3 &lt; 0.9)"
    result.stdout.fnmatch_lines([f"test_agent.py::test_agent: {line.replace('&lt;', '<')}"])
    # Every run reached the bar by its grade; the decision counts the run that broke.
    assert f"<td data-sort='{line}'>{line}</td>" in (pytester.path / "report.html").read_text()


def test_a_failing_decisions_figure_never_shows_as_reaching_its_threshold(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        FLIPPING
        + """
@pytest.mark.cleo_grade(runs=3, fail_under=91.67)
def test_mean(graded_session, cleo_grade_run):
    agent_for(cleo_grade_run)(graded_session)

@pytest.mark.cleo_grade(runs=7, fail_under="A", pass_k=(2, 0.29))
def test_pass_k(graded_session, cleo_grade_run):
    agent_for(cleo_grade_run)(graded_session)
""",
    )
    result = pytester.runpytest("--junitxml=out.xml", "--cleo-grade-gate=91.67")
    result.assert_outcomes(passed=8, failed=2)
    # (100 + 75 + 100) / 3 = 91.667 and pass^2 = C(4,2)/C(7,2) = 6/21 = 0.2857: both round
    # up to their threshold, so both are cut, as the run line cuts the same mean.
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_mean: flaky, FAILED (mean 91.66% is below 91.67% (A))",
            "    3 runs, mean 91.66% *",
            "test_agent.py::test_pass_k: flaky, FAILED (pass^2 0.28 < 0.29)",
            "    7 runs, * pass^2 0.28, *",
        ]
    )
    root = ET.parse(pytester.path / "out.xml").getroot()
    decided = {}
    for case in root.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "cleo_verdict" in props:
            decided[case.get("name")] = props
    assert decided["test_mean[run-3]"]["cleo_decided_by"] == "mean 91.66% is below 91.67% (A)"
    assert decided["test_mean[run-3]"]["cleo_mean_percent"] == "91.66"
    assert decided["test_pass_k[run-7]"]["cleo_decided_by"] == "pass^2 0.28 < 0.29"
    assert decided["test_pass_k[run-7]"]["cleo_pass_hat_2"] == "0.28"


def test_runs_asked_of_a_session_taken_with_getfixturevalue_are_said_not_applied(
    pytester: pytest.Pytester,
) -> None:
    # runs=3 makes its items from the test's arguments at collection: a session asked for
    # in the body came too late, and the test silently ran once.
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(runs=3)
        def test_late(request):
            perfect(request.getfixturevalue("graded_session"))

        @pytest.mark.cleo_grade(runs=3)
        def test_argument(graded_session):
            perfect(graded_session)
        """,
    )
    result = pytester.runpytest("-W", "default")
    result.assert_outcomes(passed=4)
    text = result.stdout.str()
    assert text.count("is not applied") == 1
    result.stdout.fnmatch_lines(
        [
            "*CleoGradeWarning: cleo-grade: test_agent.py::test_late: runs=3 is not applied: the"
            " test asks for graded_session with request.getfixturevalue*"
        ]
    )


def test_a_repeated_xfail_raises_test_with_a_run_raising_another_error_counts_as_one_test(
    pytester: pytest.Pytester,
) -> None:
    # One run raising an error the marker's raises= does not name is a real failure, as a
    # single such run is: the test is counted, once, by the mean of all its runs.
    make_suite(
        pytester,
        """
@pytest.mark.xfail(reason="b", raises=ValueError)
@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_agent(graded_session, cleo_grade_run):
    (perfect if cleo_grade_run == 1 else forty)(graded_session)
    if cleo_grade_run == 1:
        raise TypeError("wrong")

@pytest.mark.xfail(reason="b", raises=ValueError)
@pytest.mark.cleo_grade(fail_under="B")
def test_single(graded_session):
    forty(graded_session)
    raise TypeError("wrong")
""",
    )
    result = pytester.runpytest()
    assert result.ret == 1
    # Run 1's FAILED, and run 3 (an XFAIL on its own) carries the decision's failure.
    result.assert_outcomes(failed=3, xpassed=1)
    # (100 + 40 + 40) / 3 = 60 for the repeated test, 40 for the single one.
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_agent: stable fail, FAILED (mean 60% is below 75% (B))",
            "run grade D: mean 50% over 2 graded tests (1 below)",
        ]
    )
    result.stdout.no_fnmatch_line("*xfail/xpass not counted*")


def test_a_run_whose_fixture_teardown_errors_is_a_failed_run(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
@pytest.fixture
def sandbox(cleo_grade_run):
    yield
    if cleo_grade_run in (1, 3):
        raise RuntimeError("sandbox cleanup broke")

@pytest.mark.cleo_grade(runs=3, fail_under="B", min_pass_rate=1.0)
def test_agent(sandbox, graded_session):
    perfect(graded_session)
""",
    )
    result = pytester.runpytest("-v", "--junitxml=out.xml")
    assert result.ret == 1
    # Run 1 failed by its teardown: the decision fails on run 3, which then errors too.
    result.assert_outcomes(passed=2, failed=1, errors=2)
    result.stdout.fnmatch_lines(["test_agent.py::test_agent: flaky, FAILED (pass rate 1/3 < 1)"])
    properties = {
        prop.get("name"): prop.get("value")
        for prop in ET.parse(pytester.path / "out.xml").iter("property")
    }
    assert properties["cleo_runs_passed"] == "1"


def test_a_repeated_xfail_raises_test_with_a_failed_run_is_whole_in_baselines_and_table(
    pytester: pytest.Pytester,
) -> None:
    from pytest_cleo_grade.cli import main

    # Runs 1 and 3 pass (XPASS, reported before the test counts); run 2 raises what raises=
    # does not name: the test is counted whole, in a baseline as in the run's mean.
    make_suite(
        pytester,
        """
@pytest.mark.xfail(reason="b", raises=ValueError)
@pytest.mark.cleo_grade(runs=3, fail_under="B")
def test_agent(graded_session, cleo_grade_run):
    (forty if cleo_grade_run == 2 else perfect)(graded_session)
    if cleo_grade_run == 2:
        raise TypeError("wrong")
""",
    )
    result = pytester.runpytest("--cleo-grade-save-baseline=baseline.json")
    result.assert_outcomes(failed=1, xpassed=2)
    result.stdout.fnmatch_lines(["run grade B: mean 80% over 1 graded test"])
    result.stdout.no_fnmatch_line("*not counted*")
    saved = json.loads((pytester.path / "baseline.json").read_text())["tests"]
    assert sorted(saved["test_agent.py::test_agent"]["percents"]) == [40.0, 100.0, 100.0]
    # The baseline the history gives is the same whole series.
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    from_history = pytester.path / "b.json"
    assert main(["baseline", "save", str(from_history), "--history", str(history)]) == 0
    tests = json.loads(from_history.read_text())["tests"]
    assert sorted(tests["test_agent.py::test_agent"]["percents"]) == [40.0, 100.0, 100.0]
