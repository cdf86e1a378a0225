"""The baseline gate in real pytest runs: save, compare, fail on regression, notes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.plugin_suites import make_suite

#: The agent each test runs is read from a file, so two runs of one suite can differ.
SUITE = """
from pathlib import Path

def chosen(name):
    return {"perfect": perfect, "seventy_five": seventy_five, "forty": forty}[
        Path(name).read_text().strip()
    ]

def test_one(graded_session):
    chosen("one.txt")(graded_session)

def test_two(graded_session):
    chosen("two.txt")(graded_session)
"""


def _agents(pytester: pytest.Pytester, one: str, two: str) -> None:
    pytester.makefile(".txt", one=one, two=two)


def test_a_saved_baseline_gates_the_next_run_on_regressions(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "seventy_five")
    first = pytester.runpytest("--cleo-grade-save-baseline=baseline.json")
    first.assert_outcomes(passed=2)
    saved = json.loads((pytester.path / "baseline.json").read_text())
    assert {k: v["percents"] for k, v in saved["tests"].items()} == {
        "test_agent.py::test_one": [100.0],
        "test_agent.py::test_two": [75.0],
    }
    _agents(pytester, "perfect", "forty")
    second = pytester.runpytest(
        "--cleo-grade-baseline=baseline.json", "--cleo-grade-fail-on-regression=total:5"
    )
    second.assert_outcomes(passed=2)
    assert second.ret == 1
    second.stdout.fnmatch_lines(
        [
            "*cleo-grade baseline*",
            "baseline gate FAILED: 1 regression",
            "REGRESSION test_agent.py::test_two total: 75.0% -> 40.0% (-35.0, tolerance 5 points)",
        ]
    )
    # The same run within a looser tolerance passes, with the same figures shown.
    loose = pytester.runpytest(
        "--cleo-grade-baseline=baseline.json", "--cleo-grade-fail-on-regression=total:50%"
    )
    assert loose.ret == 0
    loose.stdout.fnmatch_lines(["baseline gate passed: no drop beyond the tolerances"])


def test_the_html_report_shows_the_baseline_gate_the_terminal_shows(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "seventy_five")
    pytester.runpytest("--cleo-grade-save-baseline=baseline.json").assert_outcomes(passed=2)
    _agents(pytester, "perfect", "forty")
    run = pytester.runpytest(
        "--cleo-grade-baseline=baseline.json",
        "--cleo-grade-fail-on-regression=total:5",
        "--cleo-grade-html=report.html",
    )
    assert run.ret == 1
    page = (pytester.path / "report.html").read_text()
    assert (
        "<div class='verdict gate fail' data-state='fail'>"
        "<strong>baseline gate FAILED: 1 regression</strong></div>"
    ) in page


def test_a_missing_baseline_is_a_note_unless_required(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "perfect")
    noted = pytester.runpytest(
        "--cleo-grade-baseline=absent.json", "--cleo-grade-fail-on-regression=total:5"
    )
    assert noted.ret == 0
    noted.stdout.fnmatch_lines(["cleo-grade: no baseline at *absent.json: nothing compared"])
    required = pytester.runpytest(
        "--cleo-grade-baseline=absent.json", "--cleo-grade-baseline-required"
    )
    assert required.ret == 1
    required.stdout.fnmatch_lines(["*nothing compared (fails the run)"])


def test_an_unwritable_step_summary_keeps_the_gates_reason_and_warns_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "perfect")
    (pytester.path / "summary").mkdir()  # a directory: the step summary cannot be written
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary"))
    required = pytester.runpytest(
        "--cleo-grade-baseline=absent.json",
        "--cleo-grade-baseline-required",
        "--cleo-grade-html=report.html",
    )
    assert required.ret == 1
    # The reason the run fails is the missing baseline, not the step summary.
    required.stdout.fnmatch_lines(
        ["cleo-grade: no baseline at *absent.json: nothing compared (fails the run)"]
    )
    required.stdout.no_fnmatch_line("cleo-grade: GITHUB_STEP_SUMMARY not written (fails*")
    page = (pytester.path / "report.html").read_text()
    assert "<strong>no baseline at " in page and "GITHUB_STEP_SUMMARY" not in page
    # The write failure is its own warning, said once for the gate's and the grades' blocks.
    text = required.stdout.str()
    assert text.count("CleoGradeWarning: cleo-grade: GITHUB_STEP_SUMMARY not written: ") == 1
    # A baseline that could not be saved keeps that note too.
    (pytester.path / "taken").mkdir()
    unsaved = pytester.runpytest("--cleo-grade-save-baseline=taken")
    assert unsaved.ret == 0
    unsaved.stdout.fnmatch_lines(["cleo-grade: baseline not saved to *taken: *"])
    unsaved.stdout.fnmatch_lines(
        ["*CleoGradeWarning: cleo-grade: GITHUB_STEP_SUMMARY not written*"]
    )


@pytest.mark.parametrize(
    ("content", "why"), [(b"\xff", "not UTF-8 text (byte 0)"), (None, "not a regular file")]
)
def test_an_unreadable_baseline_is_one_line_and_fails_a_gated_run(
    pytester: pytest.Pytester, content: bytes | None, why: str
) -> None:
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "perfect")
    if content is None:
        (pytester.path / "b.json").mkdir()
    else:
        (pytester.path / "b.json").write_bytes(content)
    result = pytester.runpytest(
        "--cleo-grade-baseline=b.json", "--cleo-grade-fail-on-regression=total:5"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines([f"cleo-grade: baseline not usable: *b.json: {why}*"])
    result.stdout.no_fnmatch_line("*INTERNALERROR*")


def test_latest_compares_with_the_previous_run_and_lists_new_and_missing_tests(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "perfect")
    pytester.runpytest("-k", "test_one").assert_outcomes(passed=1)
    _agents(pytester, "seventy_five", "perfect")
    result = pytester.runpytest(
        "--cleo-grade-baseline=latest", "--cleo-grade-fail-on-regression=total:10"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "REGRESSION test_agent.py::test_one total: 100.0% -> 75.0% *",
            "new test (not in baseline): test_agent.py::test_two",
        ]
    )


def test_a_regression_gate_without_a_baseline_is_a_usage_error(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE)
    result = pytester.runpytest("--cleo-grade-fail-on-regression=total:5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cleo-grade-fail-on-regression needs --cleo-grade-baseline*"])
    bad = pytester.runpytest("--cleo-grade-baseline=latest", "--cleo-grade-fail-on-regression=x")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*invalid regression tolerance 'x'*"])
    # Requiring a baseline that no option names passed, having compared nothing.
    required = pytester.runpytest("--cleo-grade-baseline-required")
    assert required.ret == pytest.ExitCode.USAGE_ERROR
    required.stderr.fnmatch_lines(
        ["ERROR: cleo-grade: --cleo-grade-baseline-required needs --cleo-grade-baseline=*"]
    )


#: A repeated test whose agent per run comes from a file: "flip" alternates 100 % and 75 %.
REPEATED = """
from pathlib import Path

