"""Graded calls straight from JSON lines, checked in plain Python (no AuditEntry models).

``cleo-grade grade --entries`` on a million lines spent most of its time building pydantic
models it dropped a moment later (only each entry's graded call is kept). A batch whose every
line is the usual shape of a CLEO entry (known keys, exact types, an ISO time with ``Z`` or an
offset) is read here; anything else, and every line of its batch, goes through the models,
which accept or name the error exactly as before. So the shape accepted here is a subset of
what :class:`AuditEntry` accepts, read to the same values.

Parsing the JSON is most of what is left. With orjson installed (the ``fast`` extra) each line
is parsed by it, twice as fast as the json module's scanner, which stays the fallback. The
two read every line the caller lets through alike, but for integers of 2**64 and more, which
orjson reads as floats: no graded field keeps such a number but a title (``str()`` of it
would differ), so a float title sends the batch to the exact path.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, cast

from pytest_cleo_grade.core.models import GradedCall
from pytest_cleo_grade.rubrics._cleo_calls import add_facts

__all__ = ["calls_of_lines", "reads_strictly"]

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


def _orjson_loads() -> Callable[[bytes], object] | None:
    try:
        from orjson import loads
    except ImportError:  # the fast extra is not installed: the json module's scanner
        return None
    loader: Callable[[bytes], object] = loads  # untyped where orjson is missing (mypy)
    return loader


_FAST_LOADS: Final = _orjson_loads()


def reads_strictly() -> bool:
    """Whether :func:`calls_of_lines` itself refuses (returns None for) every line holding
    NaN, an infinity, a number that overflows a float, a lone surrogate, invalid UTF-8 or
    nothing at all: orjson raises on each, so its caller need check only the nesting."""
    return _FAST_LOADS is not None


def _scanned(text: str) -> object:
    """One JSON value filling ``text``, by the C scanner without json.loads's wrappers."""
    data, end = _scan(text, 0)
    if end != len(text) and text[end:].strip(" \t\r"):
        raise ValueError("more than one value")
    return data


def calls_of_lines(lines: list[bytes]) -> tuple[list[str | None], list[GradedCall]] | None:
    """(session ids, graded calls) of JSON lines, or None when a line is not the usual shape.

    What ``json.loads`` reads more leniently than the entries' reader (NaN, infinities,
    numbers that overflow a float or are 300 digits long, lone surrogates, deep nesting) is
    ruled out before: by the caller (``store.sources``) for the json module's scanner, and
    for orjson, which raises on all of it itself, by the caller's nesting check. So no value
    read here holds a number the models refuse, and the parameters are not walked again.
    """
    sessions: list[str | None] = []
    calls: list[GradedCall] = []
    items: Sequence[Any]
    parse: Callable[[Any], object]
    if _FAST_LOADS is not None:
        items, parse = lines, cast(Callable[[Any], object], _FAST_LOADS)
    else:
        try:
            items = b"\n".join(lines).decode("utf-8").split("\n")
        except UnicodeDecodeError:
            return None
        if len(items) != len(lines):
            return None
        parse = cast(Callable[[Any], object], _scanned)
    # Locals, not globals and attributes, in the loop: it runs once per line.
    add_session, add_call, read_time = sessions.append, calls.append, _time
    entry_keys, result_keys, metadata_keys = _ENTRY_KEYS, _RESULT_KEYS, _METADATA_KEYS
    text_or_none, lowest, highest = _OPTIONAL_TEXT, _INT64[0], _INT64[1]
    float_titles_differ = _FAST_LOADS is not None
    for item in items:
        try:
            data = parse(item)
        except (StopIteration, ValueError, RecursionError):  # orjson's error is a ValueError
            return None
        if type(data) is not dict or not data.keys() <= entry_keys:
            return None
        get = data.get
        stamp = get("timestamp")
        when = read_time(stamp) if type(stamp) is str else None
        if when is None:
            return None
        session = get("sessionId")
        domain = get("domain")
        operation = get("operation")
        if (
            type(session) not in text_or_none
            or type(domain) is not str
            or type(operation) is not str
            or not domain
            or not operation
            or type(get("error")) not in text_or_none
        ):
            return None
        result = get("result")
        if type(result) is not dict or not result.keys() <= result_keys:
            return None
        success = result.get("success")
        code = result.get("exitCode", 0)
        duration = result.get("duration", 0)
        if (
            type(success) is not bool
            or type(code) is not int
            or not lowest <= code <= highest
            or type(duration) not in (int, float)
            or not duration >= 0
        ):
            return None
        metadata = get("metadata")
        if metadata is None:
            if "metadata" in data:
                return None
            gateway = task = None
        else:
            if type(metadata) is not dict or not metadata.keys() <= metadata_keys:
                return None
            meta = metadata.get
            gateway = meta("gateway")
            task = meta("taskId")
            if (
                type(meta("source", "")) is not str
                or type(gateway) not in text_or_none
                or type(task) not in text_or_none
                or type(meta("userId")) not in text_or_none
            ):
                return None
        params = get("params")
        if params is not None and type(params) is not dict:
            return None
        add = None
        if success and domain == "tasks" and operation == "add":
            if params is None:
                params = {}
            elif float_titles_differ and type(params.get("title")) is float:
                return None  # maybe an integer of 2**64 or more, which orjson reads as a float
            add = add_facts(params)
        add_session(session)
        add_call((when, domain, operation, gateway, code, success, add, task))
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
