"""The published JSON Schemas: generated from the models, and real output validates."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from pydantic import BaseModel, ValidationError

from pytest_cleo_grade import grade_entries
from pytest_cleo_grade.core.models import AuditEntry, GradeResult
from pytest_cleo_grade.core.schemas import render_schemas
from tests.entries import NOW, entry, sequence

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def load(name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    return data


@pytest.mark.parametrize("name", ["grade.schema.json", "audit-entry.schema.json"])
def test_committed_schema_matches_the_models(name: str) -> None:
    expected = render_schemas()[name]
    assert (SCHEMAS / name).read_text(encoding="utf-8") == expected, (
        f"schemas/{name} drifted from the models: run `make schemas` and commit"
    )


@pytest.mark.parametrize("name", ["grade.schema.json", "audit-entry.schema.json"])
def test_schemas_are_draft_07_with_a_schema_version(name: str) -> None:
    schema = load(name)
    jsonschema.Draft7Validator.check_schema(schema)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["_meta"] == {
        "schemaVersion": "1.0.0",
        "generatedFrom": schema["_meta"]["generatedFrom"],
    }  # type: ignore[index]


def test_grade_schema_requires_the_seed_000_fields() -> None:
    required = set(load("grade.schema.json")["required"])  # type: ignore[arg-type]
    assert {"sessionId", "totalScore", "maxScore", "dimensions", "timestamp", "entryCount"} <= (
        required
    )


def test_real_grades_validate_against_the_grade_schema() -> None:
    schema = load("grade.schema.json")
    for entries in ([], sequence(("session", "list"), ("tasks", "list"), ("tasks", "add"))):
        result = grade_entries(entries, session_id="s1", now=NOW)
        jsonschema.validate(result.to_json_dict(), schema, cls=jsonschema.Draft7Validator)


def test_cleo_entries_validate_against_the_entry_schema_and_bad_ones_do_not() -> None:
    schema = load("audit-entry.schema.json")
    good = entry("tasks", "find", gateway="query", source="dispatch")
    jsonschema.validate(good, schema, cls=jsonschema.Draft7Validator)
    bad = dict(good, result={"exitCode": 4})
    with pytest.raises(jsonschema.ValidationError, match="success"):
        jsonschema.validate(bad, schema, cls=jsonschema.Draft7Validator)


GRADE = {
    "sessionId": "s",
    "totalScore": 5,
    "maxScore": 100,
    "dimensions": {},
    "flags": [],
    "timestamp": "2026-03-01T12:00:00.000Z",
    "entryCount": 0,
    "evaluator": "auto",
}


def schema_accepts(name: str, data: dict[str, object]) -> bool:
    return jsonschema.Draft7Validator(load(name)).is_valid(data)


def model_accepts(model: type[BaseModel], data: dict[str, object]) -> bool:
    try:
        model.model_validate(data)
    except ValidationError:
        return False
    return True


@pytest.mark.parametrize(
    ("change", "valid"),
    [
        ({"totalScore": -5}, False),
        ({"totalScore": -0.5}, False),
        ({"totalScore": 0}, True),
        ({"maxScore": 0}, False),
        ({"maxScore": -1}, False),
        ({"maxScore": 0.5, "totalScore": 0.25}, True),
    ],
)
def test_the_grade_schema_refuses_the_scores_the_model_refuses(
    change: dict[str, object], valid: bool
) -> None:
    grade = {**GRADE, **change}
    assert model_accepts(GradeResult, grade) is valid
    assert schema_accepts("grade.schema.json", grade) is valid


@pytest.mark.parametrize(
    ("params", "valid"),
    [(None, True), ({}, True), ({"title": "x"}, True), ([], False), ("x", False)],
    ids=["null", "empty", "object", "array", "string"],
)
def test_the_entry_schema_takes_the_params_the_model_takes(params: object, valid: bool) -> None:
    data = {
        "timestamp": "2026-03-01T12:00:00Z",
        "domain": "tasks",
        "operation": "find",
        "params": params,
        "result": {"success": True},
    }
    assert model_accepts(AuditEntry, data) is valid
    assert schema_accepts("audit-entry.schema.json", data) is valid


def test_no_published_schema_carries_a_word_no_draft_07_validator_knows() -> None:
    known = {*jsonschema.Draft7Validator.META_SCHEMA["properties"], "_meta"}

    def unknown(node: object) -> list[str]:
        if isinstance(node, list):
            return [word for item in node for word in unknown(item)]
        if not isinstance(node, dict):
            return []
        words = [key for key in node if key not in known]
        for key, value in node.items():
            if key in ("properties", "definitions"):
                words += [word for item in value.values() for word in unknown(item)]
            elif key not in ("_meta", "default", "enum", "const", "examples"):
                words += unknown(value)
        return words

    for name in ("grade.schema.json", "audit-entry.schema.json"):
        assert unknown(load(name)) == [], name
