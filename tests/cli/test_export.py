"""``cleo-grade junit``, ``cleo-grade query`` and ``--strict``: history out, MCP-style reads."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import read_grades
from tests.entries import model, sequence

CLI = "import sys; from pytest_cleo_grade.cli import main; sys.exit(main())"


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    return tmp_path


def store_session(session: str, *calls: tuple[str, str]) -> None:
    with AuditStore(Path(".cleo/audit.db")) as store:
        rows = sequence(*calls)
        for row in rows:
            row["sessionId"] = session
        store.append_many(model(r) for r in rows)


GOOD = (
    ("session", "list"),
    ("admin", "help"),
    ("tasks", "find"),
    ("tasks", "show"),
    ("session", "end"),
)
POOR = (("tasks", "list"), ("tasks", "list"))


def test_query_admin_grade_grades_from_the_store_and_saves_like_cleo(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store_session("good", *GOOD)
    assert main(["query", "admin", "grade", '{"sessionId": "good"}']) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["sessionId"], data["totalScore"], data["entryCount"]) == ("good", 100, 5)
    assert [g.session_id for g in read_grades(".cleo/metrics/GRADES.jsonl")] == ["good"]
    with AuditStore(Path(".cleo/audit.db"), read_only=True) as store:
        assert [g.session_id for g in store.grades()] == ["good"]


def test_query_admin_grade_of_an_unknown_session_warns_as_grade_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store_session("good", *GOOD)
    assert main(["query", "admin", "grade", '{"sessionId": "NOPE"}', "--no-save"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["entryCount"] == 0
    assert captured.err == "cleo-grade: warning: no audit entries found for session NOPE\n"


def test_query_admin_grade_list_prints_the_history_as_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store_session("good", *GOOD)
    store_session("poor", *POOR)
    assert main(["grade", "good"]) == 0
    assert main(["grade", "poor"]) == 0
    capsys.readouterr()
    assert main(["query", "admin", "grade.list"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(g["sessionId"], g["totalScore"]) for g in listed] == [("good", 100), ("poor", 50)]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["query", "admin", "grade", "{bad"], "PARAMS is not valid JSON"),
        (["query", "admin", "grade", "[1]"], "PARAMS must be a JSON object"),
        (["query", "admin", "grade", "{}"], 'admin grade needs params {"sessionId": "<id>"}'),
        (["query", "tasks", "find"], "unsupported operation 'tasks.find'"),
        (["query", "admin", "grade", '{"sessionId": "x"}'], "no audit store at"),
    ],
)
def test_bad_queries_are_one_line_usage_errors(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@pytest.mark.parametrize(
    "command", [["grade", "ghost"], ["query", "admin", "grade", '{"sessionId": "ghost"}']]
)
def test_strict_turns_an_unknown_session_into_exit_four_and_saves_nothing(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    store_session("good", *GOOD)
    assert main([*command, "--strict"]) == 4
    assert "session ghost not found" in capsys.readouterr().err
    assert read_grades(".cleo/metrics/GRADES.jsonl") == []
    with AuditStore(Path(".cleo/audit.db"), read_only=True) as store:
        assert store.grades() == []


@pytest.mark.parametrize(
    "argv",
    [
        ["grade", "\udcff"],
        ["grade", "--session-id", "\udcff", "--no-save"],
        ["list", "--session-id", "\udcff"],
        ["import", "x.jsonl", "--session-id", "\udcff"],
        ["query", "admin", "grade", '{"sessionId": "\udcff"}'],
    ],
)
def test_a_session_id_with_bytes_that_are_not_utf8_is_a_one_line_usage_error(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # A byte like 0xff in argv reaches Python as the lone surrogate U+DCFF.
    store_session("good", *GOOD)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not" in err
    assert read_grades(".cleo/metrics/GRADES.jsonl") == []


@pytest.mark.parametrize(
    "command", [["grade", "good"], ["query", "admin", "grade", '{"sessionId": "good"}']]
)
def test_a_history_that_cannot_be_written_saves_the_grade_nowhere(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, command: list[str]
) -> None:
    store_session("good", *GOOD)
    (in_tmp / "blocked").mkdir()
    assert main([*command, "--history", "blocked"]) == 2
    assert "blocked: cannot append grade" in capsys.readouterr().err
    with AuditStore(Path(".cleo/audit.db"), read_only=True) as store:
        assert store.grades() == []


@pytest.mark.e2e
@pytest.mark.parametrize("history", [".cleo/audit.db", "cleo.db"])
def test_a_history_naming_an_sqlite_database_is_refused_and_left_as_it_was(
    in_tmp: Path, history: str
) -> None:
    # The audit store as --history hung for ever (the history's lock waited on the store's,
    # held by the same command); any other database got a JSON line appended, exit 0.
    store_session("good", *GOOD)
    with AuditStore(in_tmp / "cleo.db") as other:
        assert other.grades() == []
    before = (in_tmp / history).read_bytes()
    done = subprocess.run(
        [sys.executable, "-c", CLI, "grade", "good", "--history", history],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stdout.startswith("Session:    good\n")  # printed, as ever; saved nowhere
    assert done.stderr.count("\n") == 1
    assert f"{history}: an SQLite database" in done.stderr
    assert (in_tmp / history).read_bytes() == before
    with AuditStore(Path(".cleo/audit.db"), read_only=True) as store:
        assert store.grades() == []


@pytest.mark.e2e
@pytest.mark.parametrize("command", [["list"], ["list", "--json"], ["show", "good"], ["good"]])
def test_output_that_cannot_be_written_is_one_line_and_exit_two(
    in_tmp: Path, command: list[str]
) -> None:
    # `> out.txt` on a full disk was a traceback with exit status 1, the status of a grade
    # below its threshold. /dev/full fails every write as a full disk does.
    store_session("good", *GOOD)
    assert main(["grade", "good"]) == 0
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-c", CLI, *command], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert (done.returncode, done.stderr) == (
        2,
        "cleo-grade: error: cannot write the output: No space left on device\n",
    )


def test_junit_writes_one_testcase_per_session_with_its_latest_grade(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store_session("good", *GOOD)
    store_session("poor", *POOR)
    for session in ("poor", "good", "poor"):
        assert main(["grade", session]) == 0
    assert main(["junit", "out/grades.xml", "--fail-under", "B"]) == 1
    assert capsys.readouterr().out.endswith("out/grades.xml: 2 session(s), 1 below the threshold\n")
    suite = ET.parse("out/grades.xml").getroot().find("testsuite")
    assert suite is not None
    cases = {case.get("name"): case for case in suite.iter("testcase")}
    assert list(cases) == ["poor", "good"]
    failure = cases["poor"].find("failure")
    assert failure is not None
    assert failure.get("message") == "50/100 (50%, grade D), 4 flag(s): below 75% (B)"
    assert "tasks.list used 2x (prefer tasks.find for discovery)" in (failure.text or "")
    assert cases["good"].find("failure") is None
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")


def test_junit_onto_a_directory_is_a_one_line_error_leaving_no_partial_file(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    store_session("good", *GOOD)
    assert main(["grade", "good"]) == 0
    (in_tmp / "out").mkdir()
    capsys.readouterr()
    assert main(["junit", "out"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert sorted(p.name for p in in_tmp.iterdir()) == [".cleo", "out"]


def test_junit_of_a_history_that_is_not_there_is_a_one_line_error_writing_nothing(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    # A misspelt --history wrote an empty JUnit file ("0 session(s)") with exit 0.
    assert main(["junit", "out.xml", "--history", "GRADE.jsonl"]) == 2
    assert capsys.readouterr().err == "cleo-grade junit: GRADE.jsonl: no grade history there\n"
    assert not (in_tmp / "out.xml").exists()


@pytest.mark.parametrize("content", ["", "{not json\n"])
def test_junit_fail_under_on_a_history_without_grades_says_it_was_not_applied(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, content: str
) -> None:
    # Zero test cases and exit 0, silently: a CI shows that as a gate passed. Exit 0 stays,
    # as for the run gate with no graded tests (docs/pytest.md), but it says so.
    (in_tmp / "h\x1b[2J.jsonl").write_text(content)
    assert main(["junit", "out.xml", "--history", "h\x1b[2J.jsonl", "--fail-under", "B"]) == 0
    err = capsys.readouterr().err.splitlines()
    # A warning about the history, in the form of the history's own (a corrupt line).
    assert err[-1] == (
        "cleo-grade: warning: h\\x1b[2J.jsonl: no grades: --fail-under 75% (B) not applied"
    )
    suite = ET.parse("out.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "0"
    assert main(["junit", "out.xml", "--history", "h\x1b[2J.jsonl"]) == 0
    assert "not applied" not in capsys.readouterr().err  # no gate asked for, none to skip


@pytest.mark.parametrize("command", [["junit", "out.xml", "--fail-under", "A"], ["list"]])
def test_an_sqlite_database_read_as_a_history_is_one_line_not_a_warning_per_page(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, command: list[str]
) -> None:
    # The store given as --history: 48 "invalid JSON" warnings, then a JUnit file of zero
    # test cases, exit 0 under --fail-under.
    store_session("good", *GOOD)
    assert main([*command, "--history", ".cleo/audit.db"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ".cleo/audit.db: an SQLite database" in err
    assert not (in_tmp / "out.xml").exists()


def test_junit_without_a_threshold_passes_and_can_write_to_stdout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store_session("poor", *POOR)
    assert main(["grade", "poor"]) == 0
    capsys.readouterr()
    assert main(["junit", "-"]) == 0
    root = ET.fromstring(capsys.readouterr().out)
    assert [c.get("name") for c in root.iter("testcase")] == ["poor"]
    assert root.find(".//failure") is None


@pytest.mark.parametrize(
    ("output", "history", "kept"),
    [
        (".cleo/grades.jsonl", ".cleo/grades.jsonl", ".cleo/grades.jsonl"),  # the history read
        (
            "out/../.cleo/grades.jsonl",
            ".cleo/grades.jsonl",
            ".cleo/grades.jsonl",
        ),  # spelt otherwise
        ("linked/grades.jsonl", ".cleo/grades.jsonl", ".cleo/grades.jsonl"),  # a linked directory
        ("history-link", "history-link", "history-link"),  # the link the history is read through
        (".cleo/grades.jsonl", "history-link", "history-link"),  # the file behind that link
        (".cleo/audit.db", ".cleo/grades.jsonl", ".cleo/audit.db"),  # the project's audit store
        (".cleo/audit.db-wal", ".cleo/grades.jsonl", ".cleo/audit.db-wal"),  # SQLite file beside it
    ],
)
def test_junit_never_replaces_the_history_or_the_store(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, output: str, history: str, kept: str
) -> None:
    store_session("good", *GOOD)
    assert main(["grade", "good"]) == 0
    (in_tmp / "linked").symlink_to(in_tmp / ".cleo")
    (in_tmp / "history-link").symlink_to(in_tmp / ".cleo" / "grades.jsonl")
    (in_tmp / ".cleo" / "audit.db-wal").write_bytes(b"")
    before = {p: p.read_bytes() for p in (in_tmp / ".cleo").iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["junit", output, "--history", history]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"cleo-grade junit: {output}: would replace the ")
    assert err.endswith(f"{kept}: nothing written\n") and err.count("\n") == 1
    assert {p: p.read_bytes() for p in (in_tmp / ".cleo").iterdir() if p.is_file()} == before
    assert (in_tmp / "history-link").is_symlink()


@pytest.mark.parametrize(
    ("odd", "escape"),
    [
        ("\ufffe", "\\ufffe"),
        ("\uffff", "\\uffff"),
        ("\x01", "\\u0001"),
        ("\x1b", "\\u001b"),
        # What XML holds but a terminal (`junit -`) or a CI's test list acts on.
        ("\x9b", "\\x9b"),
        ("\u202e", "\\u202e"),
    ],
)
def test_junit_holds_agent_text_xml_cannot_as_its_escape(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, odd: str, escape: str
) -> None:
    line = {
        "timestamp": "2026-03-01T12:00:00Z", "sessionId": f"s{odd}", "domain": "tasks",
        "operation": "add", "params": {"title": "a"}, "result": {"success": True},
        "metadata": {"taskId": f"T{odd}"},
    }  # fmt: skip
    (in_tmp / "x.jsonl").write_text(json.dumps(line) + "\n")
    assert main(["grade", "--entries", "x.jsonl", "--history", "h.jsonl"]) == 0
    assert main(["junit", "x.xml", "--history", "h.jsonl", "--fail-under", "A"]) == 1
    capsys.readouterr()
    (case,) = ET.parse("x.xml").getroot().iter("testcase")
    failure = case.find("failure")
    assert case.get("name") == f"s{escape}" and failure is not None
    assert f"tasks.add without description (taskId: T{escape})" in (failure.text or "")
