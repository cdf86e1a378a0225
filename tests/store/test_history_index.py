"""The history's index: kept in step with GRADES.jsonl (tailed, rebuilt), and never a wrong
answer when it is stale, corrupt or cannot be written (the JSONL wins)."""

from __future__ import annotations

import os
import sqlite3
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_cleo_grade.cli.main import main
from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._history_file import latest_from_history_file, run_lines_file
from pytest_cleo_grade.store._history_index import INDEX_VARIABLE, index_path, open_index
from pytest_cleo_grade.store.history import append_grades, grade_line


@pytest.fixture(autouse=True)
def always_indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    """These histories are small: index them as a large one is."""
    monkeypatch.setenv(INDEX_VARIABLE, "on")


def grade(run: int, test: int, total: int) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": f"s-{run}-{test}",
            "totalScore": total,
            "maxScore": 100,
            "dimensions": {"sessionDiscipline": DimensionScore(score=total // 5, max=20)},
            "timestamp": datetime(2026, 1, 1 + run, tzinfo=UTC),
            "entryCount": 3,
            "testId": f"t::{test}",
            "runId": f"run-{run}",
        }
    )


def runs(path: Path, first: int, count: int, tests: int = 3, total: int = 40) -> None:
    append_grades(
        [grade(run, test, total) for run in range(first, first + count) for test in range(tests)],
        path,
    )


def latest_totals(path: Path) -> list[tuple[str, float]]:
    results, _count = run_lines_file(path)
    return [(r.session_id, r.total_score) for r in results]


def streamed(path: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """What every reader says of the history with the index turned off."""
    with monkeypatch.context() as patch:
        patch.setenv(INDEX_VARIABLE, "off")
        return (run_lines_file(path), latest_from_history_file(path, candidate=True))


def indexed(path: Path) -> object:
    index = open_index(path)
    assert index is not None
    index.close()
    return (run_lines_file(path), latest_from_history_file(path, candidate=True))


def mark_first_row(path: Path) -> None:
    """A mark in the index that only a rebuild removes (a tail keeps the rows it has)."""
    with sqlite3.connect(index_path(path)) as conn:
        conn.execute("UPDATE lines SET timestamp = 'kept' WHERE number = 1")
    conn.close()


def first_row_kept(path: Path) -> bool:
    conn = sqlite3.connect(index_path(path))
    try:
        row = conn.execute("SELECT timestamp = 'kept' FROM lines WHERE number = 1").fetchone()
    finally:
        conn.close()
    return bool(row[0])


def kept(path: Path) -> bool:
    """Whether the index is still current: a read that found a row lying forgets it (and
    answers by streaming), which these answers alone would not show."""
    conn = sqlite3.connect(index_path(path))
    try:
        return bool(conn.execute("SELECT count(*) FROM meta").fetchone()[0])
    finally:
        conn.close()


def test_readers_through_the_index_answer_as_a_streaming_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 5)
    assert indexed(history) == streamed(history, monkeypatch)
    assert index_path(history).is_file() and kept(history)
    assert latest_totals(history) == [("s-4-0", 40), ("s-4-1", 40), ("s-4-2", 40)]
    assert run_lines_file(history, "run-2")[0][0].session_id == "s-2-0"


def test_appended_lines_are_indexed_as_a_tail_not_a_rebuild(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    assert latest_totals(history)[0] == ("s-2-0", 40)
    mark_first_row(history)
    runs(history, 3, 2, total=70)
    assert latest_totals(history) == [("s-4-0", 70), ("s-4-1", 70), ("s-4-2", 70)]
    assert first_row_kept(history)
    assert indexed(history) == streamed(history, monkeypatch)


def test_a_read_brings_the_index_up_to_date_in_one_transaction_that_holds_it(
    tmp_path: Path,
) -> None:
    # One transaction for the whole update: no other reader sees half an index or writes
    # beside it, and the rows are written once (a transaction per row made and removed a
    # journal file for each line).
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    index = open_index(history)
    assert index is not None
    with index:
        other = sqlite3.connect(index_path(history), timeout=0, isolation_level=None)
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        finally:
            other.close()
        assert index.count() == 9
    assert not (tmp_path / f"{index_path(history).name}-journal").exists()


def test_a_history_rewritten_under_the_same_name_is_indexed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 4)
    assert latest_totals(history)[0] == ("s-3-0", 40)
    mark_first_row(history)
    # As a compaction does: a new file, longer than the old one, renamed over it.
    fresh = tmp_path / "new.jsonl"
    runs(fresh, 10, 6, total=90)
    os.replace(fresh, history)
    assert latest_totals(history) == [("s-15-0", 90), ("s-15-1", 90), ("s-15-2", 90)]
    assert not first_row_kept(history)
    assert indexed(history) == streamed(history, monkeypatch)


