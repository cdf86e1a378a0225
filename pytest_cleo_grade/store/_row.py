"""One call's ``audit_log`` row (CLEO's conventions), built with the standard library only."""

from __future__ import annotations

import itertools
import json
import math
import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from pytest_cleo_grade.core._files import check_nesting
from pytest_cleo_grade.core.errors import EntryError

__all__ = [
    "INSERT_ENTRY",
    "PLACEHOLDER_TASK_IDS",
    "ROW_COLUMNS",
    "NotPlainJSON",
    "build_row",
    "is_unicode",
    "new_row_id",
    "plain_json",
]

# The store builds its rows from validated entries (store._schema.entry_row); `cleo-grade
# record` builds its one row from its arguments, without pydantic (cli.record). Both go
# through build_row, so the two cannot write a call differently.

#: The columns an entry row carries, in order. CLEO's columns the store never fills from an
#: entry (before/after_json, request_id, project_hash, idempotency_key) are left to their
#: NULL default and ``actor`` is a constant of the statement: each bound value costs SQLite
#: and Python time (a third of an import's insert went to the six constant columns).
ROW_COLUMNS: Final = (
    "id",
    "timestamp",
    "action",
    "task_id",
    "details_json",
    "domain",
    "operation",
    "session_id",
    "duration_ms",
    "success",
    "source",
    "gateway",
    "error_message",
    "exit_code",
    "metadata_json",
)

INSERT_ENTRY: Final = (
    f"INSERT OR IGNORE INTO audit_log ({', '.join(ROW_COLUMNS)}, actor) "
    f"VALUES ({', '.join('?' * len(ROW_COLUMNS))}, 'agent')"
)

#: Task ids the NOT NULL ``task_id`` column cannot tell from "no task": CLEO writes ``system``
#: (and older CLEO ``unknown``) as its placeholder, and an empty id is written as ``system``
#: too. An entry carrying one of them keeps it in ``metadata_json`` as ``taskId``, which the
#: readers prefer over a placeholder (store.core._entry_json, store.calls._select).
PLACEHOLDER_TASK_IDS: Final = frozenset({"system", "unknown", ""})


class _Ids:
    """Row ids: 32 hex digits like CLEO's ``crypto.randomUUID()``, cheap to make.

    The time in milliseconds comes first (as in a UUIDv7), so ids that grow with time insert
    at the end of the primary key's B-tree instead of at random pages; then 48 random bits
    drawn once per process (again in a forked child) and a counter, so no two ids of one
    process collide (within 2**32 rows a millisecond) and two processes share a prefix with
    odds of 2**-48. One urandom() call per
    row cost more than the rest of the row under load.
    """

    def __init__(self) -> None:
        self.reseed()
        os.register_at_fork(after_in_child=self.reseed)

    def reseed(self) -> None:
        self.prefix = os.urandom(6).hex()
        self.counter = itertools.count(int.from_bytes(os.urandom(4), "big"))
        self.millis = -1
        self.head = ""

    def new(self) -> str:
        millis = time.time_ns() // 1_000_000
        if millis != self.millis:
            # Rows written together share the millisecond: format the head once for them.
            self.millis = millis
            self.head = f"{millis:012x}{self.prefix}"
        return "%s%08x" % (self.head, next(self.counter) & 0xFFFFFFFF)  # noqa: UP031 (faster)


_IDS: Final = _Ids()
#: A new row id (see _Ids).
new_row_id: Final = _IDS.new


