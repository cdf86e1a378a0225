"""Graded calls read from JSON lines without models equal those of validated entries."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.cli._grading import grade_entries_file
from pytest_cleo_grade.core.errors import EntryError
from pytest_cleo_grade.core.models import GradeResult, validate_entry_dicts
from pytest_cleo_grade.rubrics import _fast_calls
from pytest_cleo_grade.rubrics._cleo_calls import graded_call
from pytest_cleo_grade.rubrics._fast_calls import calls_of_lines
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.store.sources import load_entries_file


@pytest.fixture(autouse=True, params=["orjson", "json"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test reads its lines with orjson (the fast extra) and with the pure fallback."""
    if request.param == "json":
        monkeypatch.setattr(_fast_calls, "_FAST_LOADS", None)
    elif _fast_calls._FAST_LOADS is None:
        pytest.skip("orjson (the fast extra) is not installed here: the json module reads")
    return str(request.param)


USUAL = [
    {
        "timestamp": "2026-03-01T12:00:00Z",
        "sessionId": "s1",
        "domain": "session",
        "operation": "list",
        "params": None,
        "result": {"success": True, "exitCode": 0, "duration": 3},
        "metadata": {"source": "mcp", "gateway": "cleo_query"},
        "error": None,
    },
    {
        "timestamp": "2026-03-01T12:00:01.123456+02:00",  # an offset; microseconds dropped
        "domain": "tasks",
        "operation": "add",
        "params": {"title": " Fix Login ", "description": "\ufeff", "parent": "T1"},
        "result": {"success": True},
    },
    {
        "timestamp": "2026-03-01T12:00:02.5Z",
        "sessionId": "s1",
        "domain": "tasks",
        "operation": "show",
        "params": {"taskId": "T404", "deep": {"list": [1, 2.5, None]}},
        "result": {"success": False, "exitCode": 4, "duration": 1.5},
        "metadata": {"taskId": "T404", "userId": None},
        "error": "E_NOT_FOUND",
    },
]


def lines_of(entries: list[dict[str, object]]) -> list[bytes]:
    return [json.dumps(entry).encode() for entry in entries]


def test_the_usual_lines_give_the_calls_of_their_validated_entries() -> None:
    read = calls_of_lines(lines_of(USUAL))
    assert read is not None
    entries = validate_entry_dicts(USUAL)
    assert read == ([e.session_id for e in entries], [graded_call(e) for e in entries])


@pytest.mark.parametrize(
    "odd",
    [
        {"timestamp": "2026-03-01 12:00:00Z"},  # a space, which pydantic reads
        {"timestamp": "2026-03-01T12:00:00"},  # no timezone: the models' error
        {"timestamp": 1767225600},
        {"session_id": "s1"},  # the field's name, not its alias
        {"extra": 1},
        {"domain": ""},
        {"result": {"success": 1}},
        {"result": {"success": True, "exitCode": True}},
        {"result": {"success": True, "duration": -1}},
        {"metadata": {"source": "mcp", "custom": "kept by the model"}},
        {"params": []},
        {"metadata": None},
    ],
)
def test_any_other_shape_is_left_to_the_models(odd: dict[str, object]) -> None:
    line = {**USUAL[0], **odd}
    assert calls_of_lines(lines_of([USUAL[1], line])) is None


def test_an_integer_too_long_to_read_back_is_left_to_the_models() -> None:
    line = json.dumps(USUAL[0]).encode().replace(b'"params": null', b'"params": {"n": 1}')
    assert calls_of_lines([line]) is not None
    assert calls_of_lines([line.replace(b'"n": 1', b'"n": ' + b"1" * 5000)]) is None


def test_a_file_grades_the_same_through_either_path_and_errors_name_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    usual = tmp_path / "usual.jsonl"
    usual.write_text("".join(json.dumps({**e, "sessionId": "s1"}) + "\n" for e in USUAL))
    mixed = tmp_path / "mixed.jsonl"  # one odd line: its batch goes through the models
    mixed.write_text(
        usual.read_text()
        + json.dumps({**USUAL[0], "sessionId": "s1", "timestamp": "2026-03-01 12:00:03Z"})
        + "\n"
    )
    for path in (usual, mixed):
        entries = validate_entry_dicts([json.loads(line) for line in path.read_text().splitlines()])
        expected = grade_entries(entries, session_id="s1")
        got = grade_entries_file(str(path))
        assert got.model_dump(exclude={"timestamp"}) == expected.model_dump(exclude={"timestamp"})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(usual.read_text() + json.dumps({**USUAL[0], "timestamp": "noon"}) + "\n")
    assert main(["grade", "--entries", str(bad), "--no-save"]) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade: error: {bad}:4: timestamp: must be an ISO 8601 date and time with a "
        "timezone (2026-03-01T12:00:00Z), not 'noon'\n"
    )