@pytest.mark.cleo_grade(runs=4)
def test_agent(graded_session, cleo_grade_run):
    choice = Path("agent.txt").read_text().strip()
    if choice == "flip":
        choice = "perfect" if cleo_grade_run % 2 else "seventy_five"
    {"perfect": perfect, "seventy_five": seventy_five, "forty": forty}[choice](graded_session)
"""


@pytest.mark.e2e  # two xdist workers; the controller runs in this process
def test_with_repeats_on_both_sides_only_a_drop_beyond_the_noise_fails_under_xdist(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_suite(pytester, REPEATED)
    pytester.makefile(".txt", agent="flip")
    # Serial in-process runs save and compare; the last run proves the same under xdist.
    pytester.runpytest("--cleo-grade-save-baseline=baseline.json").assert_outcomes(passed=4)
    saved = json.loads((pytester.path / "baseline.json").read_text())["tests"]
    assert sorted(saved["test_agent.py::test_agent"]["percents"]) == [75.0, 75.0, 100.0, 100.0]
    gate = ["--cleo-grade-baseline=baseline.json", "--cleo-grade-fail-on-regression=total:5"]
    # 87.5 % -> 75 %: beyond 5 points, but the 95 % intervals of four runs each overlap.
    pytester.makefile(".txt", agent="seventy_five")
    noisy = pytester.runpytest(*gate)
    assert noisy.ret == 0
    noisy.stdout.fnmatch_lines(
        [
            "baseline gate passed: no drop beyond the tolerances",
            "within noise test_agent.py::test_agent total: 87.5% -> 75.0% (-12.5, tolerance 5 "
            "points); within noise: 95% intervals overlap *",
        ]
    )
    pytester.makefile(".txt", agent="forty")
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    worse = pytester.runpytest("-n", "2", *gate, "--junitxml=out.xml")
    assert worse.ret == 1
    worse.stdout.fnmatch_lines(
        ["REGRESSION test_agent.py::test_agent total: 87.5% -> 40.0% (-47.5, tolerance 5 points)"]
    )
    text = summary.read_text()
    assert "**baseline gate FAILED: 1 regression**" in text
    assert (
        "| `test_agent.py::test_agent` | total | 87.5% | 40.0% | -47.5 | **REGRESSION** |" in text
    )
    root = ET.parse(pytester.path / "out.xml").getroot()
    suite = {(p.get("name"), p.get("value")) for p in root.iter("property")}
    assert ("cleo_baseline", "baseline gate FAILED: 1 regression") in suite
    assert ("cleo_regressions", "1") in suite


@pytest.mark.parametrize("workers", [None, pytest.param("1", marks=pytest.mark.e2e)])
def test_a_repeated_test_of_which_only_some_runs_ran_is_not_compared(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: str | None
) -> None:
    # `-k run-2` (or --lf re-running the run that carried a failing decision) grades one
    # run of four: its 75 % is no measure of the baseline's mean of 87.5 %, not a regression.
    make_suite(
        pytester, REPEATED + "\n\ndef test_one(graded_session):\n    perfect(graded_session)\n"
    )
    pytester.makefile(".txt", agent="flip")
    pytester.runpytest("--cleo-grade-save-baseline=baseline.json").assert_outcomes(passed=5)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    gate = ["--cleo-grade-baseline=baseline.json", "--cleo-grade-fail-on-regression=total:5"]
    args = [*gate, "-k", "run-2 or test_one", "--junitxml=out.xml"]
    if workers is None:
        result = pytester.runpytest(*args)
    else:
        result = pytester.runpytest(*args, "-n", workers)  # the workers' processes only
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "baseline gate passed: no drop beyond the tolerances",
            "not compared, 1 of 4 runs ran: test_agent.py::test_agent",
        ]
    )
    result.stdout.no_fnmatch_line("*REGRESSION*")
    text = summary.read_text()
    assert "Not compared, 1 of 4 runs ran: `test_agent.py::test_agent`" in text
    root = ET.parse(pytester.path / "out.xml").getroot()
    suite = {(p.get("name"), p.get("value")) for p in root.iter("property")}
    assert ("cleo_baseline_partial_test", "test_agent.py::test_agent") in suite
    # Only part of a test's runs, and nothing else: the gate says it checked nothing.
    alone = pytester.runpytest(*gate, "-k", "run-2")
    assert alone.ret == 0
    alone.stdout.fnmatch_lines(
        ["baseline gate not applied: no test in the baseline ran all of its runs"]
    )


def test_a_short_series_in_the_history_is_no_baseline_and_no_candidate(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    # `-k run-1` (100 %) after a whole run (87.5 %): as `latest`, or saved from the history,
    # the one run was the test's baseline, so the unchanged agent "regressed" to 87.5 %.
    from pytest_cleo_grade.cli.main import main

    make_suite(pytester, REPEATED)
    pytester.makefile(".txt", agent="flip")
    pytester.runpytest().assert_outcomes(passed=4)
    pytester.runpytest("-k", "run-1").assert_outcomes(passed=1)
    gate = ["--cleo-grade-baseline=latest", "--cleo-grade-fail-on-regression=total:5"]
    result = pytester.runpytest(*gate)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["  test_agent.py::test_agent total: 87.5% -> 87.5% (+0.0*"])
    history = str(pytester.path / ".cleo" / "metrics" / "GRADES.jsonl")
    pytester.runpytest("-k", "run-1").assert_outcomes(passed=1)
    saved = pytester.path / "b.json"
    assert main(["baseline", "save", str(saved), "--history", history]) == 0
    tests = json.loads(saved.read_text())["tests"]
    assert sorted(tests["test_agent.py::test_agent"]["percents"]) == [75.0, 75.0, 100.0, 100.0]
    # As the candidate, the history's short series is not compared (as in pytest's own run).
    capsys.readouterr()
    assert main(["baseline", "diff", str(saved), history, "--fail-on-regression=total:5"]) == 0
    out = capsys.readouterr().out
    assert "not compared, 1 of 4 runs graded: test_agent.py::test_agent" in out
    assert "REGRESSION" not in out


XFAILED = """
def test_ok(graded_session):
    perfect(graded_session)