def test_a_truncated_history_is_indexed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 4)
    assert latest_totals(history)[0] == ("s-3-0", 40)
    lines = history.read_bytes().splitlines(keepends=True)
    with history.open("r+b") as handle:
        handle.truncate(sum(len(line) for line in lines[:6]))  # runs 0 and 1 only
    assert latest_totals(history) == [("s-1-0", 40), ("s-1-1", 40), ("s-1-2", 40)]
    assert indexed(history) == streamed(history, monkeypatch)


def test_a_line_edited_in_place_at_the_same_size_is_read_as_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    assert latest_totals(history)[1] == ("s-2-1", 40)
    before = history.stat()
    data = history.read_bytes()
    line = grade_line(grade(2, 1, 40)).encode()
    assert data.count(line) == 1
    history.write_bytes(data.replace(line, line.replace(b'"totalScore":40', b'"totalScore":45')))
    # Same size; a clock too coarse to move the time would hide the edit, so it is moved.
    os.utime(history, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert history.stat().st_size == before.st_size
    assert latest_totals(history)[1] == ("s-2-1", 45)
    assert indexed(history) == streamed(history, monkeypatch)


#: The tables of the index's format 3 (before rows kept their line's CRC-32 and scores).
_FORMAT_3 = """
CREATE TABLE meta (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL,
    device INTEGER NOT NULL, inode INTEGER NOT NULL, size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL, head TEXT NOT NULL, tail TEXT NOT NULL,
    next_number INTEGER NOT NULL, open_offset INTEGER);
CREATE TABLE lines (number INTEGER PRIMARY KEY, offset INTEGER NOT NULL,
    length INTEGER NOT NULL, problem TEXT, session_id TEXT, test_id TEXT, run_id TEXT,
    evaluator TEXT, timestamp TEXT, at TEXT, total REAL, max REAL, percent INTEGER,
    letter TEXT, flags INTEGER, extras TEXT);
INSERT INTO meta VALUES (1, 3, 0, 0, 0, 0, '', '', 1, NULL);
"""


def test_an_index_of_an_older_format_is_made_anew_and_read_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    conn = sqlite3.connect(index_path(history))
    conn.executescript(_FORMAT_3)
    conn.close()
    assert indexed(history) == streamed(history, monkeypatch)
    assert kept(history)  # read through the index, not streamed past tables it cannot use
    conn = sqlite3.connect(index_path(history))
    try:
        assert conn.execute("SELECT grades FROM meta").fetchone() == (9,)
        assert conn.execute("SELECT count(*) FROM lines WHERE crc IS NOT NULL").fetchone() == (9,)
    finally:
        conn.close()


def test_a_line_a_baseline_reads_edited_while_the_file_grew_is_read_as_edited(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The baseline takes a grade's scores from its row once the line's bytes are checked
    # against the row's CRC-32: an edit the head and tail fingerprints cannot see (a line of
    # the latest run more than their 4 KiB from the end, then a grade appended) is noticed.
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3, tests=30)
    assert latest_from_history_file(history)[0]["t::0"].totals == (40.0,)
    data = history.read_bytes()
    line = grade_line(grade(2, 0, 40)).encode()
    assert data.count(line) == 1 and len(data) - data.index(line) > 4096
    history.write_bytes(data.replace(line, line.replace(b'"totalScore":40', b'"totalScore":45')))
    unrun = grade(9, 0, 70).model_dump(by_alias=True)
    del unrun["runId"]
    append_grades([GradeResult.model_validate({**unrun, "testId": "t::other"})], history)
    found = latest_from_history_file(history)
    assert found[0]["t::0"].totals == (45.0,)
    with monkeypatch.context() as patch:
        patch.setenv(INDEX_VARIABLE, "off")
        assert latest_from_history_file(history) == found
    assert latest_from_history_file(history) == found  # through the index rebuilt


def test_a_head_edited_while_the_file_grew_is_indexed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 2)
    assert latest_totals(history)[0] == ("s-1-0", 40)
    mark_first_row(history)
    data = history.read_bytes()
    history.write_bytes(b"not json\n" + data)  # a line put in front, then more appended
    runs(history, 2, 1)
    with pytest.warns(CleoGradeWarning, match=r"GRADES\.jsonl:1: skipped corrupt grade line"):
        assert latest_totals(history)[0] == ("s-2-0", 40)
    assert not first_row_kept(history)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CleoGradeWarning)
        assert indexed(history) == streamed(history, monkeypatch)


