"""Refusals told across processes: the file beside the store, read per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_cleo_grade.refusals import note_refusal, refusals_for, refusals_path


def test_a_session_reads_its_own_refusals_in_order(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    assert refusals_for(db, "s1") == []  # no file: nothing refused
    assert note_refusal(db, "s1", "tasks.list: params: limit is not a finite number")
    assert note_refusal(db, "s2", "another session's")
    assert note_refusal(db, "s1", 'a "quoted" s1 reason\nover two lines')
    assert refusals_path(db) == tmp_path / "audit.db.refused"
    assert refusals_for(db, "s1") == [
        "tasks.list: params: limit is not a finite number",
        'a "quoted" s1 reason\nover two lines',
    ]
    assert refusals_for(db, "s") == []  # a prefix of an id is not the id


def test_a_torn_or_foreign_line_is_skipped(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    refusals_path(db).write_text('{"session": "s1", "reas\nnot json s1\n[1, "s1"]\n')
    note_refusal(db, "s1", "kept")
    assert refusals_for(db, "s1") == ["kept"]


def test_a_link_planted_at_the_file_is_never_written_through(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("")
    db = tmp_path / "audit.db"
    os.symlink(target, refusals_path(db))
    assert not note_refusal(db, "s1", "reason")
    assert target.read_text() == ""


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_what_is_not_a_regular_file_is_not_read(tmp_path: Path, kind: str) -> None:
    db = tmp_path / "audit.db"
    path = refusals_path(db)
    if kind == "directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    assert refusals_for(db, "s1") == []
    assert not note_refusal(db, "s1", "reason")
