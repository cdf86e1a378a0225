"""``cleo-grade history compact`` and ``restore``: older runs into the store's archive, the
file rewritten atomically, and every byte back, in its place."""

from __future__ import annotations

import os
import re
import sqlite3
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import append_grades, grade_line, read_grades

START = datetime(2026, 1, 1, tzinfo=UTC)
HISTORY = Path(".cleo/metrics/GRADES.jsonl")
STORE = Path(".cleo/audit.db")


def grade(test: str, at: int, run: str | None, **extra: object) -> GradeResult:
    if run is not None:
        extra["runId"] = run
    return GradeResult(
        session_id=f"s-{test}-{at}",
        total_score=80,
        dimensions={"d": DimensionScore(score=80, max=100, evidence=[])},
        timestamp=START + timedelta(minutes=at),
        entry_count=3,
        testId=test,
        **extra,
    )


def line(test: str, at: int, run: str | None) -> bytes:
    return grade_line(grade(test, at, run)).encode() + b"\n"


def runs_history(root: Path, runs: int, tests: int = 2) -> bytes:
    """A history of ``runs`` runs (run-0 oldest) of ``tests`` tests, and a store beside it."""
    data = b"".join(
        line(f"t::{test}", run * 10 + test, f"run-{run}")
        for run in range(runs)
        for test in range(tests)
    )
    return write(root, data)


def write(root: Path, data: bytes) -> bytes:
    (root / HISTORY).parent.mkdir(parents=True, exist_ok=True)
    (root / HISTORY).write_bytes(data)
    AuditStore(root / STORE).close()
    return data


def archive_rows(root: Path) -> list[tuple[int, int, str | None, str | None, bytes]]:
    """(batch, line number, run id, test id, raw) of every archived line, as stored."""
    conn = sqlite3.connect(root / STORE)
    try:
        return [
            (row[0], row[1], row[2], row[3], zlib.decompress(row[4]))
            for row in conn.execute(
                "SELECT batch, line_number, run_id, test_id, raw FROM history_archive "
                "WHERE encoding = 'zlib' ORDER BY batch, line_number"
            )
        ]
    finally:
        conn.close()


