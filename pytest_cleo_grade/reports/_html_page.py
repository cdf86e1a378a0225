"""The HTML report: one self-contained page (inline CSS, inline SVG, one small inline script).

Pure: grades in, an HTML string out; the I/O edge (:mod:`pytest_cleo_grade.reports._html`)
reads the history and the store and writes the file. Every string that can come from the
graded agent or a third-party rubric (test ids, flags, rule texts, dimension names, call
names) goes through :func:`html.escape`; markup is never built from data any other way.
Everything is rendered on the server side, so the page reads the same with JavaScript off;
the script only makes the table sortable.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, Protocol

from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core._scale import letter_for
from pytest_cleo_grade.core._text import html_text
from pytest_cleo_grade.core.models import DimensionScore, GradeResult, Point, format_timestamp
from pytest_cleo_grade.grading._runs import latest_whole_series, short_series
from pytest_cleo_grade.grading._stats import verdict_for
from pytest_cleo_grade.grading._verdict import (
    GradedTest,
    RunGrade,
    describe_percent,
    describe_threshold,
    shown_percent,
)
from pytest_cleo_grade.reports._display import number_text, points_of, score_text, signed_text

__all__ = [
    "MAX_NOT_GRADED",
    "MAX_TREND_POINTS",
    "GradeLine",
    "HtmlReport",
    "HtmlTest",
    "build_report",
    "grade_test_id",
    "render_html",
]

#: The most history points one trend line draws (the most recent ones): a test graded on
#: every commit for years must not make the page megabytes long.
MAX_TREND_POINTS: Final = 500

#: The most runs without a grade a repeated test's run list names (the rest are counted).
MAX_NOT_GRADED: Final = 20

#: Extras whose change between two grades of a test is marked on its trend.
_VERSION_KEYS: Final = ("rubric", "rubricVersion", "model", "judgeModel")


class GradeLine(Protocol):
    """What the page reads of a history line beside this run's (a trend point, a previous
    grade): a GradeResult, or the history index's light row of one (reports._html_history)."""

    @property
    def session_id(self) -> str: ...
    @property
    def timestamp(self) -> datetime: ...
    @property
    def model_extra(self) -> dict[str, Any] | None: ...
    @property
    def percent(self) -> float: ...
    @property
    def display_percent(self) -> int: ...


def grade_test_id(result: GradeLine) -> str:
    """The test a grade belongs to: its ``testId`` extra, else its session id (as baselines)."""
    extra = result.model_extra or {}
    return str(extra.get("testId") or result.session_id)


def _identity(result: GradeLine, key: str) -> tuple[str, object, str, object]:
    """What tells one grade line from another: this run's grades are found in the history
    (the plugin appended them before the report is written) by it."""
    extra = result.model_extra or {}
    return (result.session_id, result.timestamp, key, extra.get("run"))


def _version(result: GradeLine) -> tuple[str, ...]:
    extra = result.model_extra or {}
    return tuple(str(extra.get(key, "")) for key in _VERSION_KEYS)


