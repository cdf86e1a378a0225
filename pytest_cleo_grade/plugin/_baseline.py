"""The controller's baseline gate: compare the run's grades with a baseline, save a baseline.

A plain component of the controller (never a plugin of its own): it hands the gate each
grade as it arrives, whichever process graded it, and asks it once after the last test; the
summary prints the same comparison object the exit status was decided on. On an xdist worker
only :class:`DeselectedOnWorker` runs, to tell the controller what the selection left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from pytest_cleo_grade.plugin._repeat_options import RepeatOptions

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._baseline import BaselineComparison, TestGrades
    from pytest_cleo_grade.grading._runs import RepeatInfo
    from pytest_cleo_grade.grading._verdict import GradedTest

__all__ = ["BaselineGate", "DeselectedOnWorker"]

#: Where an xdist worker tells the controller how many tests the selection left out.
DESELECTED_KEY = "cleo_grade_deselected"


class DeselectedOnWorker:
    """On an xdist worker: what ``-k``, ``-m``, ``--lf`` and the like left out (workers
    collect and select; the controller, which saves the baseline, does not)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.deselected = 0

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += _graded(items)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        output: dict[str, Any] = self.config.workeroutput  # type: ignore[attr-defined]
        output[DESELECTED_KEY] = (self.deselected, *_left_out_by_lf(session.config))


def _graded(items: list[pytest.Item]) -> int:
    """How many of ``items`` are graded tests (a baseline holds only those)."""
    return sum("graded_session" in getattr(item, "fixturenames", ()) for item in items)


#: The options that select part of the suite for one run. Given in the ini's ``addopts`` (or
#: PYTEST_ADDOPTS) they are the project's standing selection, whose baseline is the norm.
_SUBSET_OPTIONS: Final = ("-k", "-m", "--keyword", "--deselect", "--lf", "--last-failed", "--sw")


def _subset_on_command_line(config: pytest.Config) -> bool:
    """Whether the command line itself narrowed the run (``-k x``, ``-kx``, ``--lf``...)."""
    for arg in config.invocation_params.args:
        text = str(arg)
        if text.startswith("--"):
            if text.split("=", 1)[0] in _SUBSET_OPTIONS or text.startswith("--stepwise"):
                return True
        elif text[:2] in ("-k", "-m"):
            return True
    return False


def _left_out_by_lf(config: pytest.Config) -> tuple[int, int]:
    """Test files ``--lf`` left uncollected, and the failures it re-ran: within a file it
    collects only those, and no hook counts the rest as deselected (pytest's plugin keeps
    the counts; the failures are re-run only when there were any)."""
    if not config.getoption("lf", False):
        return 0, 0
    plugin = config.pluginmanager.get_plugin("lfplugin")
    files = int(getattr(plugin, "_skipped_files", 0) or 0)
    return files, int(getattr(plugin, "_previously_failed_count", 0) or 0)


