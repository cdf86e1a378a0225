"""Refusals told across processes: the file beside the store, read per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_cleo_grade.capture._refusals import (
    note_refusal,
    refusals_for,
    refusals_path,
    refusals_size,
)


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


def test_a_session_reads_from_where_the_file_ended_when_it_started_however_much_follows(
    tmp_path: Path,
) -> None:
    db = tmp_path / "audit.db"
    note_refusal(db, "s1", "an earlier run's, same id")
    since = refusals_size(db)
    assert since == refusals_path(db).stat().st_size > 0
    note_refusal(db, "s1", "this test's")
    # Another worker's session refuses far more than any fixed tail of the file held (the
    # last mebibyte was read, and this test's line fell out of it).
    for _ in range(800):
        note_refusal(db, "s2", "x" * 1900)
    assert refusals_path(db).stat().st_size > 1024 * 1024
    assert refusals_for(db, "s1", since=since) == ["this test's"]
    assert refusals_for(db, "s1") == ["an earlier run's, same id", "this test's"]
    assert refusals_size(tmp_path / "none.db") == 0


def test_a_session_sees_a_childs_refusal_behind_a_mebibyte_of_other_sessions(
    tmp_path: Path,
) -> None:
    from pytest_cleo_grade.grading.session import GradeSession, SessionSettings

    db = tmp_path / "audit.db"
    note_refusal(db, "someone-before", "a line from an earlier run")
    with GradeSession(SessionSettings(db_path=db)) as session:
        note_refusal(db, session.id, "tasks.list: params: x is not a finite number")
        for _ in range(800):  # another xdist worker's noisy test, meanwhile
            note_refusal(db, "session-1795000000000-abcdef", "k" * 1900)
        assert session.refusals() == ["tasks.list: params: x is not a finite number"]
