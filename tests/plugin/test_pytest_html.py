"""pytest-html: the report shows each test's grade, score and flags, and the run's grade and
gate verdict in its summary, so a gate failure never looks like an all-green report."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytest_html", reason="pytest-html is a development dependency")

from tests.plugin_suites import make_suite

# pytest-html's report and its hooks are what these tests read.
pytestmark = pytest.mark.inner_plugins("html")

SUITE = """
import pytest

def test_careful_agent(graded_session):
    for call in [("session", "list"), ("admin", "help"), ("tasks", "find"), ("tasks", "show")]:
        graded_session.record(*call, gateway="cleo_query")
    graded_session.record("session", "end", gateway="cleo_mutate")

@pytest.mark.cleo_grade(fail_under="C", mode="report")
def test_hasty_agent(graded_session):
    graded_session.record("tasks", "list", gateway="cleo_query")
    task = "<script>alert(1)</script>\x1b[2J"
    graded_session.record("tasks", "add", {"title": "x"}, task_id=task)

def test_plain():
    pass
"""


def report(pytester: pytest.Pytester, *args: str) -> tuple[int, str, dict[str, Any]]:
    pytester.makepyfile(test_agent=SUITE)
    result = pytester.runpytest("--html=report.html", "--self-contained-html", *args)
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="([^"]*)"', page)
    assert blob is not None
    return int(result.ret), page, json.loads(html.unescape(blob.group(1)))


def dump_dom(tmp_path: Path, url: str) -> str:
    """The page at ``url`` as headless Chromium leaves it once its scripts ran."""
    done = subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=5000",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def row(data: dict[str, Any], test: str) -> list[str]:
    cells: list[str] = data["tests"][f"test_agent.py::{test}"][0]["resultsTableRow"]
    return cells


def test_each_graded_test_gets_grade_score_and_flag_columns(pytester: pytest.Pytester) -> None:
    _, page, data = report(pytester)
    assert '<th class="sortable" data-column-type="cleoGrade">Grade</th>' in page
    careful = row(data, "test_careful_agent")
    assert careful[2:5] == [
        '<td class="col-cleoGrade">A</td>',
        # The comment is the key pytest-html sorts the column by (never shown).
        '<td class="col-cleoPercent"><!--100.000-->100% (100/100)</td>',
        '<td class="col-cleoFlags">0</td>',
    ]
    hasty = row(data, "test_hasty_agent")
    assert hasty[2] == '<td class="col-cleoGrade">D below threshold</td>'
    assert "<li>tasks.list used 1x (prefer tasks.find for discovery)</li>" in hasty[4]
    # Agent text is escaped: the report cannot be scripted by the agent.
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hasty[4]
    assert "<script>alert(1)" not in json.dumps(data)
    # A control character is shown as its escape, never written into the page.
    assert "&lt;/script&gt;\\x1b[2J" in hasty[4] and "\x1b" not in page
    # An ungraded test keeps the table's shape, with empty cells.
    assert row(data, "test_plain")[2:5] == [
        '<td class="col-cleoGrade"></td>',
        '<td class="col-cleoPercent"></td>',
        '<td class="col-cleoFlags"></td>',
    ]


def test_a_test_id_an_agent_chose_is_escaped_in_pytest_htmls_own_cell(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        test_agent="""
import pytest

@pytest.mark.parametrize("task", ["<img src=x onerror=alert(1)>"])
def test_agent(graded_session, task):
    graded_session.record("session", "list", gateway="cleo_query")
