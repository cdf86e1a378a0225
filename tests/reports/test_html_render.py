"""The HTML report's pure renderer: escaping, fixed radar axes, trend marks, the drill-down."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._verdict import GradedTest, RunGrade
from pytest_cleo_grade.reports._html_page import (
    MAX_TREND_POINTS,
    build_report,
    radar_svg,
    render_html,
    trend_svg,
)

HOSTILE = "<script>alert(1)</script></details></svg>\"'&"


def grade(
    test_id: str,
    total: float,
    *,
    minute: int = 0,
    flags: tuple[str, ...] = (),
    points: list[dict[str, object]] | None = None,
    dims: dict[str, tuple[float, float]] | None = None,
    **extra: object,
) -> GradeResult:
    dimensions = dims or {"sessionDiscipline": (total / 5, 20), "discovery": (total / 5, 20)}
    return GradeResult.model_validate(
        {
            "sessionId": f"s-{test_id}-{minute}",
            "totalScore": total,
            "maxScore": 100,
            "dimensions": {
                name: DimensionScore(score=score, max=top)
                for name, (score, top) in dimensions.items()
            },
            "flags": list(flags),
            "timestamp": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=minute),
            "entryCount": 3,
            "testId": test_id,
            **({"points": points} if points is not None else {}),
            **extra,
        }
    )


def run_of(
    *results: GradeResult, gate: float | None = None, threshold: float | None = None
) -> RunGrade:
    tests = tuple(
        GradedTest(str((r.model_extra or {})["testId"]), r, threshold, None, "fail")
        for r in results
    )
    return RunGrade(tests, gate)


class _Tags(HTMLParser):
    """Counts start tags and collects text, as a browser's parser would see the page."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def parse(page: str) -> _Tags:
    parser = _Tags()
    parser.feed(page)
    parser.close()
    return parser


def test_hostile_test_ids_flags_and_points_are_text_never_markup() -> None:
    hostile = grade(
        HOSTILE,
        40,
        flags=(HOSTILE,),
        points=[
            {"dimension": HOSTILE, "points": -5, "rule": HOSTILE, "text": HOSTILE, "entries": [0]}
        ],
        dims={HOSTILE: (8, 20)},
        sessionId=HOSTILE,
    )
    page = render_html(
        build_report(run_of(hostile), [hostile], calls={HOSTILE: {0: HOSTILE}}, source=HOSTILE)
    )
    tags = parse(page)
    # The page's own markup only: one script (the sorter), its details and its SVGs.
    assert tags.tags["script"] == 1
    assert tags.tags["svg"] == 2
    assert "<script>alert" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;&lt;/details&gt;") >= 8
    # Every occurrence reads back as the original text.
    assert "".join(tags.text).count(HOSTILE) >= 8


def test_control_characters_from_the_agent_are_shown_as_escapes_not_written_raw() -> None:
    # ESC and BEL mean nothing in a page (and are invalid in HTML); a CR read as a line break.
    odd = "id\x1b[31m\x07\r\u202e"
    hostile = grade(
        odd,
        40,
        flags=(odd,),
        points=[{"dimension": odd, "points": -5, "rule": odd, "text": odd, "entries": [0]}],
        dims={odd: (8, 20)},
        sessionId=odd,
    )
    page = render_html(build_report(run_of(hostile), [hostile], calls={odd: {0: odd}}))
    assert not set("\x1b\x07\r\u202e") & set(page)
    assert page.count("id\\x1b[31m\\x07\\r\\u202e") >= 6


def test_the_verdict_comes_first_and_says_what_the_gate_decided() -> None:
    failing = run_of(grade("t::a", 40), grade("t::b", 60), gate=75)
    page = render_html(build_report(failing, []))
    assert page.index("id='verdict'") < page.index("id='grades'")
    assert "data-state='fail'" in page
    assert "gate FAILED: mean 50% is below 75% (B)" in page
    passing = render_html(build_report(run_of(grade("t::a", 90), gate=75), []))
    assert "data-state='pass'" in passing and "gate passed: mean 90% reaches 75% (B)" in passing
    assert "data-state='none'" in render_html(build_report(run_of(grade("t::a", 90)), []))


