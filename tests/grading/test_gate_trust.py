"""The gate never lies: a test that cannot be graded fails, empty and skipped tests are not
silently graded, storage trouble never changes an outcome, and a killed run keeps its grades."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main as cli_main
from pytest_cleo_grade.core.errors import EntryError
from pytest_cleo_grade.core.models import non_finite_path
from pytest_cleo_grade.store import AuditStore
from tests.inner_runs import shared_pytester
from tests.plugin_suites import make_suite

HISTORY = Path(".cleo") / "metrics" / "GRADES.jsonl"


def history_lines(root: Path) -> list[dict[str, object]]:
    path = root / HISTORY
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- 1. non-finite numbers and ungradable sessions ----------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_param_is_refused_where_it_is_recorded(
    pytester: pytest.Pytester, value: float
) -> None:
    make_suite(
        pytester,
        f"""
        @pytest.mark.cleo_grade(fail_under="A")
        def test_agent(graded_session):
            perfect(graded_session)
            graded_session.record("tasks", "add", {{"title": "x", "c": float("{value}")}})
        """,
    )
    result = pytester.runpytest("--cleo-grade-gate=A")
    result.assert_outcomes(failed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*params: c is not a finite number*"])


SWALLOWED = """
from datetime import datetime
from pytest_cleo_grade.capture import audit
from pytest_cleo_grade.capture.mapping import Call, record_call

def careless(call):
    # Agent code that catches everything: the refused call must not vanish from the grade.
    try:
        call()
    except Exception:
        pass

@pytest.mark.cleo_grade(mode="{mode}")
def test_agent(graded_session):
    perfect(graded_session)
    {call}
