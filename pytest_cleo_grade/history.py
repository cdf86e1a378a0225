"""GRADES.jsonl: the append-only grade history, safe under concurrent writers."""

from __future__ import annotations

import fcntl
import json
import os
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pydantic import ValidationError

from pytest_cleo_grade.errors import CleoGradeWarning, HistoryError
from pytest_cleo_grade.models import GradeResult, format_validation_error

__all__ = ["DEFAULT_HISTORY", "append_grade", "append_grades", "grade_line", "read_grades"]

DEFAULT_HISTORY = Path(".cleo") / "metrics" / "GRADES.jsonl"


def grade_line(result: GradeResult) -> str:
    """Seed 000's history line: the compact GradeResult JSON with ``evaluator``, no newline."""
    return json.dumps(result.to_json_dict(), separators=(",", ":"), ensure_ascii=False)


@contextmanager
def _locked_append(path: Path) -> Iterator[int]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
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


def append_grades(results: Iterable[GradeResult], path: str | os.PathLike[str]) -> None:
    """Append several grades in one locked write and one fsync (all of them or none)."""
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
                os.fsync(fd)
            except OSError:
                os.ftruncate(fd, size)
                raise
    except OSError as exc:
        raise HistoryError(f"{target}: cannot append grade: {exc.strerror or exc}") from exc


def read_grades(path: str | os.PathLike[str], session_id: str | None = None) -> list[GradeResult]:
    """Read the history in file order, optionally only one session's grades.

    A missing file is an empty history. A line that is not a valid grade is skipped with a
    CleoGradeWarning naming its line number, so one bad line never hides the rest.
    """
    target = Path(path)
    try:
        handle = target.open("rb")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise HistoryError(f"{target}: cannot read history: {exc.strerror or exc}") from exc
    results: list[GradeResult] = []
    with handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                data = json.loads(raw)
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                result = GradeResult.model_validate(data)
            except ValidationError as exc:
                _skip(target, number, format_validation_error(exc))
                continue
            except (ValueError, UnicodeDecodeError) as exc:
                _skip(target, number, f"invalid JSON ({exc})")
                continue
            if session_id is None or result.session_id == session_id:
                results.append(result)
    return results


def _skip(path: Path, number: int, why: str) -> None:
    warnings.warn(
        f"{path}:{number}: skipped corrupt grade line: {why}", CleoGradeWarning, stacklevel=3
    )