def test_a_torn_last_line_is_indexed_again_once_the_next_grade_is_appended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 2)
    with history.open("ab") as handle:
        handle.write(b'{"sessionId": "torn", "tot')  # a writer killed mid-line
    with pytest.warns(CleoGradeWarning, match=r":7: skipped corrupt grade line: invalid JSON"):
        assert latest_totals(history)[0] == ("s-1-0", 40)
    runs(history, 2, 1, total=55)
    with pytest.warns(CleoGradeWarning, match=r":7: skipped corrupt grade line: invalid JSON"):
        assert latest_totals(history) == [("s-2-0", 55), ("s-2-1", 55), ("s-2-2", 55)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CleoGradeWarning)
        assert indexed(history) == streamed(history, monkeypatch)


def test_skipped_lines_warn_alike_through_the_index_and_streaming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 1)
    with history.open("ab") as handle:
        handle.write(b"[1, 2]\n\n" + grade_line(grade(1, 0, 120)).encode() + b"\n")
    runs(history, 1, 1)

    def said(reader: object) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert callable(reader)
            reader()
        return [str(w.message) for w in caught]

    through_index = said(lambda: indexed(history))
    through_stream = said(lambda: streamed(history, monkeypatch))
    assert through_index == through_stream
    assert any(":4:" in m and "not a JSON object" in m for m in through_index)
    assert any(":6:" in m and "totalScore is above maxScore" in m for m in through_index)
    assert not any(":5:" in m for m in through_index)  # a blank line is no grade, silently


def test_a_corrupt_index_file_is_replaced_and_answers_stay_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    latest_totals(history)
    index_path(history).write_bytes(b"garbage, not SQLite " * 500)
    assert latest_totals(history)[0] == ("s-2-0", 40)
    assert index_path(history).read_bytes().startswith(b"SQLite format 3\x00")
    assert indexed(history) == streamed(history, monkeypatch)


def test_index_rows_that_point_at_the_wrong_lines_fall_back_to_the_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    latest_totals(history)
    with sqlite3.connect(index_path(history)) as conn:
        # Every row of the latest run now points at line 1 (run 0's first grade).
        conn.execute("UPDATE lines SET offset = 0 WHERE run_id = 'run-2'")
    conn.close()
    assert latest_totals(history) == [("s-2-0", 40), ("s-2-1", 40), ("s-2-2", 40)]
    # The lie was noticed: the next open rebuilds, and reads through the index again.
    assert indexed(history) == streamed(history, monkeypatch)
    with sqlite3.connect(index_path(history)) as conn:
        assert conn.execute("SELECT count(*) FROM lines WHERE offset = 0").fetchone() == (1,)
    conn.close()


def test_no_writable_index_means_a_streaming_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    index_path(history).mkdir()  # what cannot be opened as a database
    assert open_index(history) is None
    assert latest_totals(history)[0] == ("s-2-0", 40)
    assert indexed_or_none(history) == streamed(history, monkeypatch)
    index_path(history).rmdir()
    outside = tmp_path / "elsewhere.db"
    index_path(history).symlink_to(outside)  # never followed out of the directory
    assert open_index(history) is None
    assert not outside.exists()
    assert latest_totals(history)[0] == ("s-2-0", 40)
    monkeypatch.setenv(INDEX_VARIABLE, "off")
    index_path(history).unlink()
    assert latest_totals(history)[0] == ("s-2-0", 40)
    assert not index_path(history).exists()


