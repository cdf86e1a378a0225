"""Safe file access for untrusted input: regular files only, no link followed on write, strict JSON.

Every reader of an entry file, a history, a rubric file or a CLEO database opens it here, so a
device or a FIFO given as input is refused at once (never read forever, never waited on), and
every writer creates its files here, so a symbolic link planted where the tool writes is refused
instead of written through. JSON lines end at ``\\n`` (or ``\\r\\n``) only: U+2028, U+2029,
U+0085, VT and FF inside a line are data, as JSON says.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import re
import signal
import stat
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Final

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_NESTING",
    "SQLITE_HEADER",
    "SQLITE_SIDE_FILES",
    "NotRegularFileError",
    "SymlinkRefusedError",
    "append_markdown",
    "check_nesting",
    "exclusive_temp_file",
    "finite_float",
    "interrupts_held",
    "iter_line_blocks",
    "iter_lines",
    "json_error_text",
    "kind_of",
    "make_parents",
    "nesting_depth",
    "open_append_no_follow",
    "open_regular",
    "parse_json_strict",
    "read_regular_bytes",
    "refuse_symlink",
    "replaced_input",
    "write_atomically",
]

#: The longest JSON line read (an audit entry or a grade is a few KiB); longer is an input
#: error, so a file without line breaks cannot make a reader hold it whole.
MAX_LINE_BYTES: Final = 64 * 1024 * 1024

#: How deeply a value may nest (objects and arrays) in params, metadata or a grade line. The
#: store reads a session back through a JSON parser with a depth budget, and a value nested
#: deeper than this could be written but never graded; deeper is refused where it enters.
MAX_NESTING: Final = 100

_READ_CHUNK: Final = 1024 * 1024

#: How every SQLite database file begins: what tells a database from a JSON file given in
#: its place.
SQLITE_HEADER: Final = b"SQLite format 3\x00"
#: The files SQLite keeps beside a database: replacing one loses the database's last writes.
SQLITE_SIDE_FILES: Final = ("-wal", "-shm", "-journal")

#: A \uD800-\uDFFF escape: JSON can spell a lone surrogate, which no UTF-8 store or output
#: can hold. Text without one cannot produce one (UTF-8 decoding rejects encoded surrogates).
SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")

#: Tokens that change the nesting depth; strings are matched whole so brackets in them count
#: for nothing.
_DEPTH_TOKENS: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.DOTALL)


class NotRegularFileError(OSError):
    """The input is a device, a FIFO, a socket or a directory: not a file to read."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"not a regular file ({kind})", os.fspath(path))


class SymlinkRefusedError(OSError):
    """A symbolic link where the tool writes: refused, never written through."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(
            errno.ELOOP,
            "is a symbolic link; refusing to write through it (remove it or name the real file)",
            os.fspath(path),
        )


def kind_of(mode: int) -> str:
    """What a file that is not a regular one is, for an error message."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a file"


