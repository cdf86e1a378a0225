"""The verdict table and decision as plain text (terminal) and Markdown (GitHub step summary)."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from pytest_cleo_grade.core._text import markdown_cell, terminal_text
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.rubrics.comparison.decision import Comparison, QueryComparison
from pytest_cleo_grade.rubrics.comparison.scores import METRICS

__all__ = ["comparison_properties", "format_average", "render_markdown", "render_text"]


def format_average(value: Fraction, *, signed: bool = False) -> str:
    """Two decimals, half up (3.8333 -> 3.83, -0.5 -> -0.50); signed adds + to positives."""
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    text = str(exact.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))
    if text == "-0.00":
        text = "0.00"
    return f"+{text}" if signed and value > 0 else text


def _runs(item: QueryComparison) -> bool:
    return item.stability is not None


def _rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    repeated = any(_runs(item) for item in comparison.queries)
    follow_up = any(item.verdict.follow_up for item in comparison.queries)
    header = ["Query", "Mode", comparison.baseline, comparison.candidate, "Diff", "Verdict"]
    if follow_up:
        header.append("Round")
    if repeated:
        header += ["Runs", "95% CI of diff", "Stable"]
    rows = []
    for item in comparison.queries:
        verdict = item.verdict
        row = [
            verdict.query,
            verdict.mode,
            format_average(verdict.baseline_average),
            format_average(verdict.candidate_average),
            format_average(verdict.difference, signed=True),
            verdict.label,
        ]
        if follow_up:
            row.append("follow-up" if verdict.follow_up else "original")
        if repeated:
            row.append(f"{item.baseline.runs}/{item.candidate.runs}")
            if item.stability is None:
                row += ["-", "single run"]
            else:
                interval = item.stability.difference
                row += [
                    f"[{format_average(interval.low, signed=True)}, "
                    f"{format_average(interval.high, signed=True)}]",
                    "UNSTABLE" if verdict.unstable else "yes",
                ]
        rows.append(row)
    return header, rows


def render_text(comparison: Comparison) -> str:
    """The terminal report: an aligned table, then the decision, its reason and the action."""
    # Query and variant names come from the history: each is shown escaped, in its place.
    header, rows = _rows(comparison)
    header = [terminal_text(cell) for cell in header]
    rows = [[terminal_text(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    candidate, baseline = terminal_text(comparison.candidate), terminal_text(comparison.baseline)
    lines = [f"Comparison: {candidate} (candidate) vs {baseline} (baseline)", ""]
    for row in (header, *rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    decision = comparison.decision
    lines += [
        "",
        f"Decision: {decision.label} [{decision.rule}]",
        # The reason names queries (from the history): escaped like the cells above.
        f"Reason:   {terminal_text(decision.reason)}",
        f"Action:   {decision.action}",
    ]
    rests = _rests_on(comparison)
    if rests:
        lines.append(f"Round:    {terminal_text(rests)}")
    lines += _worst_case(comparison)
    gaps = _gap_rows(comparison)
    if gaps is not None:
        header, rows = gaps
        header = [terminal_text(cell) for cell in header]
        rows = [[terminal_text(cell) for cell in row] for row in rows]
        widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
        lines += ["", _gap_title(comparison), ""]
        for row in (header, *rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        lines += ["", terminal_text(_gap_summary(comparison))]
    return "\n".join(lines)


def _gap_title(comparison: Comparison) -> str:
    assert comparison.meaningful_gap is not None
    gap = format_average(comparison.meaningful_gap)
    return (
        f"Per-metric differences (candidate - baseline); under {gap} points is not meaningful, "
        "shown in parentheses:"
    )


def _gap_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]] | None:
    """The per-metric differences, those under the meaningful gap in parentheses; None
    without the option."""
    if comparison.meaningful_gap is None:
        return None
    header = ["Query", *(metric for metric, _ in METRICS)]
    rows = []
    for item in comparison.queries:
        row = [item.verdict.query]
        for gap in item.metrics:
            text = format_average(gap.difference, signed=True)
            row.append(text if comparison.meaningful(gap) else f"({text})")
        rows.append(row)
    return header, rows


def _gap_summary(comparison: Comparison) -> str:
    found = comparison.meaningful_gaps()
    if not found:
        return "Meaningful gaps: none"
    listed = ", ".join(
        f"{query} {gap.metric} {format_average(gap.difference, signed=True)}"
        for query, gap in found
    )
    return f"Meaningful gaps: {listed}"


def _rests_on(comparison: Comparison) -> str | None:
    """Which round the decision rests on, said only when there is a follow-up round."""
    follow_up = [q.verdict.query for q in comparison.queries if q.verdict.follow_up]
    if not follow_up:
        return None
    decision = comparison.decision
    where = {
        "follow-up": "the decision rests on the follow-up round",
        "original + follow-up": "the decision rests on the original and the follow-up round",
        "original": "the decision rests on the original round",
    }[decision.round]
    state = "final" if decision.kind != "CONDITIONAL" else "not final"
    return f"{where} ({', '.join(follow_up)}); {state}"


def _worst_case(comparison: Comparison) -> list[str]:
    """Say when unstable verdicts could change the decision, so the reader sees both."""
    worst = comparison.worst_case
    if worst is None:
        return []
    if comparison.decide_on == "worst":
        return ["Note:     unstable verdicts were taken at their worst (--decide-on worst)"]
    if worst.kind == comparison.decision.kind:
        return []
    return [
        f"Note:     with unstable verdicts at their worst: {worst.label} [{worst.rule}]; "
        "run more repetitions or decide with --decide-on worst"
    ]


def render_markdown(comparison: Comparison) -> str:
    """The same report as GitHub-flavoured Markdown (a heading, a table, the decision)."""
    header, rows = _rows(comparison)
    decision = comparison.decision
    lines = [
        f"### Model comparison: {markdown_cell(comparison.candidate)} vs "
        f"{markdown_cell(comparison.baseline)}",
        "",
        "| " + " | ".join(markdown_cell(cell) for cell in header) + " |",
        "|" + "|".join(" --- " for _ in header) + "|",
    ]
    lines += ["| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows]
    lines += [
        "",
        f"**Decision: {decision.label}** ({decision.rule}): {markdown_cell(decision.reason)}",
        "",
        f"Action: {decision.action}",
    ]
    rests = _rests_on(comparison)
    if rests:
        lines += ["", f"Round: {markdown_cell(rests)}"]
    notes = _worst_case(comparison)
    if notes:
        lines += ["", "_" + markdown_cell(notes[0].removeprefix("Note:").strip()) + "_"]
    gaps = _gap_rows(comparison)
    if gaps is not None:
        header, rows = gaps
        lines += [
            "",
            markdown_cell(_gap_title(comparison)),
            "",
            "| " + " | ".join(markdown_cell(cell) for cell in header) + " |",
            "|" + "|".join(" --- " for _ in header) + "|",
            *("| " + " | ".join(markdown_cell(cell) for cell in row) + " |" for row in rows),
            "",
            markdown_cell(_gap_summary(comparison)),
        ]
    return "\n".join(lines) + "\n"


def comparison_properties(result: GradeResult) -> list[tuple[str, str]]:
    """JUnit properties of a comparison grade, beside the plugin's usual ``cleo_*`` ones.

    ``cleo_variant``, ``cleo_query``, ``cleo_mode``, ``cleo_q_average`` (two decimals, half
    up), one ``cleo_Q-0N`` per metric and one ``cleo_S-0N`` (``pass``/``fail``) per check.
    Empty for a grade without the comparison extras.
    """
    extra = result.model_extra or {}
    if "variant" not in extra or not isinstance(extra.get("substantive"), Mapping):
        return []
    scores: Mapping[str, Any] = extra["substantive"]
    values = [value for value in scores.values() if isinstance(value, int)]
    properties = [
        ("cleo_variant", str(extra["variant"])),
        ("cleo_query", str(extra.get("query", ""))),
        ("cleo_mode", str(extra.get("mode", ""))),
    ]
    if values:
        average = Decimal(sum(values)) / Decimal(len(values))
        rounded = average.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        properties.append(("cleo_q_average", str(rounded)))
    properties += [(f"cleo_{metric}", str(value)) for metric, value in scores.items()]
    structural = extra.get("structural")
    if isinstance(structural, Mapping):
        properties += [
            (f"cleo_{check}", "pass" if passed else "fail") for check, passed in structural.items()
        ]
    return properties