def test_a_baseline_note_is_drawn_neutral_never_as_a_passed_gate() -> None:
    gates = [
        (None, "no baseline at /ci/nope.json: nothing compared"),
        (False, "baseline gate passed: no drop beyond the tolerances"),
        (True, "baseline gate FAILED: 1 regression"),
    ]
    page = render_html(build_report(run_of(grade("t::a", 90)), [], gates=gates))
    states = re.findall(r"<div class='verdict gate (\w+)' data-state='(\w+)'><strong>([^<]*)", page)
    assert states == [
        ("none", "none", "no baseline at /ci/nope.json: nothing compared"),
        ("pass", "pass", "baseline gate passed: no drop beyond the tolerances"),
        ("fail", "fail", "baseline gate FAILED: 1 regression"),
    ]


def test_the_radar_axes_are_fixed_at_each_dimensions_max() -> None:
    full = grade("t::a", 100, dims={"a": (20, 20), "b": (10, 10), "c": (5, 5), "d": (7, 7)})
    half = grade("t::a", 50, dims={"a": (10, 20), "b": (5, 10), "c": (2.5, 5), "d": (3.5, 7)})
    outer = re.findall(r"class='ring' points='([^']*)'", radar_svg(full))[-1]
    score = re.search(r"class='score' points='([^']*)'", radar_svg(full))
    assert score is not None and score.group(1) == outer  # a perfect grade fills the frame
    half_score = re.search(r"class='score' points='([^']*)'", radar_svg(half))
    middle = re.findall(r"class='ring' points='([^']*)'", radar_svg(half))[1]
    assert half_score is not None and half_score.group(1) == middle  # half on every axis
    # The frame does not move with the scores.
    assert re.findall(r"class='ring'[^>]*", radar_svg(full)) == re.findall(
        r"class='ring'[^>]*", radar_svg(half)
    )


def test_the_trend_marks_each_rubric_or_model_change_and_only_those() -> None:
    history = [
        grade("t::a", 50, minute=0, rubric="cleo", rubricVersion="1"),
        grade("t::a", 60, minute=1, rubric="cleo", rubricVersion="1"),
        grade("t::a", 65, minute=2, rubric="cleo", rubricVersion="2"),
        grade("t::a", 70, minute=3, rubric="cleo", rubricVersion="2", model="m1"),
        grade("t::a", 75, minute=4, rubric="cleo", rubricVersion="2", model="m1"),
    ]
    svg = trend_svg(history)
    assert "data-points='5'" in svg and "data-changes='2'" in svg
    assert "rubricVersion 1 → 2" in svg and "model - → m1" in svg
    ys = [float(y) for y in re.findall(r"<circle cx='[^']*' cy='([^']*)'", svg)]
    assert ys == sorted(ys, reverse=True)  # rising percentages are drawn higher up


def test_a_long_history_draws_only_its_recent_points() -> None:
    history = [grade("t::a", i % 100, minute=i) for i in range(MAX_TREND_POINTS + 300)]
    svg = trend_svg(history)
    assert f"data-points='{MAX_TREND_POINTS}'" in svg
    assert f"last {MAX_TREND_POINTS} of {MAX_TREND_POINTS + 300}" in svg
    assert "<circle" not in svg  # no dots on a long line


def test_change_is_against_the_previous_run_or_the_baseline() -> None:
    old = grade("t::a", 50, minute=0)
    new = grade("t::a", 80, minute=1)
    fresh = grade("t::b", 70, minute=1)
    report = build_report(run_of(new, fresh), [old, new, fresh])
    page = render_html(report)
    assert "+30 vs previous run" in page and ">new<" in page
    assert [len(t.history) for t in report.tests] == [2, 1]
    against = render_html(build_report(run_of(new), [old, new], baseline={"t::a": [90.0, 100.0]}))
    assert "-15 vs baseline" in against


def test_a_repeated_tests_row_shows_its_flaky_verdict() -> None:
    runs = [grade("t::a", p, minute=i, run=i + 1, runs=3) for i, p in enumerate((90, 50, 80))]
    page = render_html(build_report(run_of(*runs, threshold=75), runs))
    assert "flaky (2/3 passed)" in page
    assert "mean of 3 runs (73.33%)" in page  # the row's percentage is the runs' mean
    # The radar, flags and points are the lowest run's, the one that explains a failure; the
    # heading's letter is the mean's, as in the row.
    assert "run 2 of 3 (the lowest): 50/100 (50%)" in page
    assert "3 runs, mean 73.33%: #1 90% A, #2 50% D, #3 80% B" in page
    assert "<h2>t::a <span class='letter C'>C</span></h2>" in page