"""

SWALLOWED_CALLS = {
    "fixture": 'careless(lambda: graded_session.record("tasks", "find", {"q": float("nan")}))',
    "dispatcher": (
        'graded_session.dispatcher.register("tasks", "find", lambda p: [])\n    '
        'careless(lambda: graded_session.dispatcher.query("tasks", "find", {"q": float("nan")}))'
    ),
    "audit": 'careless(lambda: audit.record("tasks", "find", {"q": float("nan")}))',
    # Stored, and then no reader could parse it back (Python's 4300-digit limit).
    "fixture-huge-int": 'careless(lambda: graded_session.record("tasks", "find", {"q": 10**5000}))',
    "audit-huge-int": 'careless(lambda: audit.record("tasks", "find", {"q": [1, -10**4300]}))',
    # A framework adapter warns instead of raising into the agent (here: an adapter bug, a
    # time without a timezone; it stores a NaN argument as text).
    "adapter": 'record_call(Call("tasks_find", started=datetime(2026, 3, 1)))',
}


@pytest.mark.parametrize("mode", ["fail", "report"])
@pytest.mark.parametrize("path", sorted(SWALLOWED_CALLS))
def test_a_call_that_could_not_be_recorded_fails_the_test_even_when_the_agent_caught_it(
    pytester: pytest.Pytester, path: str, mode: str
) -> None:
    make_suite(pytester, SWALLOWED.format(mode=mode, call=SWALLOWED_CALLS[path]))
    result = pytester.runpytest("-W", "ignore::pytest_cleo_grade.CleoGradeWarning")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: test_agent.py::test_agent: not every call of the test could be recorded, "
            "so its session is not graded on the rest*: "
            + (
                "tool call 'tasks_find': timestamp*"
                if path == "adapter"
                else "*q* is not a finite*"
            )
        ]
    )
    # Not graded: its history line says so, with no score that could count.
    [line] = history_lines(pytester.path)
    assert (line["cleoStatus"], line["dimensions"]) == ("ungradable", {})
    assert "not every call of the test could be recorded" in str(line["reason"])


@pytest.mark.parametrize(
    "call",
    [
        'graded_session.record("tasks", "find", ["x"])',
        'audit.record("tasks", "find", 42)',
        'graded_session.record("tasks", "find", metadata=["team"])',
    ],
    ids=["fixture-params", "audit-params", "fixture-metadata"],
)
def test_params_or_metadata_that_are_no_mapping_are_a_refused_call(
    pytester: pytest.Pytester, call: str
) -> None:
    # dict(["x"]) raised a bare ValueError the refusals never heard of: an agent that caught
    # it passed its test on the other calls.
    make_suite(pytester, SWALLOWED.format(mode="fail", call=f"careless(lambda: {call})"))
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*could be recorded*tasks.find: *: must be a mapping *"])


def test_the_non_finite_check_names_the_nested_place_and_survives_cycles() -> None:
    cycle: list[object] = [1.0]
    cycle.append(cycle)
    assert non_finite_path({"a": [1, {"b": float("nan")}]}) == ".a[1].b"
    assert non_finite_path({"ok": cycle, "s": "nan", "i": 10**30}) is None

    class Odd(float):
        pass

    assert non_finite_path({"flat": Odd("nan")}) == ".flat"
    # Integers up to Python's JSON digit limit are numbers; one digit more is not.
    assert non_finite_path({"i": 10**4300 - 1, "j": [-(10**4300 - 1)]}) is None
    assert non_finite_path({"i": 10**4300}) == ".i"
    assert non_finite_path({"a": {"b": [-(10**4300)]}}) == ".a.b[0]"


@pytest.mark.parametrize("mode", ["fail", "report"])
def test_a_session_that_cannot_be_read_fails_its_test_in_every_mode(
    pytester: pytest.Pytester, mode: str
) -> None:
    # Another process wrote a row no reader can parse (the shape a NaN used to leave).
    make_suite(
        pytester,
        """
        import sqlite3

        def test_agent(graded_session):
            perfect(graded_session)
            graded_session.flush()
            db = sqlite3.connect(graded_session.env["CLEO_AUDIT_DB"])
            db.execute(
                "UPDATE audit_log SET details_json = '{\\"params\\": NaN' WHERE session_id = ?",
                (graded_session.id,),
            )
            db.commit()
            db.close()
        """,
    )
    result = pytester.runpytest(f"--cleo-grade-mode={mode}", "--cleo-grade-gate=A")
    result.assert_outcomes(failed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*test_agent.py::test_agent: cannot grade with rubric cleo*"])


def test_importing_an_infinite_param_is_refused_with_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = tmp_path / "e.jsonl"
    entry = {
        "timestamp": "2026-01-01T00:00:00Z",
        "sessionId": "s1",
        "domain": "tasks",
        "operation": "find",
        "params": {"x": 1e999},
        "result": {"success": True, "exitCode": 0, "duration": 1},
    }
    entries.write_text(json.dumps(entry).replace("Infinity", "1e999") + "\n")
    db = tmp_path / "a.db"
    assert cli_main(["import", str(entries), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert "e.jsonl:1:" in err and "1e999 is out of range" in err
    assert "Traceback" not in err
    with AuditStore(db) as store:
        assert store.session_entries("s1") == []


# --- 2. nothing captured ------------------------------------------------------------------

EMPTY = """
def test_empty(graded_session):
    pass
"""


def test_a_test_that_captured_nothing_fails_saying_how_capture_works(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, EMPTY)
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*nothing was captured*cleo_grade(allow_empty=True)*"])
    [line] = history_lines(pytester.path)
    assert line["cleoStatus"] == "ungradable"
    assert "nothing was captured" in str(line["reason"])


@pytest.mark.parametrize(
    ("marker", "args", "ini"),
    [
        ("@pytest.mark.cleo_grade(allow_empty=True)\n", [], ""),
        ("", ["--cleo-grade-allow-empty"], ""),
        ("", [], "cleo_grade_allow_empty = true\n"),
    ],
    ids=["marker", "option", "ini"],
)
def test_allow_empty_grades_an_empty_session_zero_as_the_specification_does(
    pytester: pytest.Pytester, marker: str, args: list[str], ini: str
) -> None:
    make_suite(pytester, marker + EMPTY, ini=ini)
    pytester.runpytest(*args).assert_outcomes(passed=1)
    [line] = history_lines(pytester.path)
    assert (line["totalScore"], line["entryCount"]) == (0, 0)


def test_an_invalid_allow_empty_is_a_usage_error(pytester: pytest.Pytester) -> None:
    make_suite(pytester, "@pytest.mark.cleo_grade(allow_empty='yes')\n" + EMPTY)
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*cleo_grade(allow_empty=...): invalid value 'yes'*"])


# --- 3. skipped, xfailed and xpassed tests ------------------------------------------------

UNITTEST_SKIPS = """
import unittest

