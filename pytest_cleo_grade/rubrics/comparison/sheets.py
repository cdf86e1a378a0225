"""Hand-entered score sheets (JSON or TOML) as comparison records; errors name the place."""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path
from typing import Any

from pytest_cleo_grade.core._files import json_error_text, read_regular_bytes
from pytest_cleo_grade.rubrics.comparison.scores import (
    ComparisonError,
    ComparisonRecord,
    validate_records,
)

__all__ = ["load_score_sheet", "parse_score_sheet"]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a valid score")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads keeps the last of repeated keys: a score entered twice would silently win.
    # (TOML rejects them itself.)
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise ValueError(f"duplicate key {key!r}")
        data[key] = value
    return data


def load_score_sheet(path: str | os.PathLike[str]) -> list[ComparisonRecord]:
    """Load a score sheet; ``.toml`` files are TOML, anything else JSON.

    Both hold a list ``scores`` of rows (a JSON file may also be the bare list). A row has
    ``variant``, ``query``, ``mode`` and ``substantive`` (``{"Q-01": 4, ...}``, integers 1-5),
    optionally ``structural`` (``{"S-01": true, ...}``) and ``operational`` (``OP-01``..
    ``OP-05``). Unknown keys are errors, so a typo cannot drop a score silently.
    """
    target = Path(path)
    try:
        text = read_regular_bytes(target).decode("utf-8")  # never a device or a FIFO
    except UnicodeDecodeError as exc:
        raise ComparisonError(f"{target}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise ComparisonError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    return parse_score_sheet(text, str(target), toml=target.suffix.lower() == ".toml")


def parse_score_sheet(text: str, where: str, *, toml: bool = False) -> list[ComparisonRecord]:
    """Parse a score sheet's text; ``where`` names it in errors."""
    try:
        return _parse_score_sheet(text, where, toml=toml)
    except RecursionError:
        # The parsers recurse per nesting level: absurd nesting is an input error.
        raise ComparisonError(f"{where}: nested too deeply") from None


def _parse_score_sheet(text: str, where: str, *, toml: bool) -> list[ComparisonRecord]:
    data: Any
    if toml:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ComparisonError(f"{where}: invalid TOML: {exc}") from exc
        except ValueError as exc:  # a number of more digits than Python converts
            raise ComparisonError(f"{where}: invalid TOML: {json_error_text(exc)}") from None
    else:
        try:
            data = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as exc:
            raise ComparisonError(f"{where}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
        except ValueError as exc:
            raise ComparisonError(f"{where}: invalid JSON: {json_error_text(exc)}") from None
    if isinstance(data, dict):
        unknown = sorted(set(data) - {"scores"})
        if unknown:
            raise ComparisonError(
                f"{where}: unknown top-level key {unknown[0]!r} (expected scores)"
            )
        data = data.get("scores")
    if not isinstance(data, list) or not data:
        raise ComparisonError(f"{where}: scores: expected a non-empty list of score rows")
    for index, row in enumerate(data):
        if not isinstance(row, dict):
            raise ComparisonError(f"{where}: scores[{index}]: expected a table/object")
    records = validate_records(data, f"{where}: scores")
    return [
        record.model_copy(update={"source": f"{where}: scores[{index}]"})
        for index, record in enumerate(records)
    ]
