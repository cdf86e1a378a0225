"""A history line read by pydantic's JSON parser in one pass is the line the strict parse
reads: the same grade, or (when the line needs the strict parse) no shortcut at all."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.store import history
from pytest_cleo_grade.store.history import check_line, grade_line
from tests.entries import NOW, sequence
from tests.store.test_hostile_history import CORRUPT_LINES, GOOD


def _real_line() -> bytes:
    """A CLEO grade as the plugin writes it: evidence, flags, points and run extras."""
    entries = sequence(("session", "list"), ("tasks", "show"), ("tasks", "add"))
    grade = grade_entries(entries, session_id="s-1", now=NOW)
    extra = {"testId": "tests/test_a.py::test_a[1]", "runId": "run-1", "position": 3}
    return grade_line(GradeResult.model_validate({**grade.to_json_dict(), **extra})).encode()


def _exact(result: GradeResult | str | None) -> str:
    """The outcome with every value's type: 1 and 1.0 must not read alike."""
    if isinstance(result, GradeResult):
        return repr((result.model_dump(), result.model_extra))
    return repr(result)


def _strict(raw: bytes) -> str:
    checked = history._strict_grade(raw)
    return _exact(checked if isinstance(checked, str) else history._usable(checked))


def _assert_alike(raw: bytes) -> None:
    plain = history._plain_grade(raw)
    if plain is not None:
        assert _exact(history._usable(plain)) == _strict(raw), raw[:200]
    assert _exact(check_line(2, raw)) == _strict(raw), raw[:200]


def test_a_real_grade_line_takes_the_one_pass_parse_and_reads_as_the_strict_one() -> None:
    raw = _real_line()
    plain = history._plain_grade(raw)
    assert plain is not None
    assert plain.dimensions and plain.flags  # the line holds what every reader shows
    _assert_alike(raw)


#: Lines the strict parse reads or refuses in its own way, valid JSON every one.
_EDGE_LINES: dict[str, dict[str, Any] | str] = {
    "duplicate key, last wins": json.dumps(GOOD)[:-1] + ', "totalScore": 40}',
    "integer extra past 64 bits": {**GOOD, "big": 2**70},
    "99-digit integer extra": {**GOOD, "big": int("9" * 99)},
    "float score": {**GOOD, "totalScore": 85.0},
    "negative zero": {**GOOD, "totalScore": -0.0},
    "tiny float": {**GOOD, "x": 5e-324},
    "largest float": {**GOOD, "x": 1.7976931348623157e308},
    "escaped control": {**GOOD, "flags": ["a\u0000b\u001b[31m"]},
    "non-ascii": {**GOOD, "flags": ["é 日本 🚀"]},
    "surrogate pair escaped": json.dumps({**GOOD, "flags": ["🚀"]}, ensure_ascii=True),
    "score as a string": {**GOOD, "totalScore": "85"},
    "float entry count": {**GOOD, "entryCount": 3.0},
    "unix timestamp": {**GOOD, "timestamp": 1772366400},
    "naive timestamp": {**GOOD, "timestamp": "2026-03-01T12:00:00"},
    "microseconds": {**GOOD, "timestamp": "2026-03-01T12:00:00.123456+02:00"},
    "flag mentions NaN": {**GOOD, "flags": ["NaN and Infinity were sent"]},
    "NaN extra": json.dumps(GOOD)[:-1] + ', "x": NaN}',
    "Infinity extra": json.dumps(GOOD)[:-1] + ', "x": -Infinity}',
    "overflowing float extra": json.dumps(GOOD)[:-1] + ', "x": 1e400}',
    "overflowing long float extra": json.dumps(GOOD)[:-1] + f', "x": {"9" * 320}.5}}',
    "5000-digit integer extra": json.dumps(GOOD)[:-1] + f', "x": {"9" * 5000}}}',
    "lone surrogate in a flag": json.dumps(GOOD)[:-1] + ', "flags": ["\\udc80"]}',
    "trailing text": json.dumps(GOOD) + " x",
    "raw tab in a string": json.dumps(GOOD)[:-1] + ', "x": "a\tb"}',
    "array": json.dumps([GOOD]),
    "nested 100 deep": {**GOOD, "x": json.loads("[" * 99 + "]" * 99)},
    "nested 101 deep": {**GOOD, "x": json.loads("[" * 100 + "]" * 100)},
    "dimension without max": {**GOOD, "dimensions": {"a": {"score": 1}}},
    "evaluator unknown": {**GOOD, "evaluator": "llm"},
    "total above max": {**GOOD, "totalScore": 120},
}


@pytest.mark.parametrize(
    "line",
    [*_EDGE_LINES.values(), *CORRUPT_LINES.values()],
    ids=[*_EDGE_LINES, *CORRUPT_LINES],
)
def test_an_edge_line_reads_alike_either_way(line: dict[str, Any] | str) -> None:
    raw = line if isinstance(line, str) else json.dumps(line)
    _assert_alike(raw.encode("utf-8", "surrogateescape"))


def test_a_line_needing_the_strict_parse_never_takes_the_shortcut() -> None:
    for name in ("NaN extra", "Infinity extra", "overflowing float extra", "nested 101 deep"):
        line = _EDGE_LINES[name]
        raw = (line if isinstance(line, str) else json.dumps(line)).encode()
        assert history._plain_grade(raw) is None, name


#: What the mutations splice into a real line: tokens each parser may read its own way.
_SPLICES = (
    b"NaN",
    b"-Infinity",
    b"1e400",
    b"1E-400",
    b"-0",
    b"0.1",
    b"2e5",
    b'"\\ud800"',
    b'"\\u0000"',
    b"\xff",
    b"\xc3\xa9",
    b"\t",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b":",
    b'"',
    b"\\",
    b"null",
    b"true",
    b"99999999999999999999999",
    b'"a":1,',
    b'"totalScore":7,',
)


@pytest.mark.parametrize("seed", range(8))
def test_a_thousand_mutations_of_a_real_line_read_alike_either_way(seed: int) -> None:
    rng = random.Random(seed)
    original = _real_line()
    kinds = {"grade": 0, "refused": 0}
    for _ in range(1000):
        raw = bytearray(original)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(raw))
            if rng.random() < 0.3:
                del raw[at : at + rng.randint(1, 4)]
            else:
                raw[at:at] = rng.choice(_SPLICES)
        _assert_alike(bytes(raw))
        kinds["grade" if isinstance(check_line(2, bytes(raw)), GradeResult) else "refused"] += 1
    # Both outcomes were exercised, not only refusals of broken JSON.
    assert kinds["grade"] > 50 and kinds["refused"] > 50, kinds