@dataclass(frozen=True, slots=True)
class HtmlTest:
    """One graded test of the report: this run's grade(s) and the test's history."""

    test_id: str
    #: This run's grades of the test in run order (several when it is repeated).
    tests: tuple[GradedTest, ...]
    #: Every known grade of the test in history order, this run's included.
    history: tuple[GradeLine, ...]
    #: The percentage compared with (the previous run's or the baseline's), if any.
    previous: float | None = None
    previous_source: str = "previous run"
    #: Entry index -> ``domain.operation`` of the shown grade's session, when the store had it.
    calls: Mapping[int, str] | None = None
    #: The shown grade's session's conversation, when the store holds one.
    conversation: Conversation | None = None
    #: A repeated test's decision as the terminal says it (the pytest run knows it; a
    #: history does not: then :attr:`repeat_verdict` counts the runs that reached the bar).
    decision: str | None = None

    @property
    def shown_index(self) -> int:
        """Which run's grade the radar, flags and points show: a repeated test's lowest (the
        latest of equals), the one that explains a failing decision; else the one grade."""
        return min(range(len(self.tests)), key=lambda i: (self.tests[i].result.percent, -i))

    @property
    def shown(self) -> GradeResult:
        """The grade whose radar, flags and points are shown (see :attr:`shown_index`)."""
        return self.tests[self.shown_index].result

    @property
    def percent(self) -> float:
        return sum(test.result.percent for test in self.tests) / len(self.tests)

    @property
    def repeat_verdict(self) -> str | None:
        """``flaky (2/3 passed)`` for a repeated test with a threshold, else None."""
        if not self.repeated or all(test.threshold is None for test in self.tests):
            return None
        passed = sum(test.passed for test in self.tests)
        if self.partial is not None:
            # (One graded run too: whether it met the threshold is worth saying.)
            # Runs missing from the series may have failed: no verdict over the others.
            return f"{passed}/{len(self.tests)} graded runs passed"
        return f"{verdict_for(passed, len(self.tests))} ({passed}/{len(self.tests)} passed)"

    @property
    def runs_asked(self) -> int:
        """How many runs the test asked for (its grades' ``runs``): more than were graded when
        a run could not be graded or did not run (``-k``, ``--lf``)."""
        asked = [(t.result.model_extra or {}).get("runs") for t in self.tests]
        return max([len(self.tests), *(n for n in asked if isinstance(n, int))])

    @property
    def repeated(self) -> bool:
        """A test of several runs, even when only one of them was graded."""
        return self.runs_asked > 1

    def run_number(self, position: int) -> int:
        """The run index of the grade at ``position`` (its ``run`` extra)."""
        run = (self.tests[position].result.model_extra or {}).get("run")
        return run if isinstance(run, int) else position + 1

    @property
    def not_graded(self) -> tuple[tuple[int, ...], int]:
        """The first :data:`MAX_NOT_GRADED` runs the test asked for that have no grade here
        (failed, or did not run), and how many such runs there are in all."""
        asked = self.runs_asked
        graded = {self.run_number(i) for i in range(len(self.tests))}
        graded = {n for n in graded if 1 <= n <= asked}
        # ``runs`` is read from a history: a huge one is counted, never listed run by run.
        missing = (n for n in range(1, asked + 1) if n not in graded)
        return tuple(itertools.islice(missing, MAX_NOT_GRADED)), asked - len(graded)

    @property
    def partial(self) -> str | None:
        """``1 of 4 runs graded`` for a repeated test graded over fewer runs than it asked
        (``-k run-2``, ``--lf``, a run that could not be graded), else None: such a series is
        no measure of the test's mean, and is not compared (as the baseline gate does)."""
        graded, asked = len(self.tests), self.runs_asked
        return f"{graded} of {asked} runs graded" if graded < asked else None


@dataclass(frozen=True, slots=True)
class HtmlReport:
    """What the page shows: the run's grade and gate, and its tests."""

    run: RunGrade
    tests: tuple[HtmlTest, ...]
    title: str = "cleo-grade report"
    #: Where the grades came from (a path, "this pytest run"), shown under the title.
    source: str = ""
    #: Other gates of the run, each (failed, its verdict line): the baseline gate's. Failed
    #: is None for a line that decided nothing (a note: "no baseline at ...: nothing
    #: compared", a comparison without tolerances): drawn neutral, never as a passed gate.
    gates: tuple[tuple[bool | None, str], ...] = ()
    #: The judge calibration section (rendered), "" without manual grades to compare with.
    calibration: str = ""