class BaselineGate:
    """Controller-side baseline comparison and saving for one run."""

    def __init__(
        self,
        options: RepeatOptions,
        history_path: Path,
        *,
        db_path: Path | None = None,
        rubric_file: Path | None = None,
    ) -> None:
        self.options = options
        self.history_path = history_path
        #: The audit store a changed rubric re-grades the baseline's sessions from, and the
        #: run's rubric file they are re-graded with.
        self.db_path = db_path
        self.rubric_file = rubric_file
        #: Each graded item's grade, an expected failure's too: whether it counts is known
        #: only once every run of its test has reported (see :func:`verdict.counted_tests`).
        self.graded: dict[str, GradedTest] = {}
        self.baseline: dict[str, TestGrades] | None = None
        self.note: str | None = None
        #: What --cleo-grade-save-baseline wrote (None: nothing saved).
        self.saved: str | None = None
        self.failed_without_baseline = False
        self.comparison: BaselineComparison | None = None
        #: Tests the selection options left out, files --lf skipped and the failures it
        #: re-ran alone: a baseline saved from such a run is partial.
        self.deselected = 0
        #: The items that ran (their setup was reported): a run stopped by -x after its last
        #: test is whole.
        self.ran: set[str] = set()
        self.lf_files = 0
        self.lf_rerun = 0
        #: Per repeated test: how many runs it asks for, and the runs that ran.
        self.runs_asked: dict[str, int] = {}
        self.runs_ran: dict[str, set[int]] = {}
        #: Tests with runs="auto": their series may end early, as their decision allows.
        self.adaptive: set[str] = set()

    @property
    def gated(self) -> bool:
        return self.options.fail_on_regression is not None

    def start(self) -> None:
        """Read the baseline (at the session's start, before the first test appends to the
        history: "latest" is the previous run)."""
        if self.options.baseline is None:
            return
        from pytest_cleo_grade.core.errors import CleoGradeError
        from pytest_cleo_grade.grading._baseline import (
            BaselineError,
            read_baseline,
        )

        where = self.options.baseline
        try:
            if where == "latest":
                from pytest_cleo_grade.core.errors import warnings_shown_not_raised
                from pytest_cleo_grade.grading._history_file import latest_from_history_file

                if not self.history_path.exists():
                    raise FileNotFoundError(self.history_path)
                with warnings_shown_not_raised():  # a corrupt line is skipped with a warning
                    # Two passes a line at a time: a history of years is never held whole.
                    self.baseline = latest_from_history_file(self.history_path)[0]
            else:
                self.baseline = read_baseline(Path(where))
        except FileNotFoundError as exc:
            self.note = f"no baseline at {exc.filename or where}: nothing compared"
            self.failed_without_baseline = self.options.baseline_required
        except (BaselineError, CleoGradeError, OSError) as exc:
            # A baseline that exists but cannot be read must not let a gate pass unchecked.
            why = f"{where}: {exc.strerror or exc}" if isinstance(exc, OSError) else exc
            self.note = f"baseline not usable: {why}"
            self.failed_without_baseline = self.gated or self.options.baseline_required

    def on_report(
        self, report: pytest.TestReport, graded: GradedTest | None, info: RepeatInfo | None
    ) -> None:
        """Take one report, its grade and its run as the controller decoded them."""
        if report.when == "setup":
            self.ran.add(report.nodeid)
        if info is not None:
            self._count_run(info)
        if report.when == "call" and graded is not None and not graded.ungradable:
            # A test that could not be graded has no score to save or compare: its own
            # failure says so, never a regression.
            self.graded[graded.nodeid] = graded

    def repack(self, graded: GradedTest, packed: GradedTest) -> None:
        """Hold ``packed`` where ``graded`` was held (the controller packs a saved grade)."""
        if self.graded.get(graded.nodeid) is graded:
            self.graded[graded.nodeid] = packed

    def _count_run(self, info: RepeatInfo) -> None:
        self.runs_asked[info.test_id] = info.runs
        self.runs_ran.setdefault(info.test_id, set()).add(info.run)
        if info.min_runs is not None:
            self.adaptive.add(info.test_id)

    def _partial_series(self) -> dict[str, str]:
        """Repeated tests of which only some runs ran (-k, --lf, a run stopped early, a node
        id naming one run) or were graded (a run that failed to grade, a skipped run): the
        rest are no measure of the test's mean, as the HTML report says too."""
        graded: dict[str, set[int]] = {}
        for test in self.graded.values():
            extra = test.result.model_extra or {}
            run = extra.get("run")
            if isinstance(run, int):
                graded.setdefault(str(extra.get("testId")), set()).add(run)
        partial = {}
        for test_id, runs in self.runs_asked.items():
            ran, scored = len(self.runs_ran[test_id]), len(graded.get(test_id, ()))
            if ran < runs:
                partial[test_id] = f"{ran} of {runs} runs ran"
            elif scored < runs and test_id not in self.adaptive:
                # runs="auto" grades only the runs its decision needed: a whole series.
                partial[test_id] = f"{scored} of {runs} runs graded"
        return partial

    def deselect(self, items: list[pytest.Item]) -> None:
        self.deselected += _graded(items)

    def worker_done(self, node: Any) -> None:
        # Every worker collects and selects the whole suite: each counts the same tests.
        output = getattr(node, "workeroutput", None) or {}
        tests, files, rerun = output.get(DESELECTED_KEY, (0, 0, 0))
        self.deselected = max(self.deselected, int(tests))
        self.lf_files = max(self.lf_files, int(files))
        self.lf_rerun = max(self.lf_rerun, int(rerun))

    def _partial(self, session: pytest.Session, exitstatus: int) -> str | None:
        """Why this run's grades are not the whole suite's (None: they are)."""
        stopped = session.shouldfail or session.shouldstop
        interrupted = stopped or exitstatus == pytest.ExitCode.INTERRUPTED
        if interrupted and len(self.ran) < session.testscollected:
            why = f" ({stopped})" if isinstance(stopped, str) else ""
            return f"the run stopped early{why}"
        if self.deselected and _subset_on_command_line(session.config):
            tests = "test was" if self.deselected == 1 else "tests were"
            return f"{self.deselected} {tests} deselected (-k, -m, --deselect, --lf, --sw)"
        files, rerun = _left_out_by_lf(session.config)
        if max(rerun, self.lf_rerun) or max(files, self.lf_files):
            return "--lf re-ran only the tests that failed last time"
        series = self._partial_series()
        if series:
            first = min(series)
            more = f" (and {len(series) - 1} more tests)" if len(series) > 1 else ""
            return f"{first}: only {series[first]}{more}"
        return None

    def _current(self) -> dict[str, TestGrades]:
        from pytest_cleo_grade.grading._baseline import grades_from_results
        from pytest_cleo_grade.grading._verdict import counted_tests

        # As the run's mean: a repeated test counts whole when any of its runs counts.
        return grades_from_results(test.result for test in counted_tests(self.graded.values()))

    def decide(self, config: pytest.Config) -> bool:
        """Compare the run with the baseline, once, after the last test; True when the gate
        fails the run (a regression, or a baseline it needs missing)."""
        if self.baseline is not None:
            from pytest_cleo_grade.grading._baseline import compare_baseline, parse_tolerances

            tolerances = (
                parse_tolerances(self.options.fail_on_regression or "") if self.gated else {}
            )
            regrade = None
            if self.db_path is not None:
                from pytest_cleo_grade.grading._regrade import StoreRegrader, rubric_grader

                regrade = StoreRegrader(self.db_path, rubric_grader(self.rubric_file))
            self.comparison = compare_baseline(
                self.baseline, self._current(), tolerances, self._partial_series(), regrade
            )
            self._junit(config, self.comparison)
        return self.failed

    @property
    def failed(self) -> bool:
        """Whether the baseline gate fails the run (a regression, or a required baseline
        missing)."""
        if self.comparison is not None:
            return self.gated and self.comparison.failed
        return self.failed_without_baseline

    def verdict_text(self) -> str | None:
        """The gate's one verdict line (None when nothing was compared or noted)."""
        if self.comparison is not None:
            from pytest_cleo_grade.reports._baseline import baseline_verdict

            return baseline_verdict(self.comparison, gated=self.gated)
        return self.note or None

    def _junit(self, config: pytest.Config, comparison: BaselineComparison) -> None:
        """The verdict as <testsuite> properties: it belongs to the run, not to one test."""
        # pytest's JUnit writer, registered under --junitxml only (found by what it does:
        # its stash key is not public API).
        plugins = config.pluginmanager.get_plugins()
        xml = next((p for p in plugins if callable(getattr(p, "add_global_property", None))), None)
        if xml is None:
            return
        from pytest_cleo_grade.reports._baseline import baseline_verdict, change_text

        xml.add_global_property("cleo_baseline", baseline_verdict(comparison, gated=self.gated))
        xml.add_global_property("cleo_regressions", len(comparison.regressions))
        for change in comparison.regressions:
            xml.add_global_property("cleo_regression", change_text(change))
        for test in comparison.new_tests:
            xml.add_global_property("cleo_baseline_new_test", test)
        for test in comparison.missing_tests:
            xml.add_global_property("cleo_baseline_missing_test", test)
        for test, _ in comparison.partial_tests:
            xml.add_global_property("cleo_baseline_partial_test", test)
        for test, _ in comparison.rubric_changed:
            xml.add_global_property("cleo_baseline_rubric_changed_test", test)
        for test, _ in comparison.regraded:
            xml.add_global_property("cleo_baseline_regraded_test", test)

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Save the baseline asked for (only what the run counts: a run of nothing but
        expected failures saves none)."""
        target = self.options.save_baseline
        if target is None:
            return
        from pytest_cleo_grade.core._files import replaced_input
        from pytest_cleo_grade.grading._baseline import write_baseline

        current = self._current()
        partial = self._partial(session, exitstatus)
        # A baseline saved from part of the suite would stop the gate checking the rest.
        if partial is not None:
            self.note = f"baseline not saved to {target}: {partial}; save it from a whole run"
        elif not current:
            self.note = f"baseline not saved to {target}: no graded test counted in this run"
        # Never over the history it was read beside (grading never loses data).
        elif replaced_input(target, [self.history_path]) is not None:
            self.note = f"baseline not saved to {target}: it would replace the grade history"
        else:
            try:
                write_baseline(target, current, source="pytest run")
            except OSError as exc:
                self.note = f"baseline not saved to {target}: {exc}"
            else:
                count = len(current)
                self.saved = (
                    f"baseline of {count} test{'' if count == 1 else 's'} saved to {target} "
                    f"(compare a later run with --cleo-grade-baseline={target})"
                )

    def markdown(self) -> str | None:
        """The step summary's block against the baseline (None: nothing compared or noted)."""
        if self.comparison is not None:
            from pytest_cleo_grade.reports._baseline import baseline_markdown

            return baseline_markdown(self.comparison, gated=self.gated)
        if self.note:
            from pytest_cleo_grade.core._text import markdown_cell

            return f"### Against the baseline\n\n{markdown_cell(self.note)}\n"
        return None

    def terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.comparison is None and self.note is None and self.saved is None:
            return
        from pytest_cleo_grade.core._text import terminal_text

        terminalreporter.write_sep("-", "cleo-grade baseline")
        if self.saved is not None:
            terminalreporter.write_line(terminal_text(f"cleo-grade: {self.saved}"))
        if self.note is not None:
            failing = self.failed_without_baseline
            suffix = " (fails the run)" if failing else ""
            note = terminal_text(f"cleo-grade: {self.note}{suffix}")
            terminalreporter.write_line(note, yellow=not failing)
        if self.comparison is not None:
            from pytest_cleo_grade.reports._baseline import baseline_lines

            for line in baseline_lines(self.comparison, gated=self.gated):
                failed = line.startswith(("REGRESSION", "baseline gate FAILED", "problem"))
                terminalreporter.write_line(terminal_text(line), red=failed, bold=failed)
