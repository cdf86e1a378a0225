"""The GitHub step summary: regressions first, then flaky tests, then the grades with the flag
texts of every test below its threshold; test ids and agent text shown exactly as written."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

import cmarkgfm
import pytest

from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._baseline import BaselineComparison, Change, Tolerance
from pytest_cleo_grade.grading._runs import RepeatInfo, TestRuns
from pytest_cleo_grade.grading._stats import RepeatPolicy, repeat_stats
from pytest_cleo_grade.grading._verdict import GradedTest, RunGrade
from pytest_cleo_grade.reports._baseline import BASELINE_SUMMARY_BYTES, baseline_markdown
from pytest_cleo_grade.reports._display import SUMMARY_BYTES, markdown_summary
from pytest_cleo_grade.reports._repeats import ESTIMATOR_NOTE, REPEAT_SUMMARY_BYTES, repeat_markdown
from tests.inner_runs import shared_pytester

#: An agent's task id: a table break, a Markdown link, HTML, a code span, bare addresses
#: GitHub would link, a terminal escape and a bidirectional override.
TASK_ID = (
    "T1 | [link](http://x) <b>` https://evil.example/p www.evil.example a@evil.example "
    "\x1b[2J \u202e"
)

SUITE = (
    f"""
TASK_ID = {TASK_ID!r}
"""
    + """
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
    s.record("tasks", "add", {"title": "x"}, task_id=TASK_ID)

@pytest.mark.parametrize("name", ["\\u00e9", "a`b", "x|y"])
def test_ids(graded_session, name):
    (sloppy if REGRESS else good)(graded_session)

@pytest.mark.cleo_grade(runs=4)
def test_flaky(graded_session):
    (good if next(counter) % 2 else sloppy)(graded_session)
"""
)


def run(pytester: pytest.Pytester, regress: bool, *args: str) -> str:
    pytester.makepyfile(test_suite=f"REGRESS = {regress}\n" + SUITE)
    summary = pytester.path / f"summary-{regress}.md"
    pytester.runpytest(*args, "--cleo-grade-fail-under=B", "--cleo-grade-mode=report")
    return summary.read_text(encoding="utf-8") if summary.exists() else ""


@pytest.fixture(scope="module")
def summary(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The step summary of a run regressed against its baseline, made once: the tests reading
    it check different facets of the same text, and each made it anew (two runs) before."""
    with shared_pytester(request, tmp_path_factory) as (pytester, monkeypatch):
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
        "  - tasks.add without description (taskId: T1 \\| \\[link\\](http\\://x) \\<b\\>\\` "
        "https\\://evil.example/p www\\.evil.example a@<!-- -->evil.example "
        "\\\\x1b\\[2J \\\\u202e)" in below
    )
    assert "[link](http://x)" not in summary


def test_rendered_by_githubs_markdown_library_agent_text_adds_no_link_and_no_html(
    summary: str,
) -> None:
    html = cmarkgfm.github_flavored_markdown_to_html(summary)
    assert "<a " not in html
    # Only the tags the summary's own Markdown makes (GitHub drops the comment).
    made = {"h3", "h4", "table", "thead", "tbody", "tr", "th", "td", "ul", "li", "p", "code"}
    assert set(re.findall(r"</?([a-z0-9]+)", html)) <= made | {"strong"}
    assert "\x1b" not in html and "\u202e" not in html
    shown = "https://evil.example/p www.evil.example a@<!-- raw HTML omitted -->evil.example"
    assert shown in html


