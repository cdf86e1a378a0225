"""--cleo-grade-html in real pytest runs (serial and under pytest-xdist), and
``cleo-grade report --html`` over a real grade history."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.reports._html import write_report
from pytest_cleo_grade.store.history import append_grades
from tests.plugin_suites import make_suite

SUITE = """
@pytest.mark.parametrize("agent", [perfect, seventy_five, forty], ids=["a", "b", "f"])
@pytest.mark.parametrize("n", range(2))
@pytest.mark.cleo_grade(mode="report")
def test_agent(graded_session, agent, n):
    agent(graded_session)
"""

#: Each worker looks for the report once its own session is over, before the controller's
#: ends (before the worker tells the controller it is done).
WORKER_PROBE = """
import os
import pytest

@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session):
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:
        seen = os.path.exists(os.path.join(str(session.config.rootpath), "out", "report.html"))
        with open(f"probe-{worker}.txt", "w") as handle:
            handle.write(str(seen))
"""


def test_a_run_writes_its_report_with_every_graded_test_and_the_gate(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    first = pytester.runpytest("--cleo-grade-gate=B", "--cleo-grade-html=out/report.html")
    first.assert_outcomes(passed=6)
    first.stdout.fnmatch_lines([f"cleo-grade: HTML report {pytester.path / 'out' / 'report.html'}"])
    page = (pytester.path / "out" / "report.html").read_text()
    assert "gate FAILED: mean 71.67% is below 75% (B)" in page
    assert page.count("<tr data-index=") == 6
    assert page.count("class='score'") == 6  # one radar per test
    assert "test_agent.py::test_agent[0-a]" in page and ">new<" in page
    # Entries are named by their calls from the audit store.
    assert "<code>session.list</code>" in page
    second = pytester.runpytest("--cleo-grade-html=out/report.html")
    second.assert_outcomes(passed=6)
    page = (pytester.path / "out" / "report.html").read_text()
    assert page.count("±0 vs previous run") == 6
    assert page.count("data-points='2'") == 6  # each trend holds both runs
    assert sorted(os.listdir(pytester.path / "out")) == ["report.html"]  # no partial files


def test_the_ini_key_sets_the_path_relative_to_the_ini_file(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE, ini="cleo_grade_html = reports/grades.html\n")
    pytester.runpytest().assert_outcomes(passed=6)
    assert "<tr data-index=" in (pytester.path / "reports" / "grades.html").read_text()


@pytest.mark.e2e  # two xdist workers; the controller runs in this process
def test_under_xdist_only_the_controller_writes_the_one_report(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE)
    pytester.makeconftest(WORKER_PROBE)
    result = pytester.runpytest("-p", "xdist", "-n", "2", "--cleo-grade-html=out/report.html")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["*2 workers [[]6 items[]]*"])
    probes = sorted(p.read_text() for p in pytester.path.glob("probe-gw*.txt"))
    assert probes == ["False", "False"]  # no worker wrote it
    assert sorted(os.listdir(pytester.path / "out")) == ["report.html"]
    page = (pytester.path / "out" / "report.html").read_text()
    assert page.count("<tr data-index=") == 6  # both workers' tests, from the controller


def test_an_unwritable_report_path_is_one_warning_and_the_run_keeps_its_outcome(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    (pytester.path / "taken").mkdir()
    result = pytester.runpytest("--cleo-grade-html=taken", "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(passed=6, warnings=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*CleoGradeWarning: cleo-grade: HTML report *taken: Is a directory"]
    )


def test_a_history_that_cannot_be_read_says_the_report_was_not_written(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    (pytester.path / "hdir").mkdir()
    args = ["--cleo-grade-history=hdir", "--cleo-grade-html=rh.html"]
    result = pytester.runpytest(*args, "-W", "ignore::DeprecationWarning")
    result.assert_outcomes(passed=6, warnings=2)
    assert result.ret == 0
    assert not (pytester.path / "rh.html").exists()
    # One line each: the grades not appended, and the page not written with the reason.
    result.stdout.fnmatch_lines(
        ["*CleoGradeWarning: cleo-grade: HTML report *rh.html not written: *hdir: cannot read*"]
    )
    assert f"cleo-grade: HTML report {pytester.path / 'rh.html'}" not in result.stdout.lines


@pytest.mark.parametrize(
    ("target", "role"),
    [(".cleo/metrics/GRADES.jsonl", "grade history"), ("base.json", "baseline")],
)
def test_a_run_never_writes_its_report_over_its_history_or_baseline(
    pytester: pytest.Pytester, target: str, role: str
) -> None:
    make_suite(pytester, SUITE)
    pytester.runpytest("--cleo-grade-save-baseline=base.json").assert_outcomes(passed=6)
    before = (pytester.path / target).read_bytes()
    result = pytester.runpytest(
        "--cleo-grade-baseline=base.json", f"--cleo-grade-html={target}", "-W", "error"
    )
    result.assert_outcomes(passed=6)
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*HTML report *{target}: would replace the {role} *"])
    if role == "baseline":
        assert (pytester.path / target).read_bytes() == before
    else:  # the history kept every line (this run's appended), and is no page
        text = (pytester.path / target).read_text()
        assert text.startswith(before.decode()) and "<html" not in text


def test_a_missing_baseline_is_a_neutral_note_in_the_page_never_a_passed_gate(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    result = pytester.runpytest("--cleo-grade-baseline=nope.json", "--cleo-grade-html=r.html")
    result.assert_outcomes(passed=6)
    page = (pytester.path / "r.html").read_text()
    (box,) = [line for line in page.splitlines() if "class='verdict gate" in line]
    assert "no baseline at" in box and "data-state='none'" in box


def test_with_a_baseline_the_change_is_against_it(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE)
    pytester.runpytest("--cleo-grade-save-baseline=base.json").assert_outcomes(passed=6)
    result = pytester.runpytest("--cleo-grade-baseline=base.json", "--cleo-grade-html=r.html")
    result.assert_outcomes(passed=6)
    page = (pytester.path / "r.html").read_text()
    assert page.count("±0 vs baseline") == 6 and "previous run" not in page


def test_a_repeated_test_is_one_row_with_its_flaky_verdict(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
        calls = []

        @pytest.mark.cleo_grade(runs=3, fail_under="B", mode="report")
        def test_sometimes(graded_session):
            calls.append(1)
            (perfect if len(calls) % 2 else forty)(graded_session)
        """,
    )
    pytester.runpytest("-p", "no:randomly", "--cleo-grade-html=r.html").assert_outcomes(passed=3)
    page = (pytester.path / "r.html").read_text()
    assert page.count("<tr data-index=") == 1
    # The decision as the terminal says it (a report from a history counts passing runs).
    assert "flaky, PASSED (mean 80% reaches 75% (B))" in page and "mean of 3 runs (80%)" in page


