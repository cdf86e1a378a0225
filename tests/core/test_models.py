"""The data model: CLEO-shaped JSON in and out, strict inputs, letters and rounding."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_cleo_grade import AuditEntry, GradeResult, letter_for
from pytest_cleo_grade.core.models import round_half_up
from tests.entries import entry


@pytest.mark.parametrize(
    ("percent", "letter"),
    [
        (100, "A"),
        (90, "A"),
        (89.99, "B"),
        (75, "B"),
        (74.99, "C"),
        (60, "C"),
        (59.99, "D"),
        (45, "D"),
        (44.99, "F"),
        (0, "F"),
    ],
)
def test_letters_compare_the_exact_percentage_with_the_cutoffs(percent: float, letter: str) -> None:
    assert letter_for(percent) == letter


def test_letter_of_nan_is_an_error() -> None:
    with pytest.raises(ValueError, match="NaN"):
        letter_for(math.nan)


@pytest.mark.parametrize(
    ("value", "rounded"), [(82.5, 83), (0.5, 1), (2.5, 3), (89.49, 89), (89.5, 90)]
)
def test_display_rounding_is_half_up_not_bankers(value: float, rounded: int) -> None:
    assert round_half_up(value) == rounded


def test_huge_scores_display_without_error_and_an_overflowing_percentage_is_invalid() -> None:
    assert round_half_up(1e300) == 10**300
    grade = {"sessionId": "s", "dimensions": {}, "timestamp": "2026-03-01T12:00:00Z"}
    huge = GradeResult.model_validate({**grade, "totalScore": 1e300, "entryCount": 1})
    assert (huge.display_percent, huge.letter) == (10**300, "A")
    with pytest.raises(ValidationError, match="not a finite percentage"):
        GradeResult.model_validate(
            {**grade, "totalScore": 1e308, "maxScore": 1e-300, "entryCount": 1}
        )


def test_display_percent_rounds_half_up_while_the_letter_uses_the_exact_value() -> None:
    result = GradeResult.model_validate(
        {
            "sessionId": "s",
            "totalScore": 89.5,
            "maxScore": 100,
            "dimensions": {},
            "timestamp": "2026-03-01T12:00:00Z",
            "entryCount": 1,
        }
    )
    assert (result.display_percent, result.letter) == (90, "B")


@pytest.mark.parametrize("source", ["cli", "mcp", "rpc", "http", "dispatch"])
@pytest.mark.parametrize("gateway", ["cleo_query", "cleo_mutate", "query", "mutate", None])
def test_cleo_entries_load_unchanged(source: str, gateway: str | None) -> None:
    raw = entry("tasks", "find", source=source, gateway=gateway, task_id="T9")
    raw["metadata"]["role"] = "worker"
    parsed = AuditEntry.model_validate(raw)
    dumped = parsed.to_json_dict()
    assert dumped["metadata"] == raw["metadata"]
    assert (dumped["timestamp"], dumped["sessionId"], dumped["result"]) == (
        "2026-03-01T12:00:00.000Z",
        "s1",
        {"success": True, "exitCode": 0, "duration": 3},
    )


def test_entries_populate_by_snake_case_name_too() -> None:
    parsed = AuditEntry(
        timestamp="2026-03-01T12:00:00+00:00",  # type: ignore[arg-type]
        session_id="s",
        domain="tasks",
        operation="skill.show",
        result={"success": True, "exit_code": 4},  # type: ignore[arg-type]
    )
    assert (parsed.session_id, parsed.result.exit_code, parsed.metadata.source) == ("s", 4, "mcp")


def test_timestamps_are_serialised_as_utc_with_milliseconds() -> None:
    raw = entry("tasks", "find")
    raw["timestamp"] = "2026-03-01T14:00:00.123456+02:00"
    assert AuditEntry.model_validate(raw).to_json_dict()["timestamp"] == "2026-03-01T12:00:00.123Z"


@pytest.mark.parametrize("stamp", [1e12, 1700000000, "1700000000", "-1", True])
def test_a_number_is_not_a_timestamp(stamp: object) -> None:
    # pydantic would read Unix time, guessing seconds or milliseconds (1e12 -> 2001).
    raw = entry("tasks", "find")
    raw["timestamp"] = stamp
    with pytest.raises(ValidationError, match="must be an ISO 8601 date and time"):
        AuditEntry.model_validate(raw)


def test_timestamps_are_kept_to_the_millisecond_the_store_keeps() -> None:
    raw = entry("tasks", "find")
    raw["timestamp"] = "2026-03-01T12:00:00.123999Z"
    stamp = AuditEntry.model_validate(raw).timestamp
    assert (stamp.second, stamp.microsecond) == (0, 123000)


def test_timestamps_before_year_1000_serialise_with_four_digit_years_and_round_trip() -> None:
    raw = entry("tasks", "find")
    raw["timestamp"] = "0005-03-01T12:00:00.123+01:00"
    parsed = AuditEntry.model_validate(raw)
    assert parsed.to_json_dict()["timestamp"] == "0005-03-01T11:00:00.123Z"
    assert AuditEntry.model_validate(parsed.to_json_dict()) == parsed


@pytest.mark.parametrize("stamp", ["0001-01-01T00:30:00+01:00", "9999-12-31T23:30:00-01:00"])
def test_a_timestamp_that_utc_cannot_hold_is_a_validation_error(stamp: str) -> None:
    raw = entry("tasks", "find")
    raw["timestamp"] = stamp
    assert invalid(raw) == "timestamp"
    grade = {
        "sessionId": "s",
        "totalScore": 1,
        "dimensions": {},
        "timestamp": stamp,
        "entryCount": 1,
    }
    with pytest.raises(ValidationError, match="out of range once converted to UTC"):
        GradeResult.model_validate(grade)


def test_null_params_load_as_an_empty_object() -> None:
    raw = entry("tasks", "find")
    raw["params"] = None
    assert AuditEntry.model_validate(raw).params == {}


def invalid(raw: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as info:
        AuditEntry.model_validate(raw)
    return ".".join(str(p) for p in info.value.errors()[0]["loc"])


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth - 1):
        value = [value]
    return value


def test_a_timestamp_without_timezone_is_rejected() -> None:
    raw = entry("tasks", "find")
    raw["timestamp"] = "2026-03-01T12:00:00"
    assert invalid(raw) == "timestamp"


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1])
def test_durations_must_be_finite_and_non_negative(bad: float) -> None:
    raw = entry("tasks", "find")
    raw["result"]["duration"] = bad
    assert invalid(raw) == "result.duration"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("result", "success"), "yes"),
        (("result", "exitCode"), 4.5),
        # Beyond SQLite's 64-bit INTEGER: it could be graded but never stored.
        (("result", "exitCode"), 2**63),
        (("result", "exitCode"), -(2**63) - 1),
        # Deeper than the store (and the entry files) can carry back.
        (("params",), {"a": _nested(100)}),
        (("domain",), ""),
        (("operation",), None),
    ],
)
def test_malformed_fields_are_rejected_by_name(path: tuple[str, ...], value: object) -> None:
    raw = entry("tasks", "find")
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    assert invalid(raw) == ".".join(path)


def test_the_deepest_params_the_store_carries_are_accepted() -> None:
    raw = entry("tasks", "find")
    raw["params"] = {"a": _nested(99)}  # the params object itself is the 100th level
    assert AuditEntry.model_validate(raw).params == raw["params"]
    assert AuditEntry.model_validate(entry("tasks", "find", exit_code=2**63 - 1))


def test_grade_results_keep_extra_keys_and_drop_empty_task_id() -> None:
    data = {
        "sessionId": "s",
        "totalScore": 85,
        "maxScore": 100,
        "dimensions": {"x": {"score": 5, "max": 20, "evidence": ["e"]}},
        "flags": [],
        "timestamp": "2026-03-01T12:00:00.000Z",
        "entryCount": 47,
        "evaluator": "auto",
        "testId": "tests/test_a.py::test_b",
    }
    result = GradeResult.model_validate(data)
    assert result.to_json_dict() == data
    assert result.to_report_dict()["percent"] == 85
    assert result.to_report_dict()["grade"] == "B"


def test_points_round_trip_through_a_history_line_and_bad_points_are_refused() -> None:
    from pytest_cleo_grade.core.models import Point

    line = {
        "sessionId": "s1",
        "totalScore": 15,
        "dimensions": {"a": {"score": 15, "max": 20, "evidence": []}},
        "timestamp": "2026-03-01T12:00:00.000Z",
        "entryCount": 2,
        "points": [
            {"dimension": "a", "points": 20, "rule": "A1", "text": "start", "entries": []},
            {"dimension": "a", "points": -5, "rule": "A2", "text": "no find", "entries": [1]},
        ],
    }
    result = GradeResult.from_mapping(line)
    assert [p.points for p in result.points] == [20, -5]
    expected = Point(dimension="a", points=-5, rule="A2", text="no find", entries=[1])
    assert result.points[1] == expected
    again = GradeResult.from_mapping(result.to_json_dict())
    assert again.points == result.points
    line["points"] = [{"dimension": "a", "points": float("nan"), "rule": "A1", "text": "x"}]
    with pytest.raises(ValueError, match="finite number"):
        GradeResult.from_mapping(line).points  # noqa: B018
