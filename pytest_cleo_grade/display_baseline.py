"""Text and Markdown of a comparison with the baseline: regressions first, then the rest."""

from __future__ import annotations

from pytest_cleo_grade.baseline import BaselineComparison, Change
from pytest_cleo_grade.display import markdown_cell, markdown_code_cell

__all__ = ["baseline_lines", "baseline_markdown", "baseline_verdict", "change_text"]


def change_text(change: Change) -> str:
    """One change on one line: test, metric, figures, tolerance, and a noise note."""
    tolerance = f", tolerance {change.tolerance.text()}" if change.tolerance else ""
    note = f"; {change.note}" if change.note else ""
    return (
        f"{change.test_id} {change.metric}: {change.baseline:.1f}% -> {change.current:.1f}% "
        f"({change.delta:+.1f}{tolerance}){note}"
    )


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
        rows.append(
            f"| {markdown_code_cell(change.test_id)} | {markdown_cell(change.metric)} | "
            f"{change.baseline:.1f}% | {change.current:.1f}% | {change.delta:+.1f} | {status} |"
        )
    for problem in comparison.problems:
        rows.append(f"\nProblem: {markdown_cell(problem)}")
    for test in comparison.new_tests:
        rows.append(f"\nNew test (not in baseline): {markdown_code_cell(test, in_table=False)}")
    for test in comparison.missing_tests:
        code = markdown_code_cell(test, in_table=False)
        rows.append(f"\nMissing from this run (in baseline): {code}")
    return "\n".join(rows) + "\n"