"""
    )
    pytester.runpytest("--html=report.html", "--self-contained-html", "--cleo-grade-fail-under=F")
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="([^"]*)"', page)
    assert blob is not None
    data = json.loads(html.unescape(blob.group(1)))
    [tests] = data["tests"].values()
    cell = tests[0]["resultsTableRow"][1]
    assert cell == (
        '<td class="col-testId">test_agent.py::test_agent[&lt;img src=x onerror=alert(1)&gt;]</td>'
    )


def test_a_failed_gate_is_the_first_thing_the_summary_says(pytester: pytest.Pytester) -> None:
    status, page, _ = report(pytester, "--cleo-grade-gate=A")
    assert status == 1  # no test failed: only the gate
    summary = page.split('<div class="additional-summary prefix">', 1)[1]
    assert summary.lstrip().startswith('<div class="cleo-grade failed"')
    assert "cleo-grade gate FAILED: mean 72.5% is below 90% (A)" in summary
    assert "the run exits with status 1 even where no test failed" in summary


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_a_failed_gate_is_drawn_in_red(pytester: pytest.Pytester, tmp_path: Path) -> None:
    # The colour was on the div, and pytest-html's own `p {color: black}` won: black text.
    report(pytester, "--cleo-grade-gate=A")
    path = pytester.path / "report.html"
    probe = (
        "<script>document.addEventListener('DOMContentLoaded',function(){"
        "var p=document.querySelector('.cleo-grade p');"
        "document.body.setAttribute('data-gate-colour',getComputedStyle(p).color);});</script>"
    )
    path.write_text(path.read_text(encoding="utf-8").replace("</body>", probe + "</body>"))
    assert 'data-gate-colour="rgb(176, 0, 32)"' in dump_dom(tmp_path, path.as_uri())


def test_a_passed_gate_says_so_without_alarm(pytester: pytest.Pytester) -> None:
    status, page, _ = report(pytester, "--cleo-grade-gate=F")
    assert status == 0
    assert '<div class="cleo-grade passed"' in page
    assert "cleo-grade gate passed: mean 72.5% reaches 0% (F)" in page


def test_a_failed_baseline_gate_shows_in_the_summary(pytester: pytest.Pytester) -> None:
    baseline = Path(pytester.path / "baseline.json")
    pytester.makepyfile(test_agent=SUITE)
    pytester.runpytest(f"--cleo-grade-save-baseline={baseline}")
    # The careful agent stops checking sessions first: 90 %, 10 points below its baseline.
    worse = SUITE.replace('("session", "list"), ', "")
    pytester.makepyfile(test_agent=worse)
    args = ["--html=report.html", "--self-contained-html", f"--cleo-grade-baseline={baseline}"]
    result = pytester.runpytest(*args, "--cleo-grade-fail-on-regression=total:5")
    assert result.ret == 1
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    assert '<div class="cleo-grade failed"' in page
    assert ">cleo-grade baseline gate FAILED: 1 regression</p>" in page


def test_a_failed_baseline_gate_alone_says_why_the_run_exits_with_status_1(
    pytester: pytest.Pytester,
) -> None:
    baseline = Path(pytester.path / "baseline.json")
    pytester.makepyfile(test_agent=SUITE)
    pytester.runpytest(f"--cleo-grade-save-baseline={baseline}")
    worse = SUITE.replace('("session", "list"), ', "")
    pytester.makepyfile(test_agent=worse)
    args = ["--html=report.html", "--self-contained-html", f"--cleo-grade-baseline={baseline}"]
    result = pytester.runpytest(*args, "--cleo-grade-fail-on-regression=total:5")
    # Every test passed and the run gate passed: only the baseline gate sets status 1.
    assert result.ret == 1
    result.assert_outcomes(passed=3)
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    summary = page.split('<div class="cleo-grade failed"', 1)[1].split("</div>", 1)[0]
    assert ">cleo-grade baseline gate FAILED: 1 regression</p>" in summary
    reminder = ">the run exits with status 1 even where no test failed</p>"
    assert summary.count(reminder) == 1


#: Graded 100 %, 75 % and 40 % (and one ungraded test): as text, "100%" sorts before "40%".
SCORED = """
def test_perfect(graded_session):
    perfect(graded_session)

def test_forty(graded_session):
    forty(graded_session)

def test_seventy_five(graded_session):
    seventy_five(graded_session)

def test_ungraded():
    pass
