"""Compacting GRADES.jsonl: older runs' lines moved into the store's archive, the file
rewritten atomically under its writers' lock (store._restore puts the lines back).

Crash safety, step by step (``compact``): the new file is written beside the old one and
fsynced; the archive's batch is committed as ``pending``; the new file replaces the old one
(``os.replace``) and the directory is fsynced; the batch becomes ``done``. A crash leaves the
old file or the new one, never half of either. The next compact or restore settles a batch
left ``pending``: if the history still starts with the file compact read, the replace never
happened and the batch is dropped (its lines are still in the file: nothing is archived
twice); otherwise it is ``done``. A restore runs the same way with a ``restoring`` batch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from pytest_cleo_grade.core._files import MAX_LINE_BYTES
from pytest_cleo_grade.core.errors import HistoryError
from pytest_cleo_grade.store._archive import (
    ArchivedLine,
    BatchFacts,
    add_batch,
    history_key,
    set_state,
)
from pytest_cleo_grade.store._rewrite import (
    COPY_CHUNK,
    now,
    put_in_place,
    reader,
    settle,
    temp_beside,
)
from pytest_cleo_grade.store._store import AuditStore
from pytest_cleo_grade.store.history import locked_history

__all__ = ["LEGACY_RUN", "Compaction", "RunLines", "compact"]

#: How the lines that carry no run id (written before lines carried one) are named: they
#: are one run, the legacy one, as old as its newest line.
LEGACY_RUN: Final = "(lines without a run id)"

#: Not a run's line: a line compact cannot read (not a JSON object with a session id, over
#: the readers' line limit, without its newline). It stays where it is, warned about by
#: every reader as before.
_UNREAD: Final = -1


@dataclass(slots=True)
class RunLines:
    """One run of the history: its id (None: the legacy run), its lines and their bytes,
    and the first and last timestamps its lines carry."""

    run_id: str | None
    lines: int = 0
    size: int = 0
    first: str | None = None
    last: str | None = None
    #: The number of its last line: runs are as new as their newest line.
    newest_line: int = 0

    @property
    def name(self) -> str:
        return LEGACY_RUN if self.run_id is None else self.run_id


@dataclass(slots=True)
class Compaction:
    """What a compaction did (or, dry, would do)."""

    kept: list[RunLines] = field(default_factory=list)
    archived: list[RunLines] = field(default_factory=list)
    #: Lines no run owns (unreadable, blank), left in place.
    unread_lines: int = 0
    size_before: int = 0
    size_after: int = 0
    #: Batches an earlier, interrupted compaction or restore left, settled first.
    settled: int = 0

    @property
    def kept_lines(self) -> int:
        return sum(run.lines for run in self.kept)

    @property
    def archived_lines(self) -> int:
        return sum(run.lines for run in self.archived)


@dataclass(slots=True)
class _Scan:
    """Pass one over the history: each line's start and owner, and each run's totals."""

    offsets: array[int] = field(default_factory=lambda: array("q"))
    owners: array[int] = field(default_factory=lambda: array("i"))
    runs: list[RunLines] = field(default_factory=list)
    #: Per line: (test id, session id, timestamp) of a run's line, None for the others.
    keys: list[tuple[str | None, str | None, str | None] | None] = field(default_factory=list)
    size: int = 0
    sha256: str = ""

    @property
    def line_count(self) -> int:
        return len(self.offsets)

    def span(self, index: int) -> tuple[int, int]:
        start = self.offsets[index]
        end = self.offsets[index + 1] if index + 1 < len(self.offsets) else self.size
        return start, end - start


def compact(
    history: Path, store_path: Path, keep_runs: int, *, dry_run: bool, wait: float
) -> Compaction:
    """Keep the newest ``keep_runs`` runs of ``history`` in it and move every older run's
    lines into the archive of the store at ``store_path``, which must exist (StoreError,
    HistoryError; FileNotFoundError for a missing history)."""
    if not store_path.is_file():
        raise HistoryError(f"{store_path}: no audit store there (name one with --db)")
    # A dry run opens the store read-only: it neither migrates it nor settles a batch.
    opened = AuditStore(store_path, read_only=dry_run)
    with opened as store, locked_history(history, timeout=wait) as fd:
        key = history_key(store_path, history)
        settled = 0 if dry_run else settle(store, key, fd)
        scan = _scan(fd, str(history))
        keep = _runs_kept(scan.runs, keep_runs)
        report = Compaction(
            kept=[run for i, run in enumerate(scan.runs) if i in keep],
            archived=[run for i, run in enumerate(scan.runs) if i not in keep],
            unread_lines=sum(1 for owner in scan.owners if owner == _UNREAD),
            size_before=scan.size,
            settled=settled,
        )
        report.archived.sort(key=lambda run: run.newest_line)
        report.kept.sort(key=lambda run: run.newest_line)
        report.size_after = scan.size - sum(run.size for run in report.archived)
        if dry_run or not report.archived:
            return report
        kept = array("b", (owner == _UNREAD or owner in keep for owner in scan.owners))
        written, digest = _write_kept(fd, history, scan, kept)
        partial: Path | None = written
        try:
            facts = BatchFacts(
                original_lines=scan.line_count,
                original_bytes=scan.size,
                original_sha256=scan.sha256,
                kept_lines=sum(kept),
                kept_bytes=report.size_after,
                kept_sha256=digest,
            )
            batch = add_batch(store, key, now(), facts, _ArchivedLines(fd, scan, kept))
            put_in_place(written, history)
            partial = None
        finally:
            if partial is not None:
                with contextlib.suppress(OSError):
                    partial.unlink()
        set_state(store, [batch], "done")
        return report


# -- pass one: who owns each line ----------------------------------------------------------


def _scan(fd: int, where: str) -> _Scan:
    scan = _Scan()
    runs: dict[str | None, int] = {}
    shared: dict[str, str] = {}  # one string per distinct test id, not one per line
    digest = hashlib.sha256()
    offset = 0
    with reader(fd) as handle:
        while line := handle.readline(MAX_LINE_BYTES + 1):
            digest.update(line)
            number = len(scan.offsets) + 1
            scan.offsets.append(offset)
            offset += len(line)
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                # Longer than any reader reads: read through, never held whole.
                while not line.endswith(b"\n") and (line := handle.readline(COPY_CHUNK)):
                    digest.update(line)
                    offset += len(line)
                scan.owners.append(_UNREAD)
                scan.keys.append(None)
                continue
            owned = _owner(line, number)
            if owned is None:
                scan.owners.append(_UNREAD)
                scan.keys.append(None)
                continue
            run_id, test_id, session_id, timestamp = owned
            index = runs.get(run_id)
            if index is None:
                index = runs[run_id] = len(scan.runs)
                scan.runs.append(RunLines(run_id))
            run = scan.runs[index]
            run.lines += 1
            run.size += len(line)
            run.newest_line = number
            if timestamp is not None:
                run.first = run.first or timestamp
                run.last = timestamp
            scan.owners.append(index)
            scan.keys.append(
                (
                    shared.setdefault(test_id, test_id) if test_id else None,
                    shared.setdefault(session_id, session_id),
                    timestamp,
                )
            )
    scan.size = offset
    scan.sha256 = digest.hexdigest()
    return scan


def _owner(line: bytes, number: int) -> tuple[str | None, str | None, str, str | None] | None:
    """(run id, test id, session id, timestamp) of a grade's line, or None for a line no
    run owns. Only what places the line is read: whether a reader accepts the grade is the
    reader's to say, after a restore as before the compaction."""
    if not line.endswith(b"\n"):
        return None  # torn, or a hand edit: a line archived without its end could not be
        # put back before the lines appended after it
    text = line[3:] if number == 1 and line.startswith(b"\xef\xbb\xbf") else line
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    if not isinstance(data, dict) or not isinstance(data.get("sessionId"), str):
        return None
    run_id = data.get("runId")
    test_id = data.get("testId")
    timestamp = data.get("timestamp")
    return (
        run_id if isinstance(run_id, str) and run_id else None,
        test_id if isinstance(test_id, str) else None,
        data["sessionId"],
        timestamp if isinstance(timestamp, str) else None,
    )


