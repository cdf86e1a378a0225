"""The controller: collects graded tests, persists them, summarises, gates, compares.

One object, registered on the process that decides (never on a pytest-xdist worker): a
worker's grades reach it on the test reports, so it sees every graded test of the run,
whichever process graded it, and it alone writes the history, the step summary and the
verdicts. Its parts are plain components it calls in a fixed order, not plugins of their own
(pytest-benchmark's ``BenchmarkSession`` and pytest-cov's ``CovPlugin`` are the model): the
repeated runs (``_repeats.Repeats``), the baseline gate (``_baseline.BaselineGate``) and
pytest-html's columns (``_pytest_html.HtmlColumns``). Each test's report is decoded once, the
run is gated once, and the step summary is one block: regressions, repeats, grades.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest

from pytest_cleo_grade.core.errors import CleoGradeError, CleoGradeWarning
from pytest_cleo_grade.core.settings import PluginOptions
from pytest_cleo_grade.grading._run_ids import (
    MODE_KEY,
    RUN_ID_KEY,
    SHARD_KEY,
    STATUS_KEY,
    THRESHOLD_KEY,
    fresh_run_id,
)
from pytest_cleo_grade.grading._runs import EXCLUDED_KEY, SERIES_KEY
from pytest_cleo_grade.plugin._baseline import BaselineGate
from pytest_cleo_grade.plugin._pytest_html import HtmlColumns
from pytest_cleo_grade.plugin._repeat_options import RepeatOptions
from pytest_cleo_grade.plugin._repeats import Repeats, repeat_of
from pytest_cleo_grade.plugin._run_options import RunOptions
from pytest_cleo_grade.plugin._state import (
    GRADE_ATTRIBUTE,
    UNUSED_JUDGE_OUTPUT,
    Role,
    run_state,
)
from pytest_cleo_grade.plugin._writer import GradeWriter

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult
    from pytest_cleo_grade.grading._verdict import GradedTest, RunGrade
    from pytest_cleo_grade.reports._html_page import GradeLine
    from pytest_cleo_grade.rubrics.comparison import Comparison
    from pytest_cleo_grade.store import AuditStore

# Like the plugin module, this one loads in every run: pydantic, SQLite and the comparison
# code are imported where a grade or a comparison is first handled.

__all__ = ["Controller", "comparison_fails_run"]


def comparison_fails_run(comparison: Comparison) -> bool:
    """The comparison gate's one predicate: NO-GO fails the run (exit status 1).

    CONDITIONAL does not: ``cleo-grade compare`` exits 3 for it, but a pytest exit status of
    3 means an internal error, so the run exits 0 and the summary says CONDITIONAL.
    """
    from pytest_cleo_grade.rubrics.comparison import decision_exit_status

    return decision_exit_status(comparison.decision) == 1


def _gate_markup(line: str) -> dict[str, bool]:
    if "gate FAILED" in line:
        return {"red": True, "bold": True}
    if "gate passed" in line:
        return {"green": True}
    return {}


def _decision_markup(kind: str) -> dict[str, bool]:
    if kind == "NO_GO":
        return {"red": True, "bold": True}
    if kind == "CONDITIONAL":
        return {"yellow": True, "bold": True}
    return {"green": True, "bold": True}


#: The workerinput key of the directory of decided adaptive tests.
DECIDED_INPUT: Final = "cleo_grade_decided"


def _decided_dir(config: pytest.Config) -> Path | None:
    """Under xdist: a directory where the controller tells the workers that an adaptive test
    (runs="auto") is decided, so they skip its remaining runs; removed at the end."""
    if run_state(config).role is not Role.CONTROLLER:
        return None
    return Path(tempfile.mkdtemp(prefix="cleo-grade-decided-"))


class Controller:
    """The deciding process's state of a run: its graded tests, the run grade, the gates and
    the comparison, with the repeats, the baseline and pytest-html's columns as parts."""

    def __init__(
        self,
        config: pytest.Config,
        options: PluginOptions,
        repeat_options: RepeatOptions,
        store: Callable[[], AuditStore],
        run_options: RunOptions | None = None,
    ) -> None:
        """``store`` opens (or returns) the run's shared audit store; called only once a grade
        is saved, so that a run that grades nothing never loads SQLite or pydantic."""
        self.config = config
        self.options = options
        self.store = store
        #: The run id every grade of this run is saved with, and the shard this run is.
        self.run_options = run_options or RunOptions(fresh_run_id(), None)
        self._decided_dir = _decided_dir(config)
        self.repeats = Repeats(self._decided_dir)
        #: The baseline gate, with --cleo-grade-baseline or --cleo-grade-save-baseline only.
        self.baseline: BaselineGate | None = None
        if repeat_options.baseline is not None or repeat_options.save_baseline is not None:
            self.baseline = BaselineGate(
                repeat_options,
                options.history_path,
                db_path=options.db_path,
                rubric_file=options.rubric_file,
            )
        # Keyed by node id: a test run again in the same session (a rerun plugin) keeps only
        # its final grade, so every graded test is stored exactly once.
        self.graded: dict[str, GradedTest] = {}
        self.problems: list[str] = []
        self._problems_lock = threading.Lock()
        #: Lines for the end of the terminal summary (what an export did).
        self.notes: list[str] = []
        #: Whether the run was interrupted (Ctrl-C): its grade covers the tests that finished.
        self._interrupted = False
        #: Graded tests whose last attempt has not finished yet (see pytest_runtest_logfinish).
        self._unsaved: dict[str, GradedTest] = {}
        #: A worker's grade's report payload and the grade decoded from it, until it is packed.
        self._payloads: dict[str, tuple[str, GradeResult]] = {}
        self._history_written = False
        #: Tags the runs of repeated tests this pytest run saves (the history's ``series``),
        #: so a later run of only some of them is never mixed with these (runs.latest_series).
        self._series = os.urandom(8).hex()
        self._run: RunGrade | None = None
        #: Each collected node id's position: the summaries follow collection order.
        self._order: dict[str, int] = {}
        # --cleo-grade-compare: decided once, after the last test.
        self.comparison: Comparison | None = None
        self.comparison_problem: str | None = None
        self.comparison_failed = False
        self._compared = False
        #: Where --cleo-grade-html wrote the report (said in the terminal summary).
        self.html_written: Path | None = None
        self.html_columns = HtmlColumns(self.graded, self.current_run, self.baseline)
        state = run_state(config)
        #: The grades this process made itself, by report (a plain run): see RunState.
        self._local_grades = state.local_grades
        #: Saves each final grade: at once in a plain run, in batches on the xdist controller.
        self._writer = GradeWriter(self._save, batched=state.role is Role.CONTROLLER)

    # -- collecting and persisting -----------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if self.baseline is not None:
            self.baseline.start()

    # First: a repeated test's decision rewrites the report that completes it (its outcome,
    # its sections, its properties) before pytest's terminal and JUnit writers read it.
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        graded = self._decoded(report)
        info = repeat_of(report)
        graded = self.repeats.on_report(report, graded, info)
        if str(report.outcome) == "rerun":
            # pytest-rerunfailures will run this test again: its grade is not the final one.
            self.graded.pop(report.nodeid, None)
            self._unsaved.pop(report.nodeid, None)
            self._payloads.pop(report.nodeid, None)
        elif graded is not None:
            self.graded.pop(graded.nodeid, None)
            self.graded[graded.nodeid] = graded
            self._unsaved[graded.nodeid] = graded
        if self.baseline is not None:
            self.baseline.on_report(report, graded, info)

    def _decoded(self, report: pytest.TestReport) -> GradedTest | None:
        """The grade a call report carries (once per report: every part reads this one):
        this process's own, or a worker's, decoded."""
        if report.when != "call":
            return None
        local = self._local_grades.pop(report, None)
        if local is not None:
            return local
        encoded = getattr(report, GRADE_ATTRIBUTE, None)
        if not isinstance(encoded, str):
            return None
        from pytest_cleo_grade.grading._verdict import decode_graded_test

        graded = decode_graded_test(encoded)
        # Packed as it came once saved (_pack): encoding the grade again cost 30 us a test.
        self._payloads[report.nodeid] = (encoded, graded.result)
        return graded

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        # Saved as soon as its test is done (every attempt a rerun plugin makes ends before
        # this), so a run killed by a timeout or a cancelled job keeps the grades of the
        # tests that finished, and a rerun test keeps only its last attempt's grade (under
        # xdist within the writer's linger: _writer.GradeWriter).
        graded = self._unsaved.pop(nodeid, None)
        if graded is not None:
            self._persist(graded)
            self._pack(graded)

    def _pack(self, graded: GradedTest) -> None:
        """Keep a saved grade packed (``GradedTest.packed``): the end of the run reads it
        again, but a suite of thousands must not hold every grade's model until then."""
        came, result = self._payloads.pop(graded.nodeid, (None, None))
        packed = graded.packed(came if result is graded.result else None)
        if self.graded.get(graded.nodeid) is graded:
            self.graded[graded.nodeid] = packed
        if self.baseline is not None:
            self.baseline.repack(graded, packed)

    def _persist(self, graded: GradedTest) -> None:
        """Hand one final grade, with the run's identity, to the writer."""
        # Which run (shards of one CI run share the id) and how the test came out: the
        # history's readers (cleo-grade combine and report --gate) decide from these.
        identity: dict[str, object] = {RUN_ID_KEY: self.run_options.run_id}
        if self.run_options.shard is not None:
            identity[SHARD_KEY] = self.run_options.shard.label
        identity[STATUS_KEY] = graded.status
        if graded.threshold is not None:
            identity[THRESHOLD_KEY] = graded.threshold
            identity[MODE_KEY] = graded.mode
        result = graded.result.model_copy(update=identity)
        if (result.model_extra or {}).get("run") is not None:
            result = result.model_copy(update={SERIES_KEY: self._series})
        if graded.excluded is not None:
            # The history says it too, so reports and baselines read from it leave it out.
            result = result.model_copy(update={EXCLUDED_KEY: graded.excluded})
        self._writer.add(result)

    def _save(self, results: list[GradeResult]) -> None:
        """Save final grades with the one persist(); trouble becomes a warning. Called by
        the writer, on its own thread under xdist: it touches only what nothing else
        changes during the run (the store, the history, the problems said)."""
        from pytest_cleo_grade.store._persist import PersistError, persist

        try:
            store = self.store()
        except CleoGradeError as exc:
            store = None
            self.problem(f"cleo-grade: grades table not written: {exc}")
        try:
            persist(
                results,
                history=self.options.history_path,
                store=store,
                keep_going=True,
                sync=False,
            )
        except PersistError as exc:
            self.problem(f"cleo-grade: {exc}")
            if "grade history" in exc.problems:
                return
        self._history_written = True

    def decided(self, test_id: str) -> str | None:
        return self.repeats.decided(test_id)

    def problem(self, message: str) -> None:
        from pytest_cleo_grade.core._text import terminal_text

        # A server's or a path's text in it must not rewrite the terminal (escape sequences).
        message = terminal_text(message)
        # Every test meets the same broken path: say it once (the writer's thread says its
        # own trouble here too).
        with self._problems_lock:
            if message not in self.problems:
                self.problems.append(message)

    def _sync(self) -> None:
        """One fsync of the history for the whole run (appends skipped theirs)."""
        for graded in list(self._unsaved.values()):
            self._persist(graded)  # a test whose logfinish never came (an interrupted run)
        self._unsaved.clear()
        self._writer.close()
        if not self._history_written:
            return
        from pytest_cleo_grade.store.history import sync_history

        try:
            sync_history(self.options.history_path)
        except CleoGradeError as exc:
            self.problem(f"cleo-grade: {exc}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        if self._decided_dir is not None:
            node.workerinput[DECIDED_INPUT] = str(self._decided_dir)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self._decided_dir is not None:
            shutil.rmtree(self._decided_dir, ignore_errors=True)

    # -- the run's grade -----------------------------------------------------------------

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._note_order([item.nodeid for item in session.items])

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        # The xdist controller collects nothing itself; every worker reports the same ids.
        self._note_order(ids)

    def _note_order(self, nodeids: list[str]) -> None:
        if self._order:
            return
        self._order = {nodeid: index for index, nodeid in enumerate(nodeids)}
        self.repeats.expect(nodeids)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        if self.baseline is not None:
            self.baseline.deselect(items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: object) -> None:
        if self.baseline is not None:
            self.baseline.worker_done(node)
        unused = (getattr(node, "workeroutput", None) or {}).get(UNUSED_JUDGE_OUTPUT)
        if isinstance(unused, str):
            self.problem(unused)  # said once, however many workers found it

    def in_collection_order(self) -> tuple[GradedTest, ...]:
        # Reports arrive in completion order under xdist; the table follows collection order
        # so that a parallel run prints what a serial run prints.
        last = len(self._order)
        tests = self.graded.values()
        return tuple(sorted(tests, key=lambda test: self._order.get(test.nodeid, last)))

    def current_run(self) -> RunGrade | None:
        """The run's grade, or None when there is nothing to show (no grades, no gate)."""
        if self._run is not None:
            return self._run
        if not self.graded and self.options.gate is None:
            return None
        from pytest_cleo_grade.grading._verdict import RunGrade

        return RunGrade(self.in_collection_order(), self.options.gate, self.run_options.shard)

    def _compare(self) -> None:
        if self._compared or self.options.compare is None:
            return
        self._compared = True
        baseline, candidate = self.options.compare
        results = [test.result for test in self.in_collection_order()]
        compared = [r for r in results if "variant" in (r.model_extra or {})]
        if not compared:
            # Nothing to compare (e.g. -k selected no comparison test): say so, decide nothing.
            self.comparison_problem = (
                "no comparison tests (marker variant=) were graded in this run"
            )
            return
        from pytest_cleo_grade.rubrics.comparison import ComparisonError, compare_grades

        try:
            self.comparison = compare_grades(compared, baseline, candidate)
        except ComparisonError as exc:
            # A gate that cannot decide (a variant or a query's pair missing) must not pass.
            self.comparison_problem = f"cannot compare: {exc}"
            self.comparison_failed = True
            return
        self.comparison_failed = comparison_fails_run(self.comparison)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        result = yield
        # Decided once, after every report arrived (under xdist the controller's loop ends
        # when all workers are done); the summary prints these same verdicts.
        self._run = self.current_run()
        if self._run is not None and self._run.gate_failed:
            session.testsfailed += 1
        self._compare()
        if self.comparison_failed:
            session.testsfailed += 1
        if self.baseline is not None and self.baseline.decide(session.config):
            session.testsfailed += 1
        return result

    # -- output --------------------------------------------------------------------------

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        self._interrupted = exitstatus == pytest.ExitCode.INTERRUPTED
        if self.baseline is not None:
            self.baseline.finish(session, exitstatus)
        self._sync()
        self._write_html()
        if "langfuse" in self.options.exports:
            self._export_langfuse()
        self._write_step_summary()

    def _write_step_summary(self) -> None:
        """GITHUB_STEP_SUMMARY: one block, in a fixed order: the regressions against the
        baseline first, then the repeated tests (flaky ones first), then the grades and the
        comparison."""
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        if not path:
            return
        blocks = []
        if self.baseline is not None and (regressions := self.baseline.markdown()) is not None:
            blocks.append(regressions)
        if (repeats := self.repeats.markdown(self._order)) is not None:
            blocks.append(repeats)
        run = self.current_run()
        if run is not None:
            from pytest_cleo_grade.reports._display import markdown_summary

            blocks.append(markdown_summary(run))
        if self._compared:
            # A blank line keeps the comparison apart from whatever the file already holds.
            blocks.append("\n" + self._comparison_markdown())
        if not blocks:
            return
        try:
            from pytest_cleo_grade.core._files import append_markdown

            append_markdown(path, "".join(blocks))
        except OSError as exc:
            self.problem(f"cleo-grade: GITHUB_STEP_SUMMARY not written: {exc}")

    def _export_langfuse(self) -> None:
        """Every final grade as Langfuse scores; a note, never a failed run."""
        from pytest_cleo_grade.reports.langfuse import keys_from, require_langfuse

        try:
            require_langfuse()
        except ImportError as exc:
            self.notes.append(f"cleo-grade: langfuse export skipped: {exc}")
            return
        keys = keys_from(os.environ)
        results = [test.result for test in self.in_collection_order() if not test.ungradable]
        if keys is None:
            self.notes.append(
                "cleo-grade: langfuse export skipped: LANGFUSE_PUBLIC_KEY and "
                "LANGFUSE_SECRET_KEY are not set"
            )
            return
        if not results:
            return
        public, secret, base = keys
        try:
            from pytest_cleo_grade.reports.langfuse import export_grades

            summary = export_grades(results, public_key=public, secret_key=secret, base_url=base)
        except Exception as exc:  # an export never fails the run
            from pytest_cleo_grade.reports.langfuse import failure_line

            self.problem(f"cleo-grade: {failure_line(exc, base, secret, public)}")
            return
        sessions = len({result.session_id for result in results})
        self.notes.append(f"cleo-grade: {summary.line(sessions, base)}")

    def _write_html(self) -> None:
        """--cleo-grade-html: the page of this run's grades with their history (controller
        only, after the history is synced, so the trend ends with this run). Written even
        when nothing was graded: a CI step uploading it should find it."""
        path = self.options.html_path
        if path is None:
            return
        from pytest_cleo_grade.core._files import inputs_of
        from pytest_cleo_grade.core.errors import warnings_shown_not_raised
        from pytest_cleo_grade.grading._verdict import RunGrade
        from pytest_cleo_grade.reports._html import write_html_report

        run = self.current_run() or RunGrade((), self.options.gate, self.run_options.shard)
        # With --cleo-grade-baseline, changes are against the baseline the gate compared with.
        gate = self.baseline
        grades = None if gate is None else gate.baseline
        baseline = None if grades is None else {key: grades[key].totals for key in grades}
        # The page says what the terminal says: the baseline gate's verdict, and each
        # repeated test's decision (runs that failed on their own or were not graded count).
        gates: list[tuple[bool | None, str]] = []
        if gate is not None and (line := gate.verdict_text()):
            # A note (no baseline, nothing gated) is drawn neutral, never as a passed gate.
            compared = gate.comparison is not None and not gate.comparison.empty
            decided = gate.failed or (gate.gated and compared)
            gates.append((bool(gate.failed) if decided else None, line))
        decisions = self.repeats.decisions()
        try:
            with warnings_shown_not_raised():  # a corrupt history line is skipped, said once
                history, calibration = _page_history(self.options.history_path, run)
        except CleoGradeError as exc:
            # The history's own warning says only that it could not be read: this one says
            # which artefact the run did not write because of it.
            self.problem(f"cleo-grade: HTML report {path} not written: {exc}")
            return
        try:
            where = None if gate is None else gate.options.baseline
            reads = inputs_of(
                history=self.options.history_path,
                # "latest" is the history: no file of its own.
                baseline=where if isinstance(where, Path) else None,
            )
            write_html_report(
                path,
                run,
                history,
                reads=reads,
                db=self.options.db_path,
                baseline=baseline,
                calibration=calibration,
                source="this pytest run",
                decisions=decisions,
                gates=gates,
            )
        except CleoGradeError as exc:
            self.problem(f"cleo-grade: {exc}")
            return
        self.html_written = path

    def _comparison_markdown(self) -> str:
        if self.comparison is not None:
            from pytest_cleo_grade.rubrics.comparison import render_markdown

            return render_markdown(self.comparison)
        assert self.options.compare is not None  # only a comparison run compares
        from pytest_cleo_grade.core._text import markdown_cell

        # The problem quotes query and variant names from the tests: plain text, like the
        # table's cells, so no name can add a link, a tag or a line to the job summary.
        baseline, candidate = map(markdown_cell, self.options.compare)
        problem = markdown_cell(self.comparison_problem or "")
        return f"### Model comparison: {candidate} vs {baseline}\n\n{problem}\n"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        # In a fixed order: the baseline, the repeated tests, then the grades.
        if self.baseline is not None:
            self.baseline.terminal_summary(terminalreporter)
        self.repeats.terminal_summary(terminalreporter, self._order)
        run = self.current_run()
        if run is not None:
            from pytest_cleo_grade.reports._display import summary_line, summary_lines

            if self.config.get_verbosity() < 0:
                line = summary_line(run)
                terminalreporter.write_line(line, **_gate_markup(line))
            else:
                terminalreporter.write_sep("-", "cleo-grade")
                for line in summary_lines(run):
                    terminalreporter.write_line(line, **_gate_markup(line))
            if self._interrupted:
                # "gate passed" over the tests before a Ctrl-C would read as the whole run's.
                count = len(run.tests)
                terminalreporter.write_line(
                    f"cleo-grade: the run was interrupted: its grade covers only the {count} "
                    f"graded test{'' if count == 1 else 's'} that finished",
                    yellow=True,
                )
        if self._compared:
            self._comparison_summary(terminalreporter)
        notes = list(self.notes)
        if self.html_written is not None:
            notes.insert(0, f"cleo-grade: HTML report {self.html_written}")
        if notes:
            from pytest_cleo_grade.core._text import terminal_text

            for note in notes:
                terminalreporter.write_line(terminal_text(note))
        for problem in self.problems:
            try:
                warnings.warn(CleoGradeWarning(problem), stacklevel=1)
            except CleoGradeWarning:
                # filterwarnings=error must not turn a storage hiccup into a crash.
                terminalreporter.write_line(f"CleoGradeWarning: {problem}", yellow=True)

    def _comparison_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        assert self.options.compare is not None  # only a comparison run compares
        from pytest_cleo_grade.core._text import terminal_text

        # Query and variant names come from the tests' markers: every line is escaped, so a
        # name can neither colour the terminal nor forge a line (a "Decision:" one included).
        baseline, candidate = map(terminal_text, self.options.compare)
        terminalreporter.write_sep("-", "cleo-grade comparison")
        if self.comparison is None:
            outcome = "exit status 1" if self.comparison_failed else "exit status unchanged"
            problem = terminal_text(self.comparison_problem)
            terminalreporter.write_line(
                f"cleo-grade: {candidate} vs {baseline}: {problem} ({outcome})",
                red=self.comparison_failed,
                yellow=not self.comparison_failed,
            )
            return
        from pytest_cleo_grade.rubrics.comparison import render_text

        kind = self.comparison.decision.kind
        for line in render_text(self.comparison).split("\n"):
            line = terminal_text(line)  # render_text escapes its names; this keeps it so
            markup = _decision_markup(kind) if line.startswith("Decision:") else {}
            terminalreporter.write_line(line, **markup)
        if kind == "CONDITIONAL":
            # Other tests or gates may still fail the run: say only what this decision does.
            terminalreporter.write_line(
                "cleo-grade: CONDITIONAL does not change the exit status "
                "(cleo-grade compare exits 3)",
                yellow=True,
            )
        elif self.comparison_failed:
            terminalreporter.write_line("cleo-grade: NO-GO fails the run (exit status 1)", red=True)

    # -- pytest-html (optional hooks: they exist only where pytest-html is installed) -----

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_header(self, cells: list[str]) -> None:
        self.html_columns.header(cells)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_table_row(self, report: Any, cells: list[str]) -> None:
        self.html_columns.row(report, cells)

    @pytest.hookimpl(optionalhook=True)
    def pytest_html_results_summary(
        self, prefix: list[str], summary: list[str], postfix: list[str], session: Any
    ) -> None:
        self.html_columns.summary(prefix)


def _page_history(
    path: Path, run: RunGrade
) -> tuple[Sequence[GradeLine], Sequence[GradeResult] | None]:
    """The HTML page's history of the run's tests and its calibration's grades: through the
    history's index only those tests' rows, else every line (the calibration then too)."""
    from pytest_cleo_grade.reports._html_history import test_lines_file
    from pytest_cleo_grade.reports._html_page import grade_test_id
    from pytest_cleo_grade.store.history import read_grades

    found = test_lines_file(path, {grade_test_id(test.result) for test in run.tests})
    if found is not None:
        return found
    return read_grades(path), None