class Agent(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _session(self, graded_session):
        self.session = graded_session

    def test_graded(self):
        perfect(self.session)

    @unittest.skip("not today")
    def test_decorated(self):
        forty(self.session)

    def test_skip_test(self):
        forty(self.session)
        self.skipTest("changed its mind")

    @unittest.skipIf(True, "condition")
    def test_skip_if(self):
        forty(self.session)

@unittest.skip("whole class")
class Skipped(unittest.TestCase):
    @pytest.fixture(autouse=True)
    def _session(self, graded_session):
        self.session = graded_session

    def test_in_skipped_class(self):
        forty(self.session)
"""


def test_skipped_unittest_tests_are_never_graded_or_counted(pytester: pytest.Pytester) -> None:
    make_suite(pytester, UNITTEST_SKIPS)
    result = pytester.runpytest("--cleo-grade-gate=B")
    result.assert_outcomes(passed=1, skipped=4)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["run grade A: mean 100% over 1 graded test"])
    assert [line["totalScore"] for line in history_lines(pytester.path)] == [100]


def test_xfailed_and_xpassed_tests_are_shown_but_left_out_of_the_gate(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        def test_good(graded_session):
            perfect(graded_session)

        @pytest.mark.xfail(reason="known bad agent")
        def test_known_bad(graded_session):
            forty(graded_session)
            assert False

        @pytest.mark.xfail(reason="flaky")
        def test_unexpectedly_fine(graded_session):
            forty(graded_session)
        """,
    )
    result = pytester.runpytest("--cleo-grade-gate=B")
    result.assert_outcomes(passed=1, xfailed=1, xpassed=1)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*test_known_bad*40/100*xfailed, not counted",
            "*test_unexpectedly_fine*40/100*xpassed, not counted",
            "run grade A: mean 100% over 1 graded test (2 xfail/xpass not counted)",
            "gate passed*",
        ]
    )


def test_a_strict_xpass_is_left_out_of_the_gate_as_a_lenient_one_is(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        def test_good(graded_session):
            perfect(graded_session)

        @pytest.mark.xfail(reason="flaky", strict=True)
        def test_unexpectedly_fine(graded_session):
            forty(graded_session)
        """,
    )
    result = pytester.runpytest("--cleo-grade-gate=B")
    result.assert_outcomes(passed=1, failed=1)  # pytest fails a strict XPASS itself
    result.stdout.fnmatch_lines(
        [
            "*test_unexpectedly_fine*40/100*xpassed, not counted",
            "run grade A: mean 100% over 1 graded test (1 xfail/xpass not counted)",
            "gate passed*",
        ]
    )


# --- 5. storage trouble -------------------------------------------------------------------


def test_a_store_that_turns_read_only_changes_neither_the_grade_nor_the_outcome(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(fail_under="A")
        def test_agent(graded_session):
            # The store refuses writes from now on (what a full disk or a remount does).
            graded_session.store._conn.execute("PRAGMA query_only = ON")
            perfect(graded_session)
            assert len(graded_session.entries) == 5
        """,
    )
    result = pytester.runpytest("--junitxml=out.xml")
    # Two warnings: the entries, and (the same store refusing) the grades table.
    result.assert_outcomes(passed=1, warnings=2)
    result.stdout.fnmatch_lines(
        [
            "*CleoGradeWarning: cleo-grade: entries of session * not stored: *readonly*",
            "test_agent.py::test_agent  100/100*",
            "*CleoGradeWarning: cleo-grade: grades table not written: *readonly*",
        ]
    )
    assert history_lines(pytester.path)[0]["totalScore"] == 100


