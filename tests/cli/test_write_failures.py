"""Write failures are loud, a deliberate difference from the CLEO Grade Specification's
"appendGradeResult() catches errors silently (best-effort persistence)" (docs/formats.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cleo_grade import append_grade, grade_entries
from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.errors import HistoryError
from tests.entries import entry

ENTRY = entry("session", "list", at=0)


def test_the_library_raises_where_the_specification_would_swallow_the_error(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = grade_entries([ENTRY], session_id="s1")
    with pytest.raises(HistoryError, match="cannot append grade: a parent of the path is not"):
        append_grade(result, blocker / "GRADES.jsonl")


def test_the_cli_exits_2_with_one_line_naming_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = tmp_path / "entries.jsonl"
    entries.write_text(json.dumps(ENTRY) + "\n")
    history = entries / "GRADES.jsonl"  # under a file: cannot be created
    assert main(["grade", "--entries", str(entries), "--history", str(history)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"cleo-grade: error: {history}: cannot append grade")
