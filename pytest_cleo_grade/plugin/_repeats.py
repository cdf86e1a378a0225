"""Repeated runs (``runs=N``): one pytest item per run, one decision per test over its runs.

Each run is its own item, ``test_x[run-3]`` (``test_x[a-run-3]`` with parametrize), so it runs,
reports, lands on any xdist worker and can be selected with ``-k`` like any other item. A run
is graded and stored on its own (extras ``run`` and ``runs``; ``testId`` is the test's id
without the run). It does not fail for its grade: the controller collects the runs of a test
and, when the last one reports, decides the test once (mean, pass rate or pass^k against the
threshold). A failing decision turns that last run's report into the test's failure, so the
terminal, JUnit, ``-x`` and the exit status all see exactly one failure per failing test.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from pytest_cleo_grade.grading._runs import (
    RepeatInfo,
    RunSample,
    TestRuns,
    base_test_id,
    decode_repeat,
    run_id,
    run_of,
    runs_for,
)
from pytest_cleo_grade.plugin._state import REPEAT_ATTRIBUTE, STRICT_XFAIL_ATTRIBUTE

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._verdict import GradedTest

__all__ = [
    "RUN_FIXTURE",
    "Repeats",
    "asked_runs",
    "decided_elsewhere",
    "decided_name",
    "parametrize_runs",
    "repeat_of",
]

#: The fixture ``graded_session`` depends on; parametrised with the run index when runs > 1.
RUN_FIXTURE: Final = "cleo_grade_run"


def _closest(node: pytest.Item, key: str) -> object:
    for mark in node.iter_markers("cleo_grade"):
        if key in mark.kwargs:
            return mark.kwargs[key]  # the closest marker wins
    return None


def asked_runs(
    node: pytest.Item, option_runs: int | str | None, option_max: int | None = None
) -> int:
    """How many runs (items) a test is asked for: its closest marker's ``runs=``, else the
    option; ``runs="auto"``: its ``max_runs`` (marker, else option, else 20)."""
    max_runs = _closest(node, "max_runs")
    if not isinstance(max_runs, int) or isinstance(max_runs, bool) or max_runs < 1:
        max_runs = option_max
    return runs_for(_closest(node, "runs"), option_runs, max_runs)


def parametrize_runs(
    metafunc: pytest.Metafunc, option_runs: int | str | None, option_max: int | None = None
) -> None:
    """Make one item per run of a graded test asked to run more than once."""
    if "graded_session" not in metafunc.fixturenames:
        return
    runs = asked_runs(metafunc.definition, option_runs, option_max)
    if runs > 1:
        indices = list(range(1, runs + 1))
        metafunc.parametrize(RUN_FIXTURE, indices, indirect=True, ids=[run_id(i) for i in indices])


def repeat_of(report: pytest.TestReport) -> RepeatInfo | None:
    """The run of a repeated test that ``report`` carries (a run's call, or its setup when
    that ended it), or None: not a repeated test's, or an attempt a rerun plugin replaced."""
    encoded = getattr(report, REPEAT_ATTRIBUTE, None)
    if not isinstance(encoded, str) or str(report.outcome) == "rerun":
        return None
    return decode_repeat(encoded)


