"""pytest glue for ``--cleo-grade-compare=BASE:CAND``: seed 002's decision as the run's outcome.

Registered on the controller only, next to the GradeReporter whose collected grades it reads
(under pytest-xdist they arrive on the workers' reports), so the comparison sees every
comparison test of the run, whichever process graded it.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_cleo_grade.comparison import Comparison
    from pytest_cleo_grade.plugin import GradeReporter

__all__ = ["ComparisonReporter", "fails_run"]


def fails_run(comparison: Comparison) -> bool:
    """The gate's one predicate: NO-GO fails the run (exit status 1).

    CONDITIONAL does not: ``cleo-grade compare`` exits 3 for it, but a pytest exit status of
    3 means an internal error, so the run exits 0 and the summary says CONDITIONAL.
    """
    from pytest_cleo_grade.comparison import decision_exit_status

    return decision_exit_status(comparison.decision) == 1


def _markup(kind: str) -> dict[str, bool]:
    if kind == "NO_GO":
        return {"red": True, "bold": True}
    if kind == "CONDITIONAL":
        return {"yellow": True, "bold": True}
    return {"green": True, "bold": True}


class ComparisonReporter:
    """Compares BASE with CAND over this run's comparison grades once, after the last test."""

    def __init__(self, config: pytest.Config, grades: GradeReporter, pair: tuple[str, str]) -> None:
        self.config = config
        self.grades = grades
        self.baseline, self.candidate = pair
        self.comparison: Comparison | None = None
        #: Why no comparison was made (None once one was, or before the run ends).
        self.problem: str | None = None
        self.failed = False
        self._decided = False

    def _decide(self) -> None:
        if self._decided:
            return
        self._decided = True
        results = [test.result for test in self.grades.in_collection_order()]
        compared = [r for r in results if "variant" in (r.model_extra or {})]
        if not compared:
            # Nothing to compare (e.g. -k selected no comparison test): say so, decide nothing.
            self.problem = "no comparison tests (marker variant=) were graded in this run"
            return
        from pytest_cleo_grade.comparison import ComparisonError, compare_grades

        try:
            self.comparison = compare_grades(compared, self.baseline, self.candidate)
        except ComparisonError as exc:
            # A gate that cannot decide (a variant or a query's pair missing) must not pass.
            self.problem = f"cannot compare: {exc}"
            self.failed = True
            return
        self.failed = fails_run(self.comparison)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        result = yield
        self._decide()
        if self.failed:
            session.testsfailed += 1
        return result

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        # After the grade summary, as in the terminal.
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        if not path or not self._decided:
            return
        from pytest_cleo_grade.comparison import render_markdown

        if self.comparison is not None:
            text = render_markdown(self.comparison)
        else:
            text = f"### Model comparison: {self.candidate} vs {self.baseline}\n\n{self.problem}\n"
        # A blank line keeps this block apart from whatever the file already holds.
        text = "\n" + text
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(text)
        except OSError as exc:
            self.grades.problems.append(f"cleo-grade: GITHUB_STEP_SUMMARY not written: {exc}")

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self._decided:
            return
        terminalreporter.write_sep("-", "cleo-grade comparison")
        if self.comparison is None:
            outcome = "exit status 1" if self.failed else "exit status unchanged"
            terminalreporter.write_line(
                f"cleo-grade: {self.candidate} vs {self.baseline}: {self.problem} ({outcome})",
                red=self.failed,
                yellow=not self.failed,
            )
            return
        from pytest_cleo_grade.comparison import render_text

        kind = self.comparison.decision.kind
        for line in render_text(self.comparison).splitlines():
            markup = _markup(kind) if line.startswith("Decision:") else {}
            terminalreporter.write_line(line, **markup)
        if kind == "CONDITIONAL":
            terminalreporter.write_line(
                "cleo-grade: CONDITIONAL does not fail the run (exit status 0; "
                "cleo-grade compare exits 3)",
                yellow=True,
            )
        elif self.failed:
            terminalreporter.write_line("cleo-grade: NO-GO fails the run (exit status 1)", red=True)
