"""Run ids, shards and the ungradable status in a pytest run."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.plugin_suites import make_suite

# pytest-split's --splits/--group is how a shard is named here.
pytestmark = pytest.mark.inner_plugins("pytest-split")

HISTORY = Path(".cleo") / "metrics" / "GRADES.jsonl"

SUITE = """
def test_a(graded_session):
    perfect(graded_session)

def test_b(graded_session):
    forty(graded_session)

def test_c(graded_session):
    perfect(graded_session)

def test_empty(graded_session):
    pass
"""


def lines(root: Path) -> list[dict[str, object]]:
    return [json.loads(text) for text in (root / HISTORY).read_text().splitlines()]


def test_every_line_carries_the_run_id_the_status_and_the_place_in_the_suite(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLEO_GRADE_RUN_ID", raising=False)
    monkeypatch.setenv("GITHUB_RUN_ID", "555")
    monkeypatch.setenv("GITHUB_RUN_ATTEMPT", "3")
    make_suite(pytester, SUITE)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest(
        "--junitxml=out.xml", "--cleo-grade-fail-under=B", "--cleo-grade-html=r.html"
    )
    result.assert_outcomes(passed=2, failed=2)
    got = {
        str(line["testId"]).split("::")[-1]: (line["runId"], line["cleoStatus"], line["position"])
        for line in lines(pytester.path)
    }
    assert got == {
        "test_a": ("github-555-3", "passed", 0),
        "test_b": ("github-555-3", "below", 1),
        "test_c": ("github-555-3", "passed", 2),
        "test_empty": ("github-555-3", "ungradable", 3),
    }
    # The test that captured nothing is told apart in every output.
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_empty  *-  *-  *-  *-  ungradable  not graded",
            "could not be graded: test_agent.py::test_empty: nothing was captured*",
            "run grade B: mean 80% over 3 graded tests (1 below, 1 could not be graded)",
        ]
    )
    cases = {c.get("name"): c for c in ET.parse(pytester.path / "out.xml").iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_empty"].iter("property")}
    assert props["cleo_status"] == "ungradable"
    assert "nothing was captured" in str(props["cleo_reason"])
    assert "cleo_grade" not in props
    assert "| ungradable | not graded |" in summary.read_text()
    assert "ungradable" in (pytester.path / "r.html").read_text()


def test_the_run_id_option_names_the_run(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE.split("def test_b")[0])
    pytester.runpytest("--cleo-grade-run-id=nightly-7").assert_outcomes(passed=1)
    assert [line["runId"] for line in lines(pytester.path)] == ["nightly-7"]
    result = pytester.runpytest("--cleo-grade-run-id=two words")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--cleo-grade-run-id: invalid run id 'two words'*"])


def test_a_shard_defers_the_gate_to_the_combined_run(pytester: pytest.Pytester) -> None:
    make_suite(pytester, SUITE.replace("def test_empty(graded_session):\n    pass\n", ""))
    # test_b alone is 40 %: as a gate of its own the shard would fail the run.
    result = pytester.runpytest("--splits", "3", "--group", "2", "--cleo-grade-gate=B")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "run grade F: mean 40% over 1 graded test",
            "gate 75% (B): deferred, this is shard 2/3 (pytest-split --splits/--group)*",
        ]
    )
    [line] = lines(pytester.path)
    assert (line["shard"], line["position"]) == ("2/3", 1)
    # Any other splitter: the option says which shard this is (it selects nothing itself).
    result = pytester.runpytest("--cleo-grade-shard=1/2", "--cleo-grade-gate=A")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["gate 90% (A): deferred, this is shard 1/2 (--cleo-grade-shard)*"])
