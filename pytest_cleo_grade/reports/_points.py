"""How a grade's ``points`` read: the lines of a failure message, and ``cleo-grade show``.

Every sentence, rule id and call name may come from the graded agent (a task id, a tool
name) or a third-party rubric, so each goes through :func:`display.terminal_text`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

from pytest_cleo_grade.core._conversation import Conversation, Message, ModelCall
from pytest_cleo_grade.core._text import terminal_text
from pytest_cleo_grade.core.models import AuditEntry, GradeResult, Point, format_timestamp
from pytest_cleo_grade.reports._display import (
    calls_counted,
    item_line,
    number_text,
    points_of,
    score_text,
    signed_text,
)

__all__ = ["render_session", "session_json"]


def _call(entry: AuditEntry) -> str:
    return terminal_text(f"{entry.domain}.{entry.operation}")


def _outcome(entry: AuditEntry) -> str:
    if entry.result.success:
        return "ok"
    return f"exit {entry.result.exit_code}"


def _by_entry(items: Sequence[Point]) -> dict[int, list[Point]]:
    found: dict[int, list[Point]] = defaultdict(list)
    for item in items:
        for index in item.entries:
            found[index].append(item)
    return found


def _annotation(item: Point) -> str:
    shared = f" (shared by {calls_counted(item.entries)} calls)" if len(item.entries) > 1 else ""
    return f"{terminal_text(item.rule)} {signed_text(item.points)}{shared}"


#: The most characters of a message ``cleo-grade show`` prints on its line.
SHOWN_MESSAGE_CHARS: Final = 160


def _message_line(message: Message, calls: dict[str, ModelCall]) -> str:
    text = " ".join(message.text.split())
    if len(text) > SHOWN_MESSAGE_CHARS:
        text = f"{text[:SHOWN_MESSAGE_CHARS]}... (+{len(text) - SHOWN_MESSAGE_CHARS} chars)"
    call = calls.get(message.model_call) if message.model_call else None
    usage = ""
    if call is not None and (call.model or call.total_tokens):
        model = terminal_text(call.model or "model")
        usage = f"  [{model}, {call.input_tokens or 0} in / {call.output_tokens or 0} out]"
    return (
        f"      {format_timestamp(message.timestamp)}  {message.role + ':':<10} "
        f"{terminal_text(text)}{usage}"
    )


def render_session(
    result: GradeResult,
    entries: Sequence[AuditEntry],
    conversation: Conversation | None = None,
) -> str:
    """The session's calls, one per line with the rules they triggered (the conversation's
    messages between them, in session order), then the final output and token usage, each
    dimension's items (every point of the score with its sentence) and the total."""
    items = points_of(result)
    by_entry = _by_entry(items)
    rubric = (result.model_extra or {}).get("rubric", "cleo")
    talk = conversation if conversation is not None and not conversation.empty else None
    header = f"session {terminal_text(result.session_id)} ({len(entries)} calls"
    if talk is not None:
        header += f", {len(talk.messages)} messages"
    lines = [f"{header}), rubric {terminal_text(rubric)}", ""]
    width = max((len(_call(e)) for e in entries), default=4)
    rows: list[tuple[Any, int, int, str]] = []
    for index, entry in enumerate(entries):
        notes = "; ".join(_annotation(item) for item in by_entry.get(index, ()))
        gateway = terminal_text(entry.metadata.gateway or "-")
        line = (
            f"#{index:<4} {format_timestamp(entry.timestamp)}  {_call(entry):<{width}}  "
            f"{gateway:<11} {_outcome(entry):<7} {notes}"
        )
        rows.append((entry.timestamp, 1, index, line.rstrip()))
    if talk is not None:
        calls = {call.id: call for call in talk.model_calls}
        rows += [
            (message.timestamp, 0, index, _message_line(message, calls))
            for index, message in enumerate(talk.messages)
        ]
        rows.sort(key=lambda row: row[:3])
    lines += [row[3] for row in rows]
    if talk is not None:
        lines.append("")
        output = talk.final_output
        lines.append(
            "output: "
            + (terminal_text(" ".join(output.split())) if output is not None else "(none)")
        )
        tokens = talk.tokens()
        lines.append(
            f"model calls: {len(talk.model_calls)}, tokens: {tokens['input']} in "
            f"({tokens['cached']} cached) / {tokens['output']} out"
        )
        if talk.dropped:
            lines.append(f"({talk.dropped} messages or model calls over the cap not kept)")
    if entries:
        lines.append("")
    else:
        lines.append("(no calls: nothing to explain)")
    if entries and not items:
        lines.append("(this rubric explains no points)")
    for name, dimension in result.dimensions.items():
        lines.append(
            f"{terminal_text(name)} {number_text(dimension.score)}/{number_text(dimension.max)}"
        )
        lines.extend(
            f"  {item_line(item, dimension=False)}" for item in items if item.dimension == name
        )
    lines.append(f"total {score_text(result)} ({result.display_percent}%, grade {result.letter})")
    if result.flags:
        lines.append(f"flags ({len(result.flags)}):")
        lines.extend(f"  - {terminal_text(flag)}" for flag in result.flags)
    return "\n".join(lines)


def session_json(
    result: GradeResult,
    entries: Sequence[AuditEntry],
    conversation: Conversation | None = None,
) -> dict[str, Any]:
    """``cleo-grade show --json``: the grade, each call with the points items naming it, and
    the conversation (when one was captured)."""
    by_entry = _by_entry(points_of(result))
    calls = [
        {
            "index": index,
            "timestamp": format_timestamp(entry.timestamp),
            "call": f"{entry.domain}.{entry.operation}",
            "success": entry.result.success,
            "exitCode": entry.result.exit_code,
            "points": [
                {"dimension": p.dimension, "rule": p.rule, "points": p.points}
                for p in by_entry.get(index, ())
            ],
        }
        for index, entry in enumerate(entries)
    ]
    data: dict[str, Any] = {"grade": result.to_report_dict(), "calls": calls}
    if conversation is not None and not conversation.empty:
        data["conversation"] = conversation.to_json_dict()
    return data
