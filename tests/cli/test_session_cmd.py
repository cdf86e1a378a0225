"""``cleo-grade session start`` / ``session end``: graded sessions for shell-driven agents."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.store import AuditStore

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "shell" / "graded_agent.sh"
BIN = Path(sys.executable).parent
VARIABLES = ("CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID", "CLEO_SESSION_ID", "CLEO_AUDIT_DB")


@pytest.fixture(autouse=True)
def _no_session_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The CLI in this process."""
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


def shell(program: str, script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        [program, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def history_lines(cwd: Path) -> list[dict[str, object]]:
    path = cwd / ".cleo" / "metrics" / "GRADES.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def start(cwd: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> dict[str, str]:
    """Start a graded session and put its variables in this process's environment."""
    done = run("session", "start", "--grade", "--json", *extra, cwd=cwd)
    assert done.returncode == 0, done.stderr
    env: dict[str, str] = json.loads(done.stdout)["env"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return env


@pytest.mark.e2e
@pytest.mark.parametrize("program", ["bash", "zsh", "sh"])
def test_eval_of_session_start_sets_the_four_variables_in_the_shell(
    tmp_path: Path, program: str
) -> None:
    if shutil.which(program) is None:
        pytest.skip(f"{program} is not installed on this machine")
    # A store path a shell must have quoted: spaces, a quote, a dollar sign.
    db = tmp_path / "it's a $HOME store" / "audit.db"
    script = (
        f'eval "$(cleo-grade session start --grade --db {shlex.quote(str(db))})" && '
        'printf "%s\\n" "$CLEO_SESSION_GRADE" "$CLEO_SESSION_GRADE_ID" "$CLEO_SESSION_ID" '
        '"$CLEO_AUDIT_DB"'
    )
    done = shell(program, script, tmp_path)
    assert done.returncode == 0, done.stderr
    grade, grade_id, session_id, store = done.stdout.splitlines()
    assert (grade, store) == ("true", str(db))
    assert grade_id == session_id and session_id.startswith("session-")
    assert db.is_file()  # created: the first record goes the fast way
    assert done.stderr.strip() == f"cleo-grade: graded session {session_id} started (store {db})"


def test_session_start_json_names_the_session_its_variables_scope_and_name(
    tmp_path: Path,
) -> None:
    done = run(
        "session", "start", "--grade", "--json", "--scope", "epic:T001", "--name", "Feature work",
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0
    data = json.loads(done.stdout)
    db = str(tmp_path / ".cleo" / "audit.db")
    assert data == {
        "sessionId": data["sessionId"],
        "grade": True,
        "db": db,
        "env": {
            "CLEO_SESSION_GRADE": "true",
            "CLEO_SESSION_GRADE_ID": data["sessionId"],
            "CLEO_SESSION_ID": data["sessionId"],
            "CLEO_AUDIT_DB": db,
        },
        "scope": "epic:T001",
        "name": "Feature work",
    }
    started = (tmp_path / ".cleo" / "audit.db.sessions").read_text().splitlines()
    assert [json.loads(line)["sessionId"] for line in started] == [data["sessionId"]]


def test_a_session_without_grade_mode_clears_an_earlier_graded_sessions_variables(
    tmp_path: Path,
) -> None:
    done = run("session", "start", cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert [line.split("=")[0] for line in lines[:2]] == [
        "export CLEO_SESSION_ID",
        "export CLEO_AUDIT_DB",
    ]
    assert lines[2:] == ["unset CLEO_SESSION_GRADE CLEO_SESSION_GRADE_ID"]
    assert "not graded: mutations only" in done.stderr


def test_session_end_grades_the_current_session_into_the_history_and_gates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = start(tmp_path, monkeypatch)
    for call in (["session", "list"], ["tasks", "find"], ["session", "end"]):
        assert run("record", *call, "--gateway", "cleo_query", cwd=tmp_path).returncode == 0
    below = run("session", "end", "--fail-under", "A", cwd=tmp_path)
    assert below.returncode == 1
    assert below.stdout.startswith(f"Session:    {env['CLEO_SESSION_ID']}\nScore:      85/100")
    assert below.stderr == "cleo-grade: FAIL: 85% (B) is below 90% (A)\n"
    (line,) = history_lines(tmp_path)
    assert (line["sessionId"], line["totalScore"]) == (env["CLEO_SESSION_ID"], 85)
    with AuditStore(tmp_path / ".cleo" / "audit.db", read_only=True) as store:
        assert [g.total_score for g in store.grades(env["CLEO_SESSION_ID"])] == [85]
    # As `grade` prints it, JSON too; --no-save adds nothing.
    again = run("session", "end", env["CLEO_SESSION_ID"], "--json", "--no-save", cwd=tmp_path)
    graded = run("grade", env["CLEO_SESSION_ID"], "--json", "--no-save", cwd=tmp_path)
    assert again.returncode == graded.returncode == 0
    mine, theirs = json.loads(again.stdout), json.loads(graded.stdout)
    assert {**mine, "timestamp": None} == {**theirs, "timestamp": None}
    assert mine["grade"] == "B" and len(history_lines(tmp_path)) == 1


def test_a_started_session_without_calls_is_graded_as_an_empty_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(tmp_path, monkeypatch)
    done = run("session", "end", "--json", cwd=tmp_path)
    assert done.returncode == 0
    assert json.loads(done.stdout)["flags"] == [
        "No audit entries found for session (use --grade flag when starting session)"
    ]
    assert len(history_lines(tmp_path)) == 1


def test_ending_a_session_nobody_started_is_not_found_and_saves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    start(tmp_path, monkeypatch)
    done = run("session", "end", "session-typo", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (4, "")
    assert done.stderr == (
        f"cleo-grade session end: session session-typo not found in "
        f"{tmp_path / '.cleo' / 'audit.db'} (nothing saved)\n"
    )
    assert history_lines(tmp_path) == []


def test_session_end_without_a_session_says_how_to_start_one(tmp_path: Path) -> None:
    done = run("session", "end", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "CLEO_SESSION_GRADE_ID is not set" in done.stderr
    assert 'eval "$(cleo-grade session start --grade)"' in done.stderr


def test_session_end_without_a_store_is_not_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CLEO_SESSION_GRADE_ID", "session-1")
    done = run("session", "end", cwd=tmp_path)
    assert done.returncode == 4
    assert "no audit store at" in done.stderr
    assert not (tmp_path / ".cleo").exists()


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [("--scope", "", "--scope is empty"), ("--name", "x" * 501, "longer than 500")],
)
def test_a_bad_scope_or_name_is_one_line_and_starts_nothing(
    tmp_path: Path, option: str, value: str, why: str
) -> None:
    done = run("session", "start", "--grade", option, value, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert why in done.stderr and done.stderr.count("\n") == 1
    assert not (tmp_path / ".cleo").exists()


def test_session_alone_asks_for_an_action(tmp_path: Path) -> None:
    done = run("session", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == "cleo-grade session: choose an action: start or end\n"


def test_session_end_grades_with_the_rubric_its_stored_grade_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = start(tmp_path, monkeypatch)
    for call in (["tasks", "find"], ["tasks", "show"]):
        assert run("record", *call, "--gateway", "cleo_query", cwd=tmp_path).returncode == 0
    rules = run("session", "end", "--rubric", "rules", "--json", cwd=tmp_path)
    assert rules.returncode == 0, rules.stderr
    assert json.loads(rules.stdout)["rubric"] == "rules"
    # The latest stored grade names the rules rubric: ending again, unasked, uses it.
    again = run("session", "end", "--json", "--no-save", cwd=tmp_path)
    assert json.loads(again.stdout)["rubric"] == "rules"
    assert env["CLEO_SESSION_ID"] == json.loads(again.stdout)["sessionId"]


@pytest.mark.e2e
@pytest.mark.parametrize(("threshold", "status"), [("A", 0), ("95", 1)])
def test_the_shell_agent_example_exits_as_its_gate_says(
    tmp_path: Path, threshold: str, status: int
) -> None:
    done = shell("bash", f"bash {EXAMPLE} {threshold}", tmp_path)
    assert done.returncode == status, done.stderr
    assert "Score:      90/100  (90%, grade A)" in done.stdout
    assert "No admin.help or skill lookup calls" in done.stdout
    (line,) = history_lines(tmp_path)
    assert (line["totalScore"], line["entryCount"]) == (90, 6)
    if status:
        assert done.stderr.endswith("cleo-grade: FAIL: 90% (A) is below 95% (A)\n")


def test_the_cli_pages_session_transcript_is_real_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = (ROOT / "docs" / "cli.md").read_text()
    block = page.split('$ eval "$(cleo-grade session start --grade --scope epic:T001)"\n', 1)[1]
    block = block.split("\n```", 1)[0]
    commands = [line[2:] for line in block.splitlines() if line.startswith("$ ")]
    shown = block.split(commands[-1] + "\n", 1)[1].splitlines()
    start(tmp_path, monkeypatch, "--scope", "epic:T001")
    for command in commands[:-1]:
        assert run(*shlex.split(command)[1:], cwd=tmp_path).returncode == 0
    end = shlex.split(commands[-1].split(";")[0])
    done = run(*end[1:], cwd=tmp_path)
    real = [*done.stdout.splitlines(), f"exit {done.returncode}"]

    def normal(lines: list[str]) -> list[str]:
        return [
            re.sub(r"session-\d+-[0-9a-f]+", "S", re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "T", line))
            for line in lines
        ]

    assert normal(real) == normal(shown)


@pytest.mark.e2e
def test_the_example_stops_at_a_start_that_failed(tmp_path: Path) -> None:
    # A directory where the sessions file goes: the start fails, and set -e stops the script
    # before the agent runs ungraded.
    (tmp_path / ".cleo" / "audit.db.sessions").mkdir(parents=True)
    done = shell("bash", f"bash {EXAMPLE} A", tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (
        f"cleo-grade: error: {tmp_path / '.cleo' / 'audit.db.sessions'}: Is a directory\n"
    )


def test_a_stored_grade_its_rubric_cannot_redo_stands_while_it_covers_the_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A trajectory marker's expected calls live in the test alone: its stored grade stands.
    from datetime import UTC, datetime

    from pytest_cleo_grade.core.models import DimensionScore, GradeResult

    env = start(tmp_path, monkeypatch)
    assert run("record", "tasks", "find", "--gateway", "cleo_query", cwd=tmp_path).returncode == 0
    stored = GradeResult(
        session_id=env["CLEO_SESSION_ID"], total_score=70, max_score=100,
        dimensions={"trajectory": DimensionScore(score=70, max=100, evidence=[])},
        timestamp=datetime(2026, 1, 1, tzinfo=UTC), entry_count=1, rubric="trajectory",
    )  # fmt: skip
    with AuditStore(tmp_path / ".cleo" / "audit.db") as store:
        store.add_grade(stored)
    kept = run("session", "end", "--json", "--no-save", cwd=tmp_path)
    assert kept.returncode == 0, kept.stderr
    assert (json.loads(kept.stdout)["totalScore"], json.loads(kept.stdout)["rubric"]) == (
        70,
        "trajectory",
    )
    # A call recorded since: the stored grade no longer covers the session, and says why.
    assert run("record", "tasks", "show", "--gateway", "cleo_query", cwd=tmp_path).returncode == 0
    redone = run("session", "end", "--no-save", cwd=tmp_path)
    assert (redone.returncode, redone.stdout) == (2, "")
    assert "trajectory" in redone.stderr and redone.stderr.count("\n") == 1