def test_entries_are_stored_once_in_one_transaction_when_the_test_is_graded(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
        import sqlite3

        def count(s):
            db = sqlite3.connect(s.env["CLEO_AUDIT_DB"])
            try:
                return db.execute(
                    "SELECT count(*) FROM audit_log WHERE session_id = ?", (s.id,)
                ).fetchone()[0]
            finally:
                db.close()

        def test_agent(graded_session):
            perfect(graded_session)
            assert count(graded_session) == 0  # held by the session until it is graded
            assert len(graded_session.entries) == 5
        """,
    )
    pytester.runpytest().assert_outcomes(passed=1)
    [line] = history_lines(pytester.path)
    with AuditStore(pytester.path / ".cleo" / "audit.db") as store:
        assert len(store.session_entries(str(line["sessionId"]))) == 5


# --- 4. concurrent creation of the store --------------------------------------------------

RECORDER = """
import sys
from pytest_cleo_grade.capture import audit
for i in range(int(sys.argv[1])):
    audit.record("tasks", "find", {"i": i}, gateway="cleo_query")
"""


@pytest.mark.e2e
def test_processes_creating_the_store_together_lose_no_entry(tmp_path: Path) -> None:
    db = tmp_path / "cold" / "audit.db"
    env = {
        **os.environ,
        "CLEO_AUDIT_DB": str(db),
        "CLEO_SESSION_GRADE": "true",
        "CLEO_SESSION_GRADE_ID": "s-cold",
        "PYTHONWARNINGS": "error",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RECORDER, "250"],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    errors = [proc.communicate(timeout=120)[1] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0, 0], errors
    assert errors == ["", "", "", ""]
    with AuditStore(db) as store:
        assert len(store.session_entries("s-cold")) == 1000


# --- 6. a killed run keeps the grades of finished tests -----------------------------------


@pytest.mark.e2e
def test_a_killed_run_keeps_the_grades_of_the_tests_that_finished(tmp_path: Path) -> None:
    (tmp_path / "suite_agents.py").write_text(
        textwrap.dedent(
            """
            def perfect(s):
                s.record("session", "list", gateway="cleo_query")
                s.record("admin", "help", gateway="cleo_query")
                s.record("tasks", "find", {"query": "x"}, gateway="cleo_query")
                s.record("session", "end", gateway="cleo_mutate")
            """
        )
    )
    (tmp_path / "test_killed.py").write_text(
        textwrap.dedent(
            """
            import os, signal
            from suite_agents import perfect

            def test_one(graded_session):
                perfect(graded_session)

            def test_two(graded_session):
                perfect(graded_session)

            def test_killed(graded_session):
                perfect(graded_session)
                os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:randomly", "test_killed.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -9, done.stdout
    lines = history_lines(tmp_path)
    assert [line["testId"] for line in lines] == [
        "test_killed.py::test_one",
        "test_killed.py::test_two",
    ]
    with closing(sqlite3.connect(tmp_path / ".cleo" / "audit.db")) as db:
        assert db.execute("SELECT count(*) FROM grades").fetchone()[0] == 2


def test_a_rerun_test_keeps_one_history_line_its_last_attempt(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest
        from _pytest.runner import runtestprotocol

        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_protocol(item, nextitem):
            item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
            for _ in range(3):
                runtestprotocol(item, nextitem=nextitem, log=True)
            item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
            return True
        """
    )
    make_suite(
        pytester,
        """
        attempts = []

        def test_flaky(graded_session):
            attempts.append(1)
            (perfect if len(attempts) == 3 else forty)(graded_session)
        """,
    )
    pytester.runpytest()
    assert [line["totalScore"] for line in history_lines(pytester.path)] == [100]


def test_entry_error_is_what_record_raises_for_a_nan(tmp_path: Path) -> None:
    from pytest_cleo_grade.grading.session import GradeSession, SessionSettings

    with GradeSession(SessionSettings(db_path=tmp_path / "a.db")) as session:
        with pytest.raises(EntryError, match=r"tasks\.add: params: c is not a finite number"):
            session.record("tasks", "add", {"c": float("nan")})
        assert session.entries == []


def test_pytest_rerunfailures_keeps_one_grade_the_last_attempts(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        """
        attempts = []

        @pytest.mark.cleo_grade(fail_under="A")
        def test_flaky(graded_session):
            attempts.append(1)
            (perfect if len(attempts) == 3 else forty)(graded_session)
        """,
    )
    result = pytester.runpytest("-p", "rerunfailures", "--reruns=2")
    assert result.parseoutcomes() == {"passed": 1, "rerun": 2}
    result.stdout.fnmatch_lines(["test_agent.py::test_flaky  100/100*", "run grade A: *"])
    assert [line["totalScore"] for line in history_lines(pytester.path)] == [100]


LATE_MARKERS = """
import os
import pytest

@pytest.fixture
def strict(request):
    # A fixture that sets the threshold: the marker arrives after collection.
    request.applymarker(pytest.mark.cleo_grade(fail_under="A"))

def test_applied_by_a_fixture(strict, graded_session):
    forty(graded_session)

def test_undone_by_monkeypatch(monkeypatch, graded_session):
    perfect(graded_session)
    monkeypatch.delenv("CLEO_SESSION_GRADE")

def test_ingest_caught(graded_session, tmp_path):
    perfect(graded_session)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\\n")
    try:
        graded_session.ingest(bad)
    except Exception:
        pass

def test_zz_after():
    assert [n for n in os.environ if n.startswith("CLEO_")] == []
"""


def test_markers_added_late_the_env_and_a_caught_ingest_cannot_make_the_gate_lie(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("CLEO_AUDIT_DB", "CLEO_SESSION_ID", "CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID"):
        monkeypatch.delenv(name, raising=False)
    make_suite(pytester, LATE_MARKERS)
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, failed=2)
    calls = [r for r in result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
    assert {r.nodeid.split("::")[-1]: r.outcome for r in calls} == {
        "test_applied_by_a_fixture": "failed",
        "test_undone_by_monkeypatch": "passed",
        "test_ingest_caught": "failed",
        "test_zz_after": "passed",
    }
    text = "\n".join(result.outlines)
    assert "is below the threshold 90% (A) set by @pytest.mark.cleo_grade" in text
    assert "not every call of the test could be recorded" in text
    assert "invalid JSON" in text


def test_a_marker_the_body_adds_and_a_body_that_calls_sys_exit_are_graded(
    pytester: pytest.Pytester,
) -> None:
    # A marker added in the body was ignored (a test below its own threshold passed, a bad
    # one passed silently); a body ending in sys.exit() failed with no grade recorded at all.
    make_suite(
        pytester,
        """
        import sys

        def test_body_marker(graded_session, request):
            request.applymarker(pytest.mark.cleo_grade(fail_under="A"))
            forty(graded_session)

        def test_body_bad_marker(graded_session, request):
            request.applymarker(pytest.mark.cleo_grade(fail_under="Z"))
            perfect(graded_session)

        def test_exits(graded_session):
            forty(graded_session)
            sys.exit(3)
        """,
    )
    result = pytester.runpytest("--junitxml=junit.xml")
    result.assert_outcomes(failed=3)
    text = "\n".join(result.outlines)
    assert "is below the threshold 90% (A) set by @pytest.mark.cleo_grade" in text
    assert "'Z'" in text
    result.stdout.fnmatch_lines(["*test_agent.py::test_exits *40/100*", "FAILED*SystemExit: 3*"])
    lines = history_lines(pytester.path)
    assert sorted(line["testId"].split("::")[-1] for line in lines) == [
        "test_body_marker",
        "test_exits",
    ]
    junit = (pytester.path / "junit.xml").read_text()
    assert junit.count('name="cleo_grade"') == 2


def test_a_threshold_marker_on_a_test_that_never_grades_is_a_warning(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
pytestmark = pytest.mark.cleo_grade(fail_under="B")  # covers every test: no warning

@pytest.mark.cleo_grade(fail_under="A")
def test_plain():
    pass

def test_also_plain():
    pass
""",
    )
    result = pytester.runpytest("-W", "error")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*test_agent.py::test_plain: @pytest.mark.cleo_grade on a test that did not use "
            "the graded_session fixture: nothing was graded, the marker had no effect"
        ]
    )


