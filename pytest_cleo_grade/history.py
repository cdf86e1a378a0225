"""GRADES.jsonl: the append-only grade history, safe under concurrent writers."""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from pytest_cleo_grade.errors import CleoGradeWarning, HistoryError
from pytest_cleo_grade.files import (
    MAX_NESTING,
    iter_lines,
    open_append_no_follow,
    open_regular,
    parse_json_strict,
)
from pytest_cleo_grade.models import GradeResult, format_validation_error
from pytest_cleo_grade.settings import DEFAULT_HISTORY

__all__ = [
    "DEFAULT_HISTORY",
    "append_grade",
    "append_grades",
    "grade_line",
    "read_grades",
    "sync_history",
]


def grade_line(result: GradeResult) -> str:
    """The CLEO spec's history line: the compact GradeResult JSON with ``evaluator``, no newline."""
    return json.dumps(result.to_json_dict(), separators=(",", ":"), ensure_ascii=False)


@contextmanager
def _locked_append(path: Path) -> Iterator[int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Never through a symbolic link (a planted one would carry grades out of the project),
    # never into a FIFO or a device.
    fd = open_append_no_follow(path)
    try:
        # An exclusive lock serialises writers across processes; O_APPEND alone does not
        # guarantee that a large line is written in one piece.
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing releases the lock


def append_grade(result: GradeResult, path: str | os.PathLike[str]) -> None:
    """Append one grade to the history at ``path``, creating its directories.

    The line is written whole or not at all: if the write fails (a full disk), the file is
    cut back to its previous length before the error is raised as HistoryError.
    """
    append_grades([result], path)


def append_grades(
    results: Iterable[GradeResult], path: str | os.PathLike[str], *, sync: bool = True
) -> None:
    """Append several grades in one locked write and one fsync (all of them or none).

    ``sync=False`` leaves the fsync to :func:`sync_history`: the line still survives a killed
    process (it is in the kernel's cache), and a test run appending one line per finished
    test pays for one fsync at its end instead of one per test.
    """
    target = Path(path)
    data = "".join(grade_line(result) + "\n" for result in results).encode()
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
    except OSError as exc:
        raise HistoryError(f"{target}: cannot append grade: {exc.strerror or exc}") from exc


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
    absurdly nested, a number no percentage can hold, a lone surrogate) is skipped with a
    CleoGradeWarning naming its line number, so one bad line never hides the rest. Only
    ``\n`` ends a line. A history that is not a regular file is a HistoryError.
    """
    target = Path(path)
    try:
        handle = open_regular(target)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise HistoryError(f"{target}: cannot read history: {exc.strerror or exc}") from exc
    results: list[GradeResult] = []
    with handle:
        try:
            for number, raw in iter_lines(handle, str(target), on_long=_long_line(target)):
                result = _parse_line(target, number, raw)
                if result is not None and (session_id is None or result.session_id == session_id):
                    results.append(result)
        except OSError as exc:
            raise HistoryError(f"{target}: cannot read history: {exc.strerror or exc}") from exc
    return results


def _parse_line(target: Path, number: int, raw: bytes) -> GradeResult | None:
    if not raw.strip(b" \t\r"):
        return None
    try:
        data = parse_json_strict(raw.decode("utf-8"), max_nesting=MAX_NESTING)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        _skip(target, number, f"invalid JSON ({exc})")
        return None
    try:
        result = GradeResult.model_validate(data)
        # What every reader shows must be computable: a 400-digit score overflows here.
        result.display_percent  # noqa: B018
    except ValidationError as exc:
        _skip(target, number, format_validation_error(exc))
        return None
    except (ValueError, OverflowError, RecursionError, TypeError) as exc:
        _skip(target, number, f"not a usable grade: {exc}")
        return None
    return result


def _long_line(target: Path) -> Callable[[int], None]:
    def skip(number: int) -> None:
        _skip(target, number, "line too long", stacklevel=5)

    return skip


def _skip(path: Path, number: int, why: str, stacklevel: int = 4) -> None:
    message = f"{path}:{number}: skipped corrupt grade line: {why}"
    warnings.warn(message, CleoGradeWarning, stacklevel=stacklevel)
