"""An index of GRADES.jsonl beside it: which line is where, so readers seek to the lines
they need instead of parsing the whole history.

The JSONL stays the record (append-only, CLEO's format); the index is a cache of it, a
small SQLite file ``.<history name>.index`` in the history's directory, and the history
always wins. On every open the index is checked against the file: the same file (device,
inode), its first and last indexed 4 KiB unchanged and no shorter: only the new tail is
indexed; anything else (rewritten, truncated, edited in place, a same-size change of its
modification time, another index version) and the index is rebuilt from the first line.
Every line read through the index is checked against its row (it starts a line, it is the
valid grade of the session indexed): a mismatch is :class:`StaleIndex`, and the caller reads
the history a line at a time instead. Where no index can be written (a read-only directory,
a corrupt file that cannot be replaced, ``CLEO_GRADE_HISTORY_INDEX=off``) :func:`open_index`
returns None and readers stream, as before. A history under INDEX_FROM_BYTES gets no index
of its own (streamed whole, it reads in well under a second); ``CLEO_GRADE_HISTORY_INDEX=on``
indexes any history.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import warnings
import zlib
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

from pytest_cleo_grade.core._files import MAX_LINE_BYTES, SQLITE_HEADER, open_regular
from pytest_cleo_grade.core.errors import CleoGradeWarning

if TYPE_CHECKING:
    # Imported where a line is parsed: `cleo-grade list` reads the index's rows without
    # pydantic (its start-up is most of a listing of one run).
    from pytest_cleo_grade.core.models import GradeResult

T = TypeVar("T")

__all__ = [
    "BY_HAND",
    "INDEXED_EXTRAS",
    "INDEX_FROM_BYTES",
    "INDEX_VARIABLE",
    "HistoryIndex",
    "HistoryPoint",
    "StaleIndex",
    "grades_where",
    "index_path",
    "open_index",
]

#: Bump when the table's columns or what a row means change: an older index is rebuilt.
#: (3: the fingerprints are CRC-32s, no longer SHA-256s; the problem rows' own index.
#: 4: each row's CRC-32 of its line and its scores, the grade count in meta.)
_VERSION: Final = 4
#: The variable that turns the index off (``off``, ``0``, ``no``): every read streams.
INDEX_VARIABLE: Final = "CLEO_GRADE_HISTORY_INDEX"
#: How much of the file's head and of its indexed end are fingerprinted.
_PRINT_BYTES: Final = 4096
#: How long an open waits for another process updating the index before streaming instead.
_BUSY_S: Final = 30.0
#: The extras a line's row keeps: what picks a test's latest grade, series and run (the
#: baseline readers' first pass, grading._history_file) and what the HTML report's trend
#: marks (the rubric and model versions).
INDEXED_EXTRAS: Final = (
    "testId",
    "runId",
    "run",
    "runs",
    "series",
    "adaptive",
    "cleoStatus",
    "cleoThreshold",
    "excluded",
    "rubric",
    "rubricHash",
    "rubricVersion",
    "model",
    "judgeModel",
)

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    version INTEGER NOT NULL,
    device INTEGER NOT NULL,
    inode INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    head TEXT NOT NULL,
    tail TEXT NOT NULL,
    next_number INTEGER NOT NULL,
    open_offset INTEGER,
    grades INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lines (
    number INTEGER PRIMARY KEY,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    problem TEXT,
    session_id TEXT,
    test_id TEXT,
    run_id TEXT,
    evaluator TEXT,
    timestamp TEXT,
    at TEXT,
    total REAL,
    max REAL,
    percent INTEGER,
    letter TEXT,
    flags INTEGER,
    extras TEXT,
    scores TEXT,
    crc INTEGER
);
CREATE INDEX IF NOT EXISTS lines_run ON lines (run_id);
CREATE INDEX IF NOT EXISTS lines_test ON lines (coalesce(test_id, session_id));
CREATE INDEX IF NOT EXISTS lines_session ON lines (session_id);
CREATE INDEX IF NOT EXISTS lines_problems ON lines (number) WHERE problem IS NOT NULL;
"""

