"""Output that leads to the next step: the command that explains a failed grade, why a
report-mode test is below, what a saved baseline holds, a short ``-q``, an HTML page that marks
what the terminal marks, and an async test that never ran told only what pytest says."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main

HASTY = """
import pytest

@pytest.mark.cleo_grade(fail_under="C")
def test_hasty(graded_session):
    graded_session.record("tasks", "list")
    graded_session.record("tasks", "add", {"title": "Fix login"}, gateway="cleo_mutate")
"""


def _failure(result: pytest.RunResult) -> list[str]:
    """The failure section's lines of the one failed test."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if re.match(r"_+ test_hasty _+$", line))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith(("=", "-")))
    return lines[start + 1 : end]


def test_a_test_failed_for_its_grade_ends_with_the_show_command_that_explains_it(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(HASTY)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    last = _failure(result)[-1]
    match = re.fullmatch(r"every call and its points: (cleo-grade show (session-\S+))", last)
    assert match is not None, last
    capsys.readouterr()
    # The command works as printed, from where pytest was started.
    assert main(match.group(1).split()[1:]) == 0
    shown = capsys.readouterr().out
    assert "tasks.list" in shown and "tasks.add" in shown
    assert match.group(2) in shown


def test_the_show_command_names_a_store_that_is_not_the_clis_default(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(HASTY)
    result = pytester.runpytest("--cleo-grade-db=ci/audit.db")
    last = _failure(result)[-1]
    assert re.fullmatch(
        r"every call and its points: cleo-grade show session-\S+ --db ci/audit.db", last
    )
    capsys.readouterr()
    assert main(last.split(": ", 1)[1].split()[1:]) == 0
    assert "tasks.list" in capsys.readouterr().out


def test_report_mode_rows_below_their_threshold_say_where_points_were_lost(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_suite=HASTY.replace('fail_under="C"', 'fail_under="C", mode="report"'))
    result = pytester.runpytest()
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "test_suite.py::test_hasty  *below (report) 60% (C)",
            "below the threshold in report mode (annotated, not failed), where points were lost:",
            "  test_suite.py::test_hasty: sessionDiscipline 0/20, discoveryEfficiency 0/20, *",
            "run grade *",
        ]
    )
    for line in result.outlines:
        if line.startswith("  test_") and "test_hasty:" in line:
            assert len(line) <= 100


def test_a_quiet_run_shortens_the_repeats_section_to_one_line_per_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(runs=3)
        def test_steady(graded_session):
            graded_session.record("session", "list")
        """
    )
    loud = pytester.runpytest()
    assert any("cleo-grade repeats" in line and "---" in line for line in loud.outlines)
    assert any(line.startswith("pass^k = ") for line in loud.outlines)
    quiet = pytester.runpytest("-q")
    repeats = [line for line in quiet.outlines if "repeats" in line or "pass^k" in line]
    assert len(repeats) == 1, quiet.outlines
    assert re.fullmatch(r"cleo-grade repeats: test_\w+\.py::test_steady: .+", repeats[0])


def test_saving_a_baseline_from_a_run_says_what_it_saved(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(HASTY.replace('fail_under="C"', 'mode="report"'))
    result = pytester.runpytest("--cleo-grade-save-baseline=base.json")
    result.stdout.fnmatch_lines(
        [
            "*cleo-grade baseline*",
            "cleo-grade: baseline of 1 test saved to */base.json (compare a later run with "
            "--cleo-grade-baseline=*/base.json)",
        ]
    )
    assert (pytester.path / "base.json").is_file()


def test_the_html_report_marks_a_single_run_test_below_its_threshold(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        HASTY
        + """
def test_careful(graded_session):
    graded_session.record("session", "list")
"""
    )
    pytester.runpytest("--cleo-grade-html=report.html", "--cleo-grade-fail-under=F")
    page = (pytester.path / "report.html").read_text()
    rows = re.findall(r"<tr data-index='\d+'[^>]*>.*?</tr>", page)
    hasty = next(row for row in rows if "test_hasty" in row)
    careful = next(row for row in rows if "test_careful" in row)
    assert "class='below'" in hasty
    assert "<span class='below'>below 60% (C)</span>" in hasty
    assert "class='below'" not in careful


def test_the_report_command_without_the_store_says_the_calls_are_not_named(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(HASTY)
    pytester.runpytest()
    (pytester.path / ".cleo" / "audit.db").rename(pytester.path / "elsewhere.db")
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    capsys.readouterr()
    assert main(["report", "--html", "page.html"]) == 0
    out = capsys.readouterr().out
    assert (
        f"no audit store at {pytester.path / '.cleo' / 'audit.db'}: the report names entries" in out
    )
    page = (pytester.path / "page.html").read_text()
    assert "the calls are not named: the audit store holding this session" in page
    # With the store, the calls are named and the note is gone.
    assert main(["report", "--html", "named.html", "--db", "elsewhere.db"]) == 0
    named = (pytester.path / "named.html").read_text()
    assert "the calls are not named" not in named
    assert "<code>tasks.list</code>" in named


def test_an_async_test_no_plugin_ran_gets_pytests_message_and_no_capture_advice(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        async def test_async(graded_session):
            graded_session.record("session", "list")
        """
    )
    result = pytester.runpytest("-p", "no:anyio")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "async def functions are not natively supported" in out
    assert "nothing was captured" not in out
    assert "CLEO grade" not in out
    assert not (pytester.path / ".cleo" / "metrics" / "GRADES.jsonl").exists()


@pytest.mark.inner_plugins("anyio")
def test_a_failing_async_test_an_async_plugin_ran_is_still_graded(
    pytester: pytest.Pytester,
) -> None:
    pytest.importorskip("anyio", reason="needs anyio's pytest plugin to run an async test")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.anyio
        async def test_async(graded_session):
            graded_session.record("session", "list")
            raise AssertionError("own failure")

        @pytest.fixture
        def anyio_backend():
            return "asyncio"
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    assert (
        len(Path(pytester.path, ".cleo", "metrics", "GRADES.jsonl").read_text().splitlines()) == 1
    )