#: Tests that ask for their session with request.getfixturevalue, one run under xdist.
ASKED_FOR = """
@pytest.mark.cleo_grade(fail_under="C")
def test_dynamic_marked(request):
    perfect(request.getfixturevalue("graded_session"))

def test_dynamic(request):
    forty(request.getfixturevalue("graded_session"))

def test_dynamic_failing_on_its_own(request):
    perfect(request.getfixturevalue("graded_session"))
    assert False, "the agent crashed"
"""


@pytest.fixture(scope="module")
def asked_for(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[pytest.RunResult, Path]:
    """ASKED_FOR run once under xdist, warnings as errors (the marked test's ``fail_under`` beats
    the command line's B): the two tests below read its two sides. Shared because the run
    starts a worker process."""
    with shared_pytester(request, tmp_path_factory) as (pytester, _):
        make_suite(pytester, ASKED_FOR)
        result = pytester.runpytest("-W", "error", "--cleo-grade-fail-under=B", "-n", "1")
        return result, pytester.path


@pytest.mark.e2e
def test_a_marked_test_that_asks_for_its_session_itself_is_not_warned_about(
    asked_for: tuple[pytest.RunResult, Path],
) -> None:
    result, _ = asked_for
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.no_fnmatch_line("FAILED*test_dynamic_marked*")  # the one that passed
    assert "graded_session fixture" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*test_dynamic_marked *100/100*"])


@pytest.mark.e2e
def test_a_session_the_body_asks_for_is_graded_like_a_requested_one(
    asked_for: tuple[pytest.RunResult, Path],
) -> None:
    result, path = asked_for
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(
        ["*test_dynamic *40/100*", "*test_dynamic_failing_on_its_own *100/100*"]
    )
    # The two failures, in whichever order the workers finished them.
    result.stdout.fnmatch_lines(["FAILED test_agent.py::test_dynamic - *"])
    result.stdout.fnmatch_lines(["FAILED test_agent.py::test_dynamic_failing_on_its_own - *"])
    graded = sorted(str(line["testId"]).split("::")[-1] for line in history_lines(path))
    assert graded == ["test_dynamic", "test_dynamic_failing_on_its_own", "test_dynamic_marked"]


CHILD_AGENT = """
from pytest_cleo_grade.capture.audit import record

record("session", "list", gateway="cleo_query")
try:
    record("tasks", "list", {"limit": float("nan")}, gateway="cleo_query")
except Exception as exc:
    print("the child caught:", exc)
record("session", "end", gateway="cleo_mutate")
"""


@pytest.mark.e2e
def test_a_call_a_child_process_could_not_record_fails_its_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(child_agent=CHILD_AGENT)
    make_suite(
        pytester,
        """
import os, subprocess, sys

def test_child(graded_session):
    env = {**os.environ, **graded_session.subprocess_env()}
    subprocess.run([sys.executable, "child_agent.py"], env=env, check=True)

def test_other_session(graded_session):
    perfect(graded_session)
""",
    )
    result = pytester.runpytest("--cleo-grade-mode=report", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: test_agent.py::test_child: not every call of the test could be recorded, *"
            "tasks.list: params: limit is not a finite number*",
        ]
    )
    # The other test's session is not touched by the child's note.
    calls = [r for r in result.reprec.getreports("pytest_runtest_logreport") if r.when == "call"]
    assert {r.nodeid.split("::")[-1]: r.outcome for r in calls} == {
        "test_child": "failed",
        "test_other_session": "passed",
    }