def test_a_repeated_test_with_a_run_not_graded_says_how_many_of_its_runs_are_shown() -> None:
    # Run 2 could not be graded: the page said "run 3 of 2 (the lowest)" and "2 runs".
    runs = [grade("t::a", p, minute=i, run=i, runs=3) for i, p in ((1, 90), (3, 80))]
    page = render_html(build_report(run_of(*runs, threshold=75), runs))
    assert "run 3 of 3 (the lowest): 80/100 (80%)" in page
    # The run that could not be graded is named where it ran, never left out unsaid.
    assert "2 of 3 runs graded, mean 85%: #1 90% A, #2 not graded, #3 80% B" in page
    # No verdict over the graded runs alone: the missing one may have failed.
    assert "2/2 graded runs passed; 2 of 3 runs graded" in page
    assert "stable pass" not in page


def test_a_repeated_test_with_one_graded_run_says_whether_it_passed() -> None:
    # `-k run-2`: the row said only "1 of 3 runs graded", not whether run 2 met its threshold.
    runs = [grade("t::a", 70, minute=0, run=2, runs=3)]
    page = render_html(build_report(run_of(*runs, threshold=75), runs))
    assert "0/1 graded runs passed; 1 of 3 runs graded" in page


def test_a_huge_runs_count_in_a_history_is_counted_never_listed_run_by_run() -> None:
    # A history line is input: ``runs`` of 10**12 must not make a list of every run.
    runs = [grade("t::a", p, minute=i, run=i, runs=10**12) for i, p in ((1, 90), (3, 80))]
    page = render_html(build_report(run_of(*runs), runs))
    assert "#1 90% A, #2 not graded, #3 80% B, #4 not graded" in page  # in run order
    assert f"#22 not graded and {10**12 - 2 - 20} more not graded" in page


def test_a_partial_series_is_marked_and_never_compared() -> None:
    # A whole series (85, 74, 85), then `-k run-2` re-ran run 2 alone: 74 is no measure of
    # the test's mean, so no "-7.3 vs previous run" (the baseline gate refuses it too).
    whole = [
        grade("t::a", p, minute=i, run=i, runs=3, series="s1")
        for i, p in ((1, 85), (2, 74), (3, 85))
    ]
    again = grade("t::a", 74, minute=9, run=2, runs=3, series="s2")
    page = render_html(build_report(run_of(again, threshold=75), [*whole, again]))
    row = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert "vs previous run" not in page
    assert "<td data-sort='0'>not compared, 1 of 3 runs graded</td>" in row
    assert (
        "<td data-sort='0/1 graded runs passed; 1 of 3 runs graded'>0/1 graded runs passed; "
        "1 of 3 runs graded</td>"
    ) in row
    assert "1 of 3 runs graded, mean 74%: #1 not graded, #2 74% C, #3 not graded" in page
    assert "run 2 of 3 (the only one graded): 74/100 (74%)" in page
    against = build_report(run_of(again), [again], baseline={"t::a": [85.0, 74.0, 85.0]})
    assert "not compared, 1 of 3 runs graded" in render_html(against)


def test_a_whole_series_is_compared_with_the_last_whole_one_never_a_partial_one() -> None:
    first = [grade("t::a", 60, minute=i, run=i, runs=2, series="s1") for i in (1, 2)]
    partial = grade("t::a", 10, minute=5, run=2, runs=2, series="s2")
    now = [grade("t::a", 80, minute=9 + i, run=i, runs=2, series="s3") for i in (1, 2)]
    page = render_html(build_report(run_of(*now), [*first, partial, *now]))
    assert "+20 vs previous run" in page  # against 60, never the lone re-run's 10
    # Only a partial series before: nothing whole to compare with.
    alone = render_html(build_report(run_of(*now), [partial, *now]))
    assert "not compared, no whole previous run" in alone and ">new<" not in alone


def test_an_expected_failure_is_shown_as_not_counted() -> None:
    result = grade("t::a", 30)
    run = RunGrade((GradedTest("t::a", result, None, None, "fail", excluded="xfailed"),), None)
    page = render_html(build_report(run, [result]))
    assert "xfailed, not counted" in page and "no graded tests (1 xfail/xpass not counted)" in page


def test_a_repeated_xfail_test_counted_whole_is_not_labelled_not_counted() -> None:
    # Runs 1 and 3 of an xfail(raises=) test passed (XPASS, marked); run 2 raised another
    # error (pytest's FAILED): the test counts whole in the mean, so no run says otherwise.
    results = [grade("t::a", p, minute=i, run=i, runs=3) for i, p in ((1, 100), (2, 40), (3, 100))]
    marks = ("xpassed", None, "xpassed")
    run = RunGrade(
        tuple(
            GradedTest(f"t::a[run-{i}]", r, None, None, "fail", excluded=mark)
            for i, (r, mark) in enumerate(zip(results, marks, strict=True), start=1)
        ),
        None,
    )
    page = render_html(build_report(run, results))
    assert "not counted" not in page
    assert "mean 80%" in page