_INSERT: Final = "INSERT INTO lines VALUES (" + ",".join("?" * 18) + ")"


class HistoryPoint:
    """One valid line as its row has it: what a trend, a previous grade or a flip reads
    (session, time, evaluator, percentage, the indexed extras), no line parsed."""

    __slots__ = (
        "display_percent",
        "evaluator",
        "model_extra",
        "percent",
        "session_id",
        "timestamp",
    )

    def __init__(
        self,
        session_id: str,
        timestamp: datetime,
        evaluator: str,
        percent: float,
        display_percent: int,
        model_extra: dict[str, Any],
    ) -> None:
        self.session_id = session_id
        self.timestamp = timestamp
        self.evaluator = evaluator
        self.percent = percent
        self.display_percent = display_percent
        self.model_extra = model_extra


class Score(NamedTuple):
    """A dimension's score as a row keeps it."""

    score: int | float
    max: int | float


class ScoredLine:
    """One valid line as its row has it, with its scores: what a baseline reads of a grade
    (``percent``, ``dimensions``, the indexed extras), its line checked unchanged, no line
    parsed (see :meth:`HistoryIndex.scored`)."""

    __slots__ = ("dimensions", "model_extra", "number", "percent", "session_id")

    def __init__(
        self,
        number: int,
        session_id: str,
        percent: float,
        dimensions: dict[str, Score],
        model_extra: dict[str, Any],
    ) -> None:
        self.number = number
        self.session_id = session_id
        self.percent = percent
        self.dimensions = dimensions
        self.model_extra = model_extra


class StaleIndex(Exception):
    """A line read through the index is not the line the index says: read by streaming."""


class Line(NamedTuple):
    """Where a valid line is, and whose grade it holds."""

    number: int
    offset: int
    length: int
    session_id: str


def index_path(history: Path) -> Path:
    """Where the index of ``history`` lives: beside it, hidden, named after it."""
    return history.with_name(f".{history.name}.index")


#: From this size a history without an index gets one: below it the whole file reads in
#: well under a second, and no file appears beside a small history.
INDEX_FROM_BYTES: Final = 4 * 1024 * 1024


def _setting() -> str:
    """``on`` (always index), ``off`` (never), else ``auto`` (a history of INDEX_FROM_BYTES
    or more, or one that has an index already)."""
    value = os.environ.get(INDEX_VARIABLE, "").strip().lower()
    if value in {"off", "0", "no", "false"}:
        return "off"
    return "on" if value in {"on", "1", "yes", "true"} else "auto"


def open_index(history: str | os.PathLike[str]) -> HistoryIndex | None:
    """The history's index brought up to date, or None: read the history by streaming (no
    such file, an SQLite database named as a history, no index can be kept, turned off)."""
    setting = _setting()
    if setting == "off":
        return None
    target = Path(history)
    try:
        handle = open_regular(target)
    except OSError:
        return None  # the streaming reader says what is wrong with it
    try:
        small = setting == "auto" and os.fstat(handle.fileno()).st_size < INDEX_FROM_BYTES
        if small and not os.path.lexists(index_path(target)):
            handle.close()
            return None
        if os.pread(handle.fileno(), len(SQLITE_HEADER), 0) == SQLITE_HEADER:
            handle.close()
            return None
        index = HistoryIndex(target, handle)
        if index.start():
            return index
        index.close()
    except OSError:
        handle.close()
    return None


