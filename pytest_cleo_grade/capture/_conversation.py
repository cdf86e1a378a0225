"""How adapters hand a session its conversation: messages, model calls, the final output.

The same route as :func:`~pytest_cleo_grade.capture.audit.record`: in the process holding
the graded session the items go to it (stored when the test is graded); in any other (a
child process, an agent exporting OTLP) they go to the store at once. An adapter never
breaks the code under test: a value that cannot be kept, or a store that cannot be written,
is a warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from pytest_cleo_grade.capture import audit
from pytest_cleo_grade.core._conversation import Conversation, Message, ModelCall, new_call_id
from pytest_cleo_grade.core.errors import (
    CleoGradeError,
    CleoGradeWarning,
    warnings_shown_not_raised,
)

__all__ = [
    "message",
    "model_call",
    "record_conversation",
    "text_of",
    "warn_not_recorded",
]


def warn_not_recorded(what: str, exc: Exception) -> None:
    """Warn (never raise into the code under test) that ``what`` was not recorded."""
    with warnings_shown_not_raised():
        warnings.warn(f"cleo-grade: {what} not recorded: {exc}", CleoGradeWarning, stacklevel=3)


_warn = warn_not_recorded


def message(
    role: str, text: str, *, timestamp: datetime | None = None, model_call: str | None = None
) -> Message | None:
    """A Message, or None (with a warning) when the values cannot make one."""
    try:
        return Message(
            timestamp=timestamp or datetime.now(UTC), role=role, text=text, model_call=model_call
        )
    except (ValidationError, ValueError) as exc:
        _warn("a message", exc)
        return None


def model_call(
    model: str | None,
    *,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    cached_tokens: int | None = None,
    timestamp: datetime | None = None,
    duration: float | None = None,
    call_id: str | None = None,
) -> ModelCall | None:
    """A ModelCall (negative or non-integer counts left out), or None with a warning."""

    def count(value: Any) -> int | None:
        return (
            value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
        )

    try:
        return ModelCall(
            id=call_id or new_call_id(),
            timestamp=timestamp or datetime.now(UTC),
            model=str(model)[:200] if model else None,
            input_tokens=count(input_tokens),
            output_tokens=count(output_tokens),
            cached_tokens=count(cached_tokens),
            duration=duration if isinstance(duration, int | float) and duration >= 0 else 0,
        )
    except (ValidationError, ValueError) as exc:
        _warn("a model call", exc)
        return None


def record_conversation(
    messages: Sequence[Message | None] = (),
    model_calls: Sequence[ModelCall | None] = (),
    *,
    output: str | None = None,
    session_id: str | None = None,
) -> bool:
    """Deliver conversation items to the graded session (``session_id``, else the one the
    environment names). False when there is none (outside grade mode too) or the store
    refused them (a warning says why)."""
    active = audit.active_session()
    if active is None:
        return False
    chosen, path, grade_mode = active
    if not grade_mode:
        return False  # outside grade mode only mutations are audited, and no conversation
    session_id = session_id or chosen
    part = Conversation(
        messages=[m for m in messages if m is not None],
        model_calls=[c for c in model_calls if c is not None],
        output=output,
    )
    if part.empty:
        return False
    holder = audit.held_by(session_id)
    take = getattr(holder, "hold_conversation", None)
    if callable(take):
        take(part)
        return True
    try:
        audit.store_for(path).append_conversation(session_id, part)
    except CleoGradeError as exc:
        _warn("the conversation", exc)
        return False
    return True


def text_of(content: Any) -> str | None:
    """The text of a message's content in the shapes frameworks use: a string, a list of
    strings or of ``{"type": "text", "text": ...}`` blocks (other blocks skipped)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence) and not isinstance(content, bytes | bytearray):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                text = block.get("text", block.get("content"))
                if isinstance(text, str) and block.get("type", "text") in (
                    "text",
                    "output_text",
                    "input_text",
                ):
                    parts.append(text)
        return "\n".join(parts) if parts else None
    return None