def build_report(
    run: RunGrade,
    history: Sequence[GradeLine],
    *,
    baseline: Mapping[str, Sequence[float]] | None = None,
    calibration: Sequence[GradeResult] | None = None,
    calls: Mapping[str, Mapping[int, str]] | None = None,
    title: str = "cleo-grade report",
    source: str = "",
    decisions: Mapping[str, str] | None = None,
    gates: Sequence[tuple[bool | None, str]] = (),
    conversations: Mapping[str, Conversation] | None = None,
) -> HtmlReport:
    """Group the run's tests with their history (one pass over it).

    ``baseline`` maps a test id to its baseline percentages (their mean is compared with);
    without one, a test is compared with its latest grades before this run. ``calls`` maps
    a session id to its entries' call names; ``decisions`` a repeated test's id to its
    decision line; ``gates`` the run's other gates (failed, verdict line; failed None for
    a note that decided nothing). ``calibration``: the grades the judge calibration is made
    of (every session graded by hand, all its lines), else the history's.
    """
    current: dict[str, list[GradedTest]] = {}
    for test in run.tests:
        current.setdefault(grade_test_id(test.result), []).append(test)
    now = {_identity(test.result, key) for key, tests in current.items() for test in tests}
    past: dict[str, list[GradeLine]] = {}
    earlier: dict[str, list[GradeLine]] = {}
    seen: set[tuple[str, object, str, object]] = set()
    for result in history:
        key = grade_test_id(result)
        if key in current:
            past.setdefault(key, []).append(result)
            identity = _identity(result, key)
            if identity in now:
                seen.add(identity)
            else:
                earlier.setdefault(key, []).append(result)
    tests: list[HtmlTest] = []
    for key, graded in current.items():
        lines = past.get(key, [])
        # A grade the history could not take (a full disk) still ends its trend.
        missing = [t.result for t in graded if _identity(t.result, key) not in seen]
        before = earlier.get(key, [])
        previous, source_name = _previous(key, before, baseline)
        entry = HtmlTest(
            test_id=key,
            tests=tuple(graded),
            history=(*lines, *missing),
            previous=previous,
            previous_source=source_name,
            decision=None if decisions is None else decisions.get(key),
        )
        if calls is not None:  # the calls of the session whose points are shown
            entry = dataclasses.replace(entry, calls=calls.get(entry.shown.session_id))
        if conversations is not None:
            talk = conversations.get(entry.shown.session_id)
            entry = dataclasses.replace(entry, conversation=talk)
        tests.append(entry)
    from pytest_cleo_grade.reports._calibration_html import calibration_section

    return HtmlReport(
        run=run,
        tests=tuple(tests),
        title=title,
        source=source,
        gates=tuple(gates),
        calibration=calibration_section(
            [r for r in history if isinstance(r, GradeResult)]
            if calibration is None
            else calibration
        ),
    )


def _previous(
    key: str, before: Sequence[GradeLine], baseline: Mapping[str, Sequence[float]] | None
) -> tuple[float | None, str]:
    if baseline is not None:
        values = baseline.get(key)
        return (sum(values) / len(values), "baseline") if values else (None, "baseline")
    if not before:
        return None, "previous run"
    # The latest earlier series that holds every run the test asked: the runs a ``-k`` or
    # ``--lf`` run re-ran are no measure of the test (as a baseline from a history).
    series = latest_whole_series(before, grade_test_id)[key]
    if short_series(series) is not None:
        return None, _PARTIAL_PREVIOUS
    return sum(r.percent for r in series) / len(series), "previous run"


#: The previous runs of a test hold no whole series: nothing to compare with.
_PARTIAL_PREVIOUS: Final = "no whole previous run"


# -- rendering --------------------------------------------------------------------------


def _e(text: object) -> str:
    return html_text(text)


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def render_html(report: HtmlReport) -> str:
    """The whole page as one string."""
    parts = [
        "<!DOCTYPE html>\n<html lang='en'>\n<head>\n<meta charset='utf-8'>\n",
        "<meta name='viewport' content='width=device-width, initial-scale=1'>\n",
        f'<meta http-equiv="Content-Security-Policy" content="{content_security_policy()}">\n',
        f"<title>{_e(report.title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n",
        f"<h1>{_e(report.title)}</h1>\n",
    ]
    if report.source:
        parts.append(f"<p class='source'>{_e(report.source)}</p>\n")
    parts.append(_verdict(report.run))
    parts.extend(_gate(failed, line) for failed, line in report.gates)
    parts.append(_table(report.tests))
    parts.extend(_section(index, test) for index, test in enumerate(report.tests))
    parts.append(report.calibration)
    parts.append(f"<script>{_SCRIPT}</script>\n</body>\n</html>\n")
    return "".join(parts)


def _verdict(run: RunGrade) -> str:
    line = run.verdict()
    state = "none" if line is None or run.mean is None else "fail" if run.gate_failed else "pass"
    text = line if line is not None else "no gate set"
    return (
        f"<div id='verdict' class='verdict {state}' data-state='{state}'>"
        f"<strong>{_e(text)}</strong><br>{_e(run.run_line())}</div>\n"
    )


def _gate(failed: bool | None, line: str) -> str:
    # A note is neither: green would say a gate passed that compared nothing.
    state = "none" if failed is None else "fail" if failed else "pass"
    return (
        f"<div class='verdict gate {state}' data-state='{state}'><strong>{_e(line)}</strong>"
        "</div>\n"
    )


_COLUMNS: Final = (
    ("test", "text", "Test"),
    ("grade", "number", "Grade"),
    ("score", "number", "Score"),
    ("change", "number", "Change"),
    ("runs", "text", "Runs"),
    ("flags", "number", "Flags"),
    ("status", "text", "Status"),
)


