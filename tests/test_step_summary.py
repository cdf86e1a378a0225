"""The GitHub step summary: regressions first, then flaky tests, then the grades with the flag
texts of every test below its threshold; test ids and agent text shown exactly as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

SUITE = """
import itertools
import pytest

counter = itertools.count()

def good(s):
    s.record("session", "list", gateway="cleo_query")
    s.record("admin", "help", gateway="cleo_query")
    s.record("tasks", "find", gateway="cleo_query")
    s.record("session", "end", gateway="cleo_mutate")

def sloppy(s):
    s.record("tasks", "list", gateway="cleo_mutate")
    s.record("tasks", "add", {"title": "x"}, task_id="T1 | [link](http://x) <b>`")

@pytest.mark.parametrize("name", ["\\u00e9", "a`b", "x|y"])
def test_ids(graded_session, name):
    (sloppy if REGRESS else good)(graded_session)

@pytest.mark.cleo_grade(runs=4)
def test_flaky(graded_session):
    (good if next(counter) % 2 else sloppy)(graded_session)
"""


def run(pytester: pytest.Pytester, regress: bool, *args: str) -> str:
    pytester.makepyfile(test_suite=f"REGRESS = {regress}\n" + SUITE)
    summary = pytester.path / f"summary-{regress}.md"
    pytester.runpytest(*args, "--cleo-grade-fail-under=B", "--cleo-grade-mode=report")
    return summary.read_text(encoding="utf-8") if summary.exists() else ""


@pytest.fixture
def summary(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> str:
    baseline = pytester.path / "baseline.json"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary-False.md"))
    run(pytester, False, f"--cleo-grade-save-baseline={baseline}")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary-True.md"))
    gate = "--cleo-grade-fail-on-regression=total:5"
    return run(pytester, True, f"--cleo-grade-baseline={baseline}", gate)


def test_regressions_come_first_then_repeated_tests_then_the_grades(summary: str) -> None:
    baseline = summary.index("### Against the baseline")
    repeats = summary.index("### Repeated tests")
    grades = summary.index("### cleo-grade")
    assert baseline < repeats < grades
    # The first rows of the baseline table are the regressions.
    rows = [line for line in summary[baseline:repeats].splitlines() if line.startswith("| `")]
    assert rows[0].endswith("| **REGRESSION** |")
    # The flaky test is named in the repeated tests' table.
    assert "| `test_suite.py::test_flaky` | flaky |" in summary[repeats:grades]


def test_test_ids_are_code_spans_that_show_the_id_exactly(summary: str) -> None:
    # pytest writes the non-ASCII id with one backslash (test_ids[\xe9]); a code span keeps it.
    assert "`test_suite.py::test_ids[\\xe9]`" in summary
    assert "test_ids[\\\\xe9]" not in summary
    # A backtick in the id: a longer fence; a pipe: escaped for the table only.
    assert "``test_suite.py::test_ids[a`b]``" in summary
    assert "`test_suite.py::test_ids[x\\|y]`" in summary
    for section in ("### Against the baseline", "### cleo-grade"):
        part = summary.split(section, 1)[1].split("###", 1)[0]
        assert "``test_suite.py::test_ids[a`b]``" in part


def test_tests_below_the_threshold_list_their_flag_texts_escaped(summary: str) -> None:
    below = summary.split("#### Below the threshold", 1)[1]
    assert "- `test_suite.py::test_ids[\\xe9]`: 35% (F), below 75% (B)" in below
    assert "  - tasks.list used 1x (prefer tasks.find for discovery)" in below
    # Agent text: no link, no HTML, no table break, no code span.
    assert (
        "  - tasks.add without description (taskId: T1 \\| \\[link\\](http://x) \\<b\\>\\`)"
        in below
    )
    assert "[link](http://x)" not in summary


def test_a_passing_run_lists_nothing_below_the_threshold(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = Path(pytester.path / "s.md")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    pytester.makepyfile(
        """
        def test_a(graded_session):
            graded_session.record("session", "list", gateway="cleo_query")
            graded_session.record("tasks", "find", gateway="cleo_query")
        """
    )
    pytester.runpytest("--cleo-grade-fail-under=D").assert_outcomes(passed=1)
    assert "Below the threshold" not in path.read_text(encoding="utf-8")


def test_every_table_row_has_as_many_cells_as_its_header(summary: str) -> None:
    # GFM splits a row at every pipe not escaped by a backslash, before it reads code spans:
    # an agent's or a test id's pipe must never add a cell or end a row.
    tables = 0
    widths: list[int] = []
    for line in [*summary.splitlines(), ""]:
        if line.startswith("|"):
            widths.append(len(re.split(r"(?<!\\)\|", line.strip())) - 2)
        elif widths:
            tables += 1
            assert len(set(widths)) == 1, widths
            widths = []
    assert tables >= 3
