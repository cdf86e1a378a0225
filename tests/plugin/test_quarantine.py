"""The quarantine file in a pytest run: listed tests report-only, shown as quarantined."""

from __future__ import annotations

import html
import json
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main

SUITE = """
import pytest

@pytest.mark.cleo_grade(expect=["a.b", "c.d"], mode="exact", fail_under=90)
def test_bad(graded_session):
    graded_session.record("a", "b")

@pytest.mark.cleo_grade(expect=["a.b"], mode="exact", fail_under=90)
def test_good(graded_session):
    graded_session.record("a", "b")
"""


def quarantine(path: Path, *test_ids: str) -> Path:
    path.write_text(json.dumps({"quarantine": 1, "tests": [{"testId": t} for t in test_ids]}))
    return path


def test_a_quarantined_test_is_report_only_and_said_so_in_every_output(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    listed = quarantine(pytester.path / "q.json", "test_bad_suite.py::test_bad")
    pytester.makepyfile(test_bad_suite=SUITE)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest(
        "test_bad_suite.py",
        f"--cleo-grade-quarantine={listed}",
        "--cleo-grade-gate=A",
        "--junitxml=out.xml",
        "--cleo-grade-html=report.html",
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*test_bad_suite.py::test_bad *66.67/100*quarantined: below 90% (A), not counted",
            "run grade A: mean 100% over 1 graded test (1 quarantined not counted)",
            "quarantined (report only, not in the gate): 1 test, 1 below: "
            "test_bad_suite.py::test_bad (below)",
            "gate passed: mean 100% reaches 90% (A) (1 quarantined test not gated)",
        ]
    )
    junit = (pytester.path / "out.xml").read_text()
    assert junit.count('name="cleo_quarantined" value="true"') == 1
    text = summary.read_text()
    assert "quarantined: below 90% (A), not counted" in text
    assert "(1 quarantined test not gated)" in text
    assert "quarantined, not counted" in (pytester.path / "report.html").read_text()
    lines = (pytester.path / ".cleo/metrics/GRADES.jsonl").read_text().splitlines()
    marks = {json.loads(line)["testId"]: json.loads(line).get("excluded") for line in lines}
    assert marks == {
        "test_bad_suite.py::test_bad": "quarantined",
        "test_bad_suite.py::test_good": None,
    }


def test_without_the_quarantine_the_same_test_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad_suite=SUITE)
    result = pytester.runpytest(f"--cleo-grade-quarantine={pytester.path / 'missing.json'}")
    result.assert_outcomes(passed=1, failed=1)


def test_a_bad_quarantine_file_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad_suite=SUITE)
    bad = pytester.path / "q.json"
    bad.write_text("[]")
    result = pytester.runpytest(f"--cleo-grade-quarantine={bad}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*cleo-grade: --cleo-grade-quarantine: {bad}: not a quarantine file: "
            'expected an object with "quarantine": 1'
        ]
    )


def test_a_half_passing_agent_is_reported_flaky_then_quarantined(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(
        test_coin="""
        import pytest

        @pytest.mark.cleo_grade(runs=10, expect=["a.b", "c.d"], mode="exact", fail_under=90)
        def test_coin(graded_session, cleo_grade_run):
            graded_session.record("a", "b")
            if cleo_grade_run % 2:
                graded_session.record("c", "d")
        """
    )
    first = pytester.runpytest()
    first.assert_outcomes(passed=9, failed=1)  # decided once: mean 83.33% below 90%
    history = pytester.path / ".cleo/metrics/GRADES.jsonl"
    target = pytester.path / "q.json"
    capsys.readouterr()
    assert main(["flaky", "--history", str(history), "--write-quarantine", str(target)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("1 of 1 tests flipped in their last 10 runs")
    assert out[2].split()[:5] == ["test_coin.py::test_coin", "10", "5", "9", "100%"]
    second = pytester.runpytest(f"--cleo-grade-quarantine={target}")
    second.assert_outcomes(passed=10)
    second.stdout.fnmatch_lines(
        [
            "test_coin.py::test_coin: flaky, below (quarantined) (mean * is below 90% (A))",
            "*quarantined (report only, not in the gate): 1 test, 1 below*",
        ]
    )


@pytest.mark.inner_plugins("html")
def test_pytest_html_marks_the_quarantined_test(pytester: pytest.Pytester) -> None:
    pytest.importorskip("pytest_html", reason="pytest-html is a development dependency")
    pytester.makepyfile(test_bad_suite=SUITE)
    listed = quarantine(pytester.path / "q.json", "test_bad_suite.py::test_bad")
    result = pytester.runpytest(
        f"--cleo-grade-quarantine={listed}", "--html=report.html", "--self-contained-html"
    )
    result.assert_outcomes(passed=2)
    page = html.unescape((pytester.path / "report.html").read_text(encoding="utf-8"))
    assert "below threshold (quarantined, not counted)" in page
    assert "cleo-grade: quarantined (report only, not in the gate): 1 test, 1 below" in page