def varied(i: int) -> dict[str, object]:
    """Entries of the shapes the fast path reads: metadata or none, failures, adds, offsets."""
    entry: dict[str, object] = {
        "timestamp": f"2026-03-01T10:{i // 60 % 60:02d}:{i % 60:02d}.{i % 1000:03d}Z",
        "sessionId": f"s{i % 3}" if i % 11 else None,
        "domain": ("tasks", "session", "admin")[i % 3],
        "operation": ("add", "list", "help", "find")[i % 4],
        "params": {
            "title": [f" T{i % 7} ", i, 2.5, None, True, ""][i % 6],
            "description": ["", " ", "why", 0, [], {"a": 1}][i % 6],
            "parent": [None, "T1", "", 0][i % 4],
            "nested": {"deep": [i, {"x": i / 7, "big": 2**63 + i}]},
        },
        "result": {"success": i % 5 != 0, "exitCode": 0 if i % 5 else 4, "duration": i % 13},
    }
    if i % 4 == 0:
        entry["metadata"] = {"gateway": "cleo_query", "taskId": f"T{i}", "userId": None}
    if i % 9 == 0:
        entry["timestamp"] = "2026-03-01T12:00:00.250+02:00"
    if i % 5 == 0:
        entry["error"] = "E_NOT_FOUND: no such task"
    return entry


def test_varied_lines_give_the_calls_of_their_validated_entries() -> None:
    entries = [varied(i) for i in range(600)]
    read = calls_of_lines(lines_of(entries))
    assert read is not None
    validated = validate_entry_dicts(entries)
    assert read == ([e.session_id for e in validated], [graded_call(e) for e in validated])


def test_a_title_too_big_for_orjsons_integers_is_read_as_the_models_read_it(
    tmp_path: Path, parser: str
) -> None:
    # orjson reads 2**64 as a float, whose str() is another title than the models' "1844...":
    # the batch goes the exact way, and the two adds are duplicates as the models see them.
    number = {**USUAL[1], "sessionId": "s1", "params": {"title": 2**64, "description": "d"}}
    text = {**number, "timestamp": "2026-03-01T12:00:05Z", "params": {"title": str(2**64)}}
    read = calls_of_lines(lines_of([number, text]))
    assert (read is None) == (parser == "orjson")
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in (number, text)))
    expected = grade_entries(validate_entry_dicts([number, text]), session_id="s1")
    got = grade_entries_file(str(path))
    assert got.model_dump(exclude={"timestamp"}) == expected.model_dump(exclude={"timestamp"})
    assert "1 potentially duplicate task create(s) detected" in got.flags


LENIENT = {
    "nan": b'"params": {"x": NaN}',
    "infinity": b'"params": {"x": Infinity}',
    "minus-infinity": b'"params": {"x": -Infinity}',
    "overflow": b'"params": {"x": 1e400}',
    "long-float": b'"params": {"x": 1' + b"0" * 400 + b".5}",
    "too-long-int": b'"params": {"x": ' + b"7" * 5000 + b"}",
    "lone-surrogate": b'"params": {"x": "\\udc00"}',
    "invalid-utf8": b'"params": {"x": "\xff"}',
    "deep": b'"params": {"x": ' + b"[" * 200 + b"]" * 200 + b"}",
}


def _outcome(path: Path, grade: Callable[[Path], GradeResult]) -> object:
    try:
        return grade(path).model_dump(exclude={"timestamp"})
    except EntryError as exc:
        return str(exc)


@pytest.mark.parametrize("lenient", sorted(LENIENT))
@pytest.mark.parametrize("blank", [b"", b" \t"], ids=["no-blank", "blank-line"])
def test_a_line_json_reads_leniently_grades_or_fails_as_the_models_read_it(
    tmp_path: Path, lenient: str, blank: bytes
) -> None:
    # Through the fast path (with orjson, which refuses these lines itself, only the nesting
    # is checked first) and through the models alone, the same grade or the same error.
    usual = b"".join(json.dumps({**e, "sessionId": "s1"}).encode() + b"\n" for e in USUAL)
    odd = json.dumps({**USUAL[0], "sessionId": "s1"}).encode()
    odd = odd.replace(b'"params": null', LENIENT[lenient])
    path = tmp_path / "lenient.jsonl"
    path.write_bytes(usual + (blank + b"\n" if blank else b"") + odd + b"\n")

    def by_models(path: Path) -> GradeResult:
        return grade_entries(load_entries_file(path), session_id="s1")

    assert _outcome(path, lambda p: grade_entries_file(str(p))) == _outcome(path, by_models)
