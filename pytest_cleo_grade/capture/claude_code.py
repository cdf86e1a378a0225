"""Claude Code session transcripts as audit entries (``cleo-grade import --format claude-code``).

Claude Code writes each session as JSON Lines under ``~/.claude/projects/<project>/<session
id>.jsonl`` (its documentation of session files and hooks' ``transcript_path``): one object
per line with ``type`` (``user``, ``assistant``, ``summary``, ``system``...), ``sessionId``,
``timestamp`` and ``message``. An assistant message's content holds ``tool_use`` blocks
(``id``, ``name``, ``input``); a later user message's content holds the matching
``tool_result`` blocks (``tool_use_id``, ``content``, ``is_error``). Each pair becomes one
entry: the tool's name through the shared mapping (``mcp__cleo__cleo_query`` is CLEO's query
gateway), the start from the tool_use line, the duration up to the result's line, the exit
code from the shared rules (an error saying "not found" is 4), the transcript's session id.

CLEO agents run inside Claude Code, so this grades a real CLEO session after the fact with no
instrumentation. Lines of other types are skipped; a tool_result whose tool_use is not in the
file, and a tool_use reusing an id, are skipped too, each kind counted in a CleoGradeWarning
naming its lines; a tool_use with no result (an interrupted session) is recorded as a
failure, exit 1, "no tool_result in the transcript". Streamed:
memory holds the entries (the import is all or nothing) and the calls waiting for a result.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

from pytest_cleo_grade.capture.mapping import (
    Call,
    Failure,
    ToolMapping,
    build_entry,
    texts_envelope_failure,
)
from pytest_cleo_grade.core._conversation import Conversation, Message, ModelCall, bounded
from pytest_cleo_grade.core._files import iter_lines, open_regular, parse_json_strict
from pytest_cleo_grade.core.errors import (
    CleoGradeError,
    CleoGradeWarning,
    warnings_shown_not_raised,
)
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.store.sources import is_sqlite_file

__all__ = [
    "SOURCE",
    "TranscriptError",
    "answers_in_envelopes",
    "load_transcript",
    "load_transcript_conversation",
    "subagent_transcripts",
]

SOURCE: Final = "claude-code"
UNANSWERED: Final = "no tool_result in the transcript (the session was interrupted)"


class TranscriptError(CleoGradeError):
    """A transcript that cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class _Use:
    tool: str
    arguments: Any
    started: datetime
    session_id: str | None
    line: int
    #: Its place among the file's tool_use blocks: calls started together keep the file's order.
    order: int


def _timestamp(value: Any, where: str) -> datetime:
    if not isinstance(value, str):
        raise TranscriptError(f"{where}: no timestamp")
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise TranscriptError(f"{where}: timestamp {value[:40]!r} is not ISO 8601") from None
    if stamp.tzinfo is None:
        raise TranscriptError(f"{where}: timestamp {value[:40]!r} has no timezone")
    return stamp