def _table(tests: Sequence[HtmlTest]) -> str:
    head = "".join(
        f"<th data-key='{key}' data-type='{kind}' scope='col'>{label}</th>"
        for key, kind, label in _COLUMNS
    )
    rows = "".join(_row(index, test) for index, test in enumerate(tests))
    return (
        f"<table id='grades'>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{rows}</tbody>\n</table>\n"
    )


def _row(index: int, test: HtmlTest) -> str:
    result = test.shown
    percent = test.percent
    letter = result.letter if len(test.tests) == 1 else letter_for(percent)
    change, change_value = _change(test)
    runs = (
        test.decision
        or test.repeat_verdict
        or (f"{len(test.tests)} runs" if len(test.tests) > 1 else "")
    )
    if test.partial is not None:
        runs = f"{runs}; {test.partial}" if runs else test.partial
    # Not counted only when none of its runs counts: a repeated xfail test of which a run
    # failed on its own counts whole (runs.counted_whole), its other runs' marks notwithstanding.
    excluded = test.tests[-1].excluded
    if excluded is not None and all(run.excluded is not None for run in test.tests):
        runs = f"{runs}; {excluded}, not counted" if runs else f"{excluded}, not counted"
    score = score_text(result) if len(test.tests) == 1 else f"mean of {len(test.tests)} runs"
    statuses = {run.status for run in test.tests}
    status = statuses.pop() if len(statuses) == 1 else "mixed"
    ungradable = len(test.tests) == 1 and test.tests[0].ungradable
    flags = len(result.flags)
    below = _below_mark(test)
    cells = (
        (test.test_id, f"<a href='#t{index}'>{_e(test.test_id)}</a>"),
        (repr(percent), f"<span class='letter {letter}'>{letter}</span>"),
        (repr(percent), f"{_e(score)} ({_e(_table_percent(test))}){below}"),
        (change_value, _e(change)),
        (runs, _e(runs)),
        (str(flags), str(flags)),
        (status, _e(status)),
    )
    if ungradable:
        # No score to show: the reason instead, never a 0 that reads as the agent's grade.
        reason = test.tests[-1].reason or "could not be graded"
        cells = (
            cells[0],
            ("-1", "-"),
            ("-1", f"could not be graded: {_e(reason.splitlines()[0])}"),
            ("", ""),
            cells[4],
            ("0", "-"),
            cells[6],
        )
    body = "".join(f"<td data-sort='{_e(value)}'>{content}</td>" for value, content in cells)
    state = " class='below'" if below else ""
    return f"<tr data-index='{index}'{state}>{body}</tr>\n"


def _below_mark(test: HtmlTest) -> str:
    """``below 60% (C)`` for a single-run test below its threshold, as the terminal's table
    says it (a repeated test's decision is in its Runs cell)."""
    if len(test.tests) != 1 or test.repeated:
        return ""
    only = test.tests[0]
    if only.threshold is None or only.passed:
        return ""
    mode = " (report)" if only.mode == "report" else ""
    text = f"below{mode} {describe_threshold(only.threshold)}"
    return f" <span class='below'>{_e(text)}</span>"


def _table_percent(test: HtmlTest) -> str:
    # A grade below its threshold never shows the threshold's figure, nor does a repeated
    # test's mean below it (80.666 % against 80.67 % is not "80.67%" beside FAILED).
    if len(test.tests) > 1:
        return _mean_text(test)
    only = test.tests[0]
    # As the terminal's table and the test's own section show it: whole, half up.
    return shown_percent(only.result.percent, only.threshold)


def _mean_text(test: HtmlTest) -> str:
    """A repeated test's mean, as the terminal shows it against the test's threshold."""
    return shown_percent(test.percent, test.tests[-1].threshold, exact=True)


def _change(test: HtmlTest) -> tuple[str, str]:
    if test.partial is not None:
        # As the baseline gate: a partial series is listed, never compared.
        return f"not compared, {test.partial}", "0"
    if test.previous is None:
        if test.previous_source == _PARTIAL_PREVIOUS:
            return f"not compared, {_PARTIAL_PREVIOUS}", "0"
        return ("new" if test.previous_source == "previous run" else "not in baseline"), "0"
    delta = test.percent - test.previous
    sign = "+" if delta > 0 else "" if delta < 0 else "±"
    return f"{sign}{_num(delta)} vs {test.previous_source}", repr(delta)