class Repeats:
    """The controller's collection of repeated runs: each test decided once, when its last
    run reports. A plain component of the controller, which hands it every report first
    (before pytest's terminal and JUnit writers read it: the decision may rewrite it)."""

    def __init__(self, decided_dir: Path | None = None) -> None:
        self.tests: dict[str, TestRuns] = {}
        #: Under xdist: where the controller tells workers an adaptive test is decided.
        self.decided_dir = decided_dir
        # Properties added to a run's teardown report, which junitxml reads them from.
        self._properties: dict[str, list[tuple[str, object]]] = {}
        #: Runs per test id among the collected items (a -k selection may keep only some).
        self.expected: dict[str, int] = {}

    def expect(self, nodeids: Iterable[str]) -> None:
        counts: dict[str, int] = {}
        for nodeid in nodeids:
            run = run_of(nodeid)
            if run is not None:
                test_id = base_test_id(nodeid, run)
                counts[test_id] = counts.get(test_id, 0) + 1
        self.expected = counts

    def on_report(
        self, report: pytest.TestReport, graded: GradedTest | None, info: RepeatInfo | None
    ) -> GradedTest | None:
        """Take one report (its grade and its run, decoded once by the controller: see
        :func:`repeat_of`); returns the grade as the decision leaves it (an xfail-marked
        test's run may change its mark)."""
        if report.when == "teardown":
            if report.failed:
                self._teardown_failed(report)
            report.user_properties.extend(self._properties.pop(report.nodeid, []))
            return graded
        if info is None:
            # Not a repeated test's run, or a rerun plugin's superseded attempt (the run is
            # the attempt that follows).
            return graded
        # A run ends with its call, or in its setup when that skipped or failed (no call).
        if report.when != "call" and (report.when != "setup" or report.passed):
            return graded
        runs = self.tests.setdefault(
            info.test_id, TestRuns(info, expected=self.expected.get(info.test_id))
        )
        runs.nodeids.append(report.nodeid)
        if report.skipped and graded is None:
            # Skipped, or an imperative pytest.xfail(): never graded, left out as a skip is.
            runs.skipped.add(info.run)
        else:
            runs.samples[info.run] = _sample(report, info, graded)
            # An xfail-marked run that raised: the expected failure happened (XFAIL).
            runs.raised_as_expected |= report.skipped and _expected_failure(report)
            # A run failing on its own is pytest's FAILED, an xfail marker or not (one that
            # raised what ``raises=`` does not name): the test is no expected failure then.
            runs.failed_on_its_own |= report.failed
        if runs.stats is not None:
            return graded  # an adaptive test's run that started before its decision
        stop = runs.settle()
        if not runs.complete:
            return graded
        stats = runs.decide()
        if stats is None:
            return graded
        if stop is not None:
            self._tell_workers(info.test_id, stop.reason)
        from pytest_cleo_grade.reports._repeats import junit_repeat_properties, repeat_message

        self._properties[report.nodeid] = junit_repeat_properties(stats)
        # An xfail-marked test is expected to fail: its decision is shown, never a failure
        # (as a single xfailed test's grade is left out of the gate).
        runs.xfail = _expected_failure(report) and not runs.failed_on_its_own
        message = repeat_message(info.test_id, stats, runs.mode)
        if stop is not None:
            message += f"\nadaptive runs: {stop.reason}"
        if runs.xfail and report.passed:
            # As one run would be XFAIL for raising whatever its grade, so is the test when
            # any of its runs raised, whichever run happens to complete it.
            failed = not stats.decided_pass or runs.raised_as_expected
            graded = _expected_failure_decided(report, graded, failed=failed)
        if stats.decided_pass or report.failed or runs.mode != "fail":
            report.sections.append(("CLEO repeats", message))
        else:
            # The test's one failure, carried by the run that completed it.
            report.outcome = "failed"
            report.longrepr = message
            if _expected_failure(report):
                # An xfail-marked test of which another run failed on its own is a failure,
                # as one such run is: this run's XFAIL or XPASS becomes the decision's FAILED.
                del report.wasxfail
                graded = _marked(graded, None)
        return graded

    def _tell_workers(self, test_id: str, reason: str) -> None:
        if self.decided_dir is not None:
            with contextlib.suppress(OSError):  # workers then run the rest: never wrong
                (self.decided_dir / decided_name(test_id)).write_text(reason, "utf-8")

    def decided(self, test_id: str) -> str | None:
        """Why an adaptive test needs no more runs (None: it does)."""
        runs = self.tests.get(test_id)
        if runs is None or runs.stats is None or runs.stop is None:
            return None
        return runs.stop.reason

    def _teardown_failed(self, report: pytest.TestReport) -> None:
        """A run whose teardown errored (pytest's ERROR): a failed run, as one whose call
        raised. The run that completes a test reports its teardown after the decision, so
        that decision is taken again; the ERROR already fails the session."""
        run = run_of(report.nodeid)
        runs = None if run is None else self.tests.get(base_test_id(report.nodeid, run))
        sample = None if runs is None or run is None else runs.samples.get(run)
        if runs is None or sample is None or not sample.passed:
            return
        runs.samples[sample.run] = dataclasses.replace(sample, passed=False)
        if runs.stats is None:
            return  # decided later, with this run failed
        stats = runs.decide()
        if stats is None:
            return
        from pytest_cleo_grade.reports._repeats import junit_repeat_properties, repeat_message

        self._properties[report.nodeid] = junit_repeat_properties(stats)
        report.sections.append(
            ("CLEO repeats", repeat_message(runs.info.test_id, stats, runs.mode))
        )

    def in_order(self, position: dict[str, int]) -> list[TestRuns]:
        """The repeated tests in collection order (reports arrive in completion order
        under xdist); ``position`` is each collected node id's index."""
        last = len(position)
        return sorted(
            self.tests.values(),
            key=lambda runs: min((position.get(n, last) for n in runs.nodeids), default=last),
        )

    def decisions(self) -> dict[str, str]:
        """Each repeated test's decision line, by test id (the HTML report shows them)."""
        if not self.tests:
            return {}
        from pytest_cleo_grade.reports._repeats import decision_line

        return {test_id: decision_line(runs) for test_id, runs in self.tests.items()}

    def markdown(self, position: dict[str, int]) -> str | None:
        """The step summary's block of repeated tests (None without any)."""
        if not self.tests:
            return None
        from pytest_cleo_grade.reports._repeats import repeat_markdown

        return repeat_markdown(self.in_order(position))

    def terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, position: dict[str, int]
    ) -> None:
        if not self.tests:
            return
        from pytest_cleo_grade.reports._repeats import repeat_lines

        quiet = terminalreporter.config.get_verbosity() < 0
        if not quiet:
            terminalreporter.write_sep("-", "cleo-grade repeats")
        for line in repeat_lines(self.in_order(position), quiet=quiet):
            failed = "FAILED" in line.split("(")[0]
            terminalreporter.write_line(line, red=failed, bold=failed, yellow="flaky" in line)