@pytest.mark.xfail(reason="the agent is known to skip its lookups")
@pytest.mark.cleo_grade(fail_under="A")
def test_known_bad(graded_session):
    forty(graded_session)
"""


def test_an_expected_failure_stays_out_of_reports_and_baselines_read_from_the_history(
    pytester: pytest.Pytester,
) -> None:
    from pytest_cleo_grade.cli.main import main

    make_suite(pytester, XFAILED)
    run = pytester.runpytest("--cleo-grade-gate=A")
    run.assert_outcomes(passed=1, xfailed=1)
    run.stdout.fnmatch_lines(["*gate passed: mean 100%*"])
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    lines = [json.loads(line) for line in history.read_text().splitlines()]
    assert [line.get("excluded") for line in lines] == [None, "xfailed"]
    assert main(["report", "--html", "r.html", "--history", str(history), "--gate", "A"]) == 0
    assert "gate passed: mean 100%" in (pytester.path / "r.html").read_text()
    assert main(["baseline", "save", "b.json", "--history", str(history)]) == 0
    tests = json.loads((pytester.path / "b.json").read_text())["tests"]
    assert list(tests) == ["test_agent.py::test_ok"]
    again = pytester.runpytest("--cleo-grade-baseline=b.json")
    again.assert_outcomes(passed=1, xfailed=1)
    assert "missing" not in again.stdout.str()


def test_a_run_never_saves_its_baseline_over_its_history(pytester: pytest.Pytester) -> None:
    make_suite(pytester, XFAILED)
    pytester.runpytest().assert_outcomes(passed=1, xfailed=1)
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    before = history.read_text()
    result = pytester.runpytest(f"--cleo-grade-save-baseline={history}")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*baseline not saved to *GRADES.jsonl: it would replace the*"])
    after = history.read_text()
    assert after.startswith(before) and len(after.splitlines()) == 4  # two more grade lines


@pytest.mark.parametrize(
    ("args", "why"),
    [
        pytest.param(["-k", "one"], "1 test was deselected (-k, -m, --deselect, *)", id="-k"),
        pytest.param(
            ["-k", "one", "-n", "1"],
            "1 test was deselected (-k, -m, --deselect, *)",
            id="-k under xdist",
            marks=pytest.mark.e2e,
        ),
        pytest.param(["--lf"], "--lf re-ran only the tests that failed last time", id="--lf"),
        pytest.param(
            ["--lf", "-n", "1"],
            "--lf re-ran only the tests that failed last time",
            id="--lf under xdist",
            marks=pytest.mark.e2e,
        ),
        pytest.param(
            ["-x", "--cleo-grade-fail-under=A"],
            "the run stopped early (stopping after 1 failures)",
            id="-x",
        ),
        # Stopped, or deselected, before any graded test: nothing was said at all.
        pytest.param(
            ["-x", "test_agent.py::test_three", "test_agent.py::test_one"],
            "the run stopped early (stopping after 1 failures)",
            id="-x before any graded test",
        ),
        pytest.param(["-k", "zzz"], "2 tests were deselected (-k, -m, --deselect, *)", id="-k all"),
    ],
)
def test_a_baseline_is_never_saved_from_part_of_the_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str], why: str
) -> None:
    # Saved from a subset or a stopped run, the baseline silently lost the other tests,
    # and the gate stopped checking them.
    three = "\ndef test_three():\n    assert not os.environ.get('FAIL_THREE')\n"
    make_suite(pytester, "import os\n" + SUITE + three)
    pytester.makeini("[pytest]\n")  # with pytest's cache, which --lf reads
    _agents(pytester, "perfect", "seventy_five")
    pytester.runpytest("--cleo-grade-save-baseline=baseline.json").assert_outcomes(passed=3)
    saved = (pytester.path / "baseline.json").read_text()
    assert len(json.loads(saved)["tests"]) == 2
    _agents(pytester, "forty", "perfect")
    pytester.runpytest("--cleo-grade-fail-under=A").assert_outcomes(passed=2, failed=1)
    if "test_agent.py::test_three" in args:
        monkeypatch.setenv("FAIL_THREE", "1")  # the ungraded test fails first, under -x
    result = pytester.runpytest(*args, "--cleo-grade-save-baseline=baseline.json")
    result.stdout.fnmatch_lines([f"cleo-grade: baseline not saved to *baseline.json: {why}; *"])
    assert (pytester.path / "baseline.json").read_text() == saved


def test_a_baseline_is_saved_from_a_whole_run_that_had_nothing_to_rerun(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    pytester.makeini("[pytest]\n")  # with pytest's cache: --lf finds no failures to re-run
    _agents(pytester, "perfect", "seventy_five")
    result = pytester.runpytest("--lf", "-x", "--cleo-grade-save-baseline=baseline.json")
    result.stdout.fnmatch_lines(["run-last-failure: no previously failed tests*"])
    result.assert_outcomes(passed=2)
    assert "not saved" not in result.stdout.str()
    assert len(json.loads((pytester.path / "baseline.json").read_text())["tests"]) == 2


def test_a_gated_run_that_graded_nothing_says_the_gate_was_not_applied(
    pytester: pytest.Pytester,
) -> None:
    # Every agent test skipped (no API key on this runner): the gate said "passed" having
    # compared nothing.
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "seventy_five")
    pytester.runpytest("--cleo-grade-save-baseline=baseline.json").assert_outcomes(passed=2)
    pytester.makepyfile(
        test_agent="""
        import pytest

        def test_one(graded_session):
            pytest.skip("no API key")
        """
    )
    result = pytester.runpytest(
        "--cleo-grade-baseline=baseline.json", "--cleo-grade-fail-on-regression=total:5"
    )
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["baseline gate not applied: no graded tests in this run"])
    assert "gate passed" not in result.stdout.str()


@pytest.mark.parametrize(
    ("addopts", "args"),
    [
        pytest.param('-m "not slow"', [], id="the ini's standing selection"),
        pytest.param("", ["-k", "not test_plain"], id="an ungraded test deselected"),
        pytest.param("", ["-x", "--cleo-grade-fail-under=A"], id="-x stopping after the last test"),
    ],
)
def test_a_whole_run_saves_its_baseline_whatever_it_left_out_that_is_not_graded(
    pytester: pytest.Pytester, addopts: str, args: list[str]
) -> None:
    # A project whose ini selects -m "not slow" could never save a baseline, nor one that
    # deselected a test that is not graded, nor a -x run whose last test failed.
    make_suite(
        pytester,
        SUITE
        + "\nimport pytest\n\n@pytest.mark.slow\ndef test_plain():\n    pass\n"
        + "\n\ndef test_zz_last(graded_session):\n    forty(graded_session)\n",
    )
    pytester.makeini(f"[pytest]\naddopts = -p no:cacheprovider {addopts}\nmarkers = slow\n")
    _agents(pytester, "perfect", "perfect")
    result = pytester.runpytest(*args, "--cleo-grade-save-baseline=baseline.json")
    assert "not saved" not in result.stdout.str()
    saved = json.loads((pytester.path / "baseline.json").read_text())
    assert sorted(saved["tests"]) == [
        "test_agent.py::test_one",
        "test_agent.py::test_two",
        "test_agent.py::test_zz_last",
    ]


def test_one_run_named_by_its_node_id_or_a_run_that_failed_to_grade_is_no_whole_series(
    pytester: pytest.Pytester,
) -> None:
    # Naming one run's node id saved a baseline of that run alone (no -k to count as a
    # deselection); and a series with a run that could not be graded was compared on the
    # rest by the gate while the HTML report of the same run said "not compared".
    make_suite(
        pytester,
        REPEATED.replace(
            "    choice = Path",
            "    if Path('silent.txt').exists() and cleo_grade_run == 2:\n"
            "        return  # nothing recorded: this run cannot be graded\n"
            "    choice = Path",
        ),
    )
    pytester.makefile(".txt", agent="perfect")
    pytester.runpytest("--cleo-grade-save-baseline=baseline.json").assert_outcomes(passed=4)
    saved = (pytester.path / "baseline.json").read_text()
    pytester.makefile(".txt", agent="forty")
    one = pytester.runpytest(
        "--cleo-grade-save-baseline=baseline.json", "test_agent.py::test_agent[run-3]"
    )
    one.stdout.fnmatch_lines(
        [
            "*baseline not saved to *baseline.json: test_agent.py::test_agent: only 1 of 4 runs "
            "ran; save it from a whole run*"
        ]
    )
    assert (pytester.path / "baseline.json").read_text() == saved
    pytester.makefile(".txt", silent="")
    gate = ["--cleo-grade-baseline=baseline.json", "--cleo-grade-fail-on-regression=total:5"]
    result = pytester.runpytest(*gate, "--cleo-grade-html=report.html")
    result.assert_outcomes(passed=3, failed=1)  # the run with nothing captured
    result.stdout.fnmatch_lines(["not compared, 3 of 4 runs graded: test_agent.py::test_agent"])
    result.stdout.no_fnmatch_line("*REGRESSION*")
    page = (pytester.path / "report.html").read_text()
    assert "not compared, 3 of 4 runs graded" in page
    assert "gate FAILED" not in page


#: A rule file: 50 points for listing sessions first, 50 for ending the session.
RULES = """
name = "protocol"
version = "{version}"

