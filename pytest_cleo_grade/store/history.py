"""GRADES.jsonl: the append-only grade history, safe under concurrent writers."""

from __future__ import annotations

import codecs
import errno
import fcntl
import json
import os
import stat
import time
import warnings
from collections.abc import Callable, Container, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from pytest_cleo_grade.core._files import (
    MAX_LINE_BYTES,
    MAX_NESTING,
    SQLITE_HEADER,
    SURROGATE_ESCAPE,
    NotRegularFileError,
    SymlinkRefusedError,
    check_nesting,
    compact_json_utf8,
    finite_float,
    iter_lines,
    kind_of,
    make_parents,
    open_append_no_follow,
    open_regular,
    parse_json_strict,
)
from pytest_cleo_grade.core.errors import CleoGradeWarning, HistoryError
from pytest_cleo_grade.core.models import GradeResult, format_validation_error
from pytest_cleo_grade.core.settings import DEFAULT_HISTORY
from pytest_cleo_grade.store._sqlite import same_file

__all__ = [
    "DEFAULT_HISTORY",
    "append_grade",
    "append_grades",
    "grade_line",
    "iter_grades",
    "iter_numbered_grades",
    "locked_history",
    "read_grades",
    "sync_history",
]


#: What a line says about a session id that is not Unicode (the writer refuses it, the
#: reader skips it).
_NOT_UNICODE_ID: Final = "sessionId holds a lone surrogate (\\uD800-\\uDFFF): not Unicode"


def grade_line(result: GradeResult) -> str:
    """The CLEO spec's history line: the compact GradeResult JSON with ``evaluator``, no newline.

    Always UTF-8-encodable: see :func:`_line_bytes`.
    """
    return _line_bytes(result).decode("utf-8")


def _line_bytes(result: GradeResult) -> bytes:
    # Agent text that is not Unicode (a lone surrogate in a flag) is written as JSON escapes,
    # which read_grades reads back equal; only such lines pay for them.
    return compact_json_utf8(result.to_json_dict()).encode("utf-8")


def _refuse_non_unicode_ids(results: Iterable[GradeResult], target: Path) -> None:
    """HistoryError for a grade whose session id is not Unicode: the key every reader, filter
    and store matches on could not hold it, so read_grades skips such a line."""
    for result in results:
        try:
            result.session_id.encode("utf-8")
        except UnicodeEncodeError:
            raise HistoryError(
                f"{target}: cannot append grade: {_NOT_UNICODE_ID}: "
                f"{result.session_id.encode('utf-8', 'backslashreplace').decode()}"
            ) from None


def _refuse_unreadable_lines(results: list[GradeResult], lines: list[bytes], target: Path) -> None:
    """HistoryError for a grade whose line is longer than any reader reads (a session of
    about a million flags): appended, it would be skipped by every later read."""
    for result, line in zip(results, lines, strict=True):
        if len(line) > MAX_LINE_BYTES:
            session = result.session_id.encode("utf-8", "backslashreplace").decode()
            raise HistoryError(
                f"{target}: cannot append grade of session {session}: its line would be "
                f"{len(line) / (1024 * 1024):.0f} MiB, longer than the "
                f"{MAX_LINE_BYTES // (1024 * 1024)} MiB a history line is read back with"
            )


#: How long a writer waits for the history's lock: longer than the store's busy timeout,
#: which a CLI holding the lock may wait out (its grades table), and then a HistoryError:
#: a hung or stopped holder must not hang the run.
LOCK_TIMEOUT_S: Final = 75.0
# Histories whose last wait ran out in this process: the next writer tries once, not for
# LOCK_TIMEOUT_S again (a run appending a line per test would wait that long per test).
_stuck: set[Path] = set()


def _lock(
    fd: int, path: Path, timeout: float | None = None, outcome: str = "nothing appended"
) -> None:
    appending = timeout is None  # a writer's wait, which _stuck shortens
    if timeout is None:
        timeout = 0.0 if path in _stuck else LOCK_TIMEOUT_S
    deadline = time.monotonic() + timeout
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                if appending:
                    _stuck.add(path)
                raise HistoryError(
                    f"{path}: locked by another process for more than {timeout:.0f} s "
                    f"(a hung or stopped cleo-grade or pytest?): {outcome}"
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, 0.1)
        else:
            if appending:
                _stuck.discard(path)
            return


