"""The store's schema migrations (sqlite-utils'), loaded only when a store needs one.

Opening a current store reads the applied migrations with the standard library
(``_sqlite.applied_migrations``): sqlite-utils costs a process about 80 ms to import, and most
processes that open a store (an xdist worker, a CLI command) only read and append.
"""

from __future__ import annotations

import sqlite3
from typing import Final

from sqlite_utils import Database
from sqlite_utils.migrations import Migrations

from pytest_cleo_grade.store._sqlite import MIGRATION_SET

__all__ = ["KNOWN_MIGRATIONS", "MIGRATIONS", "migrate"]

MIGRATIONS: Final = Migrations(MIGRATION_SET)


@MIGRATIONS(name="0001_audit_log_and_grades")
def _create_tables(db: Database) -> None:
    # Column types and defaults follow CLEO's drizzle schema so either side reads the other.
    db.execute(
        """
        CREATE TABLE audit_log (
            id TEXT PRIMARY KEY NOT NULL,
            timestamp TEXT NOT NULL DEFAULT (datetime('now')),
            action TEXT NOT NULL,
            task_id TEXT NOT NULL,
            actor TEXT NOT NULL DEFAULT 'system',
            details_json TEXT DEFAULT '{}',
            before_json TEXT,
            after_json TEXT,
            domain TEXT,
            operation TEXT,
            session_id TEXT,
            request_id TEXT,
            duration_ms INTEGER,
            success INTEGER,
            source TEXT,
            gateway TEXT,
            error_message TEXT,
            project_hash TEXT,
            idempotency_key TEXT,
            exit_code INTEGER,
            metadata_json TEXT
        )
        """
    )
    db.execute("CREATE INDEX idx_audit_log_session_time ON audit_log (session_id, timestamp)")
    db.execute(
        """
        CREATE TABLE grades (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            total_score REAL NOT NULL,
            max_score REAL NOT NULL,
            letter TEXT NOT NULL,
            entry_count INTEGER NOT NULL,
            flag_count INTEGER NOT NULL,
            result_json TEXT NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_grades_session ON grades (session_id, timestamp)")


@MIGRATIONS(name="0002_conversation")
def _create_conversation(db: Database) -> None:
    # A session's conversation beside its calls (core._conversation): one row per message,
    # model call or final output; ``kind`` says which, the other columns are its fields.
    db.execute(
        """
        CREATE TABLE conversation (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            timestamp TEXT NOT NULL,
            kind TEXT NOT NULL,
            role TEXT,
            text TEXT,
            call_id TEXT,
            model TEXT,
            input_tokens INTEGER,
            output_tokens INTEGER,
            cached_tokens INTEGER,
            duration_ms REAL,
            amount INTEGER
        )
        """
    )
    db.execute("CREATE INDEX idx_conversation_session_time ON conversation (session_id, timestamp)")


@MIGRATIONS(name="0004_history_archive")
def _create_history_archive(db: Database) -> None:
    # Lines `cleo-grade history compact` moved out of a GRADES.jsonl (store._archive): each
    # compaction is a batch, its lines kept byte for byte (a BLOB, zlib-compressed: see
    # ``encoding``) with the place they held, so `history restore` puts back the very file.
    db.execute(
        """
        CREATE TABLE history_archive_batches (
            id INTEGER PRIMARY KEY,
            history TEXT NOT NULL,
            archived_at TEXT NOT NULL,
            state TEXT NOT NULL,
            original_lines INTEGER NOT NULL,
            original_bytes INTEGER NOT NULL,
            original_sha256 TEXT NOT NULL,
            kept_lines INTEGER NOT NULL,
            kept_bytes INTEGER NOT NULL,
            kept_sha256 TEXT NOT NULL,
            restored_bytes INTEGER,
            restored_sha256 TEXT
        )
        """
    )
    db.execute(
        """
        CREATE TABLE history_archive (
            id INTEGER PRIMARY KEY,
            batch INTEGER NOT NULL REFERENCES history_archive_batches (id),
            line_number INTEGER NOT NULL,
            run_id TEXT,
            test_id TEXT,
            session_id TEXT,
            timestamp TEXT,
            encoding TEXT NOT NULL,
            raw BLOB NOT NULL
        )
        """
    )
    db.execute("CREATE INDEX idx_history_archive_batch ON history_archive (batch, line_number)")
    db.execute("CREATE INDEX idx_history_archive_run ON history_archive (run_id)")


#: (``_sqlite.CURRENT_MIGRATIONS`` repeats them for the stores that need none of these; a test
#: holds the two equal.)
KNOWN_MIGRATIONS: Final = frozenset(m.name for m in MIGRATIONS._migrations)


def migrate(conn: sqlite3.Connection) -> None:
    """Apply the store's pending migrations (the caller holds the write lock)."""
    db = Database(conn, execute_plugins=False, recursive_triggers=False)
    MIGRATIONS.ensure_migrations_table(db)
    MIGRATIONS.apply(db)