class HistoryIndex:
    """An open, current index and the history it indexes, in one read transaction: use
    as a context manager; every read sees the file as it was when it was opened."""

    def __init__(self, history: Path, handle: IO[bytes]) -> None:
        self.history = history
        self._handle = handle
        self._fd = handle.fileno()
        self._conn: sqlite3.Connection | None = None

    # -- opening and keeping in step ---------------------------------------------------------

    def start(self) -> bool:
        """Connect and bring the index up to date; False when it cannot be (stream)."""
        for attempt in range(2):
            try:
                self._conn = self._connect()
                self._update()
                return True
            except sqlite3.DatabaseError as exc:
                self._drop_connection()
                if attempt or not _corrupt(exc) or not self._remove_file():
                    return False
            except (sqlite3.Error, OSError, UnicodeEncodeError, OverflowError):
                # A line the table cannot hold (text that is not Unicode in a key): stream.
                self._drop_connection()
                return False
        return False

    def _connect(self) -> sqlite3.Connection:
        path = index_path(self.history)
        try:
            kind = os.lstat(path).st_mode
        except FileNotFoundError:
            pass
        else:
            # A link (even a dangling one, which SQLite's nofollow lets through to create
            # its target) or anything not a file: no index, the history is streamed.
            if not stat.S_ISREG(kind):
                raise OSError(f"{path}: not a regular file")
        conn = sqlite3.connect(
            f"{path.absolute().as_uri()}?nofollow=1",
            uri=True,
            timeout=_BUSY_S,
            isolation_level=None,
            check_same_thread=False,
        )
        try:
            conn.execute("PRAGMA journal_mode=DELETE")
            conn.execute("PRAGMA synchronous=OFF")  # a cache: a lost update is rebuilt
            # executescript() commits a pending transaction before it runs (sqlite3's default
            # transaction control, whatever isolation_level says): made inside the read's
            # transaction, the schema ended it, and every row became a transaction of its own
            # (a journal file made and removed per line: 20,000 lines took 7 s, not 0.3 s). The
            # statements are idempotent, so they run first, then the transaction begins.
            conn.executescript(_SCHEMA)
            if not _current_tables(conn):
                # An older format's tables (CREATE IF NOT EXISTS keeps them as they are): the
                # reads would fail on their columns and stream for ever. Made anew, rebuilt.
                conn.executescript(
                    f"DROP TABLE IF EXISTS lines; DROP TABLE IF EXISTS meta; {_SCHEMA}"
                )
            conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            conn.close()
            raise
        return conn

    def _remove_file(self) -> bool:
        path = index_path(self.history)
        try:
            if not stat.S_ISREG(os.lstat(path).st_mode):
                return False
            path.unlink()
        except OSError:
            return False
        return True

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.close()
            self._conn = None

    def _update(self) -> None:
        conn = self._db
        now = os.fstat(self._fd)
        meta = conn.execute(
            "SELECT version, device, inode, size, mtime_ns, head, tail, next_number, "
            "open_offset, grades FROM meta"
        ).fetchone()
        start, number, grades = 0, 1, 0
        if meta is not None and self._tail_only(meta, now):
            size, next_number, open_offset, grades = meta[3], meta[7], meta[8], meta[9]
            if size == now.st_size:
                return
            start, number = size, next_number
            if open_offset is not None:
                # The last line had no newline yet: it is indexed again with what follows.
                start, number = open_offset, next_number - 1
                grades -= conn.execute(
                    "SELECT count(*) FROM lines WHERE number >= ? AND problem IS NULL", (number,)
                ).fetchone()[0]
                conn.execute("DELETE FROM lines WHERE number >= ?", (number,))
        else:
            conn.execute("DELETE FROM lines")
        number, open_offset, added = self._scan(start, now.st_size, number)
        conn.execute(
            "INSERT OR REPLACE INTO meta VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                _VERSION,
                now.st_dev,
                now.st_ino,
                now.st_size,
                now.st_mtime_ns,
                self._print(0, min(now.st_size, _PRINT_BYTES)),
                self._print(max(0, now.st_size - _PRINT_BYTES), now.st_size),
                number,
                open_offset,
                grades + added,
            ),
        )

    def _tail_only(self, meta: tuple[Any, ...], now: os.stat_result) -> bool:
        """Whether the file is the one indexed, only grown (or unchanged) since."""
        version, device, inode, size, mtime_ns, head, tail = meta[:7]
        if (version, device, inode) != (_VERSION, now.st_dev, now.st_ino):
            return False
        if now.st_size < size or (now.st_size == size and now.st_mtime_ns != mtime_ns):
            return False
        return bool(
            head == self._print(0, min(size, _PRINT_BYTES))
            and tail == self._print(max(0, size - _PRINT_BYTES), size)
        )

    def _print(self, start: int, end: int) -> str:
        # A CRC-32 tells an edited head or tail from the one indexed; the rows themselves
        # are checked against every line read through them, so nothing rests on it alone.
        # (SHA-256's OpenSSL binding cost `cleo-grade list` a twentieth of its start-up.)
        data = os.pread(self._fd, end - start, start)
        return f"{zlib.crc32(data):08x}:{len(data)}"

    def _scan(self, start: int, end: int, number: int) -> tuple[int, int | None, int]:
        """Index the lines in bytes ``start``..``end``; (next line number, offset of a last
        line without its newline or None, how many of them are grades)."""
        from pytest_cleo_grade.core.models import GradeResult
        from pytest_cleo_grade.store.history import check_line

        handle = self._handle
        handle.seek(start)
        position = start
        open_offset: int | None = None
        rows: list[tuple[Any, ...]] = []
        added = 0
        while position < end:
            raw = handle.readline(min(MAX_LINE_BYTES + 2, end - position))
            if not raw:
                break
            offset, size = position, len(raw)
            ended = raw.endswith(b"\n")
            if not ended and len(raw) == MAX_LINE_BYTES + 2:
                size += self._skip_rest(end - position - size)
                rows.append((number, offset, size, "line too long", *_NO_ROW))
            else:
                text = raw[:-1] if ended else raw
                if text.endswith(b"\r"):
                    text = text[:-1]
                checked = check_line(number, text)
                if isinstance(checked, GradeResult):
                    rows.append((number, offset, len(raw), None, *_row(checked), zlib.crc32(text)))
                    added += 1
                elif checked is not None:
                    rows.append((number, offset, len(raw), checked, *_NO_ROW))
            position += size
            open_offset = None if raw.endswith(b"\n") else offset
            number += 1
            if len(rows) >= 2000:
                self._db.executemany(_INSERT, rows)
                rows = []
        self._db.executemany(_INSERT, rows)
        return number, open_offset, added

    def _skip_rest(self, left: int) -> int:
        """Read past the rest of an over-long line (never held whole): the bytes passed."""
        passed = 0
        while passed < left:
            piece = self._handle.readline(min(1 << 20, left - passed))
            if not piece:
                break
            passed += len(piece)
            if piece.endswith(b"\n"):
                break
        return passed

    # -- reading --------------------------------------------------------------------------

    @property
    def _db(self) -> sqlite3.Connection:
        assert self._conn is not None
        return self._conn

    def query(self, sql: str, params: Iterable[Any] = ()) -> sqlite3.Cursor:
        """SQL over the ``lines`` table (valid lines have ``problem IS NULL``)."""
        return self._db.execute(sql, tuple(params))

    def query_many(self, sql: str, rows: Iterable[tuple[Any, ...]]) -> None:
        """One statement over many parameter rows (filling a temporary table)."""
        self._db.executemany(sql, rows)

    def warn_skipped(self) -> None:
        """The warnings a streaming read gives for the lines it skips, in line order."""
        rows = self._db.execute(
            "SELECT number, problem FROM lines WHERE problem IS NOT NULL ORDER BY number"
        )
        for number, problem in rows:
            warnings.warn(
                f"{self.history}:{number}: skipped corrupt grade line: {problem}",
                CleoGradeWarning,
                stacklevel=3,
            )

    def count(self) -> int:
        """How many grades (valid lines) the history holds (kept as the lines are indexed:
        counting 200,000 rows took longer than reading the latest run's lines)."""
        return int(self._db.execute("SELECT grades FROM meta").fetchone()[0])

    def lines(self, where: str = "", params: Iterable[Any] = ()) -> list[Line]:
        """The valid lines matching ``where`` (SQL over ``lines``), in file order."""
        condition = f" AND ({where})" if where else ""
        sql = (
            f"SELECT number, offset, length, session_id FROM lines WHERE problem IS NULL{condition}"
        )
        return [Line(*row) for row in self._db.execute(sql + " ORDER BY number", tuple(params))]

    def points(self, where: str = "", params: Iterable[Any] = ()) -> Iterator[HistoryPoint]:
        """The valid lines matching ``where`` as light points, in file order."""
        from pytest_cleo_grade.core._scale import percent_of

        condition = f" AND ({where})" if where else ""
        rows = self._db.execute(
            "SELECT session_id, at, evaluator, total, max, percent, extras FROM lines "
            f"WHERE problem IS NULL{condition} ORDER BY number",
            tuple(params),
        )
        shared: dict[object, Any] = {}
        for session, at, evaluator, total, most, shown, extras in rows:
            extra: dict[str, Any] = {}
            if extras:
                for key, value in json.loads(extras).items():
                    extra[key] = (
                        shared.setdefault(value, value) if isinstance(value, str) else value
                    )
            yield HistoryPoint(
                shared.setdefault(session, session),
                datetime.fromisoformat(at),
                shared.setdefault(evaluator, evaluator),
                percent_of(total, most),
                shown,
                extra,
            )

    def scored(self, where: str, params: Iterable[Any] = ()) -> list[ScoredLine]:
        """The valid lines matching ``where`` with their scores, in file order, each line's
        bytes read and checked against the CRC-32 taken when it was validated: StaleIndex
        when the file no longer holds it (the history wins over its index)."""
        from pytest_cleo_grade.core._scale import percent_of

        rows = self._db.execute(
            "SELECT number, offset, length, session_id, crc, "
            "'[' || coalesce(extras, 'null') || ',' || scores || ']' FROM lines "
            f"WHERE problem IS NULL AND ({where}) ORDER BY number",
            tuple(params),
        ).fetchall()
        # One parse for every row's extras and scores: a call per row cost more than it read.
        values = json.loads("[" + ",".join(row[5] for row in rows) + "]")
        found: list[ScoredLine] = []
        for (number, offset, length, session, crc, _), (extra, scores) in zip(
            rows, values, strict=True
        ):
            self.check_unchanged(Line(number, offset, length, session), crc)
            total, most, dimensions = scores
            found.append(
                ScoredLine(
                    number,
                    session,
                    percent_of(total, most),
                    {name: Score(score, high) for name, score, high in dimensions},
                    extra or {},
                )
            )
        return found

    def _line_text(self, number: int, offset: int, length: int) -> bytes:
        """Line ``number``'s bytes as its row says (newline and ``\r`` trimmed), checked to
        start a line: StaleIndex when they cannot be its."""
        if offset:
            # The byte before it read with it: a newline, or the row is not this line's.
            raw = os.pread(self._fd, length + 1, offset - 1)
            if raw[:1] != b"\n":
                raise StaleIndex(f"line {number} does not start at {offset}")
            raw = raw[1:]
        else:
            raw = os.pread(self._fd, length, offset)
        text = raw[:-1] if raw.endswith(b"\n") else raw
        return text[:-1] if text.endswith(b"\r") else text

    def check_unchanged(self, line: Line, crc: int) -> None:
        """StaleIndex unless the line's bytes are still those its row took their CRC-32 of
        when it was validated (a reader taking a grade's figures from its row)."""
        if zlib.crc32(self._line_text(line.number, line.offset, line.length)) != crc:
            raise StaleIndex(f"line {line.number} is not the grade indexed")

    def grades(self, lines: Iterable[Line]) -> Iterator[tuple[int, GradeResult]]:
        """(number, grade) of each line, read at its offset and checked against its row:
        StaleIndex when the file no longer holds it there."""
        from pytest_cleo_grade.core.models import GradeResult
        from pytest_cleo_grade.store.history import check_line

        for line in lines:
            checked = check_line(
                line.number, self._line_text(line.number, line.offset, line.length)
            )
            if not isinstance(checked, GradeResult) or checked.session_id != line.session_id:
                raise StaleIndex(f"line {line.number} is not the grade indexed")
            yield line.number, checked

    def forget(self) -> None:
        """Make the next open rebuild the index (a line was not where it said)."""
        with contextlib.suppress(sqlite3.Error):
            self._db.execute("DELETE FROM meta")

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("COMMIT")
        self._drop_connection()
        self._handle.close()

    def __enter__(self) -> HistoryIndex:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


