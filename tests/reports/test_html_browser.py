"""The HTML report in a real browser: headless Chromium renders it, with and without scripts."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._verdict import GradedTest, RunGrade
from pytest_cleo_grade.reports._html import write_report
from pytest_cleo_grade.reports._html_page import build_report, render_html

CHROMIUM = shutil.which("chromium")
pytestmark = [
    pytest.mark.e2e,  # a browser process renders the report
    pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed"),
]

#: An agent-chosen test id that would retitle the page if any of it ran as markup.
HOSTILE = "t::<script>document.title='pwned'</script></details>"


def grade(test_id: str, total: int, minute: int) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": f"s-{minute}",
            "totalScore": total,
            "maxScore": 100,
            "dimensions": {
                "sessionDiscipline": DimensionScore(score=total / 5, max=20),
                "discovery": DimensionScore(score=total / 5, max=20),
                "taskHygiene": DimensionScore(score=total / 5, max=20),
            },
            "flags": [f"{test_id} flag"],
            "timestamp": f"2026-01-01T00:{minute:02d}:00Z",
            "entryCount": 3,
            "testId": test_id,
            "points": [
                {
                    "dimension": "discovery",
                    "points": -5,
                    "rule": "D2",
                    "text": "listed instead of finding",
                    "entries": [1],
                }
            ],
        }
    )


@pytest.fixture
def page(tmp_path: Path) -> Path:
    # Three tests in an order that no sort yields by itself: 60, 90, 30.
    results = [grade("t::middle", 60, 1), grade(HOSTILE, 90, 2), grade("t::low", 30, 3)]
    run = RunGrade(
        tuple(GradedTest(str(r.model_extra["testId"]), r, None, None, "fail") for r in results), 75
    )  # type: ignore[index]
    path = tmp_path / "report.html"
    write_report(path, render_html(build_report(run, results)))
    return path


def chromium(tmp_path: Path, *args: str) -> str:
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # CI runs as root, where Chromium's sandbox refuses to start
            "--disable-gpu",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def rows(dom: str) -> list[str]:
    body = dom[dom.index("<tbody>") : dom.index("</tbody>")]
    return re.findall(r'<tr data-index="(\d+)"', body)


def test_with_scripts_on_the_table_sorts_and_nothing_agent_written_runs(
    page: Path, tmp_path: Path
) -> None:
    dom = chromium(tmp_path, "--dump-dom", page.as_uri() + "#sort=-score")
    assert 'data-sortable="on"' in dom and 'data-sorted-by="-score"' in dom
    assert rows(dom) == ["1", "0", "2"]  # 90, 60, 30: sorted by the script
    assert "<title>cleo-grade report</title>" in dom  # the hostile id stayed text
    assert "gate FAILED: mean 60% is below 75% (B)" in dom
    assert dom.count('<polygon class="score"') == 3
    assert dom.count("<polyline") == 3
    ascending = chromium(tmp_path, "--dump-dom", page.as_uri() + "#sort=test")
    assert rows(ascending) == ["1", "2", "0"]  # t::<script>..., t::low, t::middle


def test_markup_that_got_past_the_escaping_still_cannot_run(page: Path, tmp_path: Path) -> None:
    # Were an agent's text ever written unescaped, the page's policy runs only the page's
    # own script (by its hash): an injected one, inline or fetched, is not run.
    html = page.read_text(encoding="utf-8")
    injected = (
        "<script>document.title='pwned'</script>"
        "<img src='https://example.invalid/x.png' onerror=\"document.title='pwned'\">"
    )
    hostile = tmp_path / "hostile.html"
    hostile.write_text(html.replace("<body>", "<body>" + injected, 1), encoding="utf-8")
    dom = chromium(tmp_path, "--dump-dom", hostile.as_uri() + "#sort=-score")
    assert "<title>cleo-grade report</title>" in dom
    assert 'data-sorted-by="-score"' in dom  # while the page's own script did run


def test_with_scripts_blocked_everything_is_there_in_server_order(
    page: Path, tmp_path: Path
) -> None:
    # As a CI artefact viewer serves it (Jenkins' default policy blocks scripts): the same
    # page under a policy forbidding every script. (Chromium's own switch for scripts off
    # also stops --dump-dom from printing anything.)
    blocked = tmp_path / "blocked.html"
    policy = "<meta http-equiv='Content-Security-Policy' content=\"script-src 'none'\">"
    blocked.write_text(page.read_text().replace("<head>", "<head>" + policy, 1))
    dom = chromium(tmp_path, "--dump-dom", blocked.as_uri() + "#sort=-score")
    assert "data-sortable" not in dom and 'class="js"' not in dom  # the script did not run
    assert rows(dom) == ["0", "1", "2"]
    assert "gate FAILED" in dom and dom.count('<polygon class="score"') == 3
    assert dom.count("<details") == 6 and "listed instead of finding" in dom
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;&lt;/details&gt;" in dom


def test_a_screenshot_of_the_report_is_a_real_image(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1000,900", page.as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1000, 900)
    assert len(data) > 20_000  # a rendered page, not a blank one


def test_a_long_test_id_and_flag_wrap_inside_the_window(tmp_path: Path) -> None:
    # A 400-character parametrize id pushed the table's Grade, Score and Change columns,
    # and the flag's text, past the right edge of a 1000 px window.
    long_id = "t::test_long[" + "averyveryverylongparametrizeidwithoutanyspaces_" * 8 + "]"
    results = [grade(long_id, 60, 1), grade("t::short", 90, 2)]
    run = RunGrade(
        tuple(GradedTest(str(r.model_extra["testId"]), r, None, None, "fail") for r in results), 75
    )  # type: ignore[index]
    html = render_html(build_report(run, results))
    # Measured where it is drawn: does anything reach past the window's right edge?
    probe = (
        "<script>var w=document.documentElement.clientWidth,far=0;"
        "document.querySelectorAll('body *').forEach(function(e){"
        "far=Math.max(far,e.getBoundingClientRect().right);});"
        "document.body.setAttribute('data-overflow',String(Math.round(far-w)));</script>"
    )
    path = tmp_path / "report.html"
    # The page's own policy runs no script but its own: the probe goes in without it.
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", html)
    write_report(path, html.replace("</body>", probe + "</body>"))
    dom = chromium(tmp_path, "--window-size=1000,900", "--dump-dom", path.as_uri())
    overflow = re.search(r'data-overflow="(-?\d+)"', dom)
    assert overflow is not None and int(overflow.group(1)) <= 0, overflow