def merged(kept: bytes, rows: list[tuple[int, int, str | None, str | None, bytes]]) -> bytes:
    """One batch's archived lines put back between the kept lines by their numbers."""
    kept_lines = kept.splitlines(keepends=True)
    out: list[bytes] = []
    for _, number, _, _, raw in rows:
        while len(out) < number - 1:
            out.append(kept_lines.pop(0))
        out.append(raw)
    return b"".join(out + kept_lines)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_compact_keeps_the_newest_runs_and_archived_plus_kept_is_the_original_byte_for_byte(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Lines without a run id first (one legacy run), runs interleaved as shards write them,
    # and lines no run owns (garbage, not UTF-8, blank): each byte stays somewhere.
    original = write(
        project,
        line("t::old", 0, None)
        + line("t::a", 1, "run-1")
        + line("t::old", 2, None)
        + b"{not json\n"
        + line("t::a", 3, "run-2")
        + line("t::b", 4, "run-1")
        + b"\xff\xfe not utf-8\r\n"
        + line("t::b", 5, "run-2")
        + b"\n"
        + line("t::a", 6, "run-3")
        + line("t::b", 7, "run-3"),
    )
    assert main(["history", "compact", "--keep-runs", "2"]) == 0
    out = capsys.readouterr().out
    kept = (project / HISTORY).read_bytes()
    rows = archive_rows(project)
    # The legacy run and run-1 are the oldest (by their newest lines): archived.
    assert [(row[1], row[2], row[3]) for row in rows] == [
        (1, None, "t::old"),
        (2, "run-1", "t::a"),
        (3, None, "t::old"),
        (6, "run-1", "t::b"),
    ]
    assert merged(kept, rows) == original
    assert kept == (
        b"{not json\n"
        + line("t::a", 3, "run-2")
        + b"\xff\xfe not utf-8\r\n"
        + line("t::b", 5, "run-2")
        + b"\n"
        + line("t::a", 6, "run-3")
        + line("t::b", 7, "run-3")
    )
    assert (len(original), len(kept)) == (1825, 937)
    assert out == (
        "cleo-grade: kept 2 runs (4 lines), archived 2 runs (4 lines) into .cleo/audit.db; "
        ".cleo/metrics/GRADES.jsonl 1.8 kB -> 937 B; 3 unreadable lines left in place\n"
    )


def test_restore_puts_every_line_back_in_its_place_and_keeps_the_lines_appended_since(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = runs_history(project, 6)
    assert main(["history", "compact", "--keep-runs", "4"]) == 0
    append_grades([grade("t::0", 100, "run-6")], project / HISTORY)  # the next CI run
    assert main(["history", "compact", "--keep-runs", "2"]) == 0  # a second batch
    append_grades([grade("t::0", 110, "run-7")], project / HISTORY)
    assert len(read_grades(project / HISTORY)) == 4
    capsys.readouterr()
    assert main(["history", "restore"]) == 0
    assert (project / HISTORY).read_bytes() == (
        original + line("t::0", 100, "run-6") + line("t::0", 110, "run-7")
    )
    assert archive_rows(project) == []  # put back, not copied
    assert capsys.readouterr().out.startswith(
        "cleo-grade: restored 5 runs (10 lines) from .cleo/audit.db; "
    )
    assert main(["history", "restore"]) == 0  # nothing left: nothing doubled
    assert capsys.readouterr().out == (
        "cleo-grade: nothing to restore: .cleo/audit.db holds no lines of "
        ".cleo/metrics/GRADES.jsonl\n"
    )


def test_a_torn_last_line_stays_last_and_a_restore_after_appends_loses_nothing(
    project: Path,
) -> None:
    torn = b'{"sessionId":"s-cut","totalSc'
    original = runs_history(project, 3) + torn
    write(project, original)
    assert main(["history", "compact", "--keep-runs", "1"]) == 0
    assert (project / HISTORY).read_bytes().endswith(torn)  # no run's line: in place
    append_grades([grade("t::0", 99, "run-3")], project / HISTORY)
    assert main(["history", "restore"]) == 0
    # The append started on a line of its own, as it does on the uncompacted file.
    assert (project / HISTORY).read_bytes() == original + b"\n" + line("t::0", 99, "run-3")


def test_dry_run_lists_the_runs_it_would_move_and_changes_nothing(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = runs_history(project, 3)
    store_before = (project / STORE).read_bytes()
    assert main(["history", "compact", "--keep-runs", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:2] == [
        "would archive run run-0: 2 lines, 2026-01-01T00:00:00.000Z to 2026-01-01T00:01:00.000Z",
        "would archive run run-1: 2 lines, 2026-01-01T00:10:00.000Z to 2026-01-01T00:11:00.000Z",
    ]
    assert out[2].startswith("cleo-grade: would keep 1 run (2 lines), archive 2 runs (4 lines)")
    assert out[2].endswith("(dry run: nothing changed)")
    assert (project / HISTORY).read_bytes() == original
    assert archive_rows(project) == []
    assert (project / STORE).read_bytes() == store_before


def test_a_dry_run_leaves_a_store_of_before_the_archive_unmigrated(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs_history(project, 3)
    conn = sqlite3.connect(project / STORE)
    with conn:  # as a store written before the archive existed
        conn.execute("DROP TABLE history_archive")
        conn.execute("DROP TABLE history_archive_batches")
        conn.execute("DELETE FROM _sqlite_migrations WHERE name = '0004_history_archive'")
    conn.close()
    before = (project / STORE).read_bytes()
    assert main(["history", "compact", "--keep-runs", "1", "--dry-run"]) == 0
    assert main(["history", "restore", "--dry-run"]) == 0
    assert (project / STORE).read_bytes() == before
    assert capsys.readouterr().out.splitlines()[-1].startswith("cleo-grade: nothing to restore")
    assert main(["history", "compact", "--keep-runs", "1"]) == 0  # migrates, then archives
    assert len(archive_rows(project)) == 4


def test_nothing_to_archive_when_the_history_holds_no_more_runs_than_kept(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = runs_history(project, 2)
    assert main(["history", "compact", "--keep-runs", "5"]) == 0
    assert capsys.readouterr().out == (
        "cleo-grade: nothing to archive: .cleo/metrics/GRADES.jsonl holds 2 runs (4 lines), "
        "--keep-runs 5\n"
    )
    assert (project / HISTORY).read_bytes() == original


@pytest.mark.parametrize("given", ["0", "-1", "1.5", "two", ""], ids=repr)
def test_a_bad_run_count_is_one_line_and_changes_nothing(
    project: Path, capsys: pytest.CaptureFixture[str], given: str
) -> None:
    original = runs_history(project, 3)
    assert main(["history", "compact", f"--keep-runs={given}"]) == 2
    captured = capsys.readouterr()
    assert captured.err == (
        "cleo-grade history compact: argument --keep-runs: invalid run count "
        f"{given!r}: expected a whole number of runs, at least 1\n"
    )
    assert (project / HISTORY).read_bytes() == original


def test_a_missing_history_or_store_is_one_line_naming_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["history", "compact", "--keep-runs", "1", "--db", "x.db"]) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade history compact: {project / HISTORY}: no grade history there\n"
    )
    original = runs_history(project, 3)
    assert main(["history", "compact", "--keep-runs", "1", "--store", "elsewhere.db"]) == 2
    assert capsys.readouterr().err == (
        "cleo-grade history compact: elsewhere.db: no audit store there (name it with --db)\n"
    )
    assert not (project / "elsewhere.db").exists()
    assert main(["history", "restore", "--db", "elsewhere.db"]) == 2
    assert "elsewhere.db: no audit store there" in capsys.readouterr().err
    assert (project / HISTORY).read_bytes() == original


def test_a_store_or_a_history_that_is_not_one_is_refused_untouched(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = runs_history(project, 3)
    # The history named as the store: no store there, and no history rewritten.
    assert main(["history", "compact", "--keep-runs", "1", "--db", str(HISTORY)]) == 2
    assert "not a usable SQLite database" in capsys.readouterr().err
    # The store named as the history.
    assert main(["history", "compact", "--keep-runs", "1", "--history", str(STORE)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cleo-grade: error: .cleo/audit.db: an SQLite database")
    assert err.count("\n") == 1
    (project / "dir.jsonl").mkdir()
    assert main(["history", "compact", "--keep-runs", "1", "--history", "dir.jsonl"]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert (project / HISTORY).read_bytes() == original
    assert archive_rows(project) == []


def test_a_history_that_is_a_symbolic_link_is_never_rewritten_through_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = runs_history(project, 3)
    (project / "elsewhere.jsonl").write_bytes(original)
    (project / HISTORY).unlink()
    (project / HISTORY).symlink_to(project / "elsewhere.jsonl")
    assert main(["history", "compact", "--keep-runs", "1"]) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade history compact: {project / HISTORY}: is a symbolic link; refusing to "
        "write through it (remove it or name the real file)\n"
    )
    assert (project / "elsewhere.jsonl").read_bytes() == original
    assert (project / HISTORY).is_symlink()


def test_a_store_of_a_newer_version_is_refused_before_the_history_changes(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = runs_history(project, 3)
    conn = sqlite3.connect(project / STORE)
    with conn:
        conn.execute(
            "INSERT INTO _sqlite_migrations (migration_set, name, applied_at) "
            "VALUES ('pytest_cleo_grade', '9999_from_the_future', 'now')"
        )
    conn.close()
    assert main(["history", "compact", "--keep-runs", "1"]) == 2
    assert "written by a newer pytest-cleo-grade" in capsys.readouterr().err
    assert (project / HISTORY).read_bytes() == original


def test_a_full_disk_beside_the_history_changes_neither_it_nor_the_store(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import tempfile

    original = runs_history(project, 3)

    def full(*args: object, **kwargs: object) -> tuple[int, str]:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tempfile, "mkstemp", full)
    assert main(["history", "compact", "--keep-runs", "1"]) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade: error: {project / HISTORY}: cannot write a file beside it: No space left on "
        "device: nothing changed\n"
    )
    assert (project / HISTORY).read_bytes() == original
    assert archive_rows(project) == []


def test_a_crash_before_the_replace_archives_nothing_twice(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = runs_history(project, 4)
    real = os.replace

    def killed(source: object, target: object) -> None:
        raise KeyboardInterrupt  # the process dies between the archive's commit and here

    monkeypatch.setattr(os, "replace", killed)
    assert main(["history", "compact", "--keep-runs", "1"]) == 130
    monkeypatch.setattr(os, "replace", real)
    assert (project / HISTORY).read_bytes() == original  # the old file, whole
    assert len(archive_rows(project)) == 6  # committed, as pending
    assert [p.name for p in (project / HISTORY).parent.iterdir()] == ["GRADES.jsonl"]
    capsys.readouterr()
    assert main(["history", "compact", "--keep-runs", "1"]) == 0
    assert "(settled 1 interrupted batch)" in capsys.readouterr().out
    rows = archive_rows(project)
    assert len(rows) == 6 and len({row[0] for row in rows}) == 1  # once, in one batch
    assert merged((project / HISTORY).read_bytes(), rows) == original


def test_a_crash_right_after_the_replace_is_settled_as_done(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    original = runs_history(project, 4)
    real = os.replace

    def replaced_then_killed(source: str, target: str) -> None:
        real(source, target)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", replaced_then_killed)
    assert main(["history", "compact", "--keep-runs", "1"]) == 130
    monkeypatch.setattr(os, "replace", real)
    assert len(read_grades(project / HISTORY)) == 2  # the new file
    assert main(["history", "compact", "--keep-runs", "1"]) == 0
    assert "nothing to archive" in capsys.readouterr().out
    assert len(archive_rows(project)) == 6
    assert main(["history", "restore"]) == 0
    assert (project / HISTORY).read_bytes() == original


def test_a_crash_during_a_restore_neither_loses_nor_doubles_a_line(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = runs_history(project, 4)
    assert main(["history", "compact", "--keep-runs", "1"]) == 0
    compacted = (project / HISTORY).read_bytes()
    real = os.replace
    for crash_after_replace in (False, True):

        def killed(source: str, target: str, after: bool = crash_after_replace) -> None:
            if after:
                real(source, target)
            raise KeyboardInterrupt

        monkeypatch.setattr(os, "replace", killed)
        assert main(["history", "restore"]) == 130
        monkeypatch.setattr(os, "replace", real)
        assert [p.name for p in (project / HISTORY).parent.iterdir()] == ["GRADES.jsonl"]
        if not crash_after_replace:
            assert (project / HISTORY).read_bytes() == compacted
            assert len(archive_rows(project)) == 6
    assert (project / HISTORY).read_bytes() == original
    assert main(["history", "restore"]) == 0  # settles the batch the crash left
    assert (project / HISTORY).read_bytes() == original
    assert archive_rows(project) == []


def test_a_history_replaced_since_gets_its_archived_lines_back_before_it(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = runs_history(project, 3)
    assert main(["history", "compact", "--keep-runs", "1"]) == 0
    (project / HISTORY).unlink()  # a CI cache that kept the store, not the history
    newer = line("t::0", 500, "run-9")
    append_grades([grade("t::0", 500, "run-9")], project / HISTORY)
    capsys.readouterr()
    assert main(["history", "restore"]) == 0
    err = capsys.readouterr().err
    assert "no longer starts with the lines compact kept" in err
    assert (project / HISTORY).read_bytes() == original[: len(original) // 3 * 2] + newer


def test_a_run_asked_for_by_id_after_it_was_archived_says_where_it_went(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs_history(project, 3)
    assert main(["history", "compact", "--keep-runs", "1"]) == 0
    capsys.readouterr()
    hint = (
        "run run-0 is archived (2 lines in .cleo/audit.db, moved there by `cleo-grade "
        "history compact`): `cleo-grade history restore` puts it back"
    )
    assert main(["report", "--run-id", "run-0"]) == 2
    assert capsys.readouterr().err == f"cleo-grade report: --run-id: {hint}\n"
    assert main(["regrade", "--run-id", "run-0"]) == 2
    assert capsys.readouterr().err == f"cleo-grade regrade: {hint}\n"
    assert main(["report", "--run-id", "run-7"]) == 2  # never there: as before
    assert capsys.readouterr().err == (
        "cleo-grade report: --run-id: no grades of run run-7 in the history\n"
    )
    assert main(["history", "restore"]) == 0
    assert main(["report", "--run-id", "run-0"]) == 0


def test_history_help_lists_its_actions(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["history", "compact", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for option in ("--keep-runs N", "--history PATH", "--dry-run"):
        assert option in out
    # Python 3.13's argparse names a metavar once for all of an option's spellings.
    assert re.search(r"--db( PATH)?, --store PATH", out), out


@pytest.mark.parametrize("seed", range(6))
def test_any_mix_of_runs_compactions_and_appends_restores_to_the_very_bytes(
    project: Path, capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    import random

    chance = random.Random(seed)
    runs = [None, *(f"run-{n}" for n in range(6))]
    junk = [b"\n", b"garbage\n", b"[1, 2]\n", b'{"runId": "run-1"}\n', b"\x80\x81\n"]

    def some_lines(count: int, at: int) -> bytes:
        return b"".join(
            chance.choice(junk)
            if chance.random() < 0.1
            else line(f"t::{chance.randrange(4)}", at + i, chance.choice(runs))
            for i in range(count)
        )

    expected = write(project, some_lines(40, 0))
    for round_ in range(3):
        keep = chance.randrange(1, 5)
        assert main(["history", "compact", "--keep-runs", str(keep)]) == 0
        appended = some_lines(chance.randrange(0, 8), 100 * (round_ + 1))
        with (project / HISTORY).open("ab") as history:
            history.write(appended)
        expected += appended
    assert archive_rows(project)  # something to undo (most seeds: several batches)
    capsys.readouterr()
    assert main(["history", "restore"]) == 0
    assert (project / HISTORY).read_bytes() == expected
    assert archive_rows(project) == []


def _shape(text: str) -> str:
    """A line with its numbers, run ids, times and sizes made alike."""
    text = re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "TIME", text)
    text = re.sub(r"\b(github|run)-[\w-]+", "RUN", text)
    text = re.sub(r"[\d,.]+ (MB|kB|B)\b", "SIZE", text)
    return re.sub(r"\d[\d,]*", "N", text)


def test_the_ci_pages_compact_transcript_is_what_the_command_prints(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "ci.md").read_text(encoding="utf-8")
    block = page.split("$ cleo-grade history compact --keep-runs 20 --dry-run\n", 1)[1]
    block = block.split("\n```", 1)[0]
    shown = [_shape(text) for text in block.splitlines() if text != "..."]
    runs_history(project, 4)
    real: list[str] = []
    for argv in (["--dry-run"], [], []):
        assert main(["history", "compact", "--keep-runs", "2", *argv]) == 0
        real.append(
            f"$ cleo-grade history compact --keep-runs 20{' ' if argv else ''}{''.join(argv)}"
        )
        real.extend(capsys.readouterr().out.splitlines())
    assert shown == [_shape(text) for text in real[1:]]
    hint = page.split("$ cleo-grade report --run-id github-9100037-1\n", 1)[1].split("\n", 1)[0]
    assert main(["report", "--run-id", "run-0"]) == 2
    assert _shape(capsys.readouterr().err.rstrip("\n")) == _shape(hint)


def test_a_run_id_that_drives_a_terminal_is_printed_inert(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write(project, line("t::a", 1, "\x1b]0;pwned\x07\x1b[2J") + line("t::a", 2, "run-2"))
    assert main(["history", "compact", "--keep-runs", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert out.startswith("would archive run ")
