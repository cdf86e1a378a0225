"""Hostile-input fuzzing of entry files and history lines: seeded mutations of valid files,
run through the real CLI; every case exits 0, 1 or 2 with at most one-line errors and never a
traceback, and an import that succeeds always leaves gradable sessions."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.store import AuditStore
from tests.entries import entry, sequence

#: Values a hostile agent or a broken writer can put anywhere in a JSON document.
NASTY_VALUES = [
    "[" * 5000 + "]" * 5000,
    "{" * 300,
    '{"a":' * 150 + "1" + "}" * 150,
    "9" * 400,
    "-" + "9" * 30,
    "1e999",
    "-1e999",
    "NaN",
    "Infinity",
    "-0",
    "1e-400",
    '"\\ud800"',
    '"\\udfff\\ud800"',
    '"\\u0000\\u001b[31m"',
    '"\u2028\u2029\u0085"',
    "null",
    "true",
    "[]",
    "{}",
    '""',
    '"' + "x" * 20000 + '"',
    "18446744073709551616",
    "-9223372036854775809",
    "0.1e1",
    '"2026-13-45T99:99:99Z"',
    '"2026-03-01T12:00:00"',
    '"0001-01-01T00:30:00+01:00"',
    '"9999-12-31T23:59:59-01:00"',
]
NASTY_BYTES = [
    b"\x00",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\x0b",
    b"\x0c",
    b"\r",
    b"\n",
    b"\xe2\x80\xa8",
    b"\xc2\x85",
    b"\xef\xbb\xbf",
    b"\x1b[2J",
    b",",
    b"}",
    b"]",
    b'"',
    b"\\",
]


def _replace_a_value(rng: random.Random, text: str) -> str:
    """Put a nasty value where a JSON value was (after a random colon)."""
    colons = [i for i, c in enumerate(text) if c == ":"]
    if not colons:
        return text
    at = rng.choice(colons) + 1
    end = at
    depth = 0
    in_string = False
    while end < len(text):
        c = text[end]
        if in_string:
            if c == "\\":
                end += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
        elif c in "]}":
            if depth == 0:
                break
            depth -= 1
        elif c == "," and depth == 0:
            break
        end += 1
    return text[:at] + rng.choice(NASTY_VALUES) + text[end:]


def mutate(rng: random.Random, data: bytes) -> bytes:
    """One to three random mutations of a file's bytes."""
    for _ in range(rng.choice((1, 1, 2, 3))):
        # Value replacements dominate: they keep the file parseable, so the values reach
        # validation, the store and grading instead of stopping at the JSON parser.
        kind = rng.choice((0, 1, 2, 3, 3, 3, 3, 3, 4, 5))
        if kind == 0 and data:
            at = rng.randrange(len(data))
            data = data[:at] + bytes([rng.randrange(256)]) + data[at + 1 :]
        elif kind == 1:
            at = rng.randrange(len(data) + 1)
            data = data[:at] + rng.choice(NASTY_BYTES) + data[at:]
        elif kind == 2 and data:
            data = data[: rng.randrange(len(data))]
        elif kind == 3:
            lines = data.split(b"\n")
            line = rng.randrange(len(lines))
            text = lines[line].decode("utf-8", "surrogateescape")
            lines[line] = _replace_a_value(rng, text).encode("utf-8", "surrogateescape")
            data = b"\n".join(lines)
        elif kind == 4:
            lines = data.split(b"\n")
            rng.shuffle(lines)
            data = b"\n".join(lines + lines[: rng.randrange(3)])
        else:
            data = b"[" + b",".join(line for line in data.split(b"\n") if line) + b"]"
    return data


def entries_file() -> bytes:
    add = entry("tasks", "add", params={"title": "Fix", "parent": "T1", "tags": ["a", {"b": 1}]})
    items: list[dict[str, Any]] = sequence(
        ("session", "list"), ("tasks", "find"), add, ("tasks", "show"), ("session", "end")
    )
    return "\n".join(json.dumps(item, ensure_ascii=False) for item in items).encode() + b"\n"


