"""The session log the judge reads: calls and conversation messages, interleaved, one line each.

Every line starts with ``#`` (``#3`` a call, ``#m2`` a message) and holds one JSON object,
so no agent-controlled text can end a line, fake another one or close the fence. Times are
whole seconds since the session's first event and durations whole seconds (both rounded
down; a duration under a second is left out): the same deterministic suite run again shows
the judge the same prompt, and the judge cache answers it without a request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from pytest_cleo_grade.core._conversation import Conversation, Message, ModelCall
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.judges._untrusted import one_line_json

__all__ = [
    "TIME_RESOLUTION",
    "clip",
    "interleave",
    "render_entry",
    "render_message",
    "session_start",
]

#: What the prompt says of its times (the docs quote it).
TIME_RESOLUTION: Final = "whole seconds"


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, visibly: the judge sees how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...(+{len(text) - limit} chars)"


def _seconds(value: float) -> int:
    return int(value // 1) if value > 0 else 0


def session_start(entries: Sequence[AuditEntry], conversation: Conversation | None) -> datetime:
    """The time of the session's first event: its first call or its first message."""
    times = [entry.timestamp for entry in entries[:1]]
    if conversation is not None and conversation.messages:
        times.append(conversation.messages[0].timestamp)
    return min(times)


def render_entry(
    entry: AuditEntry,
    position: int,
    *,
    max_param_chars: int = 2000,
    start: datetime | None = None,
) -> str:
    """One call: ``#position`` and the call as one JSON object.

    Every value the agent controls (domain, operation, gateway or source, task id, params,
    error text) is inside the JSON object. ``at`` is whole seconds since ``start`` (the
    session's first event; the entry's own time when None).
    """
    result = entry.result
    origin = entry.timestamp if start is None else start
    call: dict[str, Any] = {
        "at": _seconds((entry.timestamp - origin).total_seconds()),
        "call": f"{entry.domain}.{entry.operation}",
        "via": entry.metadata.gateway or entry.metadata.source,
        "ok": result.success,
    }
    if not result.success:
        call["exit"] = result.exit_code
    took = _seconds(result.duration / 1000)
    if took:
        call["took"] = took
    if entry.metadata.task_id:
        call["task"] = entry.metadata.task_id
    if entry.params:
        rendered = one_line_json(entry.params)
        # Too long: the cut text, as a string (a cut object would not be JSON).
        call["params"] = (
            entry.params if len(rendered) <= max_param_chars else clip(rendered, max_param_chars)
        )
    if entry.error:
        call["error"] = clip(" ".join(entry.error.split()), max_param_chars)
    return f"#{position} {one_line_json(call)}"


def render_message(
    message: Message,
    position: int,
    *,
    start: datetime,
    calls: Mapping[str, ModelCall],
    max_chars: int,
) -> str:
    """One message: ``#m<position>`` and ``{"at", "role", "text"}`` (plus the model and its
    tokens for an assistant message whose model call is known)."""
    line: dict[str, Any] = {
        "at": _seconds((message.timestamp - start).total_seconds()),
        "role": message.role,
        "text": clip(message.text, max_chars),
    }
    call = calls.get(message.model_call) if message.model_call else None
    if call is not None:
        if call.model:
            line["model"] = call.model
        if call.input_tokens is not None or call.output_tokens is not None:
            line["tokens"] = {"in": call.input_tokens or 0, "out": call.output_tokens or 0}
    return f"#m{position} {one_line_json(line)}"


def interleave(
    entries: Sequence[AuditEntry],
    conversation: Conversation | None,
    *,
    max_param_chars: int,
    max_message_chars: int,
) -> list[str]:
    """The log: calls (numbered from #0 in grading order, as `cleo-grade show` numbers them)
    and messages (#m0...) merged in session order; a message at the same time as a call
    comes first (a request precedes what it causes)."""
    start = session_start(entries, conversation)
    calls = [
        (
            entry.timestamp,
            1,
            index,
            render_entry(entry, index, max_param_chars=max_param_chars, start=start),
        )
        for index, entry in enumerate(entries)
    ]
    if conversation is None or not conversation.messages:
        return [line for *_, line in calls]
    by_id = {call.id: call for call in conversation.model_calls}
    messages = [
        (
            message.timestamp,
            0,
            index,
            render_message(message, index, start=start, calls=by_id, max_chars=max_message_chars),
        )
        for index, message in enumerate(conversation.messages)
    ]
    merged = sorted([*calls, *messages], key=lambda item: item[:3])
    return [line for *_, line in merged]
