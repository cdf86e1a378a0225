"""``cleo-grade show``: every call beside the points it earned or lost, then every point."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.store import AuditStore
from tests.entries import entry

SESSION = [
    entry("tasks", "find", at=0),
    entry("session", "list", at=1),
    entry("tasks", "show", at=2, success=False, exit_code=4),
    entry("tasks", "list", at=3),
    entry("tasks", "add", at=4, params={"title": "Fix login"}, task_id="T9"),
    entry("tasks", "add", at=5, params={"title": "fix login ", "description": "d"}, task_id="T1"),
    entry("session", "end", at=6, gateway="cleo_mutate"),
]


def write(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_each_call_shows_the_rules_it_triggered_and_each_dimension_its_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, SESSION)
    assert main(["show", "--entries", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "session s1 (7 calls), rubric cleo"
    calls = {line.split()[0]: line for line in lines if line.startswith("#")}
    assert calls["#2"].split()[1:5] == [
        "2026-03-01T12:00:02.000Z",
        "tasks.show",
        "cleo_query",
        "exit",
    ]
    assert "errors.not_found -5;" in calls["#2"]
    assert "hygiene.description -5;" in calls["#4"]
    assert "errors.duplicates -5;" in calls["#5"]
    assert calls["#6"].endswith("session.end +10")
    start = lines.index("errorProtocol 10/20")
    assert lines[start + 1 : start + 4] == [
        "   +20 errors.start: Error protocol starts at 20",
        "    -5 errors.not_found: E_NOT_FOUND (tasks.show) with no tasks.find or tasks.exists "
        "in the next 4 calls [#2]",
        "    -5 errors.duplicates: 1 tasks.add call(s) repeat an earlier title (once per "
        "session) [#5]",
    ]
    assert "total 58/100 (58%, grade D)" in lines
    assert not (tmp_path / ".cleo").exists()  # show saves nothing


def stored_session(tmp_path: Path) -> Path:
    """A store holding SESSION (session s1)."""
    db = tmp_path / "audit.db"
    with AuditStore(db) as store:
        store.append_many(AuditEntry.model_validate(row) for row in SESSION)
    return db


def test_show_reads_the_audit_store_and_prints_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = stored_session(tmp_path)
    assert main(["show", "s1", "--db", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["grade"]["totalScore"] == 58
    assert [call["call"] for call in data["calls"]][:3] == [
        "tasks.find",
        "session.list",
        "tasks.show",
    ]
    rules = {p["rule"] for p in data["calls"][2]["points"]}
    assert rules == {"discovery.show", "errors.not_found", "disclosure.query"}


def test_agent_text_cannot_forge_lines_or_colours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hostile = entry("tasks", "add", params={"title": "x"}, task_id="T\x1b[31m\nforged")
    assert main(["show", "--entries", str(write(tmp_path, [hostile]))]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "(taskId: T\\x1b[31m\\nforged)" in out
    assert not any(line.startswith("forged") for line in out.splitlines())


def test_show_with_a_rule_file_explains_that_rubrics_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rules = tmp_path / "rules.toml"
    rules.write_text(
        '[[dimensions]]\nname = "safety"\nmax = 10\nstart = 10\n'
        '[[dimensions.rules]]\nid = "no_drop"\nkind = "forbidden"\n'
        'match = { calls = ["db.drop"] }\npoints = -10\nflag = "Dropped a table"\n',
        encoding="utf-8",
    )
    rows = [entry("db", "query", at=0), entry("db", "drop", at=1)]
    argv = ["show", "--entries", str(write(tmp_path, rows)), "--rubric", "rules"]
    assert main([*argv, "--rubric-file", str(rules)]) == 0
    out = capsys.readouterr().out
    assert "#1" in out and "no_drop -10" in out
    assert "   -10 no_drop: Dropped a table [#1]" in out
    assert "total 0/10 (0%, grade F)" in out


def test_an_unknown_session_in_the_store_shows_an_empty_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "nope", "--db", str(tmp_path / "missing.db")]) == 2
    assert "cleo-grade show: no audit store at" in capsys.readouterr().err


def test_the_failure_message_says_where_points_were_lost(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(fail_under="A")
        def test_agent(graded_session):
            graded_session.record("session", "list", gateway="cleo_query")
            graded_session.record("tasks", "add", {"title": "T"}, gateway="cleo_mutate")
        """
    )
    result = pytester.runpytest("--junitxml=out.xml")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*where points were lost (entry #: position in the session):",
            "*   0 sessionDiscipline session.end: session.end was never called",
            "*  -5 taskHygiene hygiene.description: tasks.add without a description*[[]#1]",
        ]
    )


def test_show_explains_the_grade_the_test_was_given(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    # A trajectory marker's expectations are in no file: only the stored grade explains it.
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(expect=["session.list"], mode="exact")
        def test_agent(graded_session):
            graded_session.record("session", "list", gateway="cleo_query")
            graded_session.record("tasks", "find", {"query": "x"}, gateway="cleo_query")
        """
    )
    pytester.runpytest().assert_outcomes(passed=1)
    db = pytester.path / ".cleo" / "audit.db"
    with AuditStore(db, read_only=True) as store:
        (session,) = store.session_ids()
        stored = store.grades(session)[-1]
    capsys.readouterr()
    assert main(["show", session, "--db", str(db)]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert shown[0] == f"session {session} (2 calls), rubric trajectory"
    total = f"total {stored.total_score:g}/100 ({stored.display_percent}%, grade {stored.letter})"
    assert total in shown
    # Asking for a rubric grades again with it.
    assert main(["show", session, "--db", str(db), "--rubric", "cleo"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("rubric cleo")
    # A call stored after the grade (an import, a record) would shift every position the
    # grade's points name: the session is graded again, and that is said.
    late = {**entry("tasks", "list", at=59), "sessionId": session}
    with AuditStore(db) as store:
        store.append_many([AuditEntry.model_validate(late)])
    assert main(["show", session, "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[0] == f"session {session} (3 calls), rubric cleo"
    assert err == (
        f"cleo-grade: warning: the stored grade of session {session} covers 2 entries and the "
        "session now holds 3: graded again\n"
    )


def test_a_session_the_store_does_not_hold_is_said_so_and_strict_makes_it_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A mistyped id printed a plausible 0/100 F, exit 0, "this rubric explains no points".
    db = stored_session(tmp_path)
    assert main(["show", "s2", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert err == "cleo-grade: warning: no audit entries found for session s2\n"
    assert out.splitlines()[:3] == [
        "session s2 (0 calls), rubric cleo",
        "",
        "(no calls: nothing to explain)",
    ]
    assert main(["show", "s2", "--db", str(db), "--strict"]) == 4
    out, err = capsys.readouterr()
    assert (out, err) == ("", "cleo-grade show: session s2 not found\n")
    assert main(["show", "s1", "--db", str(db), "--strict"]) == 0
    assert capsys.readouterr().err == ""