@contextmanager
def _locked_append(path: Path) -> Iterator[int]:
    make_parents(path)
    while True:
        # Never through a symbolic link (a planted one would carry grades out of the
        # project), never into a FIFO or a device.
        fd = open_append_no_follow(path)
        try:
            # Checked before the lock: the audit store holds a lock on its own file, which
            # this process's store (the CLI saving into both) would hold against us for ever.
            if os.pread(fd, len(SQLITE_HEADER), 0) == SQLITE_HEADER:
                raise HistoryError(
                    f"{path}: an SQLite database (an audit store, a CLEO project's database), "
                    "not a grade history: nothing appended (name a .jsonl file)"
                )
            # An exclusive lock serialises writers across processes; O_APPEND alone does not
            # guarantee that a large line is written in one piece.
            _lock(fd, path)
            if not same_file(os.fstat(fd), path):
                # `cleo-grade history compact` replaced the file while we waited for its
                # lock: a line appended to the old one would be lost with it.
                continue
            yield fd
            return
        finally:
            os.close(fd)  # closing releases the lock


@contextmanager
def locked_history(path: str | os.PathLike[str], *, timeout: float) -> Iterator[int]:
    """A read descriptor of the existing history at ``path`` holding the lock its writers
    take, for a command that rewrites the file (``history compact``): no append can land
    between its read and its replace, and an appender that waited for the lock appends to
    the new file (see :func:`_locked_append`). FileNotFoundError when there is none;
    HistoryError after ``timeout`` seconds of another process holding the lock."""
    target = Path(path)
    while True:
        try:
            fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the file is rewritten: never through a link
                raise SymlinkRefusedError(target) from None
            raise
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise NotRegularFileError(target, kind_of(mode))
            if os.pread(fd, len(SQLITE_HEADER), 0) == SQLITE_HEADER:
                raise HistoryError(
                    f"{target}: an SQLite database (an audit store, a CLEO project's "
                    "database), not a grade history"
                )
            _lock(fd, target, timeout, "nothing changed")
            if not same_file(os.fstat(fd), target):
                continue  # rewritten by another compaction while we waited
            yield fd
            return
        finally:
            os.close(fd)


def append_grade(result: GradeResult, path: str | os.PathLike[str]) -> None:
    """Append one grade to the history at ``path``, creating its directories.

    The line is written whole or not at all: if the write fails (a full disk), the file is
    cut back to its previous length before the error is raised as HistoryError. A grade whose
    session id is not Unicode (a lone surrogate) is a HistoryError, nothing written.
    """
    append_grades([result], path)


def append_grades(
    results: Iterable[GradeResult],
    path: str | os.PathLike[str],
    *,
    sync: bool = True,
    then: Callable[[], object] | None = None,
) -> None:
    """Append several grades in one locked write and one fsync (all of them or none).

    ``sync=False`` leaves the fsync to :func:`sync_history`: the line still survives a killed
    process (it is in the kernel's cache), and a test run appending one line per finished
    test pays for one fsync at its end instead of one per test.

    ``then`` is called after the append, while the history is still locked; if it raises,
    the appended lines are cut off again and its error propagates: the caller's other half
    (the store's grades table) failed, so the grades are saved nowhere. Holding the lock is
    what makes the cut safe: no other writer can have appended after them.
    """
    target = Path(path)
    results = list(results)
    _refuse_non_unicode_ids(results, target)
    lines = [_line_bytes(result) for result in results]
    _refuse_unreadable_lines(results, lines, target)
    data = b"".join(line + b"\n" for line in lines)
    if not data:
        return
    try:
        with _locked_append(target) as fd:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                # The last line is torn (a writer killed mid-line, a hand edit): start on a
                # line of its own, or this grade would be glued to it and lost with it.
                data = b"\n" + data
            try:
                written = os.write(fd, data)
                while written < len(data):
                    written += os.write(fd, data[written:])
                if sync:
                    os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)
                raise
            if then is not None:
                _then_or_cut_back(then, fd, size, target, sync=sync)
    except OSError as exc:
        raise HistoryError(f"{target}: cannot append grade: {exc.strerror or exc}") from exc


