"""The few facts of an entry CLEO's rubric reads, as a compact tuple (a "graded call").

Grading a million entries is bound by memory: a validated AuditEntry is a tree of a dozen
objects, a graded call one tuple. The store's read path and the file grader build these
straight from columns and lines, so a session that is only graded never holds its entries.
The rubric itself (``cleo.py``) reads either form through the same small interface.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from operator import attrgetter, itemgetter
from typing import Any, Final, Protocol, cast

from pytest_cleo_grade.core.errors import EntryError
from pytest_cleo_grade.core.models import AddFacts, AuditEntry, GradedCall

__all__ = [
    "CallDetails",
    "Details",
    "EntryDetails",
    "add_facts",
    "graded_call",
]


#: What JavaScript's ``String.prototype.trim`` removes (CLEO's grader is TypeScript): the
#: WhiteSpace and LineTerminator code points. Python's ``str.strip()`` differs: it keeps
#: U+FEFF and removes U+001C-U+001F and U+0085, so "\ufeff" would count as a description.
JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def add_facts(params: Mapping[str, Any]) -> AddFacts:
    """What S3 and S4 read from the parameters of one successful tasks.add.

    A description is read as CLEO's ``!desc || !desc.trim()`` reads it: missing when None,
    an empty or blank string, or another falsy value (0, false, an empty list or object);
    any other non-string value counts as present, so odd input never crashes grading.
    """
    get = params.get
    description = get("description")
    described = description.strip(JS_WHITESPACE) if isinstance(description, str) else description
    title = get("title")
    key = None
    if title is not None:
        # A blank title is no title: untitled adds are not duplicates.
        key = (title if type(title) is str else str(title)).strip(JS_WHITESPACE).lower() or None
    return (bool(described), bool(get("parent")), key)


def graded_call(entry: AuditEntry) -> GradedCall:
    """The graded call of one validated entry."""
    result = entry.result
    metadata = entry.metadata
    add = None
    if result.success and entry.domain == "tasks" and entry.operation == "add":
        add = add_facts(entry.params)
    return (
        entry.timestamp,
        entry.domain,
        entry.operation,
        metadata.gateway,
        result.exit_code,
        result.success,
        add,
        metadata.task_id,
    )


_PARAMS = attrgetter("params")


class Details(Protocol):
    """What the rubric asks of the few entries it looks at closely, by session position."""

    def timestamp(self, position: int) -> datetime:
        """When the call at ``position`` happened."""
        ...

    def adds(self, positions: Iterable[int]) -> Iterator[AddFacts | None]:
        """The facts of the successful tasks.add calls at ``positions`` (None: none read)."""
        ...

    def task_id(self, position: int) -> str | None:
        """The metadata taskId of the call at ``position``."""
        ...

    def call(self, position: int) -> str:
        """The call at ``position`` as ``domain.operation``."""
        ...


class EntryDetails:
    """Details read from validated entries (the plugin's in-memory session)."""

    __slots__ = ("_entries",)

    def __init__(self, entries: Sequence[AuditEntry]) -> None:
        self._entries = entries

    def timestamp(self, position: int) -> datetime:
        return self._entries[position].timestamp

    def adds(self, positions: Iterable[int]) -> Iterator[AddFacts | None]:
        # No Python frame per add but add_facts' own: a session can hold 100,000 adds.
        return map(add_facts, map(_PARAMS, map(self._entries.__getitem__, positions)))

    def task_id(self, position: int) -> str | None:
        return self._entries[position].metadata.task_id

    def call(self, position: int) -> str:
        entry = self._entries[position]
        return f"{entry.domain}.{entry.operation}"


_ADD: Final = itemgetter(6)


def _params_of(text: str, position: int) -> Mapping[str, Any]:
    """A stored call's parameters. Rows written elsewhere (a CLEO database, an older release)
    may hold what Python reads no further (an integer past its digit limit): an EntryError
    naming the entry, never a traceback."""
    try:
        params = json.loads(text)
    except ValueError as exc:
        raise EntryError(f"entry {position + 1}: params cannot be read: {exc}") from None
    return params if isinstance(params, Mapping) else {}


class CallDetails:
    """Details read from graded calls."""

    __slots__ = ("_calls",)

    def __init__(self, calls: Sequence[GradedCall]) -> None:
        self._calls = calls

    def timestamp(self, position: int) -> datetime:
        stamp = self._calls[position][0]
        return stamp if isinstance(stamp, datetime) else datetime.fromisoformat(stamp)

    def adds(self, positions: Iterable[int]) -> Iterator[AddFacts | None]:
        at = list(positions)
        # Picked in C: a session can hold 100,000 adds, and most graded calls carry their
        # facts already (the file grader's form); only the store's form is parsed here.
        picked: list[AddFacts | str | None] = list(map(_ADD, map(self._calls.__getitem__, at)))
        if str not in set(map(type, picked)):
            return iter(cast(list[AddFacts | None], picked))
        return iter(  # the store's form: the parameters' JSON object text
            [
                add_facts(_params_of(add, position)) if isinstance(add, str) else add
                for position, add in zip(at, picked, strict=True)
            ]
        )

    def task_id(self, position: int) -> str | None:
        return self._calls[position][7]

    def call(self, position: int) -> str:
        call = self._calls[position]
        return f"{call[1]}.{call[2]}"
