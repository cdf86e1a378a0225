"""The plugin's outputs: JUnit properties, the summary, the gate, history and storage failures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from pytest_cleo_grade.core import settings
from pytest_cleo_grade.store import AuditStore, history
from tests.plugin_suites import FORTY_FLAGS, make_suite

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "grade.schema.json"

THREE_AGENTS = """
@pytest.mark.cleo_grade(mode="report")
def test_sloppy(graded_session):
    forty(graded_session)

def test_decent(graded_session):
    seventy_five(graded_session)

def test_perfect(graded_session):
    perfect(graded_session)

def test_plain():
    pass
"""


def junit_cases(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    return {case.attrib["name"]: case for case in root.iter("testcase")}


def properties(case: ET.Element) -> list[tuple[str, str]]:
    return [(p.attrib["name"], p.attrib["value"]) for p in case.iter("property")]


def test_each_graded_test_carries_its_grade_as_junit_properties(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, THREE_AGENTS)
    pytester.runpytest("--junitxml=out.xml").assert_outcomes(passed=4)
    cases = junit_cases(pytester.path / "out.xml")
    sloppy = properties(cases["test_sloppy"])
    # cleo_session leads from the CI failure to the graded session (`cleo-grade show`).
    history = (pytester.path / ".cleo" / "metrics" / "GRADES.jsonl").read_text().splitlines()
    [session] = [
        grade["sessionId"]
        for grade in map(json.loads, history)
        if grade["testId"].endswith("test_sloppy")
    ]
    assert sloppy == [
        ("cleo_grade", "F"),
        ("cleo_score", "40/100"),
        ("cleo_percent", "40"),
        ("cleo_entry_count", "1"),
        ("cleo_session", session),
        ("cleo_flags", "5"),
        *(("cleo_flag", flag) for flag in FORTY_FLAGS),
        ("cleo_dim_sessionDiscipline", "0/20"),
        ("cleo_dim_discoveryEfficiency", "0/20"),
        ("cleo_dim_taskHygiene", "20/20"),
        ("cleo_dim_errorProtocol", "20/20"),
        ("cleo_dim_disclosureUse", "0/20"),
        ("cleo_status", "passed"),
    ]
    assert dict(properties(cases["test_decent"]))["cleo_score"] == "75/100"
    assert properties(cases["test_plain"]) == []


def test_a_below_threshold_grade_is_a_junit_failure_not_an_error(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, "def test_sloppy(graded_session):\n    forty(graded_session)\n")
    pytester.runpytest("--junitxml=out.xml", "--cleo-grade-fail-under=C")
    case = junit_cases(pytester.path / "out.xml")["test_sloppy"]
    [failure] = case.findall("failure")
    assert case.findall("error") == []
    assert "40/100 (40%, grade F) is below the threshold 60% (C)" in failure.attrib["message"]
    assert dict(properties(case))["cleo_grade"] == "F"


def test_the_summary_lists_graded_tests_the_run_grade_and_the_gate_verdict(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, THREE_AGENTS)
    result = pytester.runpytest("--cleo-grade-gate=C", "--cleo-grade-fail-under=B")
    result.stdout.fnmatch_lines(
        [
            "*- cleo-grade -*",
            "test  *score  percent  grade  flags  status  threshold",
            "test_agent.py::test_sloppy   *40/100  *40%  F  *5  below   below (report) 75% (B)",
            "test_agent.py::test_decent   *75/100  *75%  B  *2  passed  ok 75% (B)",
            "test_agent.py::test_perfect  100/100  *100%  A  *0  passed  ok 75% (B)",
            "run grade C: mean 71.67% over 3 graded tests (1 below)",
            "gate passed: mean 71.67% reaches 60% (C)",
        ]
    )
    assert "test_plain" not in result.stdout.str().split("cleo-grade")[-1]


def test_quiet_mode_keeps_the_summary_to_one_line(pytester: pytest.Pytester) -> None:
    make_suite(pytester, THREE_AGENTS)
    result = pytester.runpytest("-q", "--cleo-grade-gate=B")
    lines = [line for line in result.outlines if "cleo-grade" in line or "graded" in line]
    assert lines == [
        "cleo-grade: run grade C: mean 71.67% over 3 graded tests;"
        " gate FAILED: mean 71.67% is below 75% (B)"
    ]


@pytest.mark.parametrize(
    ("gate", "status", "verdict"),
    [
        pytest.param("71.67", 1, "gate FAILED: mean 71.66% is below 71.67% (C)", id="just-below"),
        pytest.param("71.66", 0, "gate passed: mean 71.67% reaches 71.66% (C)", id="just-reached"),
        pytest.param("B", 1, "gate FAILED: mean 71.67% is below 75% (B)", id="letter-below"),
        pytest.param("D", 0, "gate passed: mean 71.67% reaches 45% (D)", id="letter-reached"),
    ],
)
def test_the_gate_sets_the_exit_status_with_the_same_predicate_as_the_verdict(
    pytester: pytest.Pytester, gate: str, status: int, verdict: str
) -> None:
    # The exact mean is 71.666...%: below a 71.67 gate, where it is shown cut to 71.66.
    make_suite(pytester, THREE_AGENTS, f"cleo_grade_gate = {gate}")
    result = pytester.runpytest()
    result.assert_outcomes(passed=4)
    assert result.ret == status
    result.stdout.fnmatch_lines([verdict])


def test_the_gate_at_exactly_the_mean_passes(pytester: pytest.Pytester) -> None:
    make_suite(pytester, "def test_b(graded_session):\n    seventy_five(graded_session)\n")
    result = pytester.runpytest("--cleo-grade-gate=B")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["gate passed: mean 75% reaches 75% (B)"])


def test_the_command_line_gate_beats_the_ini_gate(pytester: pytest.Pytester) -> None:
    make_suite(pytester, THREE_AGENTS, "cleo_grade_gate = A")
    assert pytester.runpytest("--cleo-grade-gate=D").ret == 0


def test_a_gate_with_no_graded_tests_says_so_and_keeps_the_exit_status(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, "def test_plain():\n    pass\n")
    result = pytester.runpytest("--cleo-grade-gate=A")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["gate 90% (A): not applied, no graded tests"])


def test_the_github_step_summary_gets_the_same_table_in_markdown(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "step-summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    make_suite(pytester, THREE_AGENTS)
    pytester.runpytest("--cleo-grade-gate=B")
    text = summary.read_text()
    # Appended after a blank line: a block of its own whatever the file ended with.
    assert text.startswith("earlier step\n\n### cleo-grade\n")
    assert "| Test | Score | Percent | Grade | Flags | Status | Threshold |" in text
    assert "| `test_agent.py::test_sloppy` | 40/100 | 40% | F | 5 | passed | - |" in text
    assert "| `test_agent.py::test_perfect` | 100/100 | 100% | A | 0 | passed | - |" in text
    assert "**Run grade C: mean 71.67% over 3 graded tests**" in text
    assert "**Gate FAILED: mean 71.67% is below 75% (B)**" in text


def test_history_and_grades_table_get_one_schema_valid_grade_per_graded_test(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, THREE_AGENTS)
    pytester.runpytest().assert_outcomes(passed=4)
    raw = (pytester.path / ".cleo" / "metrics" / "GRADES.jsonl").read_text().splitlines()
    schema = json.loads(SCHEMA.read_text())
    for line in raw:
        jsonschema.validate(json.loads(line), schema)
    test_ids = [json.loads(line)["testId"] for line in raw]
    assert test_ids == [
        "test_agent.py::test_sloppy",
        "test_agent.py::test_decent",
        "test_agent.py::test_perfect",
    ]
    with AuditStore(pytester.path / ".cleo" / "audit.db") as store:
        stored = store.grades()
    assert sorted(g.session_id for g in stored) == sorted(json.loads(x)["sessionId"] for x in raw)


def test_db_and_history_options_and_ini_keys_move_the_storage(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        "def test_b(graded_session):\n    seventy_five(graded_session)\n",
        "cleo_grade_db = ini-store/audit.db\ncleo_grade_history = ini-store/grades.jsonl\n",
    )
    pytester.runpytest().assert_outcomes(passed=1)
    assert (pytester.path / "ini-store" / "audit.db").is_file()
    pytester.runpytest(
        "--cleo-grade-db=cli/a.db", "--cleo-grade-history=cli/h.jsonl"
    ).assert_outcomes(passed=1)
    assert (pytester.path / "cli" / "a.db").is_file()
    assert len((pytester.path / "cli" / "h.jsonl").read_text().splitlines()) == 1
    assert len((pytester.path / "ini-store" / "grades.jsonl").read_text().splitlines()) == 1
    assert not (pytester.path / ".cleo").exists()


def test_an_unwritable_history_is_a_warning_and_changes_no_outcome(
    pytester: pytest.Pytester,
) -> None:
    # A regular file where a directory should be fails for every user, root included.
    (pytester.path / "blocked").write_text("not a directory")
    make_suite(pytester, THREE_AGENTS)
    result = pytester.runpytest("--cleo-grade-history=blocked/GRADES.jsonl")
    result.assert_outcomes(passed=4, warnings=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*CleoGradeWarning: cleo-grade: grade history not written: *blocked*"]
    )
    with AuditStore(pytester.path / ".cleo" / "audit.db") as store:
        assert len(store.grades()) == 3


def test_an_unwritable_audit_store_falls_back_to_a_private_one_with_a_warning(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "blocked").write_text("not a directory")
    make_suite(
        pytester,
        "@pytest.mark.cleo_grade(fail_under='B')\n"
        "def test_b(graded_session):\n    seventy_five(graded_session)\n",
    )
    result = pytester.runpytest("--cleo-grade-db=blocked/audit.db")
    result.assert_outcomes(passed=1, warnings=2)
    result.stdout.fnmatch_lines(
        [
            "*CleoGradeWarning: cleo-grade: *blocked*recording this test into *audit.db instead",
            "test_agent.py::test_b  *75/100*",
            "*CleoGradeWarning: cleo-grade: grades table not written: *blocked*",
        ]
    )
    assert len((pytester.path / ".cleo" / "metrics" / "GRADES.jsonl").read_text().splitlines())


def test_storage_warnings_do_not_crash_a_run_that_turns_warnings_into_errors(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "blocked").write_text("not a directory")
    make_suite(pytester, THREE_AGENTS, warnings="error")
    result = pytester.runpytest("--cleo-grade-history=blocked/GRADES.jsonl")
    result.assert_outcomes(passed=4)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["CleoGradeWarning: cleo-grade: grade history not written: *"])


def test_an_unwritable_audit_store_keeps_the_test_passing_when_warnings_are_errors(
    pytester: pytest.Pytester,
) -> None:
    (pytester.path / "blocked").write_text("not a directory")
    make_suite(
        pytester,
        "def test_b(graded_session):\n    seventy_five(graded_session)\n",
        warnings="error",
    )
    result = pytester.runpytest("--cleo-grade-db=blocked/audit.db")
    result.assert_outcomes(passed=1, warnings=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*CleoGradeWarning: cleo-grade: *blocked*recording this test into *audit.db instead",
            "test_agent.py::test_b  *75/100*",
        ]
    )


def _normalised(lines: list[str]) -> list[str]:
    # Plugin list and durations legitimately differ between two runs.
    return [
        re.sub(r" in [0-9.]+s", " in Ns", line) for line in lines if not line.startswith("plugins:")
    ]


def test_a_suite_that_never_uses_the_fixture_runs_unchanged_and_creates_no_cleo_dir(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        @pytest.mark.parametrize("n", range(3))
        def test_plain(n):
            assert n < 2
        """,
    )
    with_plugin = pytester.runpytest("-rA")
    without = pytester.runpytest("-rA", "-p", "no:cleo_grade")
    assert _normalised(with_plugin.outlines) == _normalised(without.outlines)
    assert with_plugin.ret == without.ret == 1
    assert not (pytester.path / ".cleo").exists()