def test_the_summary_starts_on_a_line_of_its_own_after_what_the_file_held(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = Path(pytester.path / "s.md")
    path.write_text("earlier step's text without a final newline")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    pytester.makepyfile(
        """
        def test_a(graded_session):
            graded_session.record("session", "list", gateway="cleo_query")
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)
    text = path.read_text(encoding="utf-8")
    assert text.startswith("earlier step's text without a final newline\n\n### cleo-grade\n")


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


def test_agent_text_is_cut_and_the_block_stays_under_githubs_limit(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three task ids of 600,000 characters each: written whole, the file passed 1 MiB and
    # GitHub dropped the step's whole summary, gate verdict and earlier steps' text included.
    path = Path(pytester.path / "s.md")
    path.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    pytester.makepyfile(
        """
        def test_big(graded_session):
            graded_session.record("tasks", "list")
            for i in range(3):
                task = f"T{i}-" + "A" * 600_000
                graded_session.record("tasks", "add", {"title": "t"}, task_id=task)
        """
    )
    result = pytester.runpytest("--cleo-grade-fail-under=C", "--cleo-grade-gate=A")
    assert result.ret == 1
    raw = path.read_bytes()
    assert len(raw) < SUMMARY_BYTES
    text = raw.decode("utf-8")
    assert text.startswith("earlier step\n\n### cleo-grade\n")
    flags = [line for line in text.splitlines() if line.startswith("  - tasks.add without")]
    assert len(flags) == 3
    for i, line in enumerate(flags):
        # 200 characters of the flag, the last one an ellipsis.
        assert line == f"  - tasks.add without description (taskId: T{i}-" + "A" * 157 + "…"
    assert "**Gate FAILED: mean " in text and "**Run grade " in text


def _many(
    count: int, flag: str, nodeid: str = "tests/test_suite.py::test_agent[{i}-{x}]"
) -> RunGrade:
    """``count`` tests at 40 % below their 75 % threshold, twelve flags each."""
    tests = []
    for i in range(count):
        result = GradeResult(
            session_id=f"s{i}",
            total_score=40,
            max_score=100,
            dimensions={"only": DimensionScore(score=40, max=100)},
            flags=[f"{flag} {n}" for n in range(12)],
            timestamp=datetime(2026, 3, 1, tzinfo=UTC),
            entry_count=3,
        )
        test_id = nodeid.format(i=i, x="x" * 300)
        tests.append(GradedTest(test_id, result, 75.0, "--cleo-grade-fail-under", "fail"))
    return RunGrade(tuple(tests), 90.0)


def test_a_large_suite_lists_what_fits_counts_the_rest_and_keeps_the_verdict() -> None:
    # 5,000 tests below their threshold with ten long flags each: about 12 MB listed whole.
    run = _many(5000, "@" * 300)
    text = markdown_summary(run)
    assert len(text.encode("utf-8")) <= SUMMARY_BYTES
    lines = text.splitlines()
    assert lines[:2] == ["### cleo-grade", ""]
    assert lines[-3:] == [
        "**Run grade F: mean 40% over 5000 graded tests (5000 below)**",
        "",
        "**Gate FAILED: mean 40% is below 90% (A)**",
    ]
    # The table stops with a row counting the rest, as wide as the others.
    rows = [line for line in lines if line.startswith("| `")]
    assert 0 < len(rows) < 5000
    assert f"| ... and {5000 - len(rows)} more tests | | | | | | |" in lines
    # Each id and flag is cut to 200 characters; the rest of the list is counted.
    assert all(len(line.split("`")[1]) == 200 for line in rows)
    assert rows[0].endswith("x…` | 40/100 | 40% | F | 12 | below | below 75% (B) |")
    below = text.split("#### Below the threshold", 1)[1].splitlines()
    listed = [line for line in below if line.startswith("- `")]
    assert 0 < len(listed) < 5000
    assert below[-5] == f"- ... and {5000 - len(listed)} more tests below the threshold"
    flags = [line for line in below if line.startswith("  - @")]
    assert flags and all(len(line) == len("  - ") + 199 * len("@<!-- -->") + 1 for line in flags)
    assert "  - ... and 2 more flags" in below
    # GitHub's renderer still sees one table of six columns.
    html = cmarkgfm.github_flavored_markdown_to_html(text)
    assert html.count("<table>") == 1


def test_a_short_suite_is_listed_whole() -> None:
    text = markdown_summary(_many(3, "flag"))
    assert "more tests" not in text
    assert text.count("  - ... and 2 more flags") == 3
    assert text.count("  - flag ") == 30


def test_the_lines_counting_more_flags_fit_in_the_bound_too() -> None:
    # Short ids and flags, twelve flags a test: each listed test also gets a line counting
    # the flags not listed, which the bound did not count (the block grew past it).
    text = markdown_summary(_many(10_000, "f", nodeid="t[{i}]"))
    assert "  - ... and 2 more flags" in text.splitlines()
    assert len(text.encode("utf-8")) <= SUMMARY_BYTES


def _repeated(count: int) -> list[TestRuns]:
    """``count`` flaky tests of two runs (95 % and 45 %, fail_under B), with long ids."""
    policy = RepeatPolicy()
    stats = repeat_stats([95.0, 45.0], [True, False], threshold=75.0, policy=policy)
    tests = []
    for i in range(count):
        info = RepeatInfo(f"test_many.py::test_m[{i:05d}-{'x' * 480}]", 2, 2, 75.0, policy)
        tests.append(TestRuns(info, stats=stats))
    return tests


def test_the_repeats_block_stays_within_its_bound_and_counts_the_rest() -> None:
    # 1,200 repeated tests with ids of ~500 characters: about 720 KB listed whole, which with
    # the grades' 512 KiB passed GitHub's 1 MiB and lost the whole step summary.
    text = repeat_markdown(_repeated(1200))
    assert len(text.encode("utf-8")) <= REPEAT_SUMMARY_BYTES
    assert SUMMARY_BYTES + REPEAT_SUMMARY_BYTES < 1024 * 1024
    lines = text.splitlines()
    assert lines[0] == "### Repeated tests"
    rows = [line for line in lines if line.startswith("| `")]
    assert 0 < len(rows) < 1200
    # The rest are counted in a row as wide as the others, and the note is still there.
    assert f"| ... and {1200 - len(rows)} more tests | | | | | | |" in lines
    assert text.endswith(f"\n{ESTIMATOR_NOTE}.\n\n")
    assert all(len(line.split("`")[1]) == 200 for line in rows)
    html = cmarkgfm.github_flavored_markdown_to_html(text)
    assert html.count("<table>") == 1
    assert html.count("<tr>") == len(rows) + 2  # the header and the counting row


def test_a_few_repeated_tests_are_listed_whole() -> None:
    text = repeat_markdown(_repeated(3))
    assert "more tests" not in text
    assert text.count("| `test_many.py::test_m[") == 3


def _compared(count: int, *, problems: int = 0) -> BaselineComparison:
    """``count`` tests with ids of ~500 characters, each dropped 30 points in total (one
    regression) and within noise in one dimension, plus as many new and missing tests."""
    tolerance = Tolerance(5.0)
    changes = []
    for i in range(count):
        test_id = f"test_many.py::test_m[{i:05d}-{'x' * 480}]"
        changes.append(Change(test_id, "total", 90.0, 60.0, tolerance, regressed=True))
        changes.append(Change(test_id, "only", 90.0, 80.0, tolerance, False, "within noise"))
    return BaselineComparison(
        changes=tuple(changes),
        new_tests=tuple(f"test_new.py::test_n[{i:05d}-{'y' * 480}]" for i in range(count)),
        missing_tests=tuple(f"test_old.py::test_o[{i:05d}-{'z' * 480}]" for i in range(count)),
        problems=tuple(f"problem {i}: {'p' * 1000}" for i in range(problems)),
    )


def test_the_baseline_block_stays_within_its_bound_regressions_and_problems_first() -> None:
    # 800 regressed tests, 800 new and 800 missing, with ids of ~500 characters: about 1.3 MB
    # listed whole, which with the other blocks passed GitHub's 1 MiB and lost the summary.
    text = baseline_markdown(_compared(800, problems=3), gated=True)
    assert len(text.encode("utf-8")) <= BASELINE_SUMMARY_BYTES
    assert SUMMARY_BYTES + REPEAT_SUMMARY_BYTES + BASELINE_SUMMARY_BYTES < 1024 * 1024
    lines = text.splitlines()
    assert lines[:3] == [
        "### Against the baseline",
        "",
        "**baseline gate FAILED: 800 regressions**",
    ]
    # Every regression and every problem is there; the other rows fill what is left.
    rows = [line for line in lines if line.startswith("| `")]
    assert all(row.endswith("| **REGRESSION** |") for row in rows[:800])
    assert 800 < len(rows) < 1600
    assert f"| ... and {1600 - len(rows)} more rows | | | | | |" in lines
    problems = [line for line in lines if line.startswith("Problem: ")]
    # A problem is cut too (600 characters), keeping its start.
    assert problems == [f"Problem: problem {i}: {'p' * 588}…" for i in range(3)]
    # Each id is cut to 200 characters; the tests new and missing are counted, not listed.
    assert all(len(line.split("`")[1]) == 200 for line in rows)
    assert "... and 800 more new tests" in lines
    assert "... and 800 more missing tests" in lines
    html = cmarkgfm.github_flavored_markdown_to_html(text)
    assert html.count("<table>") == 1
    assert html.count("<tr>") == len(rows) + 2  # the header and the counting row


def test_when_even_the_regressions_do_not_fit_the_verdict_stays_and_they_are_counted() -> None:
    text = baseline_markdown(_compared(5000, problems=2), gated=True)
    assert len(text.encode("utf-8")) <= BASELINE_SUMMARY_BYTES
    lines = text.splitlines()
    assert lines[2] == "**baseline gate FAILED: 5000 regressions**"
    rows = [line for line in lines if line.startswith("| `")]
    assert 0 < len(rows) < 5000
    assert all(row.endswith("| **REGRESSION** |") for row in rows)
    left = 5000 - len(rows)
    assert f"| ... and {left + 5000} more rows ({left} of them regressions) | | | | | |" in lines
    assert "... and 2 more problems" in lines
    assert "... and 5000 more new tests" in lines


def test_a_short_comparison_is_listed_whole() -> None:
    text = baseline_markdown(_compared(3, problems=1), gated=True)
    assert "... and" not in text
    assert text.count("| **REGRESSION** |") == 3
    assert text.count("| within noise |") == 3
    assert text.count("New test (not in baseline): `test_new.py") == 3


def test_a_large_suite_regressed_against_its_baseline_keeps_the_summary_under_1_mib(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 100 tests with ids of 10,000 characters, each regressing in two metrics: written whole,
    # the baseline block alone passed 2 MB (400 ids of 2,000 made 2.4 MB when it was found),
    # and GitHub showed nothing of the step summary.
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(
        test_many="""
        import os
        import pytest

        IDS = [f"{k:03d}-" + "x" * 10_000 for k in range(100)]

        @pytest.mark.parametrize("i", range(100), ids=IDS)
        def test_m(graded_session, i):
            s = graded_session
            s.record("session", "list")
            s.record("admin", "help")
            s.record("tasks", "find", {"q": "x"})
            s.record("session", "end")
            if os.environ.get("WORSE"):
                for _ in range(3):
                    s.record("tasks", "list")
        """
    )
    assert pytester.runpytest("--cleo-grade-save-baseline=b.json").ret == 0
    path = pytester.path / "s.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(path))
    monkeypatch.setenv("WORSE", "1")
    gate = "--cleo-grade-fail-on-regression=total:5,discoveryEfficiency:5,disclosureUse:5"
    result = pytester.runpytest("--cleo-grade-baseline=b.json", gate)
    assert result.ret == 1
    text = path.read_text(encoding="utf-8")
    assert len(text.encode("utf-8")) < 1024 * 1024
    block = text.split("### Against the baseline", 1)[1].split("### cleo-grade", 1)[0]
    assert len(block.encode("utf-8")) <= BASELINE_SUMMARY_BYTES
    assert "**baseline gate FAILED: 200 regressions**" in block
    rows = [line for line in block.splitlines() if line.startswith("| `")]
    assert len(rows) == 200
    assert all(len(line.split("`")[1]) == 200 for line in rows)