def _runs_line(test: HtmlTest) -> str:
    """A repeated test's runs in run order, each with its percentage and letter, or ``not
    graded`` (it failed before a grade, or did not run: ``-k``, ``--lf``)."""
    if not test.repeated:
        return ""
    shown = {
        test.run_number(i): f"{describe_percent(t.result.percent)} {t.result.letter}"
        for i, t in enumerate(test.tests)
    }
    listed, missing = test.not_graded
    shown.update((run, "not graded") for run in listed)
    runs = ", ".join(f"#{run} {shown[run]}" for run in sorted(shown))
    if missing > len(listed):
        runs += f" and {missing - len(listed)} more not graded"
    count = test.partial or f"{len(test.tests)} runs"
    return f"<p>{count}, mean {_e(_mean_text(test))}: {_e(runs)}</p>\n"


def _shown_of(test: HtmlTest) -> str:
    if not test.repeated:
        return ""
    which = "the lowest" if len(test.tests) > 1 else "the only one graded"
    return f"run {test.run_number(test.shown_index)} of {test.runs_asked} ({which}): "


def _section(index: int, test: HtmlTest) -> str:
    result = test.shown
    # A repeated test's letter is its runs' mean's, as in the table.
    letter = result.letter if len(test.tests) == 1 else letter_for(test.percent)
    flags = "".join(f"<li>{_e(flag)}</li>" for flag in result.flags) or "<li>none</li>"
    return (
        f"<section id='t{index}' class='test'>\n<h2>{_e(test.test_id)} "
        f"<span class='letter {letter}'>{letter}</span></h2>\n{_runs_line(test)}"
        f"<p>{_shown_of(test)}{_e(score_text(result))} "
        f"({shown_percent(result.percent, test.tests[test.shown_index].threshold)}), session "
        f"<code>{_e(result.session_id)}</code>, {result.entry_count} audit entries, graded "
        f"{_e(format_timestamp(result.timestamp))}</p>\n"
        f"<div class='charts'>{radar_svg(result)}{trend_svg(test.history)}</div>\n"
        f"<h3>Flags ({len(result.flags)})</h3>\n<ul class='flags'>{flags}</ul>\n"
        f"{_points(result, test.calls)}{_conversation(test.conversation)}</section>\n"
    )


# -- the radar: one axis per dimension, each from 0 to the dimension's max -----------------

_R: Final = 80.0
_CX: Final = 220.0
_CY: Final = 120.0


def _spoke(i: int, n: int, fraction: float) -> tuple[float, float]:
    angle = -math.pi / 2 + 2 * math.pi * i / n
    return _CX + _R * fraction * math.cos(angle), _CY + _R * fraction * math.sin(angle)


def _points_attr(points: Iterable[tuple[float, float]]) -> str:
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def radar_svg(result: GradeResult) -> str:
    """The dimensions' scores on fixed axes: each spoke runs from 0 to the dimension's max,
    so a full polygon is a perfect grade whatever the run."""
    dims = list(result.dimensions.items())
    n = len(dims)
    if n == 0:
        return "<p class='empty'>no dimensions</p>"
    if n < 3:
        return _bars_svg(dims)  # one or two axes make no polygon to read
    rings = "".join(
        f"<polygon class='ring' points='{_points_attr(_spoke(i, n, f) for i in range(n))}'/>"
        for f in (0.25, 0.5, 0.75, 1.0)
    )
    spokes, labels, values = [], [], []
    left, right = 0.0, 440.0
    for i, (name, dim) in enumerate(dims):
        values.append(_spoke(i, n, _fraction(dim)))
        x, y = _spoke(i, n, 1.0)
        spokes.append(f"<line class='axis' x1='{_CX}' y1='{_CY}' x2='{x:.1f}' y2='{y:.1f}'/>")
        lx, ly = _spoke(i, n, 1.12)
        anchor = "middle" if abs(lx - _CX) < 5 else "start" if lx > _CX else "end"
        text = _label(name, dim)
        # The box widens to every label (a combined rubric's cleo.discoveryEfficiency ran
        # past a fixed one and was cut): a label's width estimated from its length.
        width = len(text) * _CHAR_W
        start = {"start": lx, "end": lx - width, "middle": lx - width / 2}[anchor]
        left, right = min(left, start - 4), max(right, start + width + 4)
        labels.append(
            f"<text x='{lx:.1f}' y='{ly + 4:.1f}' text-anchor='{anchor}'>{_e(text)}</text>"
        )
    title = ", ".join(_label(name, dim) for name, dim in dims)
    return (
        f"<svg class='radar' viewBox='{left:.0f} 0 {right - left:.0f} 240' "
        f"width='{right - left:.0f}' height='240' role='img' "
        f"data-axes='{n}'><title>{_e(title)}</title>{rings}{''.join(spokes)}"
        f"<polygon class='score' points='{_points_attr(values)}'/>{''.join(labels)}</svg>"
    )