_NO_ROW: Final = (None,) * 14


def _row(result: GradeResult) -> tuple[Any, ...]:
    from pytest_cleo_grade.core.models import format_timestamp

    extra = result.model_extra or {}
    run_id = extra.get("runId")
    test_id = extra.get("testId")
    # As the HTML report's grade_test_id: a test's lines are found by it.
    test_id = str(test_id) if test_id else None
    kept = {key: extra[key] for key in INDEXED_EXTRAS if key in extra}
    return (
        result.session_id,
        test_id,
        run_id if isinstance(run_id, str) and run_id else None,
        result.evaluator,
        format_timestamp(result.timestamp),
        result.timestamp.isoformat(),
        _real(result.total_score),
        _real(result.max_score),
        result.display_percent,
        result.letter,
        len(result.flags),
        json.dumps(kept, separators=(",", ":")) if kept else None,
        # Exact (JSON keeps every int and float as read): a baseline's percentages from it
        # are the grade's own. The CRC-32 of the line follows it (see _scan).
        json.dumps(
            [
                result.total_score,
                result.max_score,
                [[name, dim.score, dim.max] for name, dim in result.dimensions.items()],
            ],
            separators=(",", ":"),
        ),
    )


def _real(value: float) -> float:
    """A score for a REAL column: as it is, unless it is an integer SQLite cannot bind (past
    64 bits; the column would hold it as a float anyway). OverflowError past a float's range:
    such a history is read without an index (exact figures come from ``scores``)."""
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return float(value)
    return value


