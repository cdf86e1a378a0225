"""Under pytest-xdist the plugin grades on workers and reports exactly what a serial run does."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_cleo_grade.store import AuditStore
from tests.plugin_suites import make_suite

# Every test here starts pytest-xdist workers. The controllers run in this process: only the
# workers need processes of their own.
pytestmark = pytest.mark.e2e

SUITE = """
import os

@pytest.mark.parametrize("agent", [perfect, seventy_five, forty], ids=["a", "b", "f"])
@pytest.mark.parametrize("n", range(4))
def test_agent(graded_session, agent, n):
    agent(graded_session)

@pytest.mark.cleo_grade(fail_under="A")
def test_below_marker(graded_session):
    seventy_five(graded_session)

def test_broken(graded_session):
    perfect(graded_session)
    raise RuntimeError("boom")

def test_plain():
    pass
"""


def _junit(path: Path) -> dict[str, tuple[list[tuple[str, str]], list[str]]]:
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        # Session ids are new in every run; everything else must be the same.
        props = [
            (p.attrib["name"], p.attrib["value"])
            for p in case.iter("property")
            if p.attrib["name"] != "cleo_session"
        ]
        outcome = [child.tag for child in case if child.tag != "properties"]
        cases[f"{case.attrib['classname']}::{case.attrib['name']}"] = (props, outcome)
    return cases


def _history(path: Path) -> list[tuple[object, ...]]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted(
        (d["testId"], d["totalScore"], d["entryCount"], json.dumps(d["dimensions"]), d["flags"])
        for d in lines
    )


def _summary(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if "- cleo-grade -" in line)
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("=="))
    return lines[start:end]


def test_a_two_worker_run_grades_reports_and_persists_exactly_like_a_serial_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_suite(pytester, SUITE)
    common = ["--cleo-grade-gate=B", "-p", "no:randomly"]
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "serial.md"))
    serial = pytester.runpytest(
        *common, "--junitxml=serial.xml", "--cleo-grade-history=serial.jsonl"
    )
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(pytester.path / "xdist.md"))
    parallel = pytester.runpytest(
        *common, "-n", "2", "--junitxml=xdist.xml", "--cleo-grade-history=xdist.jsonl"
    )
    parallel.stdout.fnmatch_lines(["*2 workers [[]15 items[]]*"])  # really ran on two workers
    for result in (serial, parallel):
        result.assert_outcomes(passed=13, failed=2)
        assert result.ret == 1
    assert _summary(serial.outlines) == _summary(parallel.outlines)
    assert _summary(serial.outlines)[-1] == "gate FAILED: mean 73.93% is below 75% (B)"
    assert _junit(pytester.path / "serial.xml") == _junit(pytester.path / "xdist.xml")
    serial_history = _history(pytester.path / "serial.jsonl")
    assert serial_history == _history(pytester.path / "xdist.jsonl")
    # Every graded test once, test_plain never: the workers write no history of their own.
    assert len(serial_history) == len({line[0] for line in serial_history}) == 14
    with AuditStore(pytester.path / ".cleo" / "audit.db") as store:
        assert len(store.grades()) == 28
    # Nor summaries: one step summary section per run, the controller's.
    for name in ("serial.md", "xdist.md"):
        assert (pytester.path / name).read_text().count("### cleo-grade") == 1


def test_under_xdist_the_gate_alone_sets_the_exit_status(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
        def test_perfect(graded_session):
            perfect(graded_session)

        def test_sloppy(graded_session):
            forty(graded_session)
        """,
    )
    result = pytester.runpytest("-n", "2", "--cleo-grade-gate=B")
    result.assert_outcomes(passed=2)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["gate FAILED: mean 70% is below 75% (B)"])


def test_under_xdist_an_invalid_marker_errors_its_test_instead_of_crashing_a_worker(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(threshold="B")
        def test_typo(graded_session):
            perfect(graded_session)

        def test_fine(graded_session):
            perfect(graded_session)
        """,
    )
    result = pytester.runpytest("-n", "2")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: test_agent.py::test_typo: @pytest.mark.cleo_grade:"
            " unknown argument 'threshold'; accepted: fail_under, mode, *"
        ]
    )
    assert "INTERNALERROR" not in result.stdout.str()


WRITER_PROBE = """
import threading

def pytest_sessionfinish(session):
    # Before the plugin's own (trylast), which stops its writer: who is there to save.
    if not hasattr(session.config, "workerinput"):
        workers = getattr(session.config.option, "numprocesses", None) or 0
        names = sorted(thread.name for thread in threading.enumerate())
        (session.config.rootpath / f"threads-{workers}.txt").write_text("\\n".join(names))
"""


def test_the_controller_saves_on_its_writer_thread_and_a_plain_run_in_its_own(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, SUITE)
    pytester.makeconftest(WRITER_PROBE)
    for extra, history in (([], "serial.jsonl"), (["-n", "2"], "xdist.jsonl")):
        result = pytester.runpytest(*extra, "-p", "no:randomly", f"--cleo-grade-history={history}")
        result.assert_outcomes(passed=13, failed=2)
    assert "cleo-grade grade writer" not in (pytester.path / "threads-0.txt").read_text()
    assert "cleo-grade grade writer" in (pytester.path / "threads-2.txt").read_text()
    # Batched or not, every graded test's line is saved once.
    assert _history(pytester.path / "serial.jsonl") == _history(pytester.path / "xdist.jsonl")
