"""GRADES.jsonl: seed 000's line format, safe concurrent appends, and tolerant reading."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from pytest_cleo_grade import (
    CleoGradeWarning,
    GradeResult,
    HistoryError,
    append_grade,
    read_grades,
)
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.store.history import append_grades, grade_line
from tests.entries import NOW, sequence


def sample(session_id: str = "s1") -> object:
    entries = sequence(("session", "list"), ("tasks", "find"), ("tasks", "list"))
    for item in entries:
        item["sessionId"] = session_id
    return grade_entries(entries, session_id=session_id, now=NOW)


def test_a_grade_line_is_compact_camel_case_json_with_evaluator_auto(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "metrics" / "GRADES.jsonl"
    result = sample()
    append_grade(result, path)  # type: ignore[arg-type]
    line = path.read_text(encoding="utf-8")
    assert line.endswith("}\n") and line.count("\n") == 1
    data = json.loads(line)
    # Compact: exactly what the tightest separators write (sentences inside may hold ", ").
    assert line == json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n"
    assert list(data) == [
        "sessionId",
        "totalScore",
        "maxScore",
        "dimensions",
        "flags",
        "timestamp",
        "entryCount",
        "evaluator",
        "points",
    ]
    assert data["evaluator"] == "auto"
    assert data["timestamp"] == "2026-03-01T13:00:00.000Z"
    assert list(data["dimensions"]) == [
        "sessionDiscipline",
        "discoveryEfficiency",
        "taskHygiene",
        "errorProtocol",
        "disclosureUse",
    ]


def test_reading_returns_grades_in_file_order_and_filters_by_session(tmp_path: Path) -> None:
    path = tmp_path / "GRADES.jsonl"
    for sid in ("a", "b", "a"):
        append_grade(sample(sid), path)  # type: ignore[arg-type]
    assert [g.session_id for g in read_grades(path)] == ["a", "b", "a"]
    assert [g.session_id for g in read_grades(path, session_id="a")] == ["a", "a"]
    assert read_grades(path)[0] == sample("a")


def test_a_missing_history_is_empty(tmp_path: Path) -> None:
    assert read_grades(tmp_path / "nope.jsonl") == []


def test_a_corrupt_line_is_skipped_with_a_warning_naming_its_number(tmp_path: Path) -> None:
    path = tmp_path / "GRADES.jsonl"
    append_grade(sample("a"), path)  # type: ignore[arg-type]
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"sessionId": "torn", "totalSc\n')
        handle.write('{"sessionId": "x"}\n')
        handle.write("\n")
    append_grade(sample("b"), path)  # type: ignore[arg-type]
    with pytest.warns(CleoGradeWarning) as caught:
        grades = read_grades(path)
    assert [g.session_id for g in grades] == ["a", "b"]
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2
    assert messages[0].startswith(f"{path}:2: skipped corrupt grade line: invalid JSON")
    assert messages[1].startswith(f"{path}:3: skipped corrupt grade line: totalScore")


def test_a_grade_appended_after_a_torn_last_line_starts_a_line_of_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / "GRADES.jsonl"
    append_grade(sample("a"), path)  # type: ignore[arg-type]
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"sessionId": "torn", "tot')  # a writer killed mid-line
    append_grade(sample("b"), path)  # type: ignore[arg-type]
    with pytest.warns(CleoGradeWarning, match=r":2: skipped corrupt grade line"):
        assert [g.session_id for g in read_grades(path)] == ["a", "b"]


def test_reading_a_directory_is_a_history_error(tmp_path: Path) -> None:
    with pytest.raises(HistoryError, match=str(tmp_path)):
        read_grades(tmp_path)


def test_appending_under_a_file_is_a_history_error_naming_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(HistoryError, match=r"file/GRADES\.jsonl: cannot append grade"):
        append_grade(sample(), blocker / "GRADES.jsonl")  # type: ignore[arg-type]


WRITER = textwrap.dedent(
    """
    import sys
    from pytest_cleo_grade import GradeResult, append_grade
    from pytest_cleo_grade.core.models import DimensionScore
    path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # A long evidence list makes each line far larger than the pipe/page atomicity limits.
    evidence = [f"{tag} evidence line {i} " + "x" * 60 for i in range(120)]
    for n in range(count):
        append_grade(GradeResult(session_id=f"{tag}-{n}", total_score=n % 100, max_score=100,
            dimensions={"d": DimensionScore(score=1, max=20, evidence=evidence)},
            timestamp="2026-03-01T12:00:00Z", entry_count=n), path)
    """
)


@pytest.mark.e2e
def test_concurrent_appends_from_several_processes_never_tear_a_line(tmp_path: Path) -> None:
    path = tmp_path / "GRADES.jsonl"
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{i}", "60"]) for i in range(4)
    ]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0, 0]
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 240
    parsed = [json.loads(line) for line in lines]  # a torn line would not parse
    assert sorted(p["sessionId"] for p in parsed) == sorted(
        f"w{i}-{n}" for i in range(4) for n in range(60)
    )


FULL_DISK = textwrap.dedent(
    """
    import resource, signal, sys
    from pytest_cleo_grade import HistoryError, append_grade, read_grades
    path = sys.argv[1]
    before = open(path, "rb").read()
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    sys.dont_write_bytecode = True  # a module's cache written past the limit would be cut
    # The file may grow by 20 bytes only: the next line is written in part, then fails.
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 20, len(before) + 20))
    try:
        append_grade(read_grades(path)[0], path)
    except HistoryError as exc:
        print("ERROR", exc)
    assert open(path, "rb").read() == before, "a partial line was left behind"
    """
)


@pytest.mark.e2e
def test_a_full_disk_leaves_no_partial_line_behind(tmp_path: Path) -> None:
    path = tmp_path / "GRADES.jsonl"
    append_grade(sample(), path)  # type: ignore[arg-type]
    done = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ERROR {path}: cannot append grade: File too large")
    assert len(read_grades(path)) == 1


def surrogate_sample(session_id: str = "s1") -> GradeResult:
    """A grade whose flag carries a task id from a file name that is not UTF-8."""
    task_id = os.fsdecode(b"T-\xff")  # '\udcff': a lone surrogate
    entries = sequence(("session", "list"), ("tasks", "add"))
    entries[1]["params"] = {"title": "x"}
    entries[1]["metadata"]["taskId"] = task_id
    for item in entries:
        item["sessionId"] = session_id
    result = grade_entries(entries, session_id=session_id, now=NOW)
    assert any(task_id in flag for flag in result.flags)
    return result


def test_agent_text_that_is_not_unicode_is_written_as_json_escapes_and_reads_back_equal(
    tmp_path: Path,
) -> None:
    path = tmp_path / "GRADES.jsonl"
    result = surrogate_sample()
    append_grade(result, path)
    append_grade(sample("after"), path)  # type: ignore[arg-type]
    raw = path.read_bytes()
    first = raw.splitlines()[0]
    # Valid UTF-8 JSON (here pure ASCII), the surrogate spelled as JSON spells it.
    assert first.isascii() and b"T-\\udcff" in first
    assert json.loads(first.decode("utf-8"))["flags"] == list(result.flags)
    assert grade_line(result).encode("ascii") == first
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no line is skipped
        grades = read_grades(path)
    assert grades == [result, sample("after")]


def test_a_grade_whose_session_id_is_not_unicode_is_a_history_error_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "GRADES.jsonl"
    append_grade(sample("before"), path)  # type: ignore[arg-type]
    before = path.read_bytes()
    bad = surrogate_sample(os.fsdecode(b"s-\xfe"))
    with pytest.raises(HistoryError, match=r"GRADES\.jsonl: cannot append grade: sessionId holds"):
        append_grades([sample("ok"), bad], path)  # type: ignore[list-item]
    assert path.read_bytes() == before


def test_a_failing_then_cuts_the_appended_lines_off_again_under_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "GRADES.jsonl"
    append_grade(sample("before"), path)  # type: ignore[arg-type]
    before = path.read_bytes()
    seen: list[bytes] = []

    def other_half() -> None:
        seen.append(path.read_bytes())
        raise HistoryError("the other half failed")

    with pytest.raises(HistoryError, match="the other half failed"):
        append_grades([sample("a"), sample("b")], path, then=other_half)  # type: ignore[list-item]
    assert seen[0].startswith(before) and seen[0].count(b"\n") == 3  # written, then taken back
    assert path.read_bytes() == before


def test_a_grade_too_long_to_read_back_is_not_appended(tmp_path: Path) -> None:
    # About a million flags make one line longer than any reader reads: appended, it was
    # skipped (with a warning) by every later read of the history.
    path = tmp_path / "GRADES.jsonl"
    kept = sample("kept")
    assert isinstance(kept, GradeResult)
    append_grade(kept, path)
    before = path.read_bytes()
    huge = kept.model_copy(update={"session_id": "huge", "flags": ["x" * 1024] * 70_000})
    with pytest.raises(HistoryError) as caught:
        append_grades([sample("first-of-two"), huge], path)
    assert str(caught.value) == (
        f"{path}: cannot append grade of session huge: its line would be 69 MiB, longer "
        "than the 64 MiB a history line is read back with"
    )
    assert path.read_bytes() == before  # neither grade of the batch
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [grade.session_id for grade in read_grades(path)] == ["kept"]


def test_a_history_locked_for_good_is_an_error_after_a_deadline_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_cleo_grade.store import history

    monkeypatch.setattr(history, "LOCK_TIMEOUT_S", 0.2)
    path = tmp_path / "GRADES.jsonl"
    append_grade(sample("s1"), path)
    holder = os.open(path, os.O_RDONLY)  # another open file: its flock excludes ours
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        with pytest.raises(HistoryError, match=r"locked by another process for more than 0 s"):
            append_grade(sample("s2"), path)
        # The next writer in this process tries once rather than wait out the deadline again.
        monkeypatch.setattr(history, "LOCK_TIMEOUT_S", 3600.0)
        with pytest.raises(HistoryError, match="locked by another process"):
            append_grade(sample("s3"), path)
    finally:
        os.close(holder)
    append_grade(sample("s4"), path)  # released: written, and waits are back to normal
    assert [g.session_id for g in read_grades(path)] == ["s1", "s4"]
    assert path not in history._stuck


def test_a_byte_order_mark_before_the_first_line_is_no_corruption(tmp_path: Path) -> None:
    # A history saved by an editor that adds a BOM lost its first grade, "corrupt".
    path = tmp_path / "GRADES.jsonl"
    append_grade(sample("s1"), path)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [g.session_id for g in read_grades(path)] == ["s1"]


def test_a_file_where_the_historys_directory_should_be_is_named_as_such(tmp_path: Path) -> None:
    # mkdir's "File exists" named neither the file nor the cause.
    (tmp_path / "afile").write_text("")
    with pytest.raises(HistoryError) as caught:
        append_grade(sample("s1"), tmp_path / "afile" / "GRADES.jsonl")
    assert str(caught.value) == (
        f"{tmp_path / 'afile' / 'GRADES.jsonl'}: cannot append grade: a parent of the path is "
        "not a directory"
    )


def test_iter_grades_reads_the_history_a_line_at_a_time(tmp_path: Path) -> None:
    from pytest_cleo_grade.store.history import iter_grades

    path = tmp_path / "GRADES.jsonl"
    append_grade(sample("a"), path)  # type: ignore[arg-type]
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"sessionId": "torn", "totalSc\n')
    append_grade(sample("b"), path)  # type: ignore[arg-type]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grades = iter_grades(path)
        assert next(grades).session_id == "a"
        # The torn line after it is not parsed yet: nothing is held but the line in hand.
        assert caught == []
        assert [g.session_id for g in grades] == ["b"]
    assert [str(w.message) for w in caught] == [
        f"{path}:2: skipped corrupt grade line: invalid JSON "
        "(Unterminated string starting at: line 1 column 23 (char 22))"
    ]
    with pytest.warns(CleoGradeWarning):
        assert list(iter_grades(path, session_id="b")) == [sample("b")]
    assert list(iter_grades(tmp_path / "nope.jsonl")) == []