#: A generous width of one character of the charts' 10px labels (system-ui), in px.
_CHAR_W: Final = 6.2


def _label(name: str, dim: DimensionScore) -> str:
    """``sessionDiscipline 10/20``: a dimension as the charts name it (escaped by the caller)."""
    return f"{name} {number_text(dim.score)}/{number_text(dim.max)}"


def _fraction(dim: DimensionScore) -> float:
    return min(max(dim.score / dim.max, 0.0), 1.0) if dim.max > 0 else 0.0


def _bars_svg(dims: Sequence[tuple[str, DimensionScore]]) -> str:
    """One or two dimensions as bars, each as long as its dimension's max: a full bar is a
    perfect score, as a full polygon is on the radar."""
    rows = []
    longest = max(len(_label(name, dim)) for name, dim in dims)
    width = max(300.0, longest * _CHAR_W)
    for i, (name, dim) in enumerate(dims):
        top = 10 + i * 44
        rows.append(
            f"<text x='0' y='{top + 10}'>{_e(_label(name, dim))}</text>"
            f"<rect class='ring' x='0' y='{top + 16}' width='{width:.0f}' height='14'/>"
            f"<rect class='score' x='0' y='{top + 16}' width='{width * _fraction(dim):.1f}' "
            "height='14'/>"
        )
    title = ", ".join(_label(name, dim) for name, dim in dims)
    height = 20 + 44 * len(dims)
    return (
        f"<svg class='radar' viewBox='0 0 {width + 4:.0f} {height}' width='{width + 4:.0f}' "
        f"height='{height}' role='img' data-axes='{len(dims)}'><title>{_e(title)}</title>"
        f"{''.join(rows)}</svg>"
    )


# -- the trend: percentage over the history, marks where rubric or model changed ------------

_W: Final = 360.0
_H: Final = 160.0
_PAD: Final = 30.0


def trend_svg(history: Sequence[GradeLine]) -> str:
    """The test's percentage over its (last :data:`MAX_TREND_POINTS`) grades, 0..100 fixed."""
    shown = list(history[-MAX_TREND_POINTS:])
    if not shown:
        return "<p class='empty'>no history</p>"
    n = len(shown)
    step = (_W - 2 * _PAD) / max(n - 1, 1)

    def x(i: int) -> float:
        return _PAD + step * i if n > 1 else _W / 2

    def y(percent: float) -> float:
        return _H - _PAD + (min(max(percent, 0.0), 100.0) / 100) * -(_H - 2 * _PAD)

    grid = "".join(
        f"<line class='grid' x1='{_PAD}' x2='{_W - _PAD}' y1='{y(p):.1f}' y2='{y(p):.1f}'/>"
        f"<text x='{_PAD - 4}' y='{y(p) + 4:.1f}' text-anchor='end'>{p}</text>"
        for p in (0, 50, 100)
    )
    line = _points_attr((x(i), y(r.percent)) for i, r in enumerate(shown))
    marks = []
    versions = [_version(result) for result in shown]
    for i in range(1, n):
        old, new = versions[i - 1], versions[i]
        if old != new:
            what = "; ".join(
                f"{key} {a or '-'} → {b or '-'}"
                for key, a, b in zip(_VERSION_KEYS, old, new, strict=True)
                if a != b
            )
            marks.append(
                f"<line class='change' x1='{x(i):.1f}' x2='{x(i):.1f}' y1='{_PAD - 10}' "
                f"y2='{_H - _PAD}'><title>{_e(what)}</title></line>"
            )
    dots = ""
    if n <= 60:  # dots help a short history; on a long one they are a smear
        dots = "".join(
            f"<circle cx='{x(i):.1f}' cy='{y(r.percent):.1f}' r='2.5'><title>"
            f"{_e(format_timestamp(r.timestamp))}: {r.display_percent}%</title></circle>"
            for i, r in enumerate(shown)
        )
    cut = f", last {n} of {len(history)}" if len(history) > n else ""
    legend = f"{n} grade{'' if n == 1 else 's'}{cut}" + (
        "; dashed: rubric or model changed" if marks else ""
    )
    return (
        f"<svg class='trend' viewBox='0 0 {_W:.0f} {_H:.0f}' width='{_W:.0f}' "
        f"height='{_H:.0f}' role='img' data-points='{n}' data-changes='{len(marks)}'>"
        f"<title>percentage over {n} grades{cut}; dashed lines: rubric or model changed"
        f"</title>{grid}{''.join(marks)}<polyline class='line' points='{line}'/>{dots}"
        f"<text x='{_PAD}' y='{_H - 8:.0f}'>{_e(legend)}</text></svg>"
    )