"""


def _scored_report(pytester: pytest.Pytester) -> tuple[Path, dict[str, Any]]:
    make_suite(pytester, SCORED)
    pytester.runpytest("--html=report.html", "--self-contained-html").assert_outcomes(passed=4)
    path = pytester.path / "report.html"
    blob = re.search(r'data-jsonblob="([^"]*)"', path.read_text(encoding="utf-8"))
    assert blob is not None
    return path, json.loads(html.unescape(blob.group(1)))


def test_sorting_by_score_orders_by_the_percentage(pytester: pytest.Pytester) -> None:
    _, data = _scored_report(pytester)
    # pytest-html 4 keeps each sortable column's inner HTML under the column's name and sorts
    # by it with a string comparison (genericSort's `a[key] > b[key]`): do the same here.
    keys = {
        test.split("::")[1]: reports[0]["cleoPercent"] for test, reports in data["tests"].items()
    }
    order = sorted(keys, key=lambda test: keys[test])
    assert order == ["test_ungraded", "test_forty", "test_seventy_five", "test_perfect"]
    # What the cell shows is unchanged: the key is a comment.
    cell = row(data, "test_seventy_five")[3]
    assert re.sub(r"<!--.*?-->", "", cell) == '<td class="col-cleoPercent">75% (75/100)</td>'


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")
def test_clicking_score_in_a_browser_sorts_by_the_percentage(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    path, _ = _scored_report(pytester)
    # `?sort=cleoPercent` is what clicking the Score header sets; pytest-html's script sorts.
    dom = dump_dom(tmp_path, path.as_uri() + "?sort=cleoPercent")
    shown = re.findall(r'col-cleoPercent">(?:<!--[^>]*-->)?([^<]*)<', dom)
    # Lowest first on the first click, the ungraded test before every grade.
    assert shown == ["", "40% (40/100)", "75% (75/100)", "100% (100/100)"]


def test_an_unwritable_step_summary_leaves_the_baseline_gates_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    (pytester.path / "summary").mkdir()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "summary"))
    status, page, _ = report(
        pytester, "--cleo-grade-baseline=absent.json", "--cleo-grade-baseline-required"
    )
    assert status == 1
    summary = page.split('<div class="additional-summary prefix">', 1)[1]
    assert '<div class="cleo-grade failed"' in summary
    assert ">cleo-grade no baseline at " in summary
    assert "absent.json: nothing compared</p>" in summary
    assert "GITHUB_STEP_SUMMARY" not in page


NEAR_MISS_RULES = """
[[dimensions]]
name = "care"
max = 25000
start = 25000

[[dimensions.rules]]
id = "care.list"
kind = "penalty"
match = { calls = ["tasks.list"] }
unless_preceded_by = { calls = ["tasks.find"] }
points = -4251
flag = "tasks.list used"
"""


def test_a_grade_just_below_its_threshold_is_never_shown_as_reaching_it(
    pytester: pytest.Pytester,
) -> None:
    # 20749/25000 is 82.996 %: rounded, both reports said "83%" beside "below threshold 83".
    pytester.makefile(".toml", near_miss=NEAR_MISS_RULES)
    pytester.makepyfile(
        test_agent="""
        import pytest

        @pytest.mark.cleo_grade(rubric="rules", fail_under=83, mode="report")
        def test_near_miss(graded_session):
            graded_session.record("tasks", "list", gateway="cleo_query")
        """
    )
    result = pytester.runpytest(
        "--html=report.html",
        "--self-contained-html",
        "--cleo-grade-rubric-file=near_miss.toml",
        "--cleo-grade-html=grades.html",
    )
    result.assert_outcomes(passed=1)
    page = (pytester.path / "report.html").read_text(encoding="utf-8")
    blob = re.search(r'data-jsonblob="([^"]*)"', page)
    assert blob is not None
    cells = row(json.loads(html.unescape(blob.group(1))), "test_near_miss")
    assert cells[2:4] == [
        '<td class="col-cleoGrade">B below threshold</td>',
        '<td class="col-cleoPercent"><!--082.996-->82.99% (20749/25000)</td>',
    ]
    own = (pytester.path / "grades.html").read_text(encoding="utf-8")
    assert "20749/25000 (82.99%)" in own  # the test's table row and its section
    assert "(83%)" not in own
