"""``cleo-grade history restore``: every line the archive holds for a history put back in
its place, newest batch first, byte for byte (see store._compact for the crash safety)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from pytest_cleo_grade.core.errors import HistoryError
from pytest_cleo_grade.store._archive import (
    Batch,
    batch_lines,
    batches,
    counted,
    drop_batches,
    history_key,
    set_state,
)
from pytest_cleo_grade.store._rewrite import (
    COPY_CHUNK,
    prefix_is,
    put_in_place,
    reader,
    settle,
    size_and_hash,
    temp_beside,
)
from pytest_cleo_grade.store._store import AuditStore
from pytest_cleo_grade.store.history import locked_history

__all__ = ["Restoration", "restore"]


@dataclass(slots=True)
class Restoration:
    """What a restore did (or, dry, would do)."""

    batches: int = 0
    lines: int = 0
    runs: int = 0
    size_before: int = 0
    size_after: int = 0
    #: Batches whose kept lines no longer start the history (it was replaced or edited
    #: since): their lines were put back before it rather than between its lines.
    misplaced: list[str] = field(default_factory=list)
    settled: int = 0


def restore(history: Path, store_path: Path, *, dry_run: bool, wait: float) -> Restoration:
    """Put every line the archive holds for ``history`` back where it was, newest batch
    first (each undone onto the file the next older one left), and drop them from the
    archive. A missing history is restored as the archive holds it."""
    if not store_path.is_file():
        raise HistoryError(f"{store_path}: no audit store there (name one with --db)")
    # A dry run opens the store read-only: it neither migrates it nor settles a batch.
    with AuditStore(store_path, read_only=dry_run) as store:
        if not history.exists() and not dry_run:
            _create_empty(history)
        with locked_history(history, timeout=wait) as fd:
            key = history_key(store_path, history)
            report = Restoration(settled=0 if dry_run else settle(store, key, fd))
            done = [batch for batch in batches(store, key) if batch.state == "done"]
            report.size_before = os.fstat(fd).st_size
            if not done:
                report.size_after = report.size_before
                return report
            report.batches = len(done)
            report.lines, report.runs = counted(store, [batch.id for batch in done])
            report.size_after = report.size_before + sum(
                b.facts.original_bytes - b.facts.kept_bytes for b in done
            )
            if dry_run:
                # Only the newest batch's kept lines start the file as it is; the older
                # ones start the file each undo leaves, which a dry run does not write.
                if not _starts_with_kept(fd, done[-1]):
                    report.misplaced = [done[-1].archived_at]
                return report
            written = _restored_file(store, fd, history, done, report)
            partial: Path | None = written
            try:
                size, digest = size_and_hash(written)
                report.size_after = size
                ids = [batch.id for batch in done]
                set_state(store, ids, "restoring", (size, digest))
                put_in_place(written, history)
                partial = None
            finally:
                if partial is not None:
                    with contextlib.suppress(OSError):
                        partial.unlink()
            drop_batches(store, ids)
            return report


def _restored_file(
    store: AuditStore, fd: int, history: Path, done: list[Batch], report: Restoration
) -> Path:
    """The history with every ``done`` batch undone, newest first, in an fsynced file
    beside it."""
    source: Path | None = None  # None: the locked history itself
    partial: Path | None = None
    try:
        for batch in reversed(done):
            out_fd, partial = temp_beside(history, os.fstat(fd))
            with os.fdopen(out_fd, "wb") as out:
                with _open_source(fd, source) as src:
                    if prefix_is(src, batch.facts.kept_bytes, batch.facts.kept_sha256):
                        _merge(store, batch, src, out)
                    else:
                        report.misplaced.append(batch.archived_at)
                        _put_before(store, batch, src, out)
                out.flush()
                os.fsync(out.fileno())
            if source is not None:
                source.unlink()
            source, partial = partial, None
    except BaseException:
        for left in (source, partial):
            if left is not None:
                with contextlib.suppress(OSError):
                    left.unlink()
        raise
    assert source is not None
    return source


def _merge(store: AuditStore, batch: Batch, src: IO[bytes], out: IO[bytes]) -> None:
    """The file before ``batch``: its archived lines back between the kept lines that
    start ``src``, then whatever was appended after the compaction."""
    src.seek(0)
    position = 1  # the number, in the file before the batch, of the next line written
    for line in batch_lines(store, batch.id):
        _copy_lines(src, out, line.line_number - position)
        out.write(line.raw)
        position = line.line_number + 1
    shutil.copyfileobj(src, out, COPY_CHUNK)


def _put_before(store: AuditStore, batch: Batch, src: IO[bytes], out: IO[bytes]) -> None:
    # The history no longer starts with what compact kept (replaced by a cache miss, edited):
    # the archived lines, older than anything in it, go first, in their order.
    for line in batch_lines(store, batch.id):
        out.write(line.raw)
    src.seek(0)
    shutil.copyfileobj(src, out, COPY_CHUNK)


def _copy_lines(src: IO[bytes], out: IO[bytes], count: int) -> None:
    """Copy ``count`` whole lines (however long) from ``src`` to ``out``."""
    while count > 0:
        piece = src.readline(COPY_CHUNK)
        if not piece:
            return
        out.write(piece)
        if piece.endswith(b"\n"):
            count -= 1


def _starts_with_kept(fd: int, batch: Batch) -> bool:
    with reader(fd) as handle:
        return prefix_is(handle, batch.facts.kept_bytes, batch.facts.kept_sha256)


@contextlib.contextmanager
def _open_source(fd: int, source: Path | None) -> Iterator[IO[bytes]]:
    if source is None:
        with reader(fd) as handle:
            yield handle
    else:
        with source.open("rb") as handle:
            yield handle


def _create_empty(history: Path) -> None:
    from pytest_cleo_grade.core._files import make_parents, open_append_no_follow

    make_parents(history)
    os.close(open_append_no_follow(history))