UNSTORABLE_CHILD = """
import os
from pytest_cleo_grade.capture.audit import record

record("session", "list", gateway="cleo_query")
# A task id from a file name that is not UTF-8: no store can hold it. record()'s caller gets
# the error for its own bad argument; the test is told even though the agent swallows it.
try:
    record("tasks", "add", {"title": "x"}, task_id=os.fsdecode(b"T-\\xff"))
except Exception as exc:
    print("the child caught:", type(exc).__name__)
record("session", "end", gateway="cleo_mutate")
"""


@pytest.mark.e2e
def test_a_call_a_child_process_could_not_store_fails_its_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(child_agent=UNSTORABLE_CHILD)
    make_suite(
        pytester,
        """
import os, subprocess, sys

def test_child(graded_session):
    env = {**os.environ, **graded_session.subprocess_env()}
    subprocess.run([sys.executable, "child_agent.py"], env=env, check=True)
""",
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_child: not every call of the test could be recorded, *tasks.add not stored:*"
            "cannot store text that is not Unicode*",
        ]
    )


@pytest.mark.e2e
def test_a_call_a_shell_agent_could_not_record_fails_its_test(
    pytester: pytest.Pytester,
) -> None:
    # A quoting slip in --params: `cleo-grade record` said so on the child's stderr only, and
    # the test passed, graded on the other calls (losing a tasks.add raised its grade).
    cli = Path(sys.executable).parent / "cleo-grade"
    make_suite(
        pytester,
        f"""
import os, subprocess

def test_shell_agent(graded_session):
    env = {{**os.environ, **graded_session.subprocess_env()}}
    script = (
        "'{cli}' record session list --gateway cleo_query; "
        "'{cli}' record tasks add --gateway cleo_mutate "
        "--params '{{\\"title\\": \\"a \\"b\\" c\\"}}'"
    )
    subprocess.run(["sh", "-c", script], env=env, check=False)
""",
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_shell_agent: not every call of the test could be recorded, *: tasks.add "
            "(cleo-grade record): --params is not valid JSON*",
        ]
    )


