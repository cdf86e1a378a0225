"""Model spans (OpenTelemetry GenAI, OpenInference LLM) as the session's conversation.

A model span (``gen_ai.operation.name`` ``chat``/``text_completion``/``generate_content``, or
OpenInference kind ``LLM``) is one model call: its model (``gen_ai.response.model``, else
``gen_ai.request.model``), its tokens (``gen_ai.usage.input_tokens``, ``output_tokens``,
``cache_read.input_tokens``; the older ``prompt_tokens``/``completion_tokens``). Its messages
come from ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (JSON, on the span or on a
``gen_ai.client.inference.operation.details`` event), the older per-message events
(``gen_ai.user.message``, ``gen_ai.choice``...) or OpenInference's ``llm.input_messages.N``.

Each request repeats the history before it: an input message already seen (same role and
text) is not added again; the answers (output messages) always are. Input messages take the
span's start time, output messages its end.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from pytest_cleo_grade.capture._spans import SpanData, time_of
from pytest_cleo_grade.core._conversation import (
    Conversation,
    Message,
    ModelCall,
    bounded,
    normalise_role,
)

__all__ = ["conversation_from_spans", "is_model_span"]

_MODEL_OPERATIONS: Final = frozenset({"chat", "text_completion", "generate_content"})
_EVENT_ROLES: Final = {
    "gen_ai.user.message": "user",
    "gen_ai.system.message": "system",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
_DETAILS_EVENT: Final = "gen_ai.client.inference.operation.details"


def is_model_span(span: SpanData) -> bool:
    """Whether the span is one request to a model, by the GenAI or OpenInference convention."""
    attributes = span.attributes
    if attributes.get("gen_ai.operation.name") in _MODEL_OPERATIONS:
        return True
    kind = attributes.get("openinference.span.kind")
    return isinstance(kind, str) and kind.upper() == "LLM"


def _count(attributes: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = attributes.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _parsed(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _parts_text(message: Mapping[str, Any]) -> str | None:
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [
            p.get("content")
            for p in parts
            if isinstance(p, Mapping) and p.get("type", "text") == "text"
        ]
        joined = "\n".join(t for t in texts if isinstance(t, str))
        return joined or None
    content = message.get("content")
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        texts = [c.get("text") for c in content if isinstance(c, Mapping)]
        joined = "\n".join(t for t in texts if isinstance(t, str))
        return joined or None
    return None


def _messages_of(value: Any, default_role: str) -> list[tuple[str, str]]:
    """(role, text) pairs of a GenAI messages attribute (a JSON list of messages)."""
    data = _parsed(value)
    if isinstance(data, Mapping):
        data = [data]
    if not isinstance(data, list):
        return []
    pairs: list[tuple[str, str]] = []
    for item in data:
        if not isinstance(item, Mapping):
            continue
        inner = item.get("message")
        message: Mapping[str, Any] = inner if isinstance(inner, Mapping) else item
        text = _parts_text(message)
        role = message.get("role", default_role)
        if text is None or not isinstance(role, str):
            continue
        pairs.append((role, text))
    return pairs


def _openinference(attributes: Mapping[str, Any], prefix: str) -> list[tuple[str, str]]:
    pairs: list[tuple[str, str]] = []
    index = 0
    while True:
        role = attributes.get(f"{prefix}.{index}.message.role")
        text = attributes.get(f"{prefix}.{index}.message.content")
        if role is None and text is None:
            return pairs
        if isinstance(role, str) and isinstance(text, str) and text:
            pairs.append((role, text))
        index += 1


def _span_messages(span: SpanData) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The span's input and output messages, whichever convention carries them."""
    attributes = span.attributes
    inputs = _messages_of(attributes.get("gen_ai.input.messages"), "user")
    outputs = _messages_of(attributes.get("gen_ai.output.messages"), "assistant")
    for name, event in span.events:
        if name == _DETAILS_EVENT:
            inputs = inputs or _messages_of(event.get("gen_ai.input.messages"), "user")
            outputs = outputs or _messages_of(event.get("gen_ai.output.messages"), "assistant")
        elif name in _EVENT_ROLES:
            text = _parts_text({"content": _parsed(event.get("content")) or event.get("content")})
            if text:
                inputs.append((_EVENT_ROLES[name], text))
        elif name == "gen_ai.choice":
            message = _parsed(event.get("message"))
            if isinstance(message, Mapping):
                text = _parts_text(message)
                if text:
                    outputs.append(("assistant", text))
    if not inputs and not outputs:
        inputs = _openinference(attributes, "llm.input_messages")
        outputs = _openinference(attributes, "llm.output_messages")
    return inputs, outputs


def conversation_from_spans(
    spans: Iterable[SpanData], *, seen: set[tuple[str, str]] | None = None
) -> Conversation:
    """The conversation the model spans among ``spans`` hold, in time order. ``seen`` (the
    (role, text) pairs already taken, kept across calls) lets a receiver skip the history
    each later request repeats."""
    seen = set() if seen is None else seen
    messages: list[Message] = []
    calls: list[ModelCall] = []
    for span in sorted((s for s in spans if is_model_span(s)), key=lambda s: s.start_ns):
        attributes = span.attributes
        call_id = (span.span_id or f"span-{span.start_ns}")[:200]
        model = attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model")
        model = model or attributes.get("llm.model_name")
        calls.append(
            ModelCall(
                id=call_id,
                timestamp=time_of(span.start_ns),
                model=model[:200] if isinstance(model, str) and model else None,
                input_tokens=_count(
                    attributes,
                    "gen_ai.usage.input_tokens",
                    "gen_ai.usage.prompt_tokens",
                    "llm.token_count.prompt",
                ),
                output_tokens=_count(
                    attributes,
                    "gen_ai.usage.output_tokens",
                    "gen_ai.usage.completion_tokens",
                    "llm.token_count.completion",
                ),
                cached_tokens=_count(
                    attributes,
                    "gen_ai.usage.cache_read.input_tokens",
                    "gen_ai.usage.cache_read_input_tokens",
                ),
                duration=max(0, span.end_ns - span.start_ns) / 1e6,
            )
        )
        inputs, outputs = _span_messages(span)
        for role, text in inputs:
            key = (role, text)
            if key in seen:
                continue
            seen.add(key)
            message = _message(role, text, span.start_ns, None)
            if message is not None:
                messages.append(message)
        for role, text in outputs:
            seen.add((role, text))
            message = _message(role, text, span.end_ns, call_id)
            if message is not None:
                messages.append(message)
    return bounded(messages, calls, None)


def _message(role: str, text: str, at_ns: int, call_id: str | None) -> Message | None:
    try:
        chosen = normalise_role(role)
    except ValueError:
        return None  # a role outside the four (a framework's own): not a conversation turn
    return Message(
        timestamp=time_of(at_ns),
        role=chosen,
        text=text,
        model_call=call_id if chosen == "assistant" else None,
    )