# -- the conversation beside the calls ---------------------------------------------------------

#: The most characters of one message the page shows (the store keeps up to its own cap).
_PAGE_MESSAGE_CHARS: Final = 2000


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _conversation(talk: Conversation | None) -> str:
    """The session's messages (each with its model and tokens), its output and its usage."""
    if talk is None or talk.empty:
        return ""
    calls = {call.id: call for call in talk.model_calls}
    rows = []
    for message in talk.messages:
        text = message.text
        if len(text) > _PAGE_MESSAGE_CHARS:
            text = f"{text[:_PAGE_MESSAGE_CHARS]}... (+{len(text) - _PAGE_MESSAGE_CHARS} chars)"
        call = calls.get(message.model_call) if message.model_call else None
        usage = ""
        if call is not None:
            usage = (
                f" <span class='usage'>{_e(call.model or 'model')}, "
                f"{call.input_tokens or 0} in / {call.output_tokens or 0} out</span>"
            )
        rows.append(
            f"<li class='{_e(message.role)}'><b>{_e(message.role)}</b> "
            f"<small>{_e(format_timestamp(message.timestamp))}</small>{usage}"
            f"<pre>{_e(text)}</pre></li>"
        )
    tokens = talk.tokens()
    output = talk.final_output
    shown = f"<pre>{_e(output)}</pre>" if output is not None else "<p>(none)</p>"
    return (
        "<details class='conversation'><summary>Conversation ("
        f"{_counted(len(talk.messages), 'message')}, "
        f"{_counted(len(talk.model_calls), 'model call')}, {tokens['input']} in / "
        f"{tokens['output']} out tokens)</summary><ol class='messages'>{''.join(rows)}</ol>"
        f"<h4>Final output</h4>{shown}</details>\n"
    )


# -- the points drill-down -------------------------------------------------------------------


def _entries(item: Point, calls: Mapping[int, str] | None) -> str:
    if not item.entries:
        return ""
    shown = []
    for index in item.entries:
        call = None if calls is None else calls.get(index)
        shown.append(f"<li>#{index}{f' <code>{_e(call)}</code>' if call else ''}</li>")
    return f"<ul class='entries'>{''.join(shown)}</ul>"


def _points(result: GradeResult, calls: Mapping[int, str] | None) -> str:
    items = points_of(result)
    if not items:
        return "<p class='empty'>the rubric gave no points breakdown</p>\n"
    by_dimension: dict[str, list[Point]] = {}
    for item in items:
        by_dimension.setdefault(item.dimension, []).append(item)
    blocks = []
    for name, dim_items in by_dimension.items():
        dim = result.dimensions.get(name)
        score = f" {number_text(dim.score)}/{number_text(dim.max)}" if dim is not None else ""
        rows = "".join(
            f"<li class='{'lost' if item.points < 0 else 'zero' if item.points == 0 else 'won'}'>"
            f"<details><summary><b>{_e(signed_text(item.points))}</b> "
            f"<code>{_e(item.rule)}</code> {_e(item.text)}</summary>"
            f"{_entries(item, calls) or '<p>no entries</p>'}</details></li>"
            for item in dim_items
        )
        # Where points were lost is what a reader came for: those dimensions start open.
        lost = dim is not None and dim.score < dim.max
        count = f"{len(dim_items)} item{'' if len(dim_items) == 1 else 's'}"
        blocks.append(
            f"<details class='dimension'{' open' if lost else ''}><summary>{_e(name)}"
            f"{_e(score)} ({count})</summary><ul class='points'>{rows}</ul></details>"
        )
    note = ""
    if calls is None and any(item.entries for item in items):
        # Without the session's entries an index alone ("#0") reads like a broken page.
        note = f"<p class='note missing-calls'>{_e(MISSING_CALLS)}</p>\n"
    return f"<h3>Points</h3>\n{note}{''.join(blocks)}\n"


#: Said over the points of a session whose entries the report could not read.
MISSING_CALLS: Final = (
    "the calls are not named: the audit store holding this session's entries was not found "
    "(cleo-grade report --db PATH names it); #N is an entry's position in the session"
)


