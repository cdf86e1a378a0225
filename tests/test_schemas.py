"""The published JSON Schemas: generated from the models, and real output validates."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from pytest_cleo_grade import grade_entries
from pytest_cleo_grade.schemas import render_schemas
from tests.entries import NOW, entry, sequence

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


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