def _blocks(line: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    message = line.get("message")
    content = message.get("content") if isinstance(message, Mapping) else None
    return (
        [block for block in content if isinstance(block, Mapping)]
        if isinstance(content, list)
        else []
    )


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        texts = [b.get("text") for b in content if isinstance(b, Mapping)]
        return [t for t in texts if isinstance(t, str)]
    return []


def _text(content: Any) -> str | None:
    return "\n".join(_texts(content)) or None


def answers_in_envelopes(tool: str) -> bool:
    """Whether a successful result of ``tool`` is read for CLEO's error envelope: an MCP
    tool's (``mcp__server__tool``: CLEO's own reach Claude that way) is; a built-in tool's
    (Bash, Read, Task) output is data the agent looked at, whatever it holds."""
    return tool.startswith("mcp__")


def _failure(tool: str, block: Mapping[str, Any]) -> Failure | None:
    content = block.get("content")
    text = _text(content)
    if block.get("is_error") is True:
        return Failure(tool=tool, payload=content, message=text)
    if not answers_in_envelopes(tool):
        return None  # a `cat` of a fixture that holds an envelope is data, not its status
    # Each block on its own (the envelope, then a hint), as the hooks and MCP adapters read it.
    return texts_envelope_failure(tool, _texts(content))


def _lines(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    if is_sqlite_file(path):  # its binary pages would read as bad JSON at some line
        raise TranscriptError(f"{path}: an SQLite database, not a Claude Code transcript")
    try:
        handle = open_regular(path)
    except OSError as exc:
        raise TranscriptError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        try:
            for number, line in iter_lines(handle, str(path)):
                # A BOM starts the first line of some editors' files; the other readers allow it.
                raw = line.removeprefix(b"\xef\xbb\xbf") if number == 1 else line
                if not raw.strip():
                    continue
                where = f"{path}:{number}"
                try:
                    # A tool's input is the agent's: a number no float holds is kept as text,
                    # as the other adapters store what JSON cannot hold. Claude Code writes
                    # half an emoji (a lone surrogate escape) where it cut a long text: U+FFFD.
                    value = parse_json_strict(
                        raw.decode("utf-8"),
                        huge_numbers_as_text=True,
                        replace_lone_surrogates=True,
                    )
                except (UnicodeDecodeError, ValueError) as exc:
                    raise TranscriptError(f"{where}: not valid JSON: {exc}") from None
                if not isinstance(value, Mapping):
                    raise TranscriptError(f"{where}: not a JSON object")
                yield number, value
        except ValueError as exc:  # an over-long line
            raise TranscriptError(str(exc)) from None


def load_transcript(
    path: str | os.PathLike[str],
    *,
    session_id: str | None = None,
    mapping: ToolMapping | None = None,
) -> list[AuditEntry]:
    """The tool calls of a Claude Code transcript as entries, in the order they started.

    ``session_id`` replaces the transcript's own (a line without ``sessionId`` takes the
    file's name, ``<session id>.jsonl``). The session's sub-agents' transcripts, which Claude
    Code writes to ``<session id>/subagents/agent-*.jsonl`` next to it, are read with it: their
    calls are the session's too. Errors name the file and line; a transcript with no tool
    call is an error (it would grade as an agent that did nothing).
    """
    source = Path(path)
    # Claude Code names the file after the session: the id of a line that lacks sessionId.
    fallback = source.stem or None
    entries: list[tuple[datetime, int, int, AuditEntry]] = []
    for index, file in enumerate([source, *subagent_transcripts(source)]):
        for started, order, entry in _file_entries(file, session_id, fallback, mapping):
            entries.append((started, index, order, entry))
    if not entries:
        raise TranscriptError(f"{source}: no tool calls in this transcript")
    entries.sort(key=lambda item: item[:3])
    return [entry for *_, entry in entries]


def subagent_transcripts(path: str | os.PathLike[str]) -> list[Path]:
    """The sub-agents' transcripts of the session whose main transcript is ``path``
    (``<session id>/subagents/agent-*.jsonl`` beside ``<session id>.jsonl``), by name."""
    source = Path(path)
    folder = source.parent / source.stem / "subagents"
    if not source.stem or not folder.is_dir():
        return []
    return sorted(folder.glob("agent-*.jsonl"))


def _file_entries(
    source: Path, session_id: str | None, fallback: str | None, mapping: ToolMapping | None
) -> list[tuple[datetime, int, AuditEntry]]:
    """One transcript file's calls: (start, order in the file, entry)."""
    waiting: dict[str, _Use] = {}
    # Every id seen once: a tool_use written twice is one call, not a second unanswered one.
    seen: set[str] = set()
    entries: list[tuple[datetime, int, AuditEntry]] = []
    # The lines of the blocks skipped, by why: each is counted in a warning, never dropped
    # unsaid (a not-found call written under a reused id would vanish from the grade).
    skipped: dict[str, list[int]] = {}

    def add(
        use: _Use, failure: Failure | None, ended: datetime | None, key: str, result: Any = None
    ) -> None:
        duration = None if ended is None else (ended - use.started).total_seconds() * 1000
        call = Call(
            tool=use.tool,
            arguments=use.arguments,
            failure=failure,
            started=use.started,
            duration_ms=duration,
            source=SOURCE,
            extra={"toolUseId": key},
            # The tool_result's content: the id of the task a tasks.add created, if it says.
            result=result,
        )
        try:
            entry = build_entry(call, session_id=session_id or use.session_id, mapping=mapping)
        except CleoGradeError as exc:
            raise TranscriptError(f"{source}:{use.line}: {exc}") from None
        entries.append((use.started, use.order, entry))

    for number, line in _lines(source):
        if line.get("type") not in ("assistant", "user"):
            continue
        blocks = _blocks(line)
        kinds = {block.get("type") for block in blocks}
        if not kinds & {"tool_use", "tool_result"}:
            continue
        where = f"{source}:{number}"
        stamp = _timestamp(line.get("timestamp"), where)
        owner = line.get("sessionId")
        for block in blocks:
            if block.get("type") == "tool_use":
                key, name = block.get("id"), block.get("name")
                if not isinstance(key, str) or not isinstance(name, str) or not name:
                    raise TranscriptError(f"{where}: a tool_use block needs an id and a name")
                if key in seen:
                    skipped.setdefault(_REUSED_ID, []).append(number)
                    continue
                waiting[key] = _Use(
                    name,
                    block.get("input"),
                    stamp,
                    owner if isinstance(owner, str) and owner else fallback,
                    number,
                    len(seen),
                )
                seen.add(key)
            elif block.get("type") == "tool_result":
                answered = block.get("tool_use_id")
                use = waiting.pop(answered, None) if isinstance(answered, str) else None
                if use is not None:
                    add(use, _failure(use.tool, block), stamp, str(answered), block.get("content"))
                else:
                    skipped.setdefault(_NO_TOOL_USE, []).append(number)
    for key, use in waiting.items():
        add(use, Failure(tool=use.tool, message=UNANSWERED), None, key)
    _warn_skipped(source, skipped)
    return entries


_REUSED_ID: Final = "tool_use block reusing an id seen before (read as that call)"
_NO_TOOL_USE: Final = "tool_result block answering no tool_use waiting in the file"


def _warn_skipped(source: Path, skipped: Mapping[str, list[int]]) -> None:
    """One CleoGradeWarning per kind of block skipped: how many, and their first lines."""
    for why, lines in skipped.items():
        count = len(lines)
        shown = ", ".join(map(str, lines[:5])) + (", ..." if count > 5 else "")
        kind = why if count == 1 else why.replace(" block ", " blocks ", 1)
        with warnings_shown_not_raised():
            warnings.warn(
                CleoGradeWarning(
                    f"{source}: {count} {kind} skipped (line{'s' if count > 1 else ''} {shown})"
                ),
                stacklevel=4,
            )


def _count(usage: Mapping[str, Any], key: str) -> int | None:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def load_transcript_conversation(path: str | os.PathLike[str]) -> Conversation:
    """The conversation of a Claude Code transcript: the user's and the assistant's text
    blocks as messages, each assistant message's model and ``usage`` as a model call (input
    tokens include the cache reads and writes; cached ones are the reads), and the last
    assistant text as the final output.

    Only the main transcript: a sub-agent's first "user" message is the prompt its parent
    gave it, not the session's goal. Tool blocks are the calls (:func:`load_transcript`).
    Meta lines (``isMeta``: Claude Code's own notes) are skipped.
    """
    source = Path(path)
    messages: list[Message] = []
    calls: dict[str, ModelCall] = {}
    for number, line in _lines(source):
        kind = line.get("type")
        if kind not in ("assistant", "user") or line.get("isMeta") is True:
            continue
        message = line.get("message")
        if not isinstance(message, Mapping):
            continue
        where = f"{source}:{number}"
        texts = _texts(message.get("content"))
        if kind == "user" and any(b.get("type") == "tool_result" for b in _blocks(line)):
            continue  # a tool's answer, part of the calls
        stamp = _timestamp(line.get("timestamp"), where)
        call_id: str | None = None
        if kind == "assistant":
            key = message.get("id")
            call_id = key if isinstance(key, str) and key else f"line-{number}"
            usage = message.get("usage")
            usage = usage if isinstance(usage, Mapping) else {}
            if call_id not in calls:  # Claude Code writes one line per block, usage repeated
                reads = _count(usage, "cache_read_input_tokens")
                writes = _count(usage, "cache_creation_input_tokens")
                fresh = _count(usage, "input_tokens")
                total_in = None if fresh is None else fresh + (reads or 0) + (writes or 0)
                model = message.get("model")
                calls[call_id] = ModelCall(
                    id=call_id[:200],
                    timestamp=stamp,
                    model=model[:200] if isinstance(model, str) and model else None,
                    input_tokens=total_in,
                    output_tokens=_count(usage, "output_tokens"),
                    cached_tokens=reads,
                )
        text = "\n".join(t for t in texts if t.strip())
        if not text:
            continue
        messages.append(
            Message(
                timestamp=stamp,
                role="assistant" if kind == "assistant" else "user",
                text=text,
                model_call=call_id[:200] if call_id else None,
            )
        )
    output = next((m.text for m in reversed(messages) if m.role == "assistant"), None)
    return bounded(messages, list(calls.values()), output)