@pytest.mark.e2e
def test_a_store_deleted_between_or_during_tests_never_hides_a_childs_call(
    pytester: pytest.Pytester,
) -> None:
    # The process kept writing to (and reading from) the deleted file, while children
    # recorded into the new one: the second of two identical tests passed at 100/100 with
    # the child's not-found out of its grade.
    pytester.makeconftest(
        """
import shutil, pytest

@pytest.fixture(autouse=True)
def fresh_cleo_project():
    shutil.rmtree(".cleo", ignore_errors=True)
    yield
"""
    )
    make_suite(
        pytester,
        """
import os, shutil, subprocess, sys

CHILD = (
    "from pytest_cleo_grade.capture.audit import record\\n"
    "record('tasks', 'show', {'taskId': 'T9'}, success=False, exit_code=4, error='not found')"
)

def child(graded_session):
    env = {**os.environ, **graded_session.subprocess_env()}
    subprocess.run([sys.executable, "-c", CHILD], env=env, check=True)

@pytest.mark.parametrize("run", [1, 2])
def test_agent(graded_session, run):
    perfect(graded_session)
    child(graded_session)

def test_resets_its_workspace(graded_session):
    perfect(graded_session)
    child(graded_session)
    shutil.rmtree(".cleo")
""",
    )
    result = pytester.runpytest("--cleo-grade-mode=report", "--cleo-grade-history=grades.jsonl")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*test_resets_its_workspace: cannot grade with rubric cleo: *audit.db: the audit "
            "store was deleted or replaced while the test ran*",
        ]
    )
    lines = [json.loads(line) for line in (pytester.path / "grades.jsonl").read_text().splitlines()]
    scores = {
        line["testId"].split("::")[-1]: (line["totalScore"], line["cleoStatus"]) for line in lines
    }
    assert scores == {
        "test_agent[1]": (95, "passed"),
        "test_agent[2]": (95, "passed"),
        "test_resets_its_workspace": (0, "ungradable"),
    }