def _runs_kept(runs: list[RunLines], keep_runs: int) -> set[int]:
    """The indices of the ``keep_runs`` runs whose newest lines are the newest."""
    newest = sorted(range(len(runs)), key=lambda i: runs[i].newest_line, reverse=True)
    return set(newest[:keep_runs])


# -- pass two and three: the new file, the archived lines -----------------------------------


def _write_kept(fd: int, history: Path, scan: _Scan, kept: array[int]) -> tuple[Path, str]:
    """The kept lines, in order, in a new fsynced file beside ``history``; its path and
    the SHA-256 of its content."""
    digest = hashlib.sha256()
    out_fd, partial = temp_beside(history, os.fstat(fd))
    try:
        with os.fdopen(out_fd, "wb") as out:
            index = 0
            while index < scan.line_count:
                if not kept[index]:
                    index += 1
                    continue
                start = scan.offsets[index]
                while index < scan.line_count and kept[index]:
                    index += 1  # consecutive kept lines: one copy
                end = scan.offsets[index] if index < scan.line_count else scan.size
                for chunk in _chunks(fd, start, end - start):
                    digest.update(chunk)
                    out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            partial.unlink()
        raise
    return partial, digest.hexdigest()


class _ArchivedLines:
    """The lines a compaction archives, read from the history (the batch's transaction
    may start again after a lock: each iteration reads them anew)."""

    def __init__(self, fd: int, scan: _Scan, kept: array[int]) -> None:
        self._fd, self._scan, self._kept = fd, scan, kept

    def __iter__(self) -> Iterator[ArchivedLine]:
        scan = self._scan
        for index in range(scan.line_count):
            if self._kept[index]:
                continue
            start, size = scan.span(index)
            raw = os.pread(self._fd, size, start)
            if len(raw) != size:
                raise HistoryError("the history changed while it was locked: nothing archived")
            keys = scan.keys[index]
            assert keys is not None  # only a run's lines are archived
            run = scan.runs[scan.owners[index]]
            yield ArchivedLine(index + 1, run.run_id, keys[0], keys[1], keys[2], raw)


# -- files ------------------------------------------------------------------------------


def _chunks(fd: int, start: int, size: int) -> Iterator[bytes]:
    while size > 0:
        chunk = os.pread(fd, min(size, COPY_CHUNK), start)
        if not chunk:
            raise HistoryError("the history changed while it was locked: nothing archived")
        yield chunk
        start += len(chunk)
        size -= len(chunk)