_CSS: Final = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:1.5em;color:#222}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.15em;margin:0 0 .3em}h3{font-size:1em}
.source{color:#555;margin:.2em 0}
.verdict{padding:.6em 1em;border-radius:4px;margin:.8em 0;border:2px solid #999}
.verdict.pass{background:#e7f6ea;border-color:#2e7d32}
.verdict.fail{background:#fdeaea;border-color:#c62828}
table{border-collapse:collapse;margin:1em 0;min-width:60%}
th,td{border:1px solid #ccc;padding:.3em .6em;text-align:left;vertical-align:top}
td,h2,li,p,summary{overflow-wrap:anywhere}
th{background:#f2f2f2}.js th{cursor:pointer}.js th:after{content:' \\2195';color:#999}
th[aria-sort]:after{color:#222}
.letter{font-weight:bold;padding:0 .3em;border-radius:3px}
.letter.A{background:#c8e6c9}.letter.B{background:#dcedc8}.letter.C{background:#fff9c4}
.letter.D{background:#ffe0b2}.letter.F{background:#ffcdd2}
span.below{font-weight:bold;color:#b71c1c;white-space:nowrap}
.test{border-top:1px solid #ccc;padding-top:1em;margin-top:1.5em}
.charts{display:flex;flex-wrap:wrap;gap:1em}
svg text{font-size:10px;fill:#333}
.ring{fill:none;stroke:#ddd}.axis{stroke:#bbb}
.score{fill:rgba(33,150,243,.35);stroke:#1565c0;stroke-width:2}
.grid{stroke:#eee}.line{fill:none;stroke:#1565c0;stroke-width:1.5}
circle{fill:#1565c0}.change{stroke:#e65100;stroke-dasharray:4 3}
.points{list-style:none;padding-left:1em}.lost b{color:#c62828}.won b{color:#2e7d32}
.entries{margin:.2em 0 .4em 1.5em}
summary{cursor:pointer}code{font-size:.95em}
@media print{
 body{margin:0;font-size:11px}.js th:after{content:''}
 details>summary{list-style:none}
 details::details-content{content-visibility:visible;display:contents}
 .test{break-inside:avoid}a{color:inherit;text-decoration:none}
}
"""

# Sorts the table by a clicked header (data-sort holds each cell's sort value, written on
# the server); "#sort=KEY" or "#sort=-KEY" in the address sorts on load. Reads no data into
# markup: it only reorders existing rows.
_SCRIPT: Final = """
(function(){
var table=document.getElementById('grades');if(!table)return;
document.documentElement.classList.add('js');
var heads=table.tHead.rows[0].cells;
function sort(col,desc){
 var h=heads[col],num=h.dataset.type==='number',body=table.tBodies[0];
 var rows=Array.prototype.slice.call(body.rows);
 rows.sort(function(a,b){
  var x=a.cells[col].dataset.sort,y=b.cells[col].dataset.sort,c;
  c=num?(parseFloat(x)-parseFloat(y)):x.localeCompare(y);
  if(!c)c=parseInt(a.dataset.index,10)-parseInt(b.dataset.index,10);
  return desc?-c:c;});
 rows.forEach(function(r){body.appendChild(r);});
 for(var i=0;i<heads.length;i++)heads[i].removeAttribute('aria-sort');
 h.setAttribute('aria-sort',desc?'descending':'ascending');
 table.dataset.sortedBy=(desc?'-':'')+h.dataset.key;}
Array.prototype.forEach.call(heads,function(h,i){
 h.addEventListener('click',function(){
  sort(i,h.getAttribute('aria-sort')==='ascending');});});
var m=/sort=(-?)([a-z]+)/.exec(location.hash);
if(m){for(var i=0;i<heads.length;i++){if(heads[i].dataset.key===m[2])sort(i,m[1]==='-');}}
window.addEventListener('beforeprint',function(){
 Array.prototype.forEach.call(document.querySelectorAll('details'),function(d){d.open=true;});});
table.dataset.sortable='on';
})();
"""


def _sha256(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return f"'sha256-{base64.b64encode(digest).decode('ascii')}'"


def content_security_policy() -> str:
    """The page's Content-Security-Policy: nothing loads or runs but its own style and
    script (by hash), so markup an agent's text smuggled past the escaping still cannot run,
    fetch or send anything; SVG is inline, images none."""
    return (
        f"default-src 'none'; style-src {_sha256(_CSS)}; script-src {_sha256(_SCRIPT)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
