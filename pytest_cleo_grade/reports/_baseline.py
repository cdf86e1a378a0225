"""Text and Markdown of a comparison with the baseline: regressions first, then the rest."""

from __future__ import annotations

from collections.abc import Iterable
from decimal import ROUND_DOWN, ROUND_HALF_UP, ROUND_UP, Decimal
from itertools import takewhile
from typing import Final

from pytest_cleo_grade.core._text import markdown_cell, markdown_code_cell
from pytest_cleo_grade.grading._baseline import BaselineComparison, Change, figure_text
from pytest_cleo_grade.reports._display import SUMMARY_BYTES, SUMMARY_TEXT, _Budget, clipped

__all__ = [
    "BASELINE_SUMMARY_BYTES",
    "baseline_lines",
    "baseline_markdown",
    "baseline_verdict",
    "change_figures",
    "change_text",
]


def _beyond(change: Change, drop: str) -> bool:
    """Whether the ``drop`` as shown is beyond the change's tolerance (in points)."""
    assert change.tolerance is not None
    return -Decimal(drop) > Decimal(repr(change.tolerance.allowed(change.baseline)))


def change_figures(change: Change) -> tuple[str, str, str]:
    """The baseline, the current figure (percent) and the signed change, half up.

    One decimal, unless a drop beyond the tolerance would then look within it (a 5.04-point
    drop against 5 points is not "-5.0"): then two, and a drop still shown at the tolerance
    is rounded away from zero (and the figures apart), so the figure never contradicts the verdict.
    """
    places, up, down = 1, ROUND_HALF_UP, ROUND_HALF_UP
    beyond = change.tolerance is not None and (change.regressed or change.note is not None)
    if beyond and not _beyond(change, figure_text(change.delta)):
        places = 2
        if not _beyond(change, figure_text(change.delta, 2)):
            # Rounded apart: the baseline up, the current figure down, the drop away from 0.
            up, down = ROUND_UP, ROUND_DOWN
    delta = figure_text(change.delta, places, up)
    return (
        figure_text(change.baseline, places, up),
        figure_text(change.current, places, down),
        delta if delta.startswith("-") else f"+{delta}",
    )


def change_text(change: Change) -> str:
    """One change on one line: test, metric, figures, tolerance, and a noise note."""
    tolerance = f", tolerance {change.tolerance.text()}" if change.tolerance else ""
    note = f"; {change.note}" if change.note else ""
    baseline, current, delta = change_figures(change)
    return f"{change.test_id} {change.metric}: {baseline}% -> {current}% ({delta}{tolerance}){note}"


#: The option that gates on regressions, as pytest spells it (the CLI passes its own).
GATE_OPTION = "--cleo-grade-fail-on-regression"


def baseline_verdict(
    comparison: BaselineComparison, *, gated: bool, option: str = GATE_OPTION
) -> str:
    """The one verdict line; ``gated`` says whether a tolerance expression was given (by
    ``option``, named when it was not)."""
    count = len(comparison.regressions)
    if not gated:
        return f"baseline: compared (no {option}, nothing gated)"
    if comparison.failed:
        why = f"{count} regression{'s' if count != 1 else ''}" if count else "cannot check"
        return f"baseline gate FAILED: {why}"
    if comparison.empty and comparison.rubric_changed and not comparison.partial_tests:
        return "baseline gate not applied: the rubric changed since the baseline (save a new one)"
    if comparison.empty and comparison.partial_tests:
        return "baseline gate not applied: no test in the baseline ran all of its runs"
    if comparison.empty:
        # Nothing graded (every agent test skipped, say without an API key): the gate checked
        # nothing and says so, as the run's gate does, instead of "passed".
        return "baseline gate not applied: no graded tests in this run"
    return "baseline gate passed: no drop beyond the tolerances"


def baseline_lines(
    comparison: BaselineComparison, *, gated: bool, option: str = GATE_OPTION
) -> list[str]:
    lines = [baseline_verdict(comparison, gated=gated, option=option)]
    lines += [f"REGRESSION {change_text(c)}" for c in comparison.regressions]
    lines += [f"problem: {p}" for p in comparison.problems]
    lines += [f"within noise {change_text(c)}" for c in comparison.changes if c.note]
    lines += [f"new test (not in baseline): {t}" for t in comparison.new_tests]
    lines += [f"missing from this run (in baseline): {t}" for t in comparison.missing_tests]
    lines += [f"not compared, {why}: {t}" for t, why in comparison.partial_tests]
    lines += [f"not compared: rubric changed ({why}): {t}" for t, why in comparison.rubric_changed]
    lines += [
        f"baseline re-graded under the current rubric ({why}): {t}"
        for t, why in comparison.regraded
    ]
    others = [c for c in comparison.changes if not c.regressed and not c.note]
    lines += [f"  {change_text(c)}" for c in others if _shown(c)]
    return lines


