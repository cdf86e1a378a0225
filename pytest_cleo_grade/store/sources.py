"""Where entries come from: JSON/JSONL entry files and CLEO project databases (read only).

Errors name the file and line (EntryError) or the database row (StoreError). Entry files are
read as a stream of batches, so importing one holds a batch in memory, never the whole file.
"""

from __future__ import annotations

import codecs
import functools
import io
import json
import os
import re
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import IO, Final, NamedTuple, TypeVar

from pydantic import TypeAdapter, ValidationError

from pytest_cleo_grade.core._files import (
    MAX_LINE_BYTES,
    MAX_NESTING,
    SQLITE_HEADER,
    SURROGATE_ESCAPE,
    NotRegularFileError,
    check_nesting,
    finite_float,
    iter_line_blocks,
    json_error_text,
    kind_of,
    open_regular,
    parse_json_strict,
)
from pytest_cleo_grade.core.errors import EntryError, StoreError
from pytest_cleo_grade.core.models import AuditEntry, collector_paused, format_validation_error
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store._workers import ordered_map

__all__ = [
    "CLEO_DB_CANDIDATES",
    "SURROGATE_ESCAPE",
    "find_cleo_db",
    "is_sqlite_file",
    "iter_entry_batches",
    "load_entries_file",
    "map_entry_batches",
    "may_overflow",
    "parse_entries_text",
    "parse_json_strict",
    "read_cleo_db",
    "select_session",
]

#: Where a CLEO project keeps its database: ``cleo.db`` now, ``tasks.db`` in older releases.
CLEO_DB_CANDIDATES: Final = (Path(".cleo") / "cleo.db", Path(".cleo") / "tasks.db")

T = TypeVar("T")

_ENTRIES: Final = TypeAdapter(list[AuditEntry])
_BOM: Final = codecs.BOM_UTF8
_SURROGATE_BYTES: Final = re.compile(rb"\\u[dD][89a-fA-F]")
#: A number that may overflow a float (a three-digit exponent, 300 digits in a row), i.e. a
#: match of ``[0-9][eE][+-]?[0-9]{3}|[0-9]{300}``: the fast path would read it as infinity,
#: so such a batch is parsed line by line. Asked at C speed (a regular expression scanned a
#: third of an import's time): digits become 0, e/E become e, signs become +, every other
#: byte a space, and plain substring searches stand for the pattern's branches.
_NUMBER_SHAPE: Final = bytes(
    ord("0")
    if byte in b"0123456789"
    else ord("e")
    if byte in b"eE"
    else ord("+")
    if byte in b"+-"
    else ord(" ")
    for byte in range(256)
)
_HUGE_SHAPES: Final = (b"0e000", b"0e+000", b"0" * 300)
_NOT_OPENERS: Final = bytes(byte for byte in range(256) if byte not in b"[{\n")
#: JSON's own whitespace; VT, FF and the Unicode spaces are not (Python's strip() would).
_JSON_SPACE: Final = b" \t\r"

#: Batches grow from one line (an error on line 1 is found after reading one line) to this
#: many, where validating a batch in one pydantic call has paid for itself.
MAX_BATCH: Final = 4096
_CHUNK: Final = 1024 * 1024


def _most_openers(text: bytes) -> int:
    """The most ``[`` and ``{`` any line of ``text`` holds: a bound on its nesting depth."""
    # C-level: keep only the openers and the line breaks, then measure each line.
    return max(map(len, text.translate(None, _NOT_OPENERS).split(b"\n")))


def may_overflow(blob: bytes) -> bool:
    """Whether ``blob`` holds a number that may overflow a float (see _NUMBER_SHAPE)."""
    shape = blob.translate(_NUMBER_SHAPE)
    return any(pattern in shape for pattern in _HUGE_SHAPES)


def load_entries_file(path: str | os.PathLike[str]) -> list[AuditEntry]:
    """Every entry of a JSON array or JSONL file; EntryError names the file and line.

    All-or-nothing: the first invalid line aborts the load. An empty file is an error, not
    an empty session. Only regular files are read (a device or a FIFO is refused).
    """
    return [entry for batch in iter_entry_batches(path) for entry in batch]


