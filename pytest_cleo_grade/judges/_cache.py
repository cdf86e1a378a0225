"""A cache of judge replies in the audit store's SQLite file (table ``judge_cache``)."""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.core.settings import JudgeCacheMode as CacheMode
from pytest_cleo_grade.judges.protocol import JudgeReply, TokenUsage

__all__ = ["CACHE_TABLE", "JudgeCache"]

CACHE_TABLE: Final = "judge_cache"
# Writers of the audit store (pytest-xdist workers, the code under test) may hold the lock.
_BUSY_TIMEOUT_S: Final = 30.0

_SCHEMA: Final = f"""
CREATE TABLE IF NOT EXISTS {CACHE_TABLE} (
    key TEXT PRIMARY KEY,
    created_at TEXT NOT NULL,
    endpoint TEXT,
    model TEXT,
    reply TEXT NOT NULL,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER NOT NULL DEFAULT 0
)
"""


@dataclass(frozen=True, slots=True)
class JudgeCache:
    """Judge replies keyed by :func:`cache_key`, in the SQLite file ``path``.

    ``mode`` ``on`` reads and writes, ``refresh`` ignores stored replies but stores new ones,
    ``off`` does neither. A cache that cannot be read or written is a CleoGradeWarning, never
    a failed grade: the judge is simply asked.
    """

    path: Path
    mode: CacheMode = "on"

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with closing(sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S)) as db:
            with db:
                db.execute(_SCHEMA)
            yield db

    def get(self, key: str) -> JudgeReply | None:
        """The stored reply for ``key`` (None on a miss, or unless the mode is ``on``)."""
        if self.mode != "on":
            return None
        try:
            with self._connect() as db:
                row = db.execute(
                    f"SELECT reply, prompt_tokens, completion_tokens, total_tokens "
                    f"FROM {CACHE_TABLE} WHERE key = ?",
                    (key,),
                ).fetchone()
        except (sqlite3.Error, OSError) as exc:
            warnings.warn(
                f"{self.path}: judge cache not read: {exc}", CleoGradeWarning, stacklevel=2
            )
            return None
        if row is None:
            return None
        return JudgeReply(row[0], TokenUsage(row[1], row[2], row[3]))

    def put(self, key: str, reply: JudgeReply, *, endpoint: str = "", model: str = "") -> None:
        """Store ``reply`` under ``key`` (a no-op when the mode is ``off``)."""
        if self.mode == "off":
            return
        usage = reply.usage or TokenUsage()
        try:
            with self._connect() as db, db:
                db.execute(
                    f"INSERT OR REPLACE INTO {CACHE_TABLE} (key, created_at, endpoint, model, "
                    "reply, prompt_tokens, completion_tokens, total_tokens) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        key,
                        datetime.now(UTC).isoformat(timespec="milliseconds"),
                        endpoint,
                        model,
                        reply.text,
                        usage.prompt_tokens,
                        usage.completion_tokens,
                        usage.total_tokens,
                    ),
                )
        except (sqlite3.Error, OSError) as exc:
            warnings.warn(
                f"{self.path}: judge reply not cached: {exc}", CleoGradeWarning, stacklevel=2
            )