#: How many columns this format's tables have (see _SCHEMA).
_COLUMNS: Final = {"meta": 11, "lines": 18}


def _current_tables(conn: sqlite3.Connection) -> bool:
    """Whether the index's tables have this format's columns."""
    return all(
        len(conn.execute(f"PRAGMA table_info({table})").fetchall()) == count
        for table, count in _COLUMNS.items()
    )


def _corrupt(exc: sqlite3.DatabaseError) -> bool:
    text = str(exc)
    return "not a database" in text or "malformed" in text or "corrupt" in text


def through_index(history: str | os.PathLike[str], read: Callable[[HistoryIndex], T]) -> T | None:
    """``read(index)`` over the history's index brought up to date, its skipped lines then
    warned of as a streaming read warns; None when the history has no usable index or a line
    read through it no longer matches its row (the index is forgotten): the caller streams."""
    index = open_index(history)
    if index is None:
        return None
    with index:
        try:
            found = read(index)
        except StaleIndex:
            index.forget()
            return None
        index.warn_skipped()
        return found


def grades_where(
    history: str | os.PathLike[str], where: str, params: Iterable[Any] = ()
) -> list[GradeResult] | None:
    """The valid lines matching ``where`` (SQL over the index's ``lines``) as grades, in
    file order; None when the history has no usable index (see :func:`through_index`)."""
    return through_index(
        history, lambda index: [grade for _, grade in index.grades(index.lines(where, params))]
    )


#: The lines of every session graded by hand (what a judge calibration is made of).
BY_HAND: Final = (
    "session_id IN (SELECT session_id FROM lines WHERE problem IS NULL AND evaluator = 'manual')"
)