def test_a_partial_series_of_a_run_is_marked_and_not_compared(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(runs=3, fail_under="B", mode="report")
        def test_agent(graded_session, cleo_grade_run):
            (forty if cleo_grade_run == 2 else perfect)(graded_session)
        """,
    )
    pytester.runpytest().assert_outcomes(passed=3)
    # Only run 2 again (as -k or --lf pick it): 40 % is no measure of the test's mean.
    again = pytester.runpytest("-k", "run-2", "--cleo-grade-html=r.html")
    again.assert_outcomes(passed=1)
    page = (pytester.path / "r.html").read_text()
    assert "vs previous run" not in page
    assert ">not compared, 1 of 3 runs graded<" in page
    assert "1 of 3 runs graded, mean 40%: #1 not graded, #2 40% F, #3 not graded" in page


def test_a_run_that_graded_nothing_still_writes_its_page(pytester: pytest.Pytester) -> None:
    make_suite(pytester, "def test_plain():\n    pass\n")
    pytester.runpytest("--cleo-grade-html=r.html").assert_outcomes(passed=1)
    page = (pytester.path / "r.html").read_text()
    assert "no gate set" in page and "no graded tests" in page
    assert "<tr data-index=" not in page


def test_text_that_is_not_unicode_is_written_as_its_escape(tmp_path: Path) -> None:
    # A lone surrogate (an undecodable byte in a test id) cannot be UTF-8.
    write_report(tmp_path / "r.html", "<p>t::\udc80</p>")
    assert (tmp_path / "r.html").read_text(encoding="utf-8") == "<p>t::\\udc80</p>"


# -- cleo-grade report ------------------------------------------------------------------


def grade(test_id: str, total: int, minute: int, **extra: object) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": f"s-{test_id}-{minute}",
            "totalScore": total,
            "maxScore": 100,
            "dimensions": {"sessionDiscipline": DimensionScore(score=total / 5, max=20)},
            "timestamp": f"2026-01-01T00:{minute:02d}:00Z",
            "entryCount": 3,
            "testId": test_id,
            **extra,
        }
    )


def test_the_report_command_renders_the_latest_run_of_a_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "GRADES.jsonl"
    append_grades(
        [
            grade("t::a", 50, 0, rubric="cleo", rubricVersion="1"),
            grade("t::b", 90, 1, rubric="cleo", rubricVersion="1"),
            grade("t::a", 70, 2, rubric="cleo", rubricVersion="2"),
            grade("t::b", 60, 3, rubric="cleo", rubricVersion="2"),
        ],
        history,
    )
    out = tmp_path / "site" / "report.html"
    args = ["report", "--html", str(out), "--history", str(history), "--gate", "C"]
    # No store where the default points: entries are named by index only (a store named
    # with --db must be there).
    monkeypatch.setenv("CLEO_AUDIT_DB", str(tmp_path / "none.db"))
    assert main(args) == 0
    out_text = capsys.readouterr().out
    assert out_text.startswith(
        f"cleo-grade: wrote {out} (2 grades)\n"
        f"cleo-grade: no audit store at {tmp_path / 'none.db'}: the report names entries by "
        "their position only (#N); --db PATH names the calls\ntest "
    )
    assert out_text.endswith("gate passed: mean 65% reaches 60% (C)\n")
    page = out.read_text()
    assert "gate passed: mean 65% reaches 60% (C)" in page
    assert "+20 vs previous run" in page and "-30 vs previous run" in page
    assert page.count("data-changes='1'") == 2  # rubric version 1 -> 2 on both trends
    assert "<li>#" not in page  # these grades carry no points


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["report", "--history", "missing.jsonl"],
            "cleo-grade report: missing.jsonl: no grade history there",
        ),
        (
            ["report", "--html", "r.html", "--history", "missing.jsonl"],
            "cleo-grade report: missing.jsonl: no grade history there",
        ),
        (
            ["report", "--html", "r.html", "--history", "empty.jsonl"],
            "cleo-grade report: empty.jsonl: no grades in the history",
        ),
        (
            ["report", "--html", "dir", "--history", "h.jsonl"],
            "cleo-grade: error: HTML report dir: Is a directory",
        ),
        (
            ["report", "--html", "file/r.html", "--history", "h.jsonl"],
            "cleo-grade: error: HTML report file/r.html: file is not a directory",
        ),
        (
            ["report", "--html", "r.html", "--history", "h.jsonl", "--baseline", "nope.json"],
            "cleo-grade report: nope.json: No such file or directory",
        ),
    ],
)
def test_bad_paths_are_one_line_errors(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    append_grades([grade("t::a", 50, 0)], tmp_path / "h.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == message + "\n"
    assert not (tmp_path / "r.html").exists()


@pytest.mark.parametrize(
    ("db", "problem"),
    [
        ("nope.db", "nope.db: no such database file"),  # a typo
        ("h.jsonl", "h.jsonl: not a usable SQLite database (file is not a database)"),
        ("sub", "sub: not a regular file (a directory)"),
    ],
)
def test_a_store_named_with_db_that_cannot_be_read_is_an_error_naming_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    db: str,
    problem: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    append_grades([grade("t::a", 50, 0)], tmp_path / "h.jsonl")
    (tmp_path / "sub").mkdir()
    argv = ["report", "--html", "r.html", "--history", "h.jsonl", "--db", db]
    assert main(argv) == 2
    assert capsys.readouterr().err == f"cleo-grade: error: audit store {problem}\n"
    assert not (tmp_path / "r.html").exists()


def test_one_bad_row_in_the_store_loses_only_its_sessions_call_names(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_suite(pytester, SUITE)
    pytester.runpytest().assert_outcomes(passed=6)
    lines = (pytester.path / ".cleo" / "metrics" / "GRADES.jsonl").read_text().splitlines()
    history = [json.loads(line) for line in lines]
    bad = history[0]["sessionId"]
    with sqlite3.connect(".cleo/audit.db") as conn:
        conn.execute("UPDATE audit_log SET details_json = '{bad' WHERE session_id = ?", (bad,))
    conn.close()
    monkeypatch.chdir(pytester.path)
    argv = ["report", "--html", "r.html", "--history", ".cleo/metrics/GRADES.jsonl"]
    assert main([*argv, "--db", ".cleo/audit.db"]) == 0
    page = (pytester.path / "r.html").read_text()
    sections = page.split("<section id='t")[1:]
    named = {s.split("<code>", 2)[1].split("<", 1)[0]: "<li>#0 <code>" in s for s in sections}
    assert named == {item["sessionId"]: item["sessionId"] != bad for item in history}


@pytest.mark.parametrize(
    ("html", "kept"),
    [
        ("h.jsonl", "h.jsonl"),  # the history it renders
        ("site/../h.jsonl", "h.jsonl"),  # the same, spelt otherwise
        ("linked/h.jsonl", "h.jsonl"),  # through a linked directory
        ("store.db", "store.db"),  # the audit store it names entries from
        ("store.db-wal", "store.db-wal"),  # SQLite's file beside it
        ("base.json", "base.json"),  # the baseline it compares with
    ],
)
def test_the_report_command_never_replaces_a_file_it_reads(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    html: str,
    kept: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    append_grades([grade("t::a", 50, 0)], tmp_path / "h.jsonl")
    assert main(["baseline", "save", "base.json", "--history", "h.jsonl"]) == 0
    (tmp_path / "store.db").write_bytes(b"SQLite format 3\0")
    (tmp_path / "store.db-wal").write_bytes(b"wal")
    (tmp_path / "linked").symlink_to(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    capsys.readouterr()
    argv = ["report", "--html", html, "--history", "h.jsonl", "--db", "store.db"]
    assert main([*argv, "--baseline", "base.json"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cleo-grade: error: HTML report {html}: would replace the ")
    assert err.endswith(f" {kept}: nothing written\n") and err.count("\n") == 1
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_run_never_writes_its_report_over_the_audit_store(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE)
    pytester.runpytest().assert_outcomes(passed=6)
    store = pytester.path / ".cleo" / "audit.db"
    result = pytester.runpytest("--cleo-grade-html=.cleo/x/../audit.db", "-p", "no:cacheprovider")
    # Refused before any test runs (a usage error), rather than after the run.
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"ERROR: cleo-grade: --cleo-grade-html (ini cleo_grade_html) {store}: is the audit *"]
    )
    assert store.read_bytes().startswith(b"SQLite format 3\0")  # still the store


def test_the_report_command_leaves_an_expected_failure_out_of_the_gate_as_the_run_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "GRADES.jsonl"
    # The run marks an xfailed (or xpassed) test's history line; its mean left it out.
    append_grades(
        [
            grade("t::good", 100, 0),
            grade("t::known_bad", 40, 0, excluded="xfailed"),
            grade("t::forged", 10, 0, excluded="<b>not a reason</b>"),  # counted
        ],
        history,
    )
    out = tmp_path / "report.html"
    args = ["report", "--html", str(out), "--history", str(history), "--gate", "B"]
    # No store where the default points: entries are named by index only (a store named
    # with --db must be there).
    monkeypatch.setenv("CLEO_AUDIT_DB", str(tmp_path / "none.db"))
    assert main(args) == 1  # the gate's verdict is the exit status
    page = out.read_text()
    assert "gate FAILED: mean 55% is below 75% (B)" in page  # (100 + 10) / 2, not / 3
    assert page.count(">xfailed, not counted<") == 1
    assert "not a reason" not in page


def test_the_report_command_counts_one_grade_in_the_singular(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "GRADES.jsonl"
    append_grades([grade("t::a", 50, 0)], history)
    monkeypatch.setenv("CLEO_AUDIT_DB", str(tmp_path / "none.db"))
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out), "--history", str(history)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"cleo-grade: wrote {out} (1 grade)"


def test_a_repeated_tests_failing_mean_is_not_shown_rounded_up_to_its_threshold(
    pytester: pytest.Pytester,
) -> None:
    # Runs of 81, 81 and 80 %: the mean 80.666...% fails 80.67 %, and the page showed
    # "mean of 3 runs (80.67%)" beside "FAILED (mean 80.66% is below 80.67% (B))".
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(runs=3, fail_under=80.67)
        def test_agent(graded_session, cleo_grade_run):
            r = graded_session.record
            finds, lists = (2, 3) if cleo_grade_run < 3 else (1, 2)
            r("session", "list")
            r("admin", "help")
            for _ in range(finds):
                r("tasks", "find", params={"query": "x"})
            for _ in range(lists):
                r("tasks", "list")
            r("tasks", "show", params={"taskId": "T1"})
            r("session", "end")
        """,
    )
    result = pytester.runpytest("--cleo-grade-html=report.html")
    result.stdout.fnmatch_lines(["*FAILED (mean 80.66% is below 80.67% (B))*"])
    page = (pytester.path / "report.html").read_text()
    assert "mean of 3 runs (80.66%)" in page
    assert "3 runs, mean 80.66%" in page
    assert "80.67%)" not in page.replace("below 80.67% (B))", "")
