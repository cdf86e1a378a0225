"""Reading audit entries from JSON and JSONL files, with errors that name file and line."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from pytest_cleo_grade.bulk import collector_paused
from pytest_cleo_grade.errors import EntryError
from pytest_cleo_grade.models import AuditEntry, format_validation_error

__all__ = ["SURROGATE_ESCAPE", "load_entries_file", "parse_entries_text", "parse_json_strict"]


def _reject_constant(name: str) -> Any:
    # json accepts NaN and Infinity by default; an audit log carrying them is corrupt.
    raise ValueError(f"{name} is not valid JSON")


#: A \uD800-\uDFFF escape: JSON can spell a lone surrogate, which no UTF-8 store or output
#: can hold. Text without one cannot produce one (UTF-8 decoding rejects encoded surrogates).
SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def parse_json_strict(text: str) -> Any:
    """json.loads that rejects NaN, Infinity and lone surrogates (ValueError)."""
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        # Pathologically nested input must be an input error, not a traceback.
        raise ValueError("nested too deeply") from None
    try:
        # Text from argv may carry undecodable bytes as surrogates (isascii() is O(1)).
        if not text.isascii():
            text.encode("utf-8")
        if SURROGATE_ESCAPE.search(text):
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a lone surrogate (\\uD800-\\uDFFF) is not Unicode") from None
    return value


def load_entries_file(path: str | os.PathLike[str]) -> list[AuditEntry]:
    """Load every entry of a JSON array or JSONL file, or raise EntryError naming the place.

    All-or-nothing: the first invalid line aborts the load. An empty file is an error, not
    an empty session.
    """
    target = Path(path)
    try:
        text = target.read_text(encoding="utf-8-sig")  # a BOM (Windows tools) is no entry
    except UnicodeDecodeError as exc:
        raise EntryError(f"{target}: not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise EntryError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    return parse_entries_text(text, str(target))


def parse_entries_text(text: str, where: str) -> list[AuditEntry]:
    """Parse entries from text that is a JSON array, one JSON object, or JSONL."""
    stripped = text.strip()
    if not stripped:
        raise EntryError(f"{where}: file is empty (no audit entries)")
    with collector_paused():
        if stripped.startswith("["):
            return _parse_array(stripped, where)
        return _parse_lines(text, where)


def _parse_array(text: str, where: str) -> list[AuditEntry]:
    try:
        data = parse_json_strict(text)
    except json.JSONDecodeError as exc:
        raise EntryError(f"{where}:{exc.lineno}: invalid JSON: {exc.msg}") from exc
    except ValueError as exc:
        raise EntryError(f"{where}: invalid JSON: {exc}") from exc
    if not data:
        raise EntryError(f"{where}: the JSON array is empty (no audit entries)")
    entries: list[AuditEntry] = []
    for index, item in enumerate(data):
        entries.append(_validate(item, f"{where}: entry {index}"))
    return entries


def _parse_lines(text: str, where: str) -> list[AuditEntry]:
    entries: list[AuditEntry] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = parse_json_strict(line)
        except json.JSONDecodeError as exc:
            raise EntryError(f"{where}:{number}: invalid JSON: {exc.msg}") from exc
        except ValueError as exc:
            raise EntryError(f"{where}:{number}: invalid JSON: {exc}") from exc
        entries.append(_validate(item, f"{where}:{number}"))
    return entries


def _validate(item: object, place: str) -> AuditEntry:
    if not isinstance(item, dict):
        raise EntryError(f"{place}: expected a JSON object, got {type(item).__name__}")
    try:
        return AuditEntry.model_validate(item)
    except ValidationError as exc:
        raise EntryError(format_validation_error(exc, place)) from exc