def open_regular(path: str | os.PathLike[str]) -> IO[bytes]:
    """Open a regular file for reading in binary; NotRegularFileError for anything else.

    O_NONBLOCK makes opening a FIFO return at once (it would wait for a writer); the type is
    checked on the open descriptor, so what is read is what was checked.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(path, kind_of(mode))
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_bytes(path: str | os.PathLike[str], limit: int = MAX_LINE_BYTES) -> bytes:
    """The whole content of a small regular file (a rubric, a score sheet), at most ``limit``."""
    with open_regular(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"larger than {limit // (1024 * 1024)} MiB", os.fspath(path))
    return data


def iter_lines(
    handle: IO[bytes],
    where: str,
    *,
    on_long: Callable[[int], None] | None = None,
    prefix: bytes = b"",
) -> Iterator[tuple[int, bytes]]:
    """(line number, line) of a binary stream, split at ``\\n`` only, ``\\r\\n`` trimmed.

    The lines of :func:`iter_line_blocks`, one at a time.
    """
    for number, lines in iter_line_blocks(handle, where, on_long=on_long, prefix=prefix):
        for offset, line in enumerate(lines):
            yield number + offset, line[:-1] if line.endswith(b"\r") else line


def iter_line_blocks(
    handle: IO[bytes],
    where: str,
    *,
    on_long: Callable[[int], None] | None = None,
    prefix: bytes = b"",
) -> Iterator[tuple[int, list[bytes]]]:
    """(number of the first line, lines) for each chunk of a binary stream, split at ``\\n``.

    Read a chunk at a time, with no Python work per line (bytes.split is much cheaper than
    readline() per line): a million-line file is a few hundred lists. A line may end with
    ``\\r``. A line longer than MAX_LINE_BYTES is a ValueError naming it, after the lines
    before it; or, with ``on_long``, is reported to it with its number and skipped (read
    through, never held whole). ``prefix``: bytes already read from the start of the stream.
    """
    number = 1  # the number of the next line
    # The unfinished last line, as the chunks it came in: joined once when its end arrives, so
    # a line of many chunks costs its length, not its length times the number of chunks.
    carry: list[bytes] = []
    carried = 0
    skipping = False  # inside an over-long line that on_long was told about
    first = prefix
    while True:
        chunk, first = (first, b"") if first else (handle.read(_READ_CHUNK), b"")
        if not chunk:
            break
        if b"\n" not in chunk:
            if not skipping:
                carry.append(chunk)
                carried += len(chunk)
                if carried > MAX_LINE_BYTES:
                    _long_line(number, where, on_long)
                    number += 1
                    skipping = True
                    carry, carried = [], 0
            continue
        lines = chunk.split(b"\n")
        if carry:
            carry.append(lines[0])
            lines[0] = b"".join(carry)
        last = lines.pop()
        carry, carried = [last], len(last)
        if skipping:
            del lines[0]  # the end of the over-long line, already numbered
            skipping = False
        while lines and max(map(len, lines)) > MAX_LINE_BYTES:
            index = next(i for i, line in enumerate(lines) if len(line) > MAX_LINE_BYTES)
            if index:
                yield number, lines[:index]
            _long_line(number + index, where, on_long)
            number += index + 1
            del lines[: index + 1]
        if lines:
            yield number, lines
            number += len(lines)
        if carried > MAX_LINE_BYTES:
            _long_line(number, where, on_long)
            number += 1
            skipping = True
            carry, carried = [], 0
    if carried and not skipping:
        yield number, [b"".join(carry)]


def _long_line(number: int, where: str, on_long: Callable[[int], None] | None) -> None:
    if on_long is None:
        raise ValueError(
            f"{where}:{number}: line longer than {MAX_LINE_BYTES // (1024 * 1024)} MiB"
        )
    on_long(number)


def nesting_depth(text: str) -> int:
    """How deeply the JSON text's objects and arrays nest (0 for a scalar)."""
    depth = deepest = 0
    for match in _DEPTH_TOKENS.finditer(text):
        token = match.group()
        if token in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif token in "]}":
            depth -= 1
    return deepest


def check_nesting(text: str, limit: int = MAX_NESTING) -> None:
    """ValueError when the JSON text nests deeper than ``limit``; cheap when it cannot."""
    # Counting brackets is a C-speed scan; only text with enough of them is walked.
    if text.count("[") + text.count("{") > limit and nesting_depth(text) > limit:
        raise ValueError(f"nested too deeply (more than {limit} levels)")


def _reject_constant(name: str) -> Any:
    # json accepts NaN and Infinity by default; an audit log carrying them is corrupt.
    raise ValueError(f"{name} is not valid JSON")


def finite_float(text: str) -> float:
    """A JSON number as a float; ValueError when it overflows (``1e999``)."""
    # 1e999 is valid JSON that no float holds: Python reads it as infinity, which no JSON
    # writer (nor the store) can carry back out.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:20]}{'...' if len(text) > 20 else ''} is out of range")
    return value


def json_error_text(exc: ValueError) -> str:
    """What is wrong with a JSON text, said for a reader of the file, not of Python's docs."""
    text = str(exc)
    if "integer string conversion" in text:
        # Python's own words point at sys.set_int_max_str_digits(), of no use to the reader.
        return f"a number with more than {sys.get_int_max_str_digits()} digits"
    return text


def _float_or_text(text: str) -> float | str:
    value = float(text)
    return value if math.isfinite(value) else text