def test_disabling_the_plugin_removes_the_fixture_and_the_options(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, "def test_b(graded_session):\n    seventy_five(graded_session)\n")
    result = pytester.runpytest("-p", "no:cleo_grade")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'graded_session' not found*"])
    assert not (pytester.path / ".cleo").exists()
    usage = pytester.runpytest("-p", "no:cleo_grade", "--cleo-grade-gate=B")
    assert usage.ret == pytest.ExitCode.USAGE_ERROR


@pytest.mark.e2e
def test_loading_the_plugin_imports_neither_pydantic_nor_sqlite(tmp_path: Path) -> None:
    # pytest loads the plugin in every run wherever it is installed; unused, it must be cheap.
    code = (
        "import sys, pytest_cleo_grade.plugin\n"
        "print(sorted(m for m in ('pydantic', 'sqlite_utils', 'sqlite3') if m in sys.modules))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert completed.stdout.strip() == "[]"


@pytest.mark.e2e
def test_a_run_that_grades_nothing_loads_neither_pydantic_nor_sqlite(tmp_path: Path) -> None:
    # Configuring the plugin (its reporter, the shared store) must stay lazy for a whole run.
    (tmp_path / "conftest.py").write_text(
        "import sys\n"
        "def pytest_unconfigure(config):\n"
        "    heavy = ('pydantic', 'sqlite_utils', 'sqlite3')\n"
        "    loaded = sorted(m for m in heavy if m in sys.modules)\n"
        "    plugin = 'pytest_cleo_grade.plugin' in sys.modules\n"
        "    open('loaded.txt', 'w').write(repr((plugin, loaded)))\n"
    )
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert 1 + 1 == 2\n")
    # Only this plugin (and pytest-html, whose columns it adds): others installed beside it
    # (langsmith's, with the langchain extra) may load pydantic themselves.
    subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"),
            *("-p", "html", "-p", "cleo_grade"),
        ],
        cwd=tmp_path,
        capture_output=True,
        check=True,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
    )
    assert (tmp_path / "loaded.txt").read_text() == "(True, [])"
    assert not (tmp_path / ".cleo").exists()


