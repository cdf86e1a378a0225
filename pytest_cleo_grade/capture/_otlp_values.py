"""OTLP's values as Python values: JSON AnyValues, 64-bit integers, ids, protobuf values.

Shared by the traces and the logs readers (one spelling of OTLP for both). Standard library
only (protobuf values are read through their own accessors).
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping
from typing import Any, Final

from pytest_cleo_grade.core.errors import CleoGradeError

__all__ = ["OtlpError"]


class OtlpError(CleoGradeError):
    """An OTLP payload or file is malformed (the message names the place)."""


#: OTLP's integers are 64-bit (fixed64 times, int64 values); JSON spells them as text.
_INTEGER_TEXT: Final = re.compile(r"-?[0-9]{1,20}")
_INT_BOUND: Final = 2**64
#: The proto3 JSON spellings of a double no JSON number holds.
_NON_FINITE: Final = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _object(value: Any, where: str) -> Mapping[str, Any]:
    """An optional JSON object of the payload: absent or null reads as empty."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise OtlpError(f"{where}: expected an object")
    return value


def _list(value: Any, where: str) -> list[Any]:
    """An optional JSON array of the payload: absent or null reads as empty."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise OtlpError(f"{where}: expected a list")
    return value


def _any_value(value: Any, where: str) -> Any:
    """An OTLP JSON AnyValue as a Python value."""
    if not isinstance(value, Mapping):
        raise OtlpError(f"{where}: expected an AnyValue object")
    if "stringValue" in value:
        return value["stringValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "intValue" in value:
        return _int(value["intValue"], where)
    if "doubleValue" in value:
        return _double(value["doubleValue"])
    if "arrayValue" in value:
        array = _object(value["arrayValue"], f"{where}.arrayValue")
        items = _list(array.get("values"), f"{where}.arrayValue.values")
        return [_any_value(item, f"{where}[{i}]") for i, item in enumerate(items)]
    if "kvlistValue" in value:
        kvlist = _object(value["kvlistValue"], f"{where}.kvlistValue")
        return _attributes(kvlist.get("values"), where)
    if "bytesValue" in value:
        return value["bytesValue"]
    return None


def _double(value: Any) -> Any:
    # OTLP allows NaN and infinities as doubles (JSON spells them "NaN", "Infinity"), but JSON
    # and the entries have no such value: they are stored as null, never as the text "nan".
    number = _NON_FINITE.get(value, value) if isinstance(value, str) else value
    return None if isinstance(number, float) and not math.isfinite(number) else number


def _int(value: Any, where: str) -> int:
    # OTLP JSON writes 64-bit integers as strings; numbers are accepted too.
    if isinstance(value, str) and _INTEGER_TEXT.fullmatch(value.strip()):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < _INT_BOUND:
        return value
    shown = repr(value)
    shown = shown if len(shown) <= 40 else f"{shown[:40]}..."
    raise OtlpError(f"{where}: expected a 64-bit integer, got {shown}")


def _attributes(items: Any, where: str) -> dict[str, Any]:
    if items is None:
        return {}
    if not isinstance(items, list):
        raise OtlpError(f"{where}: attributes must be a list")
    found: dict[str, Any] = {}
    for index, item in enumerate(items):
        place = f"{where}.attributes[{index}]"
        if not isinstance(item, Mapping) or not isinstance(item.get("key"), str):
            raise OtlpError(f"{place}: expected {{'key': ..., 'value': ...}}")
        found[item["key"]] = _any_value(item.get("value") or {}, f"{place}.value")
    return found


def _hex_id(value: Any, where: str) -> str:
    # The OTLP JSON encoding writes ids as hex; tolerate base64 (protobuf's JSON mapping).
    if value in (None, ""):
        return ""
    if not isinstance(value, str):
        raise OtlpError(f"{where}: expected a hex id string")
    text = value.strip()
    if all(c in "0123456789abcdefABCDEF" for c in text) and len(text) in (16, 32):
        return text.lower()
    try:
        return base64.b64decode(text, validate=True).hex()
    except ValueError:
        raise OtlpError(f"{where}: {value!r} is not a hex id") from None


def _pb_value(value: Any) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_pb_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _pb_value(kv.value) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    found = None if kind is None else getattr(value, kind)
    return _double(found) if kind == "double_value" else found