def indexed_or_none(path: Path) -> object:
    return (run_lines_file(path), latest_from_history_file(path, candidate=True))


def test_list_and_junit_print_alike_through_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    append_grades([grade(3, 0, 33).model_copy(update={"total_score": 33.5})], history)
    commands = (
        ["list", "--history", str(history)],
        ["list", "--history", str(history), "--session-id", "s-1-2"],
        ["junit", "-", "--history", str(history)],
    )
    for argv in commands:
        assert main(argv) in (0, 1)
        through_index = capsys.readouterr()
        assert index_path(history).is_file()
        monkeypatch.setenv(INDEX_VARIABLE, "off")
        assert main(argv) in (0, 1)
        assert capsys.readouterr() == through_index
        monkeypatch.setenv(INDEX_VARIABLE, "on")
    assert main(["list", "--history", str(history)]) == 0
    out = capsys.readouterr().out
    assert "s-3-0    33.5/100  34%" in out


def test_the_html_report_through_the_index_is_the_page_of_the_whole_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.grading.test_history_file import mixed_history

    history = tmp_path / "GRADES.jsonl"
    mixed_history(history, seed=7)
    changed = [
        GradeResult.model_validate(
            {
                **grade(20 + run, 0, 10 * run).to_json_dict(),
                "testId": "t::a",
                "rubricVersion": str(run // 2),
            }
        )
        for run in range(5)
    ]
    append_grades(changed, history)
    pages = {}
    for name, value in (("indexed", "on"), ("streamed", "off")):
        monkeypatch.setenv(INDEX_VARIABLE, value)
        for run in ("", "run-5"):
            page = tmp_path / f"{name}{run}.html"
            argv = ["report", "--history", str(history), "--html", str(page)]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CleoGradeWarning)
                main([*argv, "--run-id", run] if run else argv)
            pages[name, run] = page.read_text()
    assert index_path(history).is_file()
    assert pages["indexed", ""] == pages["streamed", ""]
    assert pages["indexed", "run-5"] == pages["streamed", "run-5"]
    assert "rubricVersion 0 → 1" in pages["indexed", ""]