def test_the_plugin_and_the_cli_share_one_default_history_path() -> None:
    from pytest_cleo_grade.cli import common

    assert history.DEFAULT_HISTORY is common.DEFAULT_HISTORY is settings.DEFAULT_HISTORY


RERUN_CONFTEST = """
import pytest
from _pytest.runner import runtestprotocol

@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    # What rerun plugins do: run the same item again within one session.
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    runtestprotocol(item, nextitem=nextitem, log=True)
    runtestprotocol(item, nextitem=nextitem, log=True)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True
"""


def test_a_test_run_twice_in_one_session_is_stored_and_reported_once_with_its_final_grade(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(RERUN_CONFTEST)
    make_suite(
        pytester,
        """
        attempts = []

        def test_flaky(graded_session):
            attempts.append(1)
            (forty if len(attempts) == 1 else perfect)(graded_session)
        """,
    )
    result = pytester.runpytest("--junitxml=out.xml")
    result.stdout.fnmatch_lines(["test_agent.py::test_flaky  100/100 *", "run grade A: *"])
    [line] = (pytester.path / ".cleo" / "metrics" / "GRADES.jsonl").read_text().splitlines()
    assert json.loads(line)["totalScore"] == 100
    props = properties(junit_cases(pytester.path / "out.xml")["test_flaky"])
    assert [value for name, value in props if name == "cleo_grade"] == ["A"]
    assert len(props) == 12


@pytest.mark.parametrize("where", ["directory", "/dev/zero", "/dev/full"])
def test_an_unwritable_github_step_summary_is_a_warning(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # A device was read to its end before appending: /dev/zero without end, /dev/full hung.
    summary = str(pytester.path) if where == "directory" else where
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", summary)
    make_suite(pytester, THREE_AGENTS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=4, warnings=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*CleoGradeWarning: cleo-grade: GITHUB_STEP_SUMMARY not written*"])
