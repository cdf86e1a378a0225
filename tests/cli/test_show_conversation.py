"""`cleo-grade import` carries a transcript's conversation; `cleo-grade show` prints it with
the calls, in session order, and the weighted judge of `cleo-grade grade` reads it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.store import AuditStore
from tests.fake_judge import FakeJudgeServer, serve

TRANSCRIPT = (
    Path(__file__).resolve().parents[2] / "examples" / "sessions" / "claude-code-cleo.jsonl"
)
SESSION = "7f1c2a9e-3b4d-4e5f-8a6b-1c2d3e4f5a6b"


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    db = tmp_path / "audit.db"
    assert main(["import", "--format", "claude-code", str(TRANSCRIPT), "--db", str(db)]) == 0
    assert "Imported 8 entries, 10 messages into" in capsys.readouterr().out
    return db


def test_importing_twice_keeps_one_conversation(store: Path) -> None:
    assert main(["import", "--format", "claude-code", str(TRANSCRIPT), "--db", str(store)]) == 0
    with AuditStore(store, read_only=True) as audit:
        assert len(audit.session_conversation(SESSION).messages) == 10


def test_show_prints_the_conversation_between_the_calls(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", SESSION, "--db", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"session {SESSION} (8 calls, 10 messages), rubric cleo"
    body = out[2:]
    first_call = next(i for i, line in enumerate(body) if line.startswith("#0 "))
    assert "user:" in body[0] and "Fix the login bug (use CLEO)" in body[0]
    assert "assistant:" in body[1] and "[claude-sonnet-4-5, 120 in / 40 out]" in body[1]
    assert first_call == 2
    assert "output: Done: T10 tracks the redirect fix." in out
    assert "model calls: 9, tokens: 960 in (0 cached) / 320 out" in out


def test_show_json_carries_the_conversation(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", SESSION, "--db", str(store), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["conversation"]["messages"][0] == {
        "timestamp": "2026-03-01T12:00:00.000Z",
        "role": "user",
        "text": "Fix the login bug (use CLEO)",
    }
    assert data["conversation"]["output"] == "Done: T10 tracks the redirect fix."


@pytest.fixture
def judge() -> Iterator[FakeJudgeServer]:
    yield from serve()


def test_the_weighted_judge_of_cleo_grade_reads_the_stored_conversation(
    store: Path, judge: FakeJudgeServer
) -> None:
    args = ["grade", SESSION, "--db", str(store), "--rubric", "weighted", "--no-save"]
    args += ["--judge-url", judge.base_url, "--judge-model", "m"]
    assert main(args) == 0
    [received] = judge.received
    assert '"Fix the login bug (use CLEO)"' in received.prompt.split("```jsonl")[0]
    assert '"Done: T10 tracks the redirect fix."' in received.prompt