def iter_entry_batches(path: str | os.PathLike[str]) -> Iterator[list[AuditEntry]]:
    """The entries of a JSON array or JSONL file, a batch at a time, in file order.

    Memory is bounded by a batch (at most MAX_BATCH entries), not by the file. EntryError
    names the file and line of the first invalid entry when the reader reaches it, so a
    caller that must be all-or-nothing keeps its writes uncommitted until the end.
    """
    return map_entry_batches(path, _same, workers=0)


def map_entry_batches(
    path: str | os.PathLike[str],
    convert: Callable[[list[AuditEntry]], T],
    *,
    workers: int,
    fast: Callable[[list[bytes]], T | None] | None = None,
    fast_is_strict: bool = False,
) -> Generator[T, None, None]:
    """``convert(batch)`` for each batch of :func:`iter_entry_batches`, in file order.

    With ``workers``, the full batches of a JSON lines file are validated and converted in
    that many worker processes (``convert`` must pickle, and so must what it returns), while
    the caller consumes the results; the first error in file order is the one raised.

    ``fast`` is offered each batch of JSON lines free of what ``json.loads`` reads more
    leniently than the entries' reader (NaN, infinities, overflowing numbers, lone
    surrogates, deep nesting, blank lines): what it returns stands for ``convert``'s, and
    None (a line it does not read) sends the batch through the models as before. With
    ``fast_is_strict``, ``fast`` itself returns None for every line holding one of those but
    deep nesting (orjson refuses them), so only the nesting is checked before.
    """
    target = Path(path)
    try:
        handle = open_regular(target)
    except OSError as exc:
        raise EntryError(f"{target}: cannot read: {exc.strerror or exc}") from exc
    where = str(target)
    with handle:
        # A database's binary pages would read as bad JSON at "line 1": say what it is.
        if handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER:
            raise EntryError(f"{target}: an SQLite database, not a JSON-lines entries file")
        handle.seek(0)
        try:
            yield from ordered_map(
                functools.partial(
                    _convert_batch,
                    where=where,
                    convert=convert,
                    fast=fast,
                    fast_is_strict=fast_is_strict,
                ),
                _raw_batches(handle, where),
                remote=_is_full_lines,
                workers=workers,
            )
        except OSError as exc:
            raise EntryError(f"{target}: cannot read: {exc.strerror or exc}") from exc


class _Lines(NamedTuple):
    """A batch of JSON lines not validated yet, from line number ``start`` on."""

    start: int
    lines: list[bytes]


def _same(batch: list[AuditEntry]) -> list[AuditEntry]:
    return batch


def _is_full_lines(batch: list[AuditEntry] | _Lines) -> bool:
    # Only full JSON-lines batches are worth a trip to a worker: the first, small ones
    # (line 1 is checked after reading one line) stay in this process.
    return isinstance(batch, _Lines) and len(batch.lines) >= MAX_BATCH


def _convert_batch(
    batch: list[AuditEntry] | _Lines,
    where: str,
    convert: Callable[[list[AuditEntry]], T],
    fast: Callable[[list[bytes]], T | None] | None = None,
    fast_is_strict: bool = False,
) -> T:
    if not isinstance(batch, _Lines):
        return convert(batch)
    if fast is not None and (_shallow if fast_is_strict else _plain)(batch.lines):
        with collector_paused():
            done = fast(batch.lines)
        if done is not None:
            return done
    return convert(_validate_lines(batch, where))


def _plain(lines: list[bytes]) -> bool:
    """Whether ``lines`` hold nothing a JSON parser may read otherwise than the entries'
    reader does (see :func:`_validate_joined`), and no blank line."""
    text = b"\n".join(lines)
    return not (
        b"NaN" in text
        or b"Infinity" in text
        or (b"\\u" in text and _SURROGATE_BYTES.search(text))
        or may_overflow(text)
        or _most_openers(text) > MAX_NESTING
        or not all(line.strip(_JSON_SPACE) for line in lines)
    )