def _int_or_text(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:  # more digits than Python converts
        return text


# json.loads' number hooks, built once: the history and entries readers parse every line here.
_STRICT_NUMBERS: Final[dict[str, Any]] = {"parse_float": finite_float}
_TEXT_NUMBERS: Final[dict[str, Any]] = {"parse_float": _float_or_text, "parse_int": _int_or_text}


def parse_json_strict(
    text: str,
    *,
    max_nesting: int | None = MAX_NESTING + 2,
    huge_numbers_as_text: bool = False,
    replace_lone_surrogates: bool = False,
) -> Any:
    """json.loads that rejects NaN, Infinity, lone surrogates and absurd nesting (ValueError).

    ``max_nesting`` counts the document's own levels (an entry object holding params is 2).
    ``huge_numbers_as_text`` keeps a number no float holds (``1e400``) and a whole number of
    more digits than Python converts as its text, for a
    document written by someone else whose values are stored as text when JSON cannot hold
    them (a tool's input in a transcript); otherwise it is an error.
    ``replace_lone_surrogates`` turns a lone surrogate escape (``\\ud83d`` alone: half an
    emoji cut by a writer that counts UTF-16 units) into U+FFFD instead of refusing the text.
    """
    if max_nesting is not None:
        check_nesting(text, max_nesting)
    numbers = _TEXT_NUMBERS if huge_numbers_as_text else _STRICT_NUMBERS
    try:
        value = json.loads(text, parse_constant=_reject_constant, **numbers)
    except RecursionError:
        # Pathologically nested input must be an input error, not a traceback.
        raise ValueError("nested too deeply") from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:
        raise ValueError(json_error_text(exc)) from None
    try:
        # Text from argv may carry undecodable bytes as surrogates (isascii() is O(1)).
        if not text.isascii():
            text.encode("utf-8")
        if SURROGATE_ESCAPE.search(text):
            json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        if not replace_lone_surrogates:
            raise ValueError("a lone surrogate (\\uD800-\\uDFFF) is not Unicode") from None
        return _without_lone_surrogates(value)
    return value


#: A surrogate code point left in a parsed string: json.loads joins every valid pair.
_LONE_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` with each lone surrogate in its strings (keys too) replaced by U+FFFD."""
    # Recursion is bounded by the nesting check parse_json_strict made first.
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {
            _without_lone_surrogates(key): _without_lone_surrogates(item)
            for key, item in value.items()
        }
    return value


def compact_json_utf8(data: Any) -> str:
    """``data`` as compact JSON that UTF-8 can always encode: non-ASCII text as it is, but
    agent text holding a lone surrogate (a task id from a file name that is not UTF-8,
    ``'T-\\udcff'``) makes the whole document JSON's ``\\u`` escapes, as CLEO's
    ``JSON.stringify`` writes it; :func:`json.loads` reads it back equal."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return json.dumps(data, separators=(",", ":"))
    return text


# -- writing --------------------------------------------------------------------------------


#: The signals a command turns into an exception (Ctrl-C, and SIGTERM in the CLI).
_INTERRUPTS: Final = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait (pending, not lost) until the block has run.

    For a resource that exists once a system call returns but belongs to nobody until the
    next statement stores it: Python runs a signal's handler right after that call, and the
    exception it raises would leave the resource (a descriptor holding a lock) with nobody to
    release it. Only this thread's mask changes; threads this process starts inside the
    block inherit it.
    """
    held = signal.pthread_sigmask(signal.SIG_BLOCK, _INTERRUPTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def refuse_symlink(path: str | os.PathLike[str]) -> None:
    """SymlinkRefusedError when ``path`` is a symbolic link (dangling or not)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISLNK(mode):
        raise SymlinkRefusedError(path)


def open_append_no_follow(path: str | os.PathLike[str], mode: int = 0o644) -> int:
    """A descriptor appending to ``path`` (created if missing), never through a link.

    O_NOFOLLOW refuses a link as the last component; O_NONBLOCK keeps a FIFO from blocking
    the open, and anything but a regular file is refused.
    """
    try:
        return _open_append_regular(path, mode, os.O_NOFOLLOW)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SymlinkRefusedError(path) from None
        raise


def _open_append_regular(path: str | os.PathLike[str], mode: int, extra_flags: int) -> int:
    # Read access too: an appender checks whether the last line was torn.
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | extra_flags
    fd = os.open(path, flags, mode)
    try:
        file_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(file_mode):
            raise NotRegularFileError(path, kind_of(file_mode))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def append_markdown(path: str | os.PathLike[str], text: str) -> None:
    """Append a Markdown block to a file other steps write too (GitHub's step summary).

    The block starts after a blank line unless the file is empty: a heading written after
    text without a final newline would otherwise continue that text's last line.
    """
    # The runner names the file (a link is followed), but only a regular file is written:
    # /dev/zero would be read without end, and a FIFO would block the run.
    with os.fdopen(_open_append_regular(path, 0o644, 0), "a+b") as handle:
        size = handle.seek(0, os.SEEK_END)
        handle.seek(max(0, size - 2))
        tail = handle.read()
        lead = "" if size == 0 or tail.endswith(b"\n\n") else "\n" * (1 + (tail[-1:] != b"\n"))
        handle.write((lead + text).encode("utf-8"))


def exclusive_temp_file(target: Path) -> tuple[int, Path]:
    """A new file beside ``target`` (same directory, so a rename replaces it atomically).

    Created with O_EXCL under a random name: a file or link planted in advance is never
    opened. Returns the descriptor and the path; the caller renames or removes it.
    """
    import tempfile  # here: with random and hashlib, a tenth of a light command's start-up

    fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial", dir=target.parent)
    return fd, Path(name)


def make_parents(target: Path) -> None:
    """Create the directories ``target`` needs; a file where one should be is said so."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        # mkdir says "File exists" of a file where a directory of the path should be.
        raise NotADirectoryError(
            errno.ENOTDIR, "a parent of the path is not a directory", os.fspath(target)
        ) from None


def write_atomically(target: Path, data: bytes | Iterable[bytes]) -> None:
    """Write ``data`` (bytes, or chunks of them) to a new file beside ``target`` and rename
    it over ``target``.

    A reader never sees half a file; the temporary file is created exclusively under a random
    name (a file or link planted beside the target is never opened), and a link at ``target``
    itself is replaced, never written through. A device, FIFO, socket or directory at
    ``target`` is NotRegularFileError: renaming over it would replace ``/dev/null`` for the
    whole machine. Missing parent directories are created. On OSError no temporary file is
    left behind, and the error is raised.
    """
    partial: Path | None = None
    try:
        make_parents(target)
        with contextlib.suppress(FileNotFoundError):
            mode = os.lstat(target).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
                raise NotRegularFileError(target, kind_of(mode))
        fd, partial = exclusive_temp_file(target)
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, bytes):
                handle.write(data)
            else:
                for chunk in data:
                    handle.write(chunk)
        # mkstemp's 0600 would hide the file from CI's other users: use the usual mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(partial, 0o666 & ~umask)
        partial.replace(target)
    except BaseException:  # a failed write, or chunks that raised
        if partial is not None:
            with contextlib.suppress(OSError):
                partial.unlink(missing_ok=True)
        raise


def _entries_behind(path: str | os.PathLike[str]) -> set[str]:
    """Every directory entry that reading ``path`` goes through: the path's own (its
    directories resolved) and, if it is a link, each link's target in turn."""
    entries: set[str] = set()
    current = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on a chain of links
        head, name = os.path.split(current)
        entry = os.path.join(os.path.realpath(head), name)
        if entry in entries:
            break
        entries.add(entry)
        try:
            link = os.readlink(entry)
        except OSError:  # not a link (or not there): the chain ends here
            break
        current = os.path.abspath(os.path.join(os.path.dirname(entry), link))
    return entries


def inputs_of(
    *, history: Path | None = None, db: Path | None = None, baseline: Path | None = None
) -> dict[Path, str]:
    """The files a report (or ``cleo-grade junit``) reads, each with what it is, for
    :func:`replaced_input`; a database comes with SQLite's side files."""
    reads: dict[Path, str] = {}
    if history is not None:
        reads[history] = "grade history"
    if db is not None:
        reads[db] = "audit store"
        for suffix in SQLITE_SIDE_FILES:
            reads[db.with_name(db.name + suffix)] = "audit store's SQLite file"
    if baseline is not None:
        reads[baseline] = "baseline"
    return reads


def replaced_input(
    target: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]]
) -> str | os.PathLike[str] | None:
    """The first of ``inputs`` (files a command reads) that writing ``target`` with
    :func:`write_atomically` would replace, or None.

    The rename replaces the entry ``target`` names (a link there is replaced, not followed),
    so ``target`` collides with an input when that entry is the input's own or one its links
    lead to: ``out/../grades.jsonl``, a link to the history, or the history reached through a
    linked directory are all the history.
    """
    head, name = os.path.split(os.path.abspath(target))
    written = os.path.join(os.path.realpath(head), name)
    for source in inputs:
        if written in _entries_behind(source):
            return source
    return None
