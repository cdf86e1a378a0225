"""The task id a call's result names (``tasks.add`` answers with the task it created)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["TaskIdExtractor", "task_id_from_result"]

#: ``(domain, operation, result) -> task id or None``: what the audited dispatcher and the
#: adapters ask for the id of a call that did not name one in its params.
TaskIdExtractor = Callable[[str, str, Any], "str | None"]

#: The calls whose result names their task: CLEO's ``tasks.add`` creates one, and the
#: specification's per-task flag ("tasks.add without description (taskId: <id>)") names it.
_CREATES: Final = frozenset({("tasks", "add")})
_ID_KEYS: Final = ("taskId", "task_id", "id")
#: Where CLEO's and common tool answers nest the created object.
_NESTED: Final = ("data", "task", "result")
#: A tool answer as text is parsed only up to this size (a page of text names no task id).
_MAX_TEXT: Final = 100_000
_MAX_DEPTH: Final = 4
#: Content blocks of one answer read for an id (an answer is a few blocks).
_MAX_BLOCKS: Final = 20


def task_id_from_result(domain: str, operation: str, result: Any) -> str | None:
    """The id a ``tasks.add`` result carries, else None.

    Read from ``taskId``, ``task_id`` or ``id`` (a string, or a whole number given as one),
    at the top of the result or under ``data``, ``task`` or ``result`` (CLEO's envelope
    ``{"success": true, "data": {"task": {"id": "T123"}}}``); the result may be a mapping, its
    JSON text, a pydantic model, an MCP tool result (its structured content or a text block
    holding JSON, as an object or as Claude's ``tool_response`` dict or block list) or a
    LangChain ``ToolMessage`` (its content). Other operations' results
    are not read: an id in a ``session.start`` answer is a session's, not a task's.
    """
    if (domain, operation) not in _CREATES:
        return None
    return _find(result, 0)


def _find(value: Any, depth: int) -> str | None:
    if depth > _MAX_DEPTH or value is None:
        return None
    if isinstance(value, str | bytes):
        return _find(_parsed(value), depth + 1)
    if isinstance(value, Mapping):
        for key in _ID_KEYS:
            found = _id(value.get(key))
            if found is not None:
                return found
        for key in _NESTED:
            if isinstance(value.get(key), Mapping | str):
                found = _find(value[key], depth + 1)
                if found is not None:
                    return found
        # An MCP tool result as JSON (Claude's tool_response): structured content, text blocks.
        for key in ("structuredContent", "content"):
            if isinstance(value.get(key), Mapping | list | tuple):
                found = _find(value[key], depth + 1)
                if found is not None:
                    return found
        return None
    if isinstance(value, list | tuple):
        for block in value[:_MAX_BLOCKS]:
            text = block.get("text") if isinstance(block, Mapping) else getattr(block, "text", None)
            if isinstance(text, str):
                found = _find(text, depth + 1)
                if found is not None:
                    return found
        return None
    # An MCP CallToolResult: its structured content, else its text blocks.
    structured = getattr(value, "structuredContent", None)
    if isinstance(structured, Mapping):
        found = _find(structured, depth + 1)
        if found is not None:
            return found
    content = getattr(value, "content", None)
    if isinstance(content, str):  # a LangChain ToolMessage
        return _find(content, depth + 1)
    if isinstance(content, list | tuple):
        for block in content:
            text = getattr(block, "text", None)
            if isinstance(text, str):
                found = _find(text, depth + 1)
                if found is not None:
                    return found
        return None
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            dumped = dump(by_alias=True)
        except Exception:
            return None
        return _find(dumped, depth + 1) if isinstance(dumped, Mapping) else None
    return None


def _id(value: Any) -> str | None:
    if isinstance(value, str) and value.strip() and len(value) <= 200:
        return value.strip()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def _parsed(text: str | bytes) -> Any:
    if len(text) > _MAX_TEXT:
        return None
    try:
        decoded = text.decode("utf-8") if isinstance(text, bytes) else text
        stripped = decoded.strip()
        return json.loads(stripped) if stripped.startswith("{") else None
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