def _shallow(lines: list[bytes]) -> bool:
    """Whether no line of ``lines`` nests deeper than the entries' reader allows.

    All a strict fast reader needs checked first: every other pass of :func:`_plain` over
    a million lines' text took a tenth to a half of a second.
    """
    return _most_openers(b"\n".join(lines)) <= MAX_NESTING


def parse_entries_text(text: str, where: str) -> list[AuditEntry]:
    """Parse entries from text that is a JSON array, one JSON object, or JSONL."""
    data = text.encode("utf-8", "surrogatepass")
    batches = _raw_batches(io.BytesIO(data), where)
    return [entry for batch in batches for entry in _convert_batch(batch, where, _same)]


def _raw_batches(handle: IO[bytes], where: str) -> Iterator[list[AuditEntry] | _Lines]:
    # The first bytes decide the format: a JSON array, or JSON lines.
    head = handle.read(_CHUNK)
    while not head.strip(_JSON_SPACE + b"\n") and len(head) <= MAX_LINE_BYTES:
        more = handle.read(_CHUNK)
        if not more:
            break
        head += more
    head = head.removeprefix(_BOM)  # a BOM (Windows tools) is no entry
    if head.lstrip(_JSON_SPACE + b"\n").startswith(b"["):
        yield from _array_batches(head, handle, 1, where)
        return
    pending: list[bytes] = []
    start = 1  # the number of pending's first line
    size = 1
    seen = False
    try:
        for number, lines in iter_line_blocks(handle, where, prefix=head):
            if not pending:
                start = number
            pending += lines
            seen = seen or any(line.strip(_JSON_SPACE) for line in lines)
            while len(pending) >= size:
                yield _Lines(start, pending[:size])
                del pending[:size]
                start += size
                size = min(size * 2, MAX_BATCH)
    except ValueError as exc:  # a line over MAX_LINE_BYTES
        if pending:  # the lines before it come first: one of them may be the first error
            yield _Lines(start, pending)
        raise EntryError(str(exc)) from None
    if not seen:
        raise EntryError(f"{where}: file is empty (no audit entries)")
    if pending:
        yield _Lines(start, pending)


def _validate_lines(batch: _Lines, where: str) -> list[AuditEntry]:
    """A batch of JSONL lines as entries: one pydantic call when the batch is clean.

    Blank lines are left out. Anything the fast path rejects, or text that might carry
    NaN/Infinity, a lone surrogate or deep nesting (which pydantic's parser would accept),
    is parsed line by line for the exact error.
    """
    entries = _validate_joined(batch.lines)
    if entries is not None:
        return entries
    kept = [
        (number, line[:-1] if line.endswith(b"\r") else line)
        for number, line in enumerate(batch.lines, batch.start)
        if line.strip(_JSON_SPACE)
    ]
    if len(kept) < len(batch.lines):  # blank lines: the rest may still be clean
        entries = _validate_joined([line for _, line in kept])
        if entries is not None:
            return entries
    with collector_paused():
        return [_parse_line(number, line, where) for number, line in kept]


def _validate_joined(lines: list[bytes]) -> list[AuditEntry] | None:
    """The entries of ``lines`` by one pydantic call, or None when they need a closer look."""
    text = b"\n".join(lines)
    blob = b"[" + text.replace(b"\n", b",") + b"]"
    if (
        b"NaN" in blob
        or b"Infinity" in blob
        or (b"\\u" in blob and _SURROGATE_BYTES.search(blob))
        or may_overflow(blob)
        or _most_openers(text) > MAX_NESTING
    ):
        return None
    try:
        with collector_paused():
            entries = _ENTRIES.validate_json(blob)
    except ValueError:
        return None
    # Joined with commas, a line holding two objects ("{...},{...}") would pass as two
    # entries, and a blank line is no entry: only one entry per line is accepted.
    return entries if len(entries) == len(lines) else None


