"""JSON Schemas (draft-07) of the published formats, generated from the pydantic models.

Run ``python -m pytest_cleo_grade.core.schemas DIR`` to (re)write ``DIR/grade.schema.json`` and
``DIR/audit-entry.schema.json``; a test fails when the committed files drift from the models.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel

from pytest_cleo_grade.core.models import AuditEntry, GradeResult

__all__ = ["SCHEMA_FILES", "build_schema", "render_schemas", "write_schemas"]

SCHEMA_VERSION: Final = "1.0.0"
DRAFT_07: Final = "http://json-schema.org/draft-07/schema#"

SCHEMA_FILES: Final[dict[str, tuple[type[BaseModel], Literal["validation", "serialization"]]]] = {
    # A grade is what we write: describe the serialised form.
    "grade.schema.json": (GradeResult, "serialization"),
    # An entry is what we accept: describe what validation takes in.
    "audit-entry.schema.json": (AuditEntry, "validation"),
}


#: pydantic leaves a bound it cannot push into a union's branches (``Field(ge=0)`` on
#: ``int | float``) under its own name, which no JSON Schema validator knows: a published
#: schema would accept what the model refuses.
_PYDANTIC_BOUNDS: Final = {
    "ge": "minimum",
    "gt": "exclusiveMinimum",
    "le": "maximum",
    "lt": "exclusiveMaximum",
}
#: Keywords whose value maps names to schemas (a property may be called "ge").
_NAMED_SCHEMAS: Final = frozenset({"properties", "patternProperties", "$defs", "definitions"})
#: Keywords whose value is data, not a schema: copied as they are.
_DATA: Final = frozenset({"default", "examples", "const", "enum"})


def _draft07(node: Any) -> Any:
    """Rewrite pydantic's 2020-12 output into draft-07 terms ($defs -> definitions, pydantic's
    leftover ``ge``/``gt``/``le``/``lt`` -> ``minimum``/``exclusiveMinimum``/...)."""
    if isinstance(node, list):
        return [_draft07(item) for item in node]
    if not isinstance(node, dict):
        return node
    schema: dict[str, Any] = {}
    key: str
    for key, value in node.items():
        if key in _NAMED_SCHEMAS and isinstance(value, dict):
            value = {name: _draft07(item) for name, item in value.items()}
        elif key not in _DATA:
            value = _draft07(value)
        schema["definitions" if key == "$defs" else _PYDANTIC_BOUNDS.get(key, key)] = value
    return schema


def build_schema(
    model: type[BaseModel], mode: Literal["validation", "serialization"]
) -> dict[str, Any]:
    body = model.model_json_schema(by_alias=True, mode=mode, ref_template="#/definitions/{model}")
    schema: dict[str, Any] = {
        "$schema": DRAFT_07,
        "_meta": {
            "schemaVersion": SCHEMA_VERSION,
            "generatedFrom": f"{model.__module__}.{model.__name__}",
        },
    }
    if mode == "serialization":
        # We serialise with exclude_none: every non-nullable property is always written.
        body["required"] = [
            name
            for name, prop in body["properties"].items()
            if {"type": "null"} not in prop.get("anyOf", [])
        ]
    schema.update(_draft07(body))
    return schema


def render_schemas() -> dict[str, str]:
    """File name -> file text of every published schema."""
    return {
        name: json.dumps(build_schema(model, mode), indent=2, ensure_ascii=False) + "\n"
        for name, (model, mode) in SCHEMA_FILES.items()
    }


def write_schemas(directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_schemas().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write_schemas(Path(sys.argv[1] if len(sys.argv) > 1 else "schemas")):
        print(path)