[[dimensions]]
name = "protocol"
max = 100

[[dimensions.rules]]
id = "listed"
kind = "called"
match = {{ calls = ["session.list"] }}
points = {listed}
flag = "Never listed the sessions"

[[dimensions.rules]]
id = "ended"
kind = "called"
match = {{ calls = ["session.end"] }}
points = {ended}
flag = "Never ended the session"
"""

RULE_RUN = ("--cleo-grade-rubric=rules", "--cleo-grade-rubric-file=rules.toml")


def _rules(pytester: pytest.Pytester, version: str, listed: int = 50, ended: int = 50) -> None:
    text = RULES.format(version=version, listed=listed, ended=ended)
    (pytester.path / "rules.toml").write_text(text)


def _compare(pytester: pytest.Pytester, *extra: str) -> pytest.RunResult:
    gate = ("--cleo-grade-baseline=base.json", "--cleo-grade-fail-on-regression=total:5")
    return pytester.runpytest(*RULE_RUN, *gate, *extra)


def _suite_properties(pytester: pytest.Pytester, name: str) -> list[str]:
    root = ET.parse(pytester.path / "out.xml").getroot()
    suite = root if root.tag == "testsuite" else root[0]
    found = suite.findall("./properties/property")
    return [str(p.get("value")) for p in found if p.get("name") == name]


def test_a_rule_files_new_version_regrades_the_baselines_sessions_and_compares(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "seventy_five")  # seventy_five lists, never ends
    _rules(pytester, "1.0.0")
    pytester.runpytest(*RULE_RUN, "--cleo-grade-save-baseline=base.json").assert_outcomes(passed=2)
    saved = json.loads((pytester.path / "base.json").read_text())["tests"]
    two = saved["test_agent.py::test_two"]
    assert (two["percents"], two["rubricVersion"], len(two["rubricHash"])) == ([50.0], "1.0.0", 64)
    assert len(two["sessions"]) == 1
    # 1.1.0 moves 10 points from listing to ending: the same agent scores 40, not 50. Its
    # baseline session, graded again under 1.1.0, scores 40 too: no regression.
    _rules(pytester, "1.1.0", listed=40, ended=60)
    same = _compare(pytester)
    assert same.ret == 0, same.stdout.str()
    same.stdout.fnmatch_lines(
        [
            "baseline gate passed: no drop beyond the tolerances",
            "baseline re-graded under the current rubric (rules 1.0.0 -> rules 1.1.0): "
            "test_agent.py::test_two",
            "  test_agent.py::test_two total: 40.0% -> 40.0% (+0.0, tolerance 5 points)",
        ]
    )
    assert "not compared" not in same.stdout.str()
    # A real drop under the new rubric is still one: test_one's agent now never ends.
    _agents(pytester, "seventy_five", "seventy_five")
    worse = _compare(pytester)
    assert worse.ret == 1
    worse.stdout.fnmatch_lines(
        ["REGRESSION test_agent.py::test_one total: 100.0% -> 40.0% (-60.0, tolerance 5 points)"]
    )


def test_a_rule_file_edited_without_a_new_version_is_another_rubric(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "seventy_five")
    _rules(pytester, "1.0.0")
    pytester.runpytest(*RULE_RUN, "--cleo-grade-save-baseline=base.json").assert_outcomes(passed=2)
    # The same version, other points: compared as they were, 50 -> 40 read as a regression.
    _rules(pytester, "1.0.0", listed=40, ended=60)
    result = _compare(pytester, "--junitxml=out.xml")
    assert result.ret == 0, result.stdout.str()
    assert _suite_properties(pytester, "cleo_baseline_regraded_test") == [
        "test_agent.py::test_one",
        "test_agent.py::test_two",
    ]
    result.stdout.fnmatch_lines(
        [
            "baseline re-graded under the current rubric (rules 1.0.0 (settings *) -> rules "
            "1.0.0 (settings *)): test_agent.py::test_two",
            "  test_agent.py::test_two total: 40.0% -> 40.0% *",
        ]
    )
    # Without the audit store holding the baseline's sessions: said, never a regression.
    unseen = _compare(pytester, "--cleo-grade-db=elsewhere.db", "--junitxml=out.xml")
    assert unseen.ret == 0, unseen.stdout.str()
    assert len(_suite_properties(pytester, "cleo_baseline_rubric_changed_test")) == 2
    assert _suite_properties(pytester, "cleo_baseline_regraded_test") == []
    unseen.stdout.fnmatch_lines(
        [
            "not compared: rubric changed (rules 1.0.0 (settings *) -> rules 1.0.0 (settings *)"
            "): test_agent.py::test_two",
        ]
    )
    assert "REGRESSION" not in unseen.stdout.str()


def test_latest_is_the_latest_run_so_a_test_deleted_from_the_suite_no_longer_counts(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_cleo_grade.cli.main import main

    make_suite(pytester, SUITE)
    _agents(pytester, "perfect", "forty")
    pytester.runpytest("--cleo-grade-fail-under=0").assert_outcomes(passed=2)
    # test_two deleted: the next run grades test_one alone.
    make_suite(pytester, SUITE.split("def test_two")[0])
    pytester.runpytest().assert_outcomes(passed=1)
    third = pytester.runpytest("--cleo-grade-baseline=latest")
    third.assert_outcomes(passed=1)
    assert "test_two" not in third.stdout.str()  # never "missing from this run"
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    capsys.readouterr()
    out = pytester.path / "base.json"
    assert main(["baseline", "save", str(out), "--history", str(history)]) == 0
    assert list(json.loads(out.read_text())["tests"]) == ["test_agent.py::test_one"]
    assert "baseline of 1 test written" in capsys.readouterr().out


@pytest.mark.e2e  # two xdist workers; the controller re-grades in this process
def test_a_repeated_tests_runs_are_regraded_each_from_its_session_under_xdist(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, REPEATED)
    pytester.makefile(".txt", agent="flip")  # perfect and seventy_five in turn: 100 % and 50 %
    _rules(pytester, "1.0.0")
    pytester.runpytest(*RULE_RUN, "--cleo-grade-save-baseline=base.json").assert_outcomes(passed=4)
    saved = json.loads((pytester.path / "base.json").read_text())["tests"]
    assert len(saved["test_agent.py::test_agent"]["sessions"]) == 4
    _rules(pytester, "1.1.0", listed=40, ended=60)  # the same runs: 100 % and 40 %
    same = _compare(pytester, "-n", "2")
    assert same.ret == 0, same.stdout.str()
    same.stdout.fnmatch_lines(
        [
            "baseline re-graded under the current rubric (rules 1.0.0 -> rules 1.1.0): "
            "test_agent.py::test_agent",
            "  test_agent.py::test_agent total: 70.0% -> 70.0% (+0.0, tolerance 5 points)",
        ]
    )
    pytester.makefile(".txt", agent="forty")
    worse = _compare(pytester, "-n", "1")  # the regression, gated on the controller
    assert worse.ret == 1
    worse.stdout.fnmatch_lines(["REGRESSION test_agent.py::test_agent total: 70.0% -> 0.0% *"])
