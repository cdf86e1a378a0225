"""Imports stream: memory is bounded by a batch, an early error costs an early read, all or
nothing holds, and only \\n (or \\r\\n) ends a JSONL line."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.sources import load_entries_file, may_overflow


def entry(i: int, session: str = "s1", **params: object) -> dict[str, object]:
    return {
        "timestamp": f"2026-01-01T00:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z",
        "sessionId": session,
        "domain": "tasks",
        "operation": "find",
        "params": {"query": f"q{i}", **params},
        "result": {"success": True, "exitCode": 0, "duration": 1},
    }


def write_jsonl(path: Path, count: int) -> None:
    with path.open("w", encoding="utf-8") as handle:
        for i in range(count):
            handle.write(json.dumps(entry(i)) + "\n")


def test_an_error_on_line_one_is_reported_without_reading_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"{}\n" * 3_000_000)  # 9 MB of entries missing every field
    status = main(["import", str(path), "--db", str(tmp_path / "a.db")])  # a traceback: raised
    err = capsys.readouterr().err
    assert status == 2
    assert f"{path}:1: " in err and "Traceback" not in err
    assert not (tmp_path / "a.db").exists()


def test_a_bad_line_after_the_first_batch_rolls_everything_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "late.jsonl"
    write_jsonl(path, 12_000)
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"timestamp": "not a time"}\n')
    db = tmp_path / "a.db"
    assert main(["import", str(path), "--db", str(db)]) == 2
    assert f"{path}:12001: " in capsys.readouterr().err
    with AuditStore(db) as store:
        assert store.count("s1") == 0


@pytest.mark.parametrize("inside", ["\u2028", "\u2029", "\u0085", "\x0b", "\x0c"])
def test_only_newline_ends_a_jsonl_line(
    tmp_path: Path, inside: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "e.jsonl"
    lines = [json.dumps(entry(i, note=f"a{inside}b"), ensure_ascii=False) for i in range(3)]
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8")
    assert [e.params["note"] for e in load_entries_file(path)] == [f"a{inside}b"] * 3
    db = tmp_path / "a.db"
    assert main(["import", str(path), "--db", str(db)]) == 0
    with AuditStore(db) as store:
        assert [e.params["note"] for e in store.session_entries("s1")] == [f"a{inside}b"] * 3


@pytest.mark.parametrize("seed", range(4))
def test_the_overflow_check_finds_exactly_what_the_number_pattern_finds(seed: int) -> None:
    # The import's fast path asks "could a number here overflow a float?" with translate and
    # substring searches; it must agree with the pattern it stands for on any bytes.
    pattern = re.compile(rb"[0-9][eE][+-]?[0-9]{3}|[0-9]{300}")
    rng = random.Random(seed)
    alphabet = b'0123456789eE+-. x"{}:,\\u'
    for _ in range(2000):
        blob = bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 40)))
        if rng.random() < 0.05:
            blob += b"7" * rng.choice((299, 300, 301))
        assert may_overflow(blob) == bool(pattern.search(blob)), blob
    assert may_overflow(b'{"x": 1e999}') and may_overflow(b'{"x": 2E+308}')
    assert not may_overflow(b'{"x": 1e99, "t": "2026-03-01T12:00:00.000Z"}')