@pytest.mark.parametrize("seed", range(12))
def test_a_baseline_from_the_newest_lines_is_the_baseline_of_the_whole_history(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    from tests.grading.test_history_file import grade as test_grade
    from tests.grading.test_history_file import mixed_history

    history = tmp_path / "GRADES.jsonl"
    mixed_history(history, seed)
    # A repeated test whose last whole series is 40 runs back: every later run re-ran one
    # of its runs only (-k), so the suffix read must reach back that far.
    lines = [
        test_grade("t::r", 60 + n, run=n, runs=3, series="s0", runId="run-50") for n in (1, 2, 3)
    ]
    for run in range(51, 91):
        lines.append(test_grade("t::r", 10, run=2, runs=3, series=f"s{run}", runId=f"run-{run}"))
        lines.append(test_grade("t::a", run, runId=f"run-{run}"))
    append_grades(lines, history)
    for whole in (True, False):
        with monkeypatch.context() as patch:
            patch.setenv(INDEX_VARIABLE, "off")
            expected = latest_from_history_file(history, whole=whole)
        assert latest_from_history_file(history, whole=whole) == expected
        assert kept(history)
    assert latest_from_history_file(history)[0]["t::r"].totals == (61.0, 62.0, 63.0)


def test_list_one_run_by_its_id_or_the_latest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    # A hand-graded line after the run: the latest run stays the one report shows.
    manual = GradeResult.model_validate({**grade(9, 9, 50).to_json_dict(), "evaluator": "manual"})
    append_grades([manual], history)
    for index in ("on", "off"):
        monkeypatch.setenv(INDEX_VARIABLE, index)
        assert main(["list", "--history", str(history), "--latest-run"]) == 0
        out = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in out] == ["SESSION", "s-2-0", "s-2-1", "s-2-2"]
        assert main(["list", "--history", str(history), "--run-id", "run-1", "--json"]) == 0
        listed = capsys.readouterr().out
        assert '"sessionId": "s-1-0"' in listed and "s-2-0" not in listed
        argv = ["list", "--history", str(history), "--run-id", "run-0", "--session-id", "s-0-1"]
        assert main(argv) == 0
        assert [line.split()[0] for line in capsys.readouterr().out.splitlines()][1:] == ["s-0-1"]
        assert main(["list", "--history", str(history), "--run-id", "run-7"]) == 0
        assert capsys.readouterr().out == f"No grades of run run-7 in {history}\n"


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["--run-id", "a b"], "cleo-grade list: --run-id: invalid run id 'a b'"),
        (["--latest-run", "--db", "x.db"], "cleo-grade list: --run-id and --latest-run read"),
    ],
)
def test_list_of_one_run_refuses_what_it_cannot_read_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], error: str
) -> None:
    assert main(["list", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(error) and err.count("\n") == 1


def test_flaky_through_the_index_is_flaky_of_every_grade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.grading.test_history_file import mixed_history

    history = tmp_path / "GRADES.jsonl"
    mixed_history(history, seed=3)
    said = {}
    for index in ("on", "off"):
        monkeypatch.setenv(INDEX_VARIABLE, index)
        for argv in (["--fail-under", "50"], ["--fail-under", "50", "--json", "--runs", "4"]):
            assert main(["flaky", "--history", str(history), *argv]) == 0
            said[index, len(argv)] = capsys.readouterr()
    assert index_path(history).is_file()
    assert said["on", 2] == said["off", 2] and said["on", 5] == said["off", 5]
    assert "flipped in their last" in said["on", 2].out


@pytest.mark.parametrize("items", [[], [{"a": [1, {"b": "x\ny"}]}], [{"c": "\x1b"}, 2, "t"]])
def test_a_json_list_printed_an_item_at_a_time_is_the_json_printed_whole(
    capsys: pytest.CaptureFixture[str], items: list[object]
) -> None:
    from pytest_cleo_grade.cli.common import print_json, print_json_list

    print_json(items)
    whole = capsys.readouterr().out
    print_json_list(iter(items))
    assert capsys.readouterr().out == whole


def test_a_small_history_gets_no_index_unless_asked_and_a_large_one_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_cleo_grade.store._history_index import INDEX_FROM_BYTES

    monkeypatch.delenv(INDEX_VARIABLE)
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 3)
    assert latest_totals(history)[0] == ("s-2-0", 40)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["GRADES.jsonl"]
    monkeypatch.setenv(INDEX_VARIABLE, "on")
    assert latest_totals(history)[0] == ("s-2-0", 40)
    monkeypatch.delenv(INDEX_VARIABLE)
    # An index there is kept in step whatever the size.
    runs(history, 3, 1, total=70)
    assert latest_totals(history)[0] == ("s-3-0", 70)
    assert first_row_kept(history) is False
    large = tmp_path / "large.jsonl"
    per_run = len(grade_line(grade(0, 0, 40))) * 1000
    runs(large, 0, INDEX_FROM_BYTES // per_run + 1, tests=1000)
    assert large.stat().st_size >= INDEX_FROM_BYTES
    assert run_lines_file(large)[0][0].session_id.startswith("s-")
    assert index_path(large).is_file()


def test_a_score_past_sqlite_integers_is_indexed_and_read_as_the_line_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A valid grade of 10**200 out of 10**200 (past SQLite's 64-bit integers) is indexed like
    any other: the history keeps its index, and every reader says what it says streamed."""
    history = tmp_path / "GRADES.jsonl"
    runs(history, 0, 2)
    huge = grade(2, 0, 40).model_copy(update={"total_score": 10**200, "max_score": 10**200})
    append_grades([huge], history)
    runs(history, 3, 1)
    assert indexed(history) == streamed(history, monkeypatch)
    with sqlite3.connect(index_path(history)) as conn:
        rows = conn.execute("SELECT count(*) FROM lines WHERE problem IS NULL").fetchone()
    conn.close()
    assert rows == (10,)
    argv = ["junit", "-", "--history", str(history), "--fail-under", "B"]
    assert main(argv) == 1
    through_index = capsys.readouterr().out
    assert "s-2-0" in through_index
    monkeypatch.setenv(INDEX_VARIABLE, "off")
    assert main(argv) == 1
    assert capsys.readouterr().out == through_index
