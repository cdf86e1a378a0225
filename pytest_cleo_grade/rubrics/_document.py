"""Reading a rubric file (TOML or JSON) and naming the place of its first invalid field.

Shared by every rubric that takes a file (the weighted judge rubric, the rule rubric): one
way to refuse a device, a hostile nesting depth or a non-UTF-8 file, and one way to turn
pydantic's error location into ``dimensions[2] (name).rules[0] (id).points``.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TypeVar

from pydantic import BaseModel, ValidationError

from pytest_cleo_grade.core._files import json_error_text, read_regular_bytes
from pytest_cleo_grade.core.errors import RubricError

#: Deepest nesting of arrays and tables a rubric file may use. Real rubric files nest 4-5
#: levels; the bound keeps hostile files far from the interpreter's recursion limit.
MAX_NESTING: Final = 32
#: Keys whose value tags a union member: pydantic puts that value after the member's index.
_TAG_KEYS: Final = ("type", "kind")
#: Keys that name a list item in an error location, first found wins.
_LABEL_KEYS: Final = ("name", "id")

Model = TypeVar("Model", bound=BaseModel)


def describe_loc(loc: Sequence[int | str], data: object) -> str:
    """``dimensions[2] (tool_efficiency).weight`` from pydantic's location tuple."""
    parts: list[str] = []
    node: object = data
    tag: object = None
    for part in loc:
        # pydantic names the union member it tried: the node's tag, or the name an alias
        # in the file stands for (kind "per_violation" is tried as "penalty"), never a key.
        if tag is not None and (part == tag or (isinstance(node, dict) and part not in node)):
            tag = None
            continue
        tag = None
        if isinstance(part, int):
            label = f"[{part}]"
            child = node[part] if isinstance(node, list) and 0 <= part < len(node) else None
            if isinstance(child, dict):
                name = next((child[k] for k in _LABEL_KEYS if isinstance(child.get(k), str)), None)
                if name is not None:
                    label += f" ({name})"
                tag = next((child[k] for k in _TAG_KEYS if isinstance(child.get(k), str)), None)
            parts.append(label)
            node = child
        else:
            parts.append(f".{part}" if parts else part)
            node = node.get(part) if isinstance(node, dict) else None
    return "".join(parts) or "rubric"


def nesting_depth(data: object) -> int:
    """How deeply lists and mappings nest in ``data``, measured without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(data, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Sequence[object] = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth + 1)
        if deepest > MAX_NESTING:
            return deepest
        stack.extend((child, depth + 1) for child in children)
    return deepest


def too_deep(where: str) -> RubricError:
    return RubricError(
        f"{where}: arrays or tables nested more than {MAX_NESTING} levels deep: not a rubric file"
    )


def validate_document(
    model: type[Model], data: object, where: str, *, strict: bool | None = None
) -> Model:
    """Validate ``data`` as ``model``; RubricError names ``where`` and the first bad field.

    ``strict=True`` validates every field strictly, nested models of other modules included
    (a bool is then no number, a string no integer)."""
    if nesting_depth(data) > MAX_NESTING:
        raise too_deep(where)
    try:
        return model.model_validate(data, strict=strict)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        more = exc.error_count() - 1
        suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
        raise RubricError(
            f"{where}: {describe_loc(first['loc'], data)}: {message}{suffix}"
        ) from exc


def parse_document(text: str, *, suffix: str, where: str) -> object:
    """Parse a rubric document's text as TOML (``.toml``) or JSON (``.json``)."""
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix == ".json":
            return json.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{where}: invalid TOML: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise RubricError(f"{where}: invalid JSON: {exc.msg} (line {exc.lineno})") from exc
    except RecursionError as exc:
        # Both parsers recurse once per level of nesting: a hostile file must not crash them.
        raise too_deep(where) from exc
    except ValueError as exc:  # both parsers: a number of more digits than Python converts
        kind = "TOML" if suffix == ".toml" else "JSON"
        raise RubricError(f"{where}: invalid {kind}: {json_error_text(exc)}") from None
    raise RubricError(f"{where}: rubric files must end in .toml or .json")


def read_document(path: str | Path) -> tuple[object, bytes]:
    """The parsed content of a TOML or JSON rubric file and the bytes it came from."""
    path = Path(path)
    try:
        source = read_regular_bytes(path)  # a device or a FIFO is refused, never read
    except OSError as exc:
        raise RubricError(f"{path}: cannot read rubric file: {exc.strerror or exc}") from exc
    try:
        text = source.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RubricError(f"{path}: not UTF-8 text: {exc.reason}") from exc
    return parse_document(text, suffix=path.suffix.lower(), where=str(path)), source
