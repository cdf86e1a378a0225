"""pytest-html: grade, score and flags columns, and the run's grade and gate in its summary.

A plain component of the controller, whose hook implementations (optional hooks: they exist
only where pytest-html is installed) hand it pytest-html's cells. Without this a
gate failure looked like an all-green report ("0 failed") while the run exited with status 1:
the summary now says so first. Every test id and flag is HTML-escaped (pytest-html inserts
these strings as markup).
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._verdict import GradedTest, RunGrade
    from pytest_cleo_grade.plugin._baseline import BaselineGate

__all__ = ["HtmlColumns"]

#: Where the columns go: after Result and Test, before Duration.
_AT = 2
#: Why a run whose tests all passed exits with status 1 (a gate failed), as the terminal says.
_EXIT_REMINDER = "the run exits with status 1 even where no test failed"
#: The most flags a cell lists (the rest are counted).
_FLAGS = 5


def _flags_cell(graded: GradedTest) -> str:
    flags = graded.result.flags
    from pytest_cleo_grade.core._text import html_text

    items = "".join(f"<li>{html_text(flag)}</li>" for flag in flags[:_FLAGS])
    more = f"<li>... and {len(flags) - _FLAGS} more</li>" if len(flags) > _FLAGS else ""
    listed = f'<ul class="cleo-flags">{items}{more}</ul>' if flags else ""
    return f'<td class="col-cleoFlags">{len(flags)}{listed}</td>'


def _percent_key(percent: float) -> str:
    """An HTML comment leading the Score cell: the key pytest-html sorts the column by.

    pytest-html 4 sorts a sortable column by the cell's inner HTML compared as strings, so
    "100% ..." came before "40% ...". A zero-padded percent first (never shown) makes the
    string order the numeric one; an ungraded row's empty cell sorts below every grade.
    """
    return f"<!--{max(0.0, min(percent, 100.0)):07.3f}-->"


_TEST_ID_CELL = ('<td class="col-testId">', "</td>")


def _escape_test_id(report: Any, cells: list[str]) -> None:
    """pytest-html (4.x) writes the test id into its cell as markup: a parametrize id an
    agent chose (``test[<img src=x onerror=...>]``) would run in the report. The cell is
    rewritten escaped, only while it holds the raw id (a pytest-html that escapes it itself
    is left alone)."""
    test_id = report.nodeid if report.when == "call" else f"{report.nodeid}::{report.when}"
    start, end = _TEST_ID_CELL
    raw = f"{start}{test_id}{end}"
    for index, cell in enumerate(cells):
        if cell == raw:
            cells[index] = f"{start}{html.escape(test_id)}{end}"
            return


class HtmlColumns:
    """pytest-html's grade columns and summary, from the controller's grades and verdicts."""

    def __init__(
        self,
        graded: Mapping[str, GradedTest],
        run: Callable[[], RunGrade | None],
        baseline: BaselineGate | None,
    ) -> None:
        self.graded = graded
        self.run = run
        self.baseline = baseline

    def header(self, cells: list[str]) -> None:
        cells[_AT:_AT] = [
            '<th class="sortable" data-column-type="cleoGrade">Grade</th>',
            '<th class="sortable" data-column-type="cleoPercent">Score</th>',
            "<th>Flags</th>",
        ]

    def row(self, report: Any, cells: list[str]) -> None:
        _escape_test_id(report, cells)
        graded = self.graded.get(report.nodeid) if report.when == "call" else None
        if graded is None:
            cells[_AT:_AT] = [
                '<td class="col-cleoGrade"></td>',
                '<td class="col-cleoPercent"></td>',
                '<td class="col-cleoFlags"></td>',
            ]
            return
        from pytest_cleo_grade.grading._runs import QUARANTINED
        from pytest_cleo_grade.grading._verdict import shown_percent

        result = graded.result
        verdict = "" if graded.passed or graded.threshold is None else " below threshold"
        if graded.excluded == QUARANTINED:
            verdict += " (quarantined, not counted)"
        cells[_AT:_AT] = [
            f'<td class="col-cleoGrade">{html.escape(result.letter)}{verdict}</td>',
            f'<td class="col-cleoPercent">{_percent_key(result.percent)}'
            f"{shown_percent(result.percent, graded.threshold)} "
            f"({result.total_score:g}/{result.max_score:g})</td>",
            _flags_cell(graded),
        ]

    def summary(self, prefix: list[str]) -> None:
        lines = self._lines()
        if not lines:
            return
        failed = self._failed()
        style = "color:#b00020;font-weight:bold" if failed else "font-weight:bold"
        from pytest_cleo_grade.core._text import html_text

        # On each paragraph: pytest-html's stylesheet gives every <p> its own colour, which
        # a colour on the div around them does not override.
        body = "".join(f'<p style="{style}">{html_text(line)}</p>' for line in lines)
        state = "failed" if failed else "passed"
        prefix.insert(0, f'<div class="cleo-grade {state}">{body}</div>')

    def _failed(self) -> bool:
        run = self.run()
        baseline_failed = self.baseline is not None and self.baseline.failed
        return bool(run is not None and run.gate_failed) or baseline_failed

    def _lines(self) -> list[str]:
        run = self.run()
        lines: list[str] = []
        if run is not None:
            verdict = run.verdict()
            if verdict is not None:
                lines.append(f"cleo-grade {verdict}")
                if run.gate_failed:
                    lines.append(_EXIT_REMINDER)
            lines.append(f"cleo-grade: {run.run_line()}")
            from pytest_cleo_grade.reports._display import quarantine_line

            quarantine = quarantine_line(run)
            if quarantine is not None:
                lines.append(f"cleo-grade: {quarantine}")
        if self.baseline is not None:
            text = self.baseline.verdict_text()
            if text:
                lines.append(f"cleo-grade {text}")
            # A failing baseline gate alone also sets the exit status: say so once, as the
            # terminal does, or an all-green table explains nothing of the status 1.
            run_failed = run is not None and run.gate_failed
            if self.baseline.failed and not run_failed:
                lines.append(_EXIT_REMINDER)
        return lines