def build_row(
    row_id: str,
    stamp: datetime,
    session_id: str | None,
    domain: str,
    operation: str,
    params: Mapping[str, Any],
    success: bool,
    exit_code: int,
    duration: float,
    source: str,
    gateway: str | None,
    task_id: str | None,
    user_id: str | None,
    extra: dict[str, Any] | None,
    error: str | None,
    dumps: Callable[[object], str],
    named: str | None = None,
) -> tuple[Any, ...]:
    """The ``audit_log`` row of one call, in ROW_COLUMNS order.

    The values are an entry's, already valid (``extra``: its metadata's keys beyond the known
    ones). ``dumps`` writes params and metadata as compact JSON: the store's is pydantic-core's
    (any value a caller recorded), ``cleo-grade record``'s the standard library's, for values
    where the two write the same text. ``named``: the row id the caller chose, for the error.
    Positional parameters: an import builds a million rows, and keywords cost per call.
    """
    if user_id is not None:
        extra = {**(extra or {}), "userId": user_id}
    if task_id in PLACEHOLDER_TASK_IDS:
        # The column keeps CLEO's placeholder (CLEO's readers expect one); the real value
        # goes where our readers look first, so it is not read back as "no task".
        extra = {**(extra or {}), "taskId": task_id}
    try:
        params_json = dumps(params)
        metadata = dumps(extra) if extra else None
        # Deeper values could be written but never read back for grading (see MAX_NESTING).
        check_nesting(params_json)
        # pydantic-core writes a non-finite float as the bare word Infinity or NaN, which
        # no JSON reader (SQLite's included) accepts back: the row would be unreadable.
        _check_finite(params_json, params)
        if metadata is not None:
            check_nesting(metadata)
            _check_finite(metadata, extra)
    except ValueError as exc:  # a circular structure, a lone surrogate, absurd nesting
        which = f"row {named} " if named else ""
        raise EntryError(f"{which}{domain}.{operation}: cannot store: {exc}") from exc
    if stamp.tzinfo is not UTC:  # validated entries hold UTC already
        stamp = stamp.astimezone(UTC)
    return (
        row_id,
        # CLEO's form (core.models.format_timestamp): the isoformat of UTC ends "+00:00";
        # positional arguments are a third cheaper than timespec= (a million rows per import).
        stamp.isoformat("T", "milliseconds")[:-6] + "Z",
        f"{domain}.{operation}",
        task_id or "system",
        params_json,
        domain,
        operation,
        session_id,
        duration,
        1 if success else 0,
        source,
        gateway,
        error,
        exit_code,
        metadata,
    )


def _check_finite(text: str, value: object) -> None:
    if ("Infinity" in text or "NaN" in text) and not _all_finite(value):
        raise ValueError("holds a non-finite number (NaN or Infinity), which JSON cannot carry")


def _all_finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return all(_all_finite(item) for item in value)
    return True


class NotPlainJSON(Exception):
    """A value :func:`plain_json` cannot promise pydantic-core's text for."""


#: The integers plain_json writes: pydantic-core writes these as Python does (its releases
#: could treat the unbounded ones differently).
_PLAIN_INTS: Final = range(-(2**63), 2**63)


def plain_json(value: object) -> str:
    """Compact JSON of a value read from JSON text (dicts, lists, strings, numbers, booleans,
    null), the text the store's serializer (pydantic-core's ``to_json``) writes for it.

    The two differ on floats written with an exponent (``1e-07`` against ``1e-7``; and
    ``1e+16`` against ``1e16`` in the pydantic-core of pydantic 2.11) and on lone surrogates
    (pydantic-core refuses them): for those, and anything else, NotPlainJSON.
    """
    if not _plain(value, 0):
        raise NotPlainJSON
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _plain(value: object, depth: int) -> bool:
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, str):
        return is_unicode(value)
    if isinstance(value, int):
        return value in _PLAIN_INTS
    if isinstance(value, float):
        # Python and pydantic-core write the shortest repr alike, where it has no exponent.
        return math.isfinite(value) and "e" not in repr(value)
    if depth >= _MAX_DEPTH:
        return False  # the row's nesting check refuses it anyway; the full path says why
    if isinstance(value, dict):
        return all(
            isinstance(key, str) and is_unicode(key) and _plain(item, depth + 1)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return all(_plain(item, depth + 1) for item in value)
    return False


#: Deeper than MAX_NESTING + 2, the parser's own limit, no value read from JSON goes.
_MAX_DEPTH: Final = 200


def is_unicode(text: str) -> bool:
    """Whether ``text`` can be stored: no lone surrogate (an undecodable byte from argv or
    the environment arrives as one)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
