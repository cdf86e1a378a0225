"""The store's conversation table: written in one transaction, read back, bounded."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_cleo_grade.core._conversation import MAX_ITEMS, Conversation, Message, ModelCall
from pytest_cleo_grade.core.errors import StoreError
from pytest_cleo_grade.store import AuditStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def talk(count: int = 2, output: str | None = "done") -> Conversation:
    return Conversation(
        messages=[
            Message(
                timestamp=T0 + timedelta(seconds=i),
                role="user" if i % 2 == 0 else "assistant",
                text=f"m{i}",
                model_call="c1" if i % 2 else None,
            )
            for i in range(count)
        ],
        model_calls=[
            ModelCall(
                id="c1",
                timestamp=T0,
                model="gpt-x",
                input_tokens=12,
                output_tokens=3,
                cached_tokens=4,
                duration=250.5,
            )
        ],
        output=output,
    )


def test_a_conversation_is_stored_and_read_back_as_it_was(tmp_path: Path) -> None:
    with AuditStore(tmp_path / "audit.db") as store:
        assert store.append_conversation("s1", talk()) == 4
        back = store.session_conversation("s1")
        assert store.session_conversation("s2").empty
    assert back == talk()


def test_the_latest_output_written_wins(tmp_path: Path) -> None:
    with AuditStore(tmp_path / "audit.db") as store:
        store.append_conversation("s1", talk(output="first"))
        store.append_conversation("s1", Conversation(output="second"))
        assert store.session_conversation("s1").output == "second"


def test_the_cap_holds_across_writes_and_what_it_leaves_out_is_counted(tmp_path: Path) -> None:
    with AuditStore(tmp_path / "audit.db") as store:
        store.append_conversation("s1", talk(MAX_ITEMS - 1, None))
        store.append_conversation("s1", talk(3, None))
        back = store.session_conversation("s1")
    assert len(back.messages) == MAX_ITEMS
    assert back.dropped == 2


def test_a_store_without_the_table_reads_as_no_conversation(tmp_path: Path) -> None:
    path = tmp_path / "cleo.db"
    with closing(sqlite3.connect(path)) as conn, conn:  # closed, not only committed
        conn.execute(
            "CREATE TABLE audit_log (id TEXT, timestamp TEXT, action TEXT, details_json TEXT, "
            "success INTEGER, session_id TEXT)"
        )
    with AuditStore(path, read_only=True) as store:
        assert store.session_conversation("s1").empty


def test_a_corrupt_row_is_named(tmp_path: Path) -> None:
    path = tmp_path / "audit.db"
    with AuditStore(path) as store:
        store.append_conversation("s1", talk())
    with closing(sqlite3.connect(path)) as conn, conn:  # closed, not only committed
        conn.execute("UPDATE conversation SET role = 'narrator' WHERE kind = 'message'")
    with AuditStore(path) as store, pytest.raises(StoreError, match=r"conversation row \d+"):
        store.session_conversation("s1")