def test_points_drill_down_names_the_entries_calls_or_their_indices() -> None:
    points = [
        {"dimension": "discovery", "points": -5, "rule": "D2", "text": "used list", "entries": [2]},
        {"dimension": "discovery", "points": 10, "rule": "D1", "text": "found", "entries": []},
    ]
    result = grade("t::a", 60, points=points)
    with_calls = render_html(
        build_report(run_of(result), [result], calls={result.session_id: {2: "tasks.list"}})
    )
    assert "<li>#2 <code>tasks.list</code></li>" in with_calls
    assert "<code>D2</code> used list" in with_calls
    without = render_html(build_report(run_of(result), [result]))
    assert "<li>#2</li>" in without
    # Plain <details> elements, readable without a script; a dimension that lost points
    # starts open, and each item's entries start closed.
    assert with_calls.count("<details") == 3
    assert with_calls.count("<details class='dimension' open>") == 1
    full = grade("t::a", 100, points=[{**points[1], "points": 20}])
    assert "<details class='dimension'>" in render_html(build_report(run_of(full), [full]))


def test_the_page_loads_nothing_from_anywhere() -> None:
    result = grade("t::a", 60)
    page = render_html(build_report(run_of(result), [result]))
    assert not re.search(r"(src|href)=['\"](?!#)", page)
    assert "@import" not in page and "url(" not in page and not re.search("https?:", page)
    assert "@media print" in page


def test_the_page_carries_a_policy_that_runs_only_its_own_style_and_script() -> None:
    import base64
    import hashlib

    from pytest_cleo_grade.reports._html_page import _CSS, _SCRIPT

    result = grade("t::a", 60)
    page = render_html(build_report(run_of(result), [result]))
    [policy] = re.findall(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', page)
    head = page[: page.index("</head>")]
    assert head.index("Content-Security-Policy") < head.index("<style>")
    directives = dict(part.strip().split(" ", 1) for part in policy.split(";"))
    assert directives["default-src"] == "'none'"

    def sha(text: str) -> str:
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        return f"'sha256-{digest}'"

    assert directives["script-src"] == sha(_SCRIPT)
    assert directives["style-src"] == sha(_CSS)
    assert f"<script>{_SCRIPT}</script>" in page and f"<style>{_CSS}</style>" in page


def test_radar_labels_fit_their_box_and_one_or_two_dimensions_are_bars() -> None:
    # Long names (a combined rubric's cleo.discoveryEfficiency) ran past a fixed 440-px box
    # and were cut; one or two dimensions drew a line and no polygon at all.
    combined = grade(
        "t::a",
        80,
        dims={
            "cleo.sessionDiscipline": (20, 20),
            "cleo.discoveryEfficiency": (15, 20),
            "trajectory.trajectory": (100, 100),
        },
    )
    svg = radar_svg(combined)
    box = re.search(r"viewBox='(-?\d+) 0 (\d+) 240'", svg)
    assert box is not None
    left, width = int(box.group(1)), int(box.group(2))
    for x, anchor, text in re.findall(
        r"<text x='([\d.]+)' y='[\d.]+' text-anchor='(\w+)'>([^<]*)", svg
    ):
        span = len(text) * 6.2
        start = {"start": float(x), "end": float(x) - span, "middle": float(x) - span / 2}[anchor]
        assert left <= start and start + span <= left + width, text
    two = radar_svg(grade("t::b", 50, dims={"workflow": (17, 30), "safety": (0, 20)}))
    bars = re.findall(r"<rect class='(ring|score)' x='0' y='\d+' width='([\d.]+)'", two)
    assert bars == [("ring", "300"), ("score", "170.0"), ("ring", "300"), ("score", "0.0")]
    assert "<polygon" not in two


def test_a_grade_shows_one_percentage_on_the_page_as_the_terminal_does() -> None:
    # The table said "43.5/100 (43.5%)" beside the section's "43.5/100 (44%)"; the terminal
    # says 44%. Half up, whole, in both places (a failing one is never rounded up).
    page = render_html(build_report(run_of(grade("t::a", 43.5)), []))
    assert "43.5/100 (44%)" in page and "(43.5%)" not in page
