"""Importing the same entries file twice stores its calls twice (entries carry no ids): the
second import says so, on stderr, before the grade counts each call twice."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main

ROOT = Path(__file__).resolve().parents[2]
SESSION = "session-1772366400000-a1b2c3"


def test_a_second_import_of_an_entries_file_warns_that_its_calls_count_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    shutil.copy(ROOT / "examples" / "sessions" / "agent-session.jsonl", "s.jsonl")
    assert main(["import", "s.jsonl"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["import", "s.jsonl"]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(
        "cleo-grade import: warning: s.jsonl: its first entry (session.list at "
        f"2026-03-01T12:00:00.000Z) is in session {SESSION} of "
    )
    assert "the session's grade counts them twice" in err
    # It did what the warning says: 18 entries now, 9 twice.
    assert main(["grade", SESSION, "--json", "--no-save"]) == 0
    assert '"entryCount": 18' in capsys.readouterr().out


def test_importing_another_file_into_the_same_session_does_not_warn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    lines = (ROOT / "examples" / "sessions" / "agent-session.jsonl").read_text().splitlines()
    Path("a.jsonl").write_text("\n".join(lines[:4]) + "\n")
    Path("b.jsonl").write_text("\n".join(lines[4:]) + "\n")
    assert main(["import", "a.jsonl"]) == 0
    assert main(["import", "b.jsonl"]) == 0
    assert capsys.readouterr().err == ""
