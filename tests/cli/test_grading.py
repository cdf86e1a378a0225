"""``cleo-grade grade --entries`` and ``cleo-grade list``: output, history, errors, statuses."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from pytest_cleo_grade import read_grades
from pytest_cleo_grade.cli import main
from tests.entries import entry, sequence

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "grade.schema.json").read_text()
)


def write_jsonl(path: Path, entries: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def session_entries(session: str = "s1") -> list[dict[str, Any]]:
    entries = sequence(
        ("session", "list"),
        ("tasks", "find"),
        ("tasks", "list"),
        ("tasks", "show"),
        ("session", "end"),
    )
    for item in entries:
        item["sessionId"] = session
    return entries


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in this process (a subprocess proves nothing here and costs ~0.4 s a call)."""
    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            status = main(list(args))
    finally:
        os.chdir(previous)
    return subprocess.CompletedProcess(
        ["cleo-grade", *args], status, out.getvalue(), err.getvalue()
    )


@pytest.mark.e2e
def test_the_installed_command_runs_as_a_process(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", session_entries())
    exe = Path(sys.executable).with_name("cleo-grade")
    done = subprocess.run(
        [str(exe), "grade", "--entries", str(path), "--no-save"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")
    assert done.stdout.startswith("Session:    s1\nScore:      83/100  (83%, grade B)\n")


def test_grading_a_jsonl_file_prints_json_with_percent_and_grade(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", session_entries())
    done = run(
        "grade", "--entries", str(path), "--session-id", "s1", "--json", "--no-save", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert (data["totalScore"], data["percent"], data["grade"], data["entryCount"]) == (
        83,
        83,
        "B",
        5,
    )
    jsonschema.validate({k: v for k, v in data.items() if k not in {"percent", "grade"}}, SCHEMA)
    assert not (tmp_path / ".cleo").exists()


def test_grading_a_json_array_saves_to_the_default_history(tmp_path: Path) -> None:
    (tmp_path / "e.json").write_text(json.dumps(session_entries()), encoding="utf-8")
    done = run("grade", "--entries", "e.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Score:      83/100  (83%, grade B)" in done.stdout
    assert "  - tasks.list used 1x (prefer tasks.find for discovery)" in done.stdout
    saved = read_grades(tmp_path / ".cleo" / "metrics" / "GRADES.jsonl")
    assert [g.total_score for g in saved] == [83]


def test_a_file_with_several_sessions_needs_session_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", session_entries("a") + session_entries("b"))
    assert main(["grade", "--entries", str(path), "--no-save"]) == 2
    assert "holds 2 sessions (a, b); choose one with --session-id" in capsys.readouterr().err
    assert main(["grade", "--entries", str(path), "--session-id", "b", "--no-save", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sessionId"] == "b"


def test_an_unknown_session_id_is_not_found_unless_empty_sessions_are_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", session_entries("a"))
    history = tmp_path / "GRADES.jsonl"
    command = ["grade", "--entries", str(path), "--session-id", "zz", "--history", str(history)]
    assert main(command) == 4
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "cleo-grade grade: session zz not found: no audit entries for it "
        "(nothing saved; --allow-empty grades it 0/100)\n"
    )
    assert not history.exists()
    assert main([*command, "--no-save", "--json", "--allow-empty"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["totalScore"] == 0
    assert "warning: no audit entries found for session zz" in captured.err


def test_a_mistyped_command_is_not_graded_as_an_empty_session(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `cleo-grade ID` grades: `cleo-grade lsit` saved an F of an empty session "lsit".
    history = tmp_path / "GRADES.jsonl"
    db = tmp_path / "audit.db"
    assert (
        main(["import", str(write_jsonl(tmp_path / "e.jsonl", session_entries())), "--db", str(db)])
        == 0
    )
    capsys.readouterr()
    assert main(["lsit", "--db", str(db), "--history", str(history)]) == 2
    assert capsys.readouterr().err.endswith(
        "cleo-grade: no command 'lsit' and no entries for a session of that id; "
        "did you mean 'list'? (nothing saved)\n"
    )
    assert not history.exists()
    # Said in full (`cleo-grade grade ID`), the id is no typo: an empty session, graded
    # only when asked for.
    assert main(["grade", "lsit", "--db", str(db), "--history", str(history)]) == 4
    assert not history.exists()
    assert main(["grade", "lsit", "--db", str(db), "--history", str(history), "--allow-empty"]) == 0
    assert json.loads(history.read_text())["sessionId"] == "lsit"
    history.unlink()
    # A session of that name with entries is graded as before.
    assert (
        main(
            [
                "grade",
                "--entries",
                str(write_jsonl(tmp_path / "l.jsonl", session_entries("lsit"))),
                "--history",
                str(history),
            ]
        )
        == 0
    )
    assert len(history.read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        pytest.param("", "file is empty (no audit entries)", id="empty"),
        pytest.param("[]", "the JSON array is empty", id="empty-array"),
        pytest.param('{"a": 1', ":1: invalid JSON", id="broken-json"),
        pytest.param("[1]", "entry 0: expected a JSON object", id="not-an-object"),
        pytest.param(
            json.dumps(entry("tasks", "find")) + "\n" + json.dumps(entry("tasks", "find"))[:-1],
            ":2: invalid JSON",
            id="torn-second-line",
        ),
        # Python's own message would tell the reader to call sys.set_int_max_str_digits().
        pytest.param(
            '{"n": ' + "9" * 5000 + "}",
            ":1: invalid JSON: a number with more than 4300 digits",
            id="huge-number",
        ),
        pytest.param(
            '[{"n": ' + "9" * 5000 + "}]",
            ":1: invalid JSON: a number with more than 4300 digits",
            id="huge-number-in-an-array",
        ),
    ],
)
def test_bad_files_exit_two_with_one_line_naming_the_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(content, encoding="utf-8")
    history = tmp_path / "h.jsonl"
    assert main(["grade", "--entries", str(path), "--history", str(history)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and str(path) in err
    assert not history.exists()


def test_an_invalid_field_names_file_line_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = entry("tasks", "find")
    bad["timestamp"] = "2026-03-01T12:00:00"
    path = write_jsonl(tmp_path / "e.jsonl", [entry("tasks", "find"), bad])
    assert main(["grade", "--entries", str(path)]) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade: error: {path}:2: timestamp: Input should have timezone info\n"
    )


def test_nan_in_a_file_is_rejected(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "e.jsonl"
    path.write_text(json.dumps(entry("tasks", "find")).replace('"duration": 3', '"duration": NaN'))
    assert main(["grade", "--entries", str(path)]) == 2
    assert "NaN is not valid JSON" in capsys.readouterr().err


def test_fail_under_sets_exit_status_one_below_and_zero_at_the_threshold(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", session_entries())
    base = ["grade", "--entries", str(path), "--no-save"]
    assert main([*base, "--fail-under", "83"]) == 0
    assert main([*base, "--fail-under", "83.5%"]) == 1
    assert main([*base, "--fail-under", "A"]) == 1
    assert "FAIL: 83% (B) is below 90% (A)" in capsys.readouterr().err
    assert main([*base, "--fail-under", "B"]) == 0


def test_a_bad_fail_under_value_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grade", "--entries", "x", "--fail-under", "Q"]) == 2
    assert "--fail-under: invalid grade 'Q'" in capsys.readouterr().err


def test_unreadable_file_is_a_clean_error_without_traceback(tmp_path: Path) -> None:
    done = run("grade", "--entries", "missing.jsonl", cwd=tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr == "cleo-grade: error: missing.jsonl: cannot read: No such file or directory\n"
    )


def test_list_shows_the_history_and_seed_parity_forms_agree(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", session_entries("a") + session_entries("b"))
    for sid in ("a", "b"):
        assert (
            run("grade", "--entries", str(path), "--session-id", sid, cwd=tmp_path).returncode == 0
        )
    listing = run("list", cwd=tmp_path)
    assert listing.returncode == 0
    lines = listing.stdout.splitlines()
    assert lines[0].split() == ["SESSION", "SCORE", "PERCENT", "GRADE", "TIMESTAMP", "FLAGS"]
    assert [line.split()[:4] for line in lines[1:]] == [
        ["a", "83/100", "83%", "B"],
        ["b", "83/100", "83%", "B"],
    ]
    assert run("--list", cwd=tmp_path).stdout == listing.stdout
    assert run(cwd=tmp_path).stdout == listing.stdout
    # Options alone that listing takes list too (no session is named): CLEO's bare command.
    history = str(tmp_path / ".cleo" / "metrics" / "GRADES.jsonl")
    assert run("--history", history, cwd=tmp_path).stdout == listing.stdout
    assert [g["sessionId"] for g in json.loads(run("--json", cwd=tmp_path).stdout)] == ["a", "b"]
    # ...but an option only grading takes still asks for the session.
    missing = run("--fail-under", "A", cwd=tmp_path)
    assert (missing.returncode, missing.stderr.strip()) == (
        2, "cleo-grade grade: give SESSION_ID (or --entries FILE)"
    )  # fmt: skip
    as_json = json.loads(run("list", "--json", "--session-id", "b", cwd=tmp_path).stdout)
    assert [(g["sessionId"], g["grade"]) for g in as_json] == [("b", "B")]


def test_grade_with_no_session_and_grade_list_list_as_the_bare_command_does(
    tmp_path: Path,
) -> None:
    # The specification's CLI: `cleo grade --list`, and `cleo grade` with no session, list.
    path = write_jsonl(tmp_path / "e.jsonl", session_entries("a") + session_entries("b"))
    for sid in ("a", "b"):
        assert (
            run("grade", "--entries", str(path), "--session-id", sid, cwd=tmp_path).returncode == 0
        )
    listing = run("--list", cwd=tmp_path)
    assert listing.stdout.count("83/100") == 2
    assert run("grade", cwd=tmp_path).stdout == listing.stdout
    assert run("grade", "--list", cwd=tmp_path).stdout == listing.stdout
    assert (
        run("grade", "--list", "--json", cwd=tmp_path).stdout
        == run("list", "--json", cwd=tmp_path).stdout
    )
    # A session named with --list filters the listing (nothing is graded or saved).
    only_b = json.loads(run("grade", "b", "--list", "--json", cwd=tmp_path).stdout)
    assert [g["sessionId"] for g in only_b] == ["b"]
    history = tmp_path / ".cleo" / "metrics" / "GRADES.jsonl"
    assert len(history.read_text().splitlines()) == 2


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["grade", "--list", "--fail-under", "B"], "--list cannot be combined with --fail-under"),
        (["grade", "--list", "--entries", "e.jsonl"], "--list cannot be combined with --entries"),
        (["grade", "--fail-under", "B"], "give SESSION_ID (or --entries FILE)"),
    ],
)
def test_a_gate_without_a_session_is_never_taken_for_a_listing(
    tmp_path: Path, argv: list[str], text: str
) -> None:
    # `cleo-grade grade --fail-under B "$ID"` with an empty $ID must not pass as a listing.
    done = run(*argv, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert text in done.stderr


def test_list_warns_about_a_corrupt_line_and_shows_the_rest(tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    path = write_jsonl(tmp_path / "e.jsonl", session_entries())
    assert (
        run("grade", "--entries", str(path), "--history", str(history), cwd=tmp_path).returncode
        == 0
    )
    with history.open("a") as handle:
        handle.write("garbage\n")
    done = run("list", "--history", str(history), cwd=tmp_path)
    assert done.returncode == 0
    assert f"{history}:2: skipped corrupt grade line" in done.stderr
    assert "s1" in done.stdout


def test_listing_an_absent_history_says_so(tmp_path: Path) -> None:
    done = run("list", "--history", str(tmp_path / "none.jsonl"), cwd=tmp_path)
    assert done.stdout.startswith("No grades in ")


def test_listing_a_session_the_history_does_not_hold_names_the_session(tmp_path: Path) -> None:
    # "No grades in GRADES.jsonl" of a history holding grades read as an empty history.
    write_jsonl(tmp_path / "s1.jsonl", session_entries())
    history = tmp_path / "G.jsonl"
    assert (
        run("grade", "--entries", "s1.jsonl", "--history", str(history), cwd=tmp_path).returncode
        == 0
    )
    done = run("list", "--history", str(history), "--session-id", "nope", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, f"No grades of session nope in {history}\n")


def test_a_file_grades_as_its_import_does_when_calls_share_a_millisecond(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Listed find-then-show, timed show-then-find within one millisecond: the store keeps
    # milliseconds, so both readings order the calls as listed (the show's E_NOT_FOUND then
    # has no lookup after it), and grade alike.
    find = entry("tasks", "find")
    show = entry("tasks", "show", success=False, exit_code=4)
    find["timestamp"] = "2026-03-01T12:00:00.0009Z"
    show["timestamp"] = "2026-03-01T12:00:00.0001Z"
    path = write_jsonl(tmp_path / "t.jsonl", [find, show])
    monkeypatch.chdir(tmp_path)
    assert main(["grade", "--entries", str(path), "--json", "--no-save"]) == 0
    from_file = json.loads(capsys.readouterr().out)
    assert main(["import", str(path)]) == 0
    capsys.readouterr()
    assert main(["grade", "s1", "--json", "--no-save"]) == 0
    from_store = json.loads(capsys.readouterr().out)
    assert from_file["dimensions"]["errorProtocol"]["score"] == 15
    assert from_file["dimensions"] == from_store["dimensions"]
    assert from_file["points"] == from_store["points"]


def test_a_directory_where_the_store_should_be_is_named_as_such(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / ".cleo" / "audit.db"
    store.mkdir(parents=True)
    assert main(["grade", "s1", "--db", str(store)]) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade grade: {store}: not a regular file (a directory), so not an audit store\n"
    )


def refuse_grades(store: Path) -> None:
    """Make the store's grades table refuse every insert (a real SQLite failure; the tests
    run as root, which a read-only file would not stop)."""
    with sqlite3.connect(store) as conn:
        conn.execute(
            "CREATE TRIGGER refuse_grades BEFORE INSERT ON grades "
            "BEGIN SELECT RAISE(ABORT, 'grades refused'); END"
        )
    conn.close()


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_grades_table_that_cannot_be_written_saves_nowhere_and_still_shows_the_grade(
    tmp_path: Path, as_json: bool
) -> None:
    entries = write_jsonl(tmp_path / "e.jsonl", session_entries())
    store, history = tmp_path / "audit.db", tmp_path / "GRADES.jsonl"
    assert run("import", str(entries), "--db", str(store), cwd=tmp_path).returncode == 0
    saved = run("grade", "s1", "--db", str(store), "--history", str(history), cwd=tmp_path)
    assert saved.returncode == 0, saved.stderr
    before = history.read_bytes()
    refuse_grades(store)
    json_flag = ["--json"] if as_json else []
    for _ in range(2):  # a retry adds nothing either
        done = run(
            "grade", "s1", "--db", str(store), "--history", str(history), *json_flag, cwd=tmp_path
        )
        assert done.returncode == 2
        assert done.stderr.startswith(f"cleo-grade: error: {store}: cannot write")
        assert "grades refused" in done.stderr and len(done.stderr.splitlines()) == 1
        assert history.read_bytes() == before
        # The grade that was not saved is still shown.
        if as_json:
            assert json.loads(done.stdout)["sessionId"] == "s1"
        else:
            assert "Session:    s1" in done.stdout
    assert len(read_grades(history)) == 1
    with sqlite3.connect(store) as conn:
        assert conn.execute("SELECT count(*) FROM grades").fetchone() == (1,)
    conn.close()


@pytest.mark.parametrize(
    ("command", "extra"), [("grade", ["--no-save"]), ("grade", ["--rubric", "rules"]), ("show", [])]
)
def test_a_database_given_as_entries_is_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str, extra: list[str]
) -> None:
    # Its binary pages were "invalid JSON" at "line 1", which sent the user looking there.
    path = tmp_path / "audit.db"
    with sqlite3.connect(path) as made:
        made.execute("CREATE TABLE t (a TEXT)")
    made.close()
    before = path.read_bytes()
    history = tmp_path / "h.jsonl"
    argv = [command, "--entries", str(path), *extra]
    assert main([*argv, "--history", str(history)] if command == "grade" else argv) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade {command}: {path} is an SQLite database, not a JSON-lines entries file "
        "(--db reads an audit store, --cleo-db a CLEO database)\n"
    )
    assert path.read_bytes() == before and not history.exists()


def test_a_stored_number_past_pythons_digit_limit_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    # A row written elsewhere (a CLEO database, an older release): the params of a tasks.add
    # are read only when grading needs them, and json.loads raised there.
    entries = session_entries()
    entries[2].update(operation="add", params={"title": "t", "description": "d"})
    write_jsonl(tmp_path / "s1.jsonl", entries)
    assert run("import", "s1.jsonl", cwd=tmp_path).returncode == 0
    db = sqlite3.connect(tmp_path / ".cleo" / "audit.db")
    huge = '{"title": "t", "n": 1' + "0" * 5000 + "}"
    db.execute("UPDATE audit_log SET details_json = ? WHERE operation = 'add'", (huge,))
    db.commit()
    db.close()
    result = run("grade", "s1", "--no-save", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("cleo-grade: error: entry 3: params cannot be read: ")