def test_a_call_made_with_the_environment_cleared_is_still_the_tests(
    pytester: pytest.Pytester,
) -> None:
    # mock.patch.dict(os.environ, clear=True) in the body: record() found no session in the
    # environment and dropped the call, and the test passed without its failed lookup.
    make_suite(
        pytester,
        """
import os
from unittest import mock
from pytest_cleo_grade.capture.audit import audited

@audited("tasks", "show", gateway="cleo_query")
def tasks_show(task_id):
    raise KeyError(task_id)

def test_isolated_env(graded_session):
    perfect(graded_session)
    with mock.patch.dict(os.environ, {"PATH": os.environ["PATH"]}, clear=True):
        try:
            tasks_show("T404")
        except KeyError:
            pass
""",
    )
    result = pytester.runpytest("--cleo-grade-mode=report")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*test_isolated_env *95/100*"])


def test_calls_recorded_after_the_grade_are_said_to_be_in_no_grade(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        """
@pytest.fixture
def agent(graded_session):
    yield graded_session
    graded_session.record("session", "end", gateway="cleo_mutate")  # closing the agent

def test_closing_in_teardown(agent):
    agent.record("session", "list", gateway="cleo_query")
""",
    )
    result = pytester.runpytest("-W", "error")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*cleo-grade: test_agent.py::test_closing_in_teardown: 1 call was recorded after "
            "the test was graded (in a fixture's teardown, or by a child process still "
            "running, say): stored, but in no grade",
        ]
    )


LATE_CHILD = """
from pytest_cleo_grade.capture.audit import record

record("session", "end", gateway="cleo_mutate")
record("admin", "help", gateway="cleo_query")
"""


@pytest.mark.e2e
@pytest.mark.parametrize("workers", [[], ["-n", "1"]], ids=["serial", "xdist"])
def test_calls_a_child_process_records_after_the_grade_are_said_to_be_in_no_grade(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    pytester.makepyfile(late_child=LATE_CHILD)
    make_suite(
        pytester,
        """
import os, subprocess, sys

@pytest.fixture
def agent(graded_session):
    yield graded_session
    # The agent's worker process, still finishing when the test body returned.
    env = {**os.environ, **graded_session.subprocess_env()}
    subprocess.run([sys.executable, "late_child.py"], env=env, check=True)

def test_child_after_the_grade(agent):
    agent.record("session", "list", gateway="cleo_query")

def test_quiet_child(graded_session):
    env = {**os.environ, **graded_session.subprocess_env()}
    subprocess.run([sys.executable, "late_child.py"], env=env, check=True)
""",
    )
    result = pytester.runpytest("-W", "error", *workers)
    result.assert_outcomes(passed=2)
    text = "\n".join(result.outlines)
    assert "test_child_after_the_grade: 2 calls were recorded after the test was graded" in text
    assert "test_quiet_child: " not in text  # its child's calls were all graded


def test_an_interrupted_run_says_its_grade_covers_only_the_tests_that_finished(
    pytester: pytest.Pytester,
) -> None:
    # "gate passed: mean 100%" over the one test before a Ctrl-C read as the whole run's.
    make_suite(
        pytester,
        """
        def test_one(graded_session):
            perfect(graded_session)

        def test_two(graded_session):
            raise KeyboardInterrupt

        def test_three(graded_session):
            perfect(graded_session)
        """,
    )
    # In process, and the inner run's KeyboardInterrupt stays there (pytester re-raises it
    # into this run unless told not to).
    result = pytester.runpytest("--cleo-grade-gate=A", no_reraise_ctrlc=True)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*gate passed: mean 100% reaches 90% (A)*",
            "cleo-grade: the run was interrupted: its grade covers only the 1 graded test that "
            "finished",
        ]
    )
    finished = pytester.runpytest("--cleo-grade-gate=A", "-k", "one or three")
    finished.stdout.no_fnmatch_line("*the run was interrupted*")