def _shown(change: Change) -> bool:
    """Whether a change gets a line or a row: every total, and a dimension when it moved
    (gated or not: a metric without a tolerance is shown, never gated), so an unchanged
    suite's summary is a line per test."""
    return (
        change.regressed
        or change.note is not None
        or change.metric == "total"
        or change.baseline != change.current
    )


#: The most bytes the step summary's baseline block takes. GitHub drops a step's whole summary
#: beyond 1 MiB: with the grades' 512 KiB (display.SUMMARY_BYTES) and the repeats' 128 KiB,
#: this half of it leaves 128 KiB for other steps of the job.
BASELINE_SUMMARY_BYTES: Final = SUMMARY_BYTES // 2
#: Kept back for what is always written: the lines counting what was left out (five at most).
_BASELINE_RESERVE: Final = 1024
#: The longest problem shown whole: one names a test and two rubrics, each cut on its own
#: elsewhere, and the problem's own words must survive a long test id.
_PROBLEM_TEXT: Final = 3 * SUMMARY_TEXT


def _markdown_row(change: Change) -> str:
    status = "**REGRESSION**" if change.regressed else markdown_cell(change.note or "ok")
    baseline, current, delta = change_figures(change)
    return (
        f"| {markdown_code_cell(clipped(change.test_id))} | {markdown_cell(clipped(change.metric))}"
        f" | {baseline}% | {current}% | {delta} | {status} |"
    )


def _fitting(lines: Iterable[str], budget: _Budget) -> list[str]:
    """The first ``lines`` that ``budget`` holds: once one does not fit, none after it does."""
    return list(takewhile(budget.take, lines))


def _counted(shown: list[str], count: int, what: str) -> list[str]:
    """``shown`` (of ``count`` lines), then a line counting the ones left out, if any."""
    left = count - len(shown)
    return [*shown, f"\n... and {left} more {what}"] if left else shown


def _listed(label: str, tests: Iterable[str]) -> list[str]:
    return [f"\n{label}: {markdown_code_cell(clipped(test), in_table=False)}" for test in tests]


def _lists(comparison: BaselineComparison) -> list[tuple[str, list[str]]]:
    """The lines below the table after the problems, each kind with its name in the count."""
    partial = [
        f"\nNot compared, {markdown_cell(why)}: {markdown_code_cell(clipped(test), in_table=False)}"
        for test, why in comparison.partial_tests
    ] + [
        f"\nNot compared: rubric changed ({markdown_cell(why)}): "
        f"{markdown_code_cell(clipped(test), in_table=False)}"
        for test, why in comparison.rubric_changed
    ]
    regraded = [
        f"\nBaseline re-graded under the current rubric ({markdown_cell(why)}): "
        f"{markdown_code_cell(clipped(test), in_table=False)}"
        for test, why in comparison.regraded
    ]
    return [
        ("new tests", _listed("New test (not in baseline)", comparison.new_tests)),
        ("missing tests", _listed("Missing from this run (in baseline)", comparison.missing_tests)),
        ("tests not compared", partial),
        ("tests re-graded", regraded),
    ]


def baseline_markdown(
    comparison: BaselineComparison, *, gated: bool, size: int = BASELINE_SUMMARY_BYTES
) -> str:
    """The step summary's comparison with the baseline, at most ``size`` bytes.

    The heading and the verdict are always there. What the gate decided on takes the room
    first: the regressions, then the problems; then the other rows (within noise, totals)
    and the tests new, missing or not compared. What does not fit is counted ("... and N
    more"), and test ids are cut to :data:`~.reports._display.SUMMARY_TEXT` characters.
    """
    head = [
        "### Against the baseline\n",
        f"**{markdown_cell(baseline_verdict(comparison, gated=gated))}**\n",
        "| Test | Metric | Baseline | Now | Change | Status |",
        "|---|---|---|---|---|---|",
    ]
    budget = _Budget(max(0, size - len("\n".join(head).encode("utf-8")) - 1 - _BASELINE_RESERVE))
    listed = [c for c in comparison.changes if _shown(c)]
    ordered = sorted(listed, key=lambda c: (not c.regressed, c.note is None))
    rows = [_markdown_row(change) for change in ordered]
    regressions = len(comparison.regressions)
    table = _fitting(rows[:regressions], budget)
    problems = _fitting(
        (f"\nProblem: {markdown_cell(clipped(p, _PROBLEM_TEXT))}" for p in comparison.problems),
        budget,
    )
    table += _fitting(rows[regressions:], budget)
    if len(table) < len(rows):
        among = max(0, regressions - len(table))
        of_them = f" ({among} of them regressions)" if among else ""
        table.append(f"| ... and {len(rows) - len(table)} more rows{of_them} | | | | | |")
    lines = [*head, *table, *_counted(problems, len(comparison.problems), "problems")]
    for what, kind in _lists(comparison):
        lines += _counted(_fitting(kind, budget), len(kind), what)
    return "\n".join(lines) + "\n"