def history_file() -> bytes:
    line = {
        "sessionId": "s1",
        "totalScore": 85,
        "maxScore": 100,
        "dimensions": {"sessionDiscipline": {"score": 20, "max": 20, "evidence": ["ok"]}},
        "flags": ["a flag"],
        "timestamp": "2026-03-01T12:00:00.000Z",
        "entryCount": 3,
        "evaluator": "auto",
    }
    lines = [json.dumps({**line, "sessionId": f"s{i}"}) for i in range(3)]
    return ("\n".join(lines) + "\n").encode()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(list(argv))  # a traceback would surface here as an exception
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    return tmp_path


@pytest.mark.parametrize("seed", range(160))
def test_a_mutated_entry_file_imports_or_fails_in_one_line_and_stays_gradable(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, seed: int
) -> None:
    rng = random.Random(seed)
    path = in_tmp / "e.jsonl"
    path.write_bytes(mutate(rng, entries_file()))
    status, _, err = run(capsys, "grade", "--entries", "e.jsonl", "--no-save")
    assert status in (0, 2), err
    if status == 2:
        assert len(err.splitlines()) == 1, err
    status, _, err = run(capsys, "import", "e.jsonl", "--db", "a.db")
    assert status in (0, 2), err
    if status == 2:
        assert len(err.splitlines()) == 1, err
        assert not (in_tmp / "a.db").exists()
        return
    # What was imported can always be graded again: the session stays gradable.
    with AuditStore(in_tmp / "a.db", read_only=True) as store:
        sessions = store.session_ids()
    for session in sessions:
        status, _, err = run(capsys, "grade", session, "--db", "a.db", "--no-save")
        assert status == 0, err


@pytest.mark.parametrize("seed", range(160))
def test_a_mutated_history_lists_what_it_can_and_warns_about_the_rest(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, seed: int
) -> None:
    rng = random.Random(10_000 + seed)
    (in_tmp / "G.jsonl").write_bytes(mutate(rng, history_file()))
    for argv in (
        ["list"],
        ["list", "--json"],
        ["junit", "out.xml", "--fail-under", "B"],
        ["query", "admin", "grade.list"],
    ):
        status, out, err = run(capsys, *argv, "--history", "G.jsonl")
        assert status in (0, 1), (argv, err)
        assert all(line.startswith("cleo-grade: warning: G.jsonl:") for line in err.splitlines())
        if argv[-1] == "--json" or argv[0] == "query":
            json.loads(out)


def test_an_imported_session_with_an_empty_id_can_be_graded(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    # Found by the fuzzing above (seed 1117 of a longer run): "" was taken for no id at all.
    items = sequence(("session", "list"), ("tasks", "find"))
    (in_tmp / "e.jsonl").write_text("\n".join(json.dumps({**i, "sessionId": ""}) for i in items))
    assert run(capsys, "import", "e.jsonl", "--db", "a.db")[0] == 0
    status, out, err = run(capsys, "grade", "", "--db", "a.db", "--no-save", "--json")
    assert (status, err) == (0, "")
    assert json.loads(out)["entryCount"] == 2


def test_an_overflowing_number_in_params_is_refused_where_it_enters(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    # Found by the fuzzing above (seed 17): 1e999 was read as infinity, stored as the bare
    # word Infinity, and the session could never be graded again.
    item = sequence(("tasks", "find"))[0]
    for number in ("1e999", "-1E+400", "9" * 400 + ".0"):
        text = json.dumps({**item, "params": {"n": "N"}}).replace('"N"', number)
        (in_tmp / "e.jsonl").write_text(text + "\n")
        status, _, err = run(capsys, "import", "e.jsonl", "--db", "a.db")
        assert status == 2
        assert err.startswith("cleo-grade: error: e.jsonl:1: invalid JSON: the number")
        assert "out of range" in err
    assert not (in_tmp / "a.db").exists()