def decided_name(test_id: str) -> str:
    """The file a decision of ``test_id`` is told by (any test id is a safe name so)."""
    return hashlib.sha256(test_id.encode("utf-8", "surrogateescape")).hexdigest()


def decided_elsewhere(directory: str | None, test_id: str) -> str | None:
    """On an xdist worker: the controller's reason an adaptive test is decided, or None."""
    if not directory:
        return None
    try:
        return (Path(directory) / decided_name(test_id)).read_text("utf-8")
    except OSError:
        return None


def _expected_failure_decided(
    report: pytest.TestReport, graded: GradedTest | None, *, failed: bool
) -> GradedTest | None:
    """The run completing an xfail-marked test carries the test's outcome, as one run would:
    XFAIL when the decision over the runs fails (the expected failure happened), else XPASS,
    a failure under ``strict=True``. Its grade's mark follows (``xfailed`` or ``xpassed``)."""
    if failed:
        report.outcome = "skipped"
        return _marked(graded, "xfailed")
    if getattr(report, STRICT_XFAIL_ATTRIBUTE, False):
        report.outcome = "failed"
        report.longrepr = f"[XPASS(strict)] {report.wasxfail}"
        del report.wasxfail  # as pytest reports a strict XPASS
    return graded


def _marked(graded: GradedTest | None, excluded: str | None) -> GradedTest | None:
    return None if graded is None else graded.replace(excluded=excluded)


def _expected_failure(report: pytest.TestReport) -> bool:
    return getattr(report, "wasxfail", None) is not None


def _sample(report: pytest.TestReport, info: RepeatInfo, graded: GradedTest | None) -> RunSample:
    if graded is None:
        return RunSample(info.run, None, False)
    # A run that raised is a failed run, expected (an xfail-marked test's XFAIL) or not.
    own_pass = report.passed
    return RunSample(info.run, graded.result.percent, own_pass and graded.passed)