def _parse_line(number: int, line: bytes, where: str) -> AuditEntry:
    place = f"{where}:{number}"
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EntryError(f"{place}: not UTF-8 text ({exc.reason})") from None
    try:
        item = parse_json_strict(text, max_nesting=MAX_NESTING)
    except json.JSONDecodeError as exc:
        raise EntryError(f"{place}: invalid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise EntryError(f"{place}: invalid JSON: {exc}") from None
    return _validate(item, place)


def _array_batches(
    first: bytes, handle: IO[bytes], first_line: int, where: str
) -> Iterator[list[AuditEntry]]:
    """The items of a JSON array, decoded one at a time from a stream, in batches."""
    batch: list[AuditEntry] = []
    size = 1
    count = 0
    for line, item, text in _array_items(first, handle, first_line, where):
        place = f"{where}:{line}: entry {count}"
        try:
            check_nesting(text, MAX_NESTING)
        except ValueError as exc:
            raise EntryError(f"{place}: invalid JSON: {exc}") from None
        batch.append(_validate(item, place))
        count += 1
        if len(batch) >= size:
            yield batch
            batch = []
            size = min(size * 2, MAX_BATCH)
    if batch:
        yield batch
    if not count:
        raise EntryError(f"{where}: the JSON array is empty (no audit entries)")


_WHITESPACE: Final = re.compile(r"[ \t\n\r]*")


def _array_items(
    first: bytes, handle: IO[bytes], first_line: int, where: str
) -> Iterator[tuple[int, object, str]]:
    """(line, value, its text) of each item of the JSON array starting ``first``."""
    decoder = json.JSONDecoder(parse_constant=_reject_constant, parse_float=finite_float)
    utf8 = codecs.getincrementaldecoder("utf-8")()
    # ``line`` is the line number at ``buf[mark]``: newlines are counted once, as the position
    # moves on, never again from the start of the buffer for each item.
    line = first_line
    mark = 0
    eof = False

    def decode(data: bytes, final: bool = False) -> str:
        try:
            return utf8.decode(data, final)
        except UnicodeDecodeError as exc:
            raise EntryError(f"{where}: not UTF-8 text ({exc.reason})") from None

    buf = decode(first)
    pos = buf.index("[") + 1
    expect_value = True
    empty = True
    while True:
        pos = _WHITESPACE.match(buf, pos).end()  # type: ignore[union-attr]
        if pos == len(buf) and not eof:
            line += buf.count("\n", mark, pos)
            data = handle.read(_CHUNK)
            eof = not data
            buf, pos, mark = decode(data, final=eof), 0, 0
            continue
        line += buf.count("\n", mark, pos)
        mark = pos
        here = line
        if pos == len(buf):
            raise EntryError(f"{where}:{here}: invalid JSON: the array is not closed")
        char = buf[pos]
        if char == "]" and (not expect_value or empty):
            _expect_only_whitespace(buf[pos + 1 :], handle, decode, f"{where}:{here}")
            return
        if not expect_value:
            if char != ",":
                raise EntryError(f"{where}:{here}: invalid JSON: expected ',' or ']'")
            pos += 1
            expect_value = True
            continue
        try:
            value, end = decoder.raw_decode(buf, pos)
        except json.JSONDecodeError as exc:
            # An error at the end of the buffer may be an item cut by the chunk: read more
            # and decode it again (one item is at most MAX_LINE_BYTES).
            cut = len(buf) - exc.pos <= 16 or exc.msg.startswith("Unterminated")
            if cut and not eof and len(buf) - pos <= MAX_LINE_BYTES:
                data = handle.read(_CHUNK)
                eof = not data
                buf, pos, mark = buf[pos:] + decode(data, final=eof), 0, 0
                continue
            at = line + buf.count("\n", mark, exc.pos)
            raise EntryError(f"{where}:{at}: invalid JSON: {exc.msg}") from None
        except RecursionError:
            raise EntryError(f"{where}:{here}: invalid JSON: nested too deeply") from None
        except ValueError as exc:  # NaN, Infinity, a number of thousands of digits
            raise EntryError(f"{where}:{here}: invalid JSON: {json_error_text(exc)}") from None
        text = buf[pos:end]
        if SURROGATE_ESCAPE.search(text):
            try:
                json.dumps(value, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError:
                raise EntryError(
                    f"{where}:{here}: invalid JSON: a lone surrogate (\\uD800-\\uDFFF) "
                    "is not Unicode"
                ) from None
        yield here, value, text
        pos = end
        expect_value = empty = False
        if pos > _CHUNK:  # drop what was decoded, keeping the line count
            line += buf.count("\n", mark, pos)
            buf, pos, mark = buf[pos:], 0, 0


def _expect_only_whitespace(
    rest: str, handle: IO[bytes], decode: Callable[[bytes, bool], str], place: str
) -> None:
    """Nothing but whitespace may follow the array (read a chunk at a time)."""
    while True:
        if rest.strip(" \t\n\r"):
            raise EntryError(f"{place}: invalid JSON: extra data after the array")
        data = handle.read(_CHUNK)
        if not data:
            decode(b"", True)
            return
        rest = decode(data, False)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _validate(item: object, place: str) -> AuditEntry:
    if not isinstance(item, dict):
        raise EntryError(f"{place}: expected a JSON object, got {type(item).__name__}")
    try:
        return AuditEntry.model_validate(item)
    except ValidationError as exc:
        raise EntryError(format_validation_error(exc, place)) from exc


def select_session(
    entries: list[AuditEntry], session_id: str | None, where: str
) -> list[AuditEntry]:
    """All entries, or only ``session_id``'s (exact match) plus those carrying no id."""
    if session_id is None:
        return entries
    # Entries without a session id join the named session; others must match it exactly.
    chosen = [
        e if e.session_id == session_id else e.model_copy(update={"session_id": session_id})
        for e in entries
        if e.session_id in (None, session_id)
    ]
    if not chosen:
        raise EntryError(f"{where}: no entries for session {session_id}")
    return chosen


def is_sqlite_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file starts with SQLite's header (a database, not an entries file)."""
    try:
        with open_regular(path) as handle:  # a FIFO is no database, and must not block
            return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


#: The file formats of ``cleo-grade import --format`` and ``graded_session.ingest(format=...)``
#: (DESIGN §4): ``auto`` tells an entries file from a CLEO database by its content.
IMPORT_FORMATS: Final = ("auto", "json", "jsonl", "otlp", "claude-code", "cleo-db")
#: The names of an audit entries file: either reads a JSON array and JSON lines alike.
ENTRY_FILE_FORMATS: Final = frozenset({"json", "jsonl"})


def find_cleo_db(project: str | os.PathLike[str]) -> Path:
    """The CLEO database of a project directory (or the path itself if it is a file)."""
    root = Path(project)
    if root.is_file():
        return root
    if root.exists() and not root.is_dir():
        raise StoreError(
            f"{root}: {NotRegularFileError(root, kind_of(root.stat().st_mode)).strerror}"
        )
    for candidate in CLEO_DB_CANDIDATES:
        if (root / candidate).is_file():
            return root / candidate
    names = " or ".join(str(c) for c in CLEO_DB_CANDIDATES)
    raise StoreError(f"{root}: no CLEO database ({names})")


def read_cleo_db(
    cleo_db: str | os.PathLike[str], *, session_id: str | None = None
) -> list[tuple[str, AuditEntry]]:
    """(row id, entry) of every audit row of a CLEO database (one session's, or all).

    The database is opened read-only. StoreError names a row that does not load, or says
    that there is nothing to import.
    """
    with AuditStore(cleo_db, read_only=True) as source:
        sessions = source.session_ids() if session_id is None else [session_id]
        items = [item for sid in sessions for item in source.session_items(sid)]
    if not items:
        which = f"session {session_id}" if session_id else "any session"
        raise StoreError(f"{cleo_db}: no audit entries for {which}")
    return items
