"""The ``conversation`` table: a session's messages, model calls and output, as rows."""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from pydantic import ValidationError

from pytest_cleo_grade.core._conversation import (
    MAX_ITEMS,
    Conversation,
    Message,
    ModelCall,
    bounded,
)
from pytest_cleo_grade.core.errors import StoreError
from pytest_cleo_grade.core.models import format_timestamp

__all__ = ["insert_conversation", "read_conversation"]

_INSERT: Final = (
    "INSERT INTO conversation (session_id, timestamp, kind, role, text, call_id, model, "
    "input_tokens, output_tokens, cached_tokens, duration_ms, amount) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


_NONE6: Final = (None,) * 6


def _stored(conn: sqlite3.Connection, session_id: str, kind: str) -> int:
    row = conn.execute(
        "SELECT count(*) FROM conversation WHERE session_id = ? AND kind = ?", (session_id, kind)
    ).fetchone()
    return int(row[0])


def insert_conversation(
    conn: sqlite3.Connection, session_id: str, conversation: Conversation
) -> int:
    """Insert ``conversation``'s items for ``session_id`` inside the caller's transaction.

    The cap holds across writes: items beyond :data:`MAX_ITEMS` messages (or model calls)
    for the session are not stored, and a ``dropped`` row counts them. Returns the rows
    written.
    """
    rows: list[tuple[Any, ...]] = []
    room = MAX_ITEMS - _stored(conn, session_id, "message")
    messages = conversation.messages[: max(0, room)]
    dropped = conversation.dropped + len(conversation.messages) - len(messages)
    for message in messages:
        stamp = format_timestamp(message.timestamp)
        rows.append(
            (session_id, stamp, "message", message.role, message.text, message.model_call, *_NONE6)
        )
    room = MAX_ITEMS - _stored(conn, session_id, "model_call")
    calls = conversation.model_calls[: max(0, room)]
    dropped += len(conversation.model_calls) - len(calls)
    for call in calls:
        rows.append(
            (
                session_id,
                format_timestamp(call.timestamp),
                "model_call",
                None,
                None,
                call.id,
                call.model,
                call.input_tokens,
                call.output_tokens,
                call.cached_tokens,
                call.duration,
                None,
            )
        )
    if conversation.output is not None:
        last = max(
            [m.timestamp for m in conversation.messages]
            + [c.timestamp for c in conversation.model_calls],
            default=None,
        )
        shown = format_timestamp(last) if last is not None else ""
        rows.append((session_id, shown, "output", None, conversation.output, None, *_NONE6))
    if dropped:
        rows.append((session_id, "", "dropped", *([None] * 8), dropped))
    conn.executemany(_INSERT, rows)
    return len(rows)


def read_conversation(conn: sqlite3.Connection, session_id: str, where: str) -> Conversation:
    """The session's stored conversation (empty when the store has no such table)."""
    try:
        rows = conn.execute(
            "SELECT id, timestamp, kind, role, text, call_id, model, input_tokens, "
            "output_tokens, cached_tokens, duration_ms, amount FROM conversation "
            "WHERE session_id = ? ORDER BY timestamp, id",
            (session_id,),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return Conversation()  # a CLEO database, or a store older than the table
        raise StoreError(f"{where}: cannot read the conversation: {exc}") from exc
    messages: list[Message] = []
    calls: list[ModelCall] = []
    output: str | None = None
    output_id = -1
    dropped = 0
    for row in rows:
        row_id, stamp, kind = row[0], row[1], row[2]
        try:
            if kind == "message":
                messages.append(
                    Message(timestamp=stamp, role=row[3], text=row[4], model_call=row[5])
                )
            elif kind == "model_call":
                calls.append(
                    ModelCall(
                        timestamp=stamp,
                        id=row[5],
                        model=row[6],
                        input_tokens=row[7],
                        output_tokens=row[8],
                        cached_tokens=row[9],
                        duration=row[10] or 0,
                    )
                )
            elif kind == "output" and isinstance(row[4], str) and row_id > output_id:
                # The latest written wins, as set_output's latest call does.
                output, output_id = row[4], row_id
            elif kind == "dropped":
                dropped += int(row[11] or 0)
        except (ValidationError, TypeError, ValueError) as exc:
            raise StoreError(f"{where}: conversation row {row_id}: not usable: {exc}") from exc
    return bounded(messages, calls, output, dropped)
