"""Graded calls straight from JSON lines, checked in plain Python (no AuditEntry models).

``cleo-grade grade --entries`` on a million lines spent most of its time building pydantic
models it dropped a moment later (only each entry's graded call is kept). A batch whose every
line is the usual shape of a CLEO entry (known keys, exact types, an ISO time with ``Z`` or an
offset) is read here; anything else, and every line of its batch, goes through the models,
which accept or name the error exactly as before. So the shape accepted here is a subset of
what :class:`AuditEntry` accepts, read to the same values.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, cast

from pytest_cleo_grade.core.models import GradedCall, non_finite_path
from pytest_cleo_grade.rubrics._cleo_calls import add_facts

__all__ = ["calls_of_lines"]

_ENTRY_KEYS: Final = frozenset(
    {"timestamp", "sessionId", "domain", "operation", "params", "result", "metadata", "error"}
)
_RESULT_KEYS: Final = frozenset({"success", "exitCode", "duration"})
_METADATA_KEYS: Final = frozenset({"source", "gateway", "taskId", "userId"})
#: The ISO times read here: what datetime.fromisoformat and pydantic read alike.
_TIME: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d)")
_INT64: Final = (-(2**63), 2**63 - 1)
_OPTIONAL_TEXT: Final = (str, type(None))
#: The decoder's C scanner (typeshed does not declare the attribute).
_scan: Final[Callable[[str, int], tuple[object, int]]] = cast(Any, json.JSONDecoder()).scan_once


def calls_of_lines(lines: list[bytes]) -> tuple[list[str | None], list[GradedCall]] | None:
    """(session ids, graded calls) of JSON lines, or None when a line is not the usual shape.

    The caller has ruled out what ``json.loads`` reads more leniently than the entries'
    reader (NaN, infinities, overflowing numbers, lone surrogates, deep nesting).
    """
    sessions: list[str | None] = []
    calls: list[GradedCall] = []
    try:
        texts = b"\n".join(lines).decode("utf-8").split("\n")
    except UnicodeDecodeError:
        return None
    if len(texts) != len(lines):
        return None
    for text in texts:
        # The C scanner itself, without json.loads's wrappers: one object filling the line.
        try:
            data, end = _scan(text, 0)
        except (StopIteration, ValueError, RecursionError):
            return None
        if end != len(text) and text[end:].strip(" \t\r"):
            return None
        if type(data) is not dict or not data.keys() <= _ENTRY_KEYS:
            return None
        stamp = data.get("timestamp")
        when = _time(stamp) if type(stamp) is str else None
        if when is None:
            return None
        session = data.get("sessionId")
        domain = data.get("domain")
        operation = data.get("operation")
        if (
            type(session) not in _OPTIONAL_TEXT
            or type(domain) is not str
            or type(operation) is not str
            or not domain
            or not operation
            or type(data.get("error")) not in _OPTIONAL_TEXT
        ):
            return None
        result = data.get("result")
        if type(result) is not dict or not result.keys() <= _RESULT_KEYS:
            return None
        success = result.get("success")
        code = result.get("exitCode", 0)
        duration = result.get("duration", 0)
        if (
            type(success) is not bool
            or type(code) is not int
            or not _INT64[0] <= code <= _INT64[1]
            or type(duration) not in (int, float)
            or not duration >= 0
        ):
            return None
        metadata = data.get("metadata", {})
        if type(metadata) is not dict or not metadata.keys() <= _METADATA_KEYS:
            return None
        gateway = metadata.get("gateway")
        task = metadata.get("taskId")
        if (
            type(metadata.get("source", "")) is not str
            or type(gateway) not in _OPTIONAL_TEXT
            or type(task) not in _OPTIONAL_TEXT
            or type(metadata.get("userId")) not in _OPTIONAL_TEXT
        ):
            return None
        params = data.get("params")
        if params is None:
            params = {}
        elif type(params) is not dict:
            return None
        try:
            if non_finite_path(params) is not None:
                return None
        except ValueError:  # nested too deeply
            return None
        add = None
        if success and domain == "tasks" and operation == "add":
            add = add_facts(params)
        sessions.append(session)
        calls.append((when, domain, operation, gateway, code, success, add, task))
    return sessions, calls


def _time(stamp: str) -> datetime | None:
    """The entry's time as AuditEntry keeps it (UTC, to the millisecond), or None."""
    if not _TIME.fullmatch(stamp):
        return None
    try:
        value = datetime.fromisoformat(stamp)
        if value.tzinfo is not UTC:  # "Z" reads as UTC itself
            value = value.astimezone(UTC)
    except (ValueError, OverflowError):
        return None
    sub = value.microsecond % 1000
    return value.replace(microsecond=value.microsecond - sub) if sub else value