def _then_or_cut_back(
    then: Callable[[], object], fd: int, size: int, target: Path, *, sync: bool
) -> None:
    try:
        then()
    except BaseException as failure:
        try:
            os.ftruncate(fd, size)
            if sync:
                os.fsync(fd)
        except OSError as exc:
            # Rare (the file vanished under us?): say that the grade stayed in the history.
            raise HistoryError(
                f"{target}: the grade stays in the history although it was not saved "
                f"elsewhere ({failure}): cannot remove its line: {exc.strerror or exc}"
            ) from failure
        raise


def sync_history(path: str | os.PathLike[str]) -> None:
    """fsync the history at ``path`` (after appends with ``sync=False``); HistoryError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise HistoryError(f"{path}: cannot sync the grade history: {exc.strerror or exc}") from exc
    try:
        os.fsync(fd)
    except OSError as exc:
        raise HistoryError(f"{path}: cannot sync the grade history: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)


def read_grades(path: str | os.PathLike[str], session_id: str | None = None) -> list[GradeResult]:
    """Read the history in file order, optionally only one session's grades.

    A missing file is an empty history. A line that is not a valid grade (torn, garbage,
    absurdly nested, a number no percentage can hold, a session id with a lone surrogate) is
    skipped with a CleoGradeWarning naming its line number, so one bad line never hides the
    rest; a lone surrogate escape elsewhere (agent text, see :func:`grade_line`) reads back
    as written. Only ``\n`` ends a line. A history that is not a regular file, or that is an
    SQLite database, is a HistoryError. A reader that needs less than every grade at once
    iterates :func:`iter_grades` instead: memory then follows a line, not the file.
    """
    return list(iter_grades(path, session_id))


def iter_grades(
    path: str | os.PathLike[str], session_id: str | None = None
) -> Iterator[GradeResult]:
    """:func:`read_grades` one grade at a time, in file order, the same lines skipped with
    the same warnings: a history of any size is read with the memory of its longest line."""
    for _number, result in iter_numbered_grades(path, session_id):
        yield result


def iter_numbered_grades(
    path: str | os.PathLike[str], session_id: str | None = None, only: Container[int] | None = None
) -> Iterator[tuple[int, GradeResult]]:
    """(line number, grade) of :func:`iter_grades`; with ``only``, the lines of those numbers
    alone are parsed (a second pass over lines a first pass chose), the rest passed over."""
    target = Path(path)
    try:
        handle = open_regular(target)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise HistoryError(f"{target}: cannot read history: {exc.strerror or exc}") from exc
    with handle:
        try:
            if os.pread(handle.fileno(), len(SQLITE_HEADER), 0) == SQLITE_HEADER:
                # One line, not a warning for every "line" of a database's pages.
                raise HistoryError(
                    f"{target}: an SQLite database (an audit store, a CLEO project's "
                    "database), not a grade history"
                )
            for number, raw in iter_lines(handle, str(target), on_long=_long_line(target)):
                if only is not None and number not in only:
                    continue
                result = _parse_line(target, number, raw)
                if result is not None and (session_id is None or result.session_id == session_id):
                    yield number, result
        except OSError as exc:
            raise HistoryError(f"{target}: cannot read history: {exc.strerror or exc}") from exc


def _parse_line(target: Path, number: int, raw: bytes) -> GradeResult | None:
    checked = check_line(number, raw)
    if isinstance(checked, str):
        _skip(target, number, checked)
        return None
    return checked


def check_line(number: int, raw: bytes) -> GradeResult | str | None:
    """Line ``number`` of a history (its newline and ``\r`` trimmed) as a grade, or why a
    reader skips it (the warning's text), or None for a blank line (skipped silently)."""
    if number == 1 and raw.startswith(codecs.BOM_UTF8):
        raw = raw[len(codecs.BOM_UTF8) :]  # an editor's BOM, as entries files allow it
    if not raw.strip(b" \t\r"):
        return None
    result = _plain_grade(raw)
    if result is None:
        checked = _strict_grade(raw)
        if isinstance(checked, str):
            return checked
        result = checked
    return _usable(result)


def _plain_grade(raw: bytes) -> GradeResult | None:
    """The line's grade parsed and validated by pydantic in one pass, or None when the strict
    parse must decide (:func:`_strict_grade` then reads it, or says why not, in its words).

    pydantic's JSON parser reads what the strict one accepts alike (the last of a duplicate
    key, integers of any size, the same floats) and refuses lone surrogates and numbers of
    thousands of digits; what it alone lets through is NaN, an infinity or a number that
    overflows a float (the model refuses them in its own fields, so only an extra can hold
    one: encoding the extras refuses them) and nesting past the strict limit (counted first).
    Half the time of ``json.loads`` then validation; tests/store/test_plain_parse.py checks
    that both read every line alike.
    """
    if raw.count(b"[") + raw.count(b"{") > MAX_NESTING:
        return None
    try:
        # Decoded here: Python's UTF-8 decoder is the one every other reader applies.
        result = GradeResult.model_validate_json(raw.decode("utf-8"))
        if result.model_extra:
            json.dumps(result.model_extra, allow_nan=False)
    # ValidationError and UnicodeDecodeError are ValueErrors; a validator may raise others.
    except (ValueError, OverflowError, RecursionError, TypeError):
        return None
    return result


def _strict_grade(raw: bytes) -> GradeResult | str:
    """The line's grade by the strict JSON parse then validation, or why it is none."""
    try:
        data = _parse_json(raw.decode("utf-8"))
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        return f"invalid JSON ({exc})"
    try:
        return GradeResult.model_validate(data)
    except ValidationError as exc:
        return format_validation_error(exc)
    except (ValueError, OverflowError, RecursionError, TypeError) as exc:
        return f"not a usable grade: {exc}"


def _usable(result: GradeResult) -> GradeResult | str:
    """The grade, or why no reader can use it though it parsed and validated."""
    try:
        # What every reader shows must be computable: a 400-digit score overflows here.
        result.display_percent  # noqa: B018
    except (ValueError, OverflowError, RecursionError, TypeError) as exc:
        return f"not a usable grade: {exc}"
    if result.total_score > result.max_score:
        # No rubric scores past its maximum: an edited or corrupted line, which ranked first.
        return "not a usable grade: totalScore is above maxScore"
    problem = _out_of_range(result)
    if problem is not None:
        # A baseline saved from it would hold a percentage no baseline reader accepts.
        return f"not a usable grade: {problem}"
    try:
        result.session_id.encode("utf-8")
    except UnicodeEncodeError:
        return _NOT_UNICODE_ID
    return result


def _out_of_range(result: GradeResult) -> str | None:
    """Why a grade's scores cannot be (a score below 0, a dimension outside 0..its max), or
    None: every rubric scores within its ranges."""
    if result.total_score < 0:
        return "totalScore is below 0"
    for name, dimension in result.dimensions.items():
        if dimension.max < 0 or not 0 <= dimension.score <= dimension.max:
            shown = name if len(name) <= 40 else f"{name[:40]}..."
            return (
                f"dimension {shown!r} scores {_number(dimension.score)} out of "
                f"{_number(dimension.max)} (a score is 0 to its max)"
            )
    return None


def _number(value: float) -> str:
    # An int of thousands of digits (a mutated line) is no float: ``:g`` would overflow.
    return f"{value:g}" if isinstance(value, float) else str(value)[:40]


def _parse_json(text: str) -> object:
    """The line's JSON, as strict as every other reader, except that a lone surrogate
    escape in the grade's text is kept: :func:`grade_line` writes agent text that is not
    Unicode that way, and every display of a grade escapes it (the session id, a key, is
    refused by the caller)."""
    try:
        return parse_json_strict(text, max_nesting=MAX_NESTING)
    except ValueError:
        if not SURROGATE_ESCAPE.search(text):
            raise
    # The strict parse failed on the escape or on something else: parse again without the
    # surrogate check only (nesting, NaN/Infinity and overflowing numbers still fail).
    check_nesting(text, MAX_NESTING)
    return json.loads(text, parse_constant=_reject_constant, parse_float=finite_float)


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not valid JSON")


def _long_line(target: Path) -> Callable[[int], None]:
    def skip(number: int) -> None:
        _skip(target, number, "line too long", stacklevel=5)

    return skip


def _skip(path: Path, number: int, why: str, stacklevel: int = 4) -> None:
    message = f"{path}:{number}: skipped corrupt grade line: {why}"
    warnings.warn(message, CleoGradeWarning, stacklevel=stacklevel)
