"""Text and Markdown of a comparison with the baseline: regressions first, then the rest."""

from __future__ import annotations

from decimal import ROUND_DOWN, ROUND_HALF_UP, ROUND_UP, Decimal

from pytest_cleo_grade.baseline import BaselineComparison, Change, figure_text
from pytest_cleo_grade.display import markdown_cell, markdown_code_cell

__all__ = [
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
    lines += [f"not compared, {ran} ran: {t}" for t, ran in comparison.partial_tests]
    others = [c for c in comparison.changes if not c.regressed and not c.note]
    lines += [f"  {change_text(c)}" for c in others if c.metric == "total"]
    return lines


def baseline_markdown(comparison: BaselineComparison, *, gated: bool) -> str:
    rows = [
        "### Against the baseline\n",
        f"**{markdown_cell(baseline_verdict(comparison, gated=gated))}**\n",
        "| Test | Metric | Baseline | Now | Change | Status |",
        "|---|---|---|---|---|---|",
    ]
    ordered = sorted(comparison.changes, key=lambda c: (not c.regressed, c.note is None))
    for change in ordered:
        if not (change.regressed or change.note or change.metric == "total"):
            continue
        status = "**REGRESSION**" if change.regressed else markdown_cell(change.note or "ok")
        baseline, current, delta = change_figures(change)
        rows.append(
            f"| {markdown_code_cell(change.test_id)} | {markdown_cell(change.metric)} | "
            f"{baseline}% | {current}% | {delta} | {status} |"
        )
    for problem in comparison.problems:
        rows.append(f"\nProblem: {markdown_cell(problem)}")
    for test in comparison.new_tests:
        rows.append(f"\nNew test (not in baseline): {markdown_code_cell(test, in_table=False)}")
    for test in comparison.missing_tests:
        code = markdown_code_cell(test, in_table=False)
        rows.append(f"\nMissing from this run (in baseline): {code}")
    for test, ran in comparison.partial_tests:
        code = markdown_code_cell(test, in_table=False)
        rows.append(f"\nNot compared, {markdown_cell(ran)} ran: {code}")
    return "\n".join(rows) + "\n"
