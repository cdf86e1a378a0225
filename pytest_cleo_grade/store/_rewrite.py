"""What rewriting GRADES.jsonl in place of itself needs, for compact and restore alike: a
reader of the locked file, a new file beside it, the replace, and settling the batch an
interrupted command left (see store._compact for the steps and why they are safe)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Final

from pytest_cleo_grade.core._files import exclusive_temp_file
from pytest_cleo_grade.core.errors import HistoryError
from pytest_cleo_grade.core.models import format_timestamp
from pytest_cleo_grade.store._archive import batches, drop_batches, set_state
from pytest_cleo_grade.store._store import AuditStore

__all__ = [
    "COPY_CHUNK",
    "now",
    "prefix_is",
    "put_in_place",
    "reader",
    "settle",
    "size_and_hash",
    "temp_beside",
]

COPY_CHUNK: Final = 1 << 20


def settle(store: AuditStore, key: str, fd: int) -> int:
    """Settle the batches an interrupted compaction or restore left; how many there were."""
    settled = 0
    for batch in batches(store, key):
        if batch.state == "pending":
            settled += 1
            facts = batch.facts
            with reader(fd) as handle:
                replaced = not prefix_is(handle, facts.original_bytes, facts.original_sha256)
            if replaced:
                set_state(store, [batch.id], "done")
            else:  # the history is still the file compact read: its lines never left it
                drop_batches(store, [batch.id])
        elif batch.state == "restoring":
            settled += 1
            assert batch.restored_bytes is not None and batch.restored_sha256 is not None
            with reader(fd) as handle:
                put_back = prefix_is(handle, batch.restored_bytes, batch.restored_sha256)
            if put_back:
                drop_batches(store, [batch.id])
            else:
                set_state(store, [batch.id], "done")
    return settled


def prefix_is(handle: IO[bytes], size: int, sha256: str) -> bool:
    """Whether the first ``size`` bytes of ``handle`` hash to ``sha256``."""
    handle.seek(0)
    digest = hashlib.sha256()
    left = size
    while left > 0:
        chunk = handle.read(min(left, COPY_CHUNK))
        if not chunk:
            return False
        digest.update(chunk)
        left -= len(chunk)
    return digest.hexdigest() == sha256


@contextlib.contextmanager
def reader(fd: int) -> Iterator[IO[bytes]]:
    """A buffered reader of the locked descriptor from its start (its own descriptor: the
    lock stays with ``fd``)."""
    handle = os.fdopen(os.dup(fd), "rb")
    try:
        handle.seek(0)
        yield handle
    finally:
        handle.close()


def temp_beside(history: Path, like: os.stat_result) -> tuple[int, Path]:
    """A new file beside the history, with the history's permissions."""
    try:
        fd, partial = exclusive_temp_file(history)
    except OSError as exc:
        raise HistoryError(
            f"{history}: cannot write a file beside it: {exc.strerror or exc}: nothing changed"
        ) from exc
    os.fchmod(fd, stat.S_IMODE(like.st_mode))
    return fd, partial


def put_in_place(partial: Path, history: Path) -> None:
    os.replace(partial, history)
    # The rename itself survives a power cut only once the directory is synced.
    directory = os.open(history.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def size_and_hash(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(COPY_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return size, digest.hexdigest()


def now() -> str:
    return format_timestamp(datetime.now(UTC))
