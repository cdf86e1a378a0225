"""A session's conversation: messages, model calls with their token usage, the final output.

The calls (audit entries) say what the agent did; the conversation says what it was asked
and what it answered. Both belong to one session and are kept side by side, in the store's
``conversation`` table. The conversation is bounded: each text is cut (visibly) at
:data:`MAX_TEXT_CHARS` characters and a session keeps at most :data:`MAX_ITEMS` messages and
model calls; what is over the cap is counted in ``dropped``, never lost without a trace.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_serializer, field_validator

__all__ = [
    "MAX_ITEMS",
    "MAX_TEXT_CHARS",
    "ROLES",
    "Conversation",
    "Message",
    "ModelCall",
    "Role",
    "bounded",
    "clip_text",
    "merge",
    "new_call_id",
    "normalise_role",
]

Role = Literal["user", "assistant", "system", "tool"]
ROLES: Final = get_args(Role)

#: The longest text one message (or the final output) keeps, in characters; longer ones are
#: cut and say by how much. 32k characters is some 8k tokens: a judge's whole budget is 80k.
MAX_TEXT_CHARS: Final = 32_000
#: The most messages, and the most model calls, one session keeps (each, separately).
MAX_ITEMS: Final = 5_000

#: Other spellings frameworks use for the four roles.
_ROLE_ALIASES: Final = {
    "human": "user",
    "ai": "assistant",
    "model": "assistant",
    "developer": "system",
    "function": "tool",
}


def normalise_role(role: str) -> Role:
    """``role`` as one of the four (``human`` is ``user``, ``ai`` is ``assistant``...);
    ValueError names the four otherwise."""
    if not isinstance(role, str):
        raise ValueError(f"role must be text, not {type(role).__name__}")
    key = role.strip().lower()
    key = _ROLE_ALIASES.get(key, key)
    if key not in ROLES:
        raise ValueError(f"role {role[:40]!r} is not one of {', '.join(ROLES)}")
    return key  # type: ignore[return-value]


def clip_text(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, saying how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...(+{len(text) - limit} chars)"


def new_call_id() -> str:
    """A fresh model-call id (``call-`` and 12 hex digits)."""
    return f"call-{secrets.token_hex(6)}"


def _utc_ms(value: datetime) -> datetime:
    # Kept to the millisecond, as the store keeps every time: the order read back is the
    # order written.
    value = value.astimezone(UTC)
    return value.replace(microsecond=value.microsecond - value.microsecond % 1000)


class _Item(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, allow_inf_nan=False)

    timestamp: AwareDatetime = Field(description="When it happened (UTC, milliseconds).")

    @field_validator("timestamp")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        return _utc_ms(value)

    @field_serializer("timestamp")
    def _serialize_timestamp(self, value: datetime) -> str:
        return value.isoformat(timespec="milliseconds")[:-6] + "Z"


class ModelCall(_Item):
    """One request to a language model: which model, and the tokens it used."""

    id: str = Field(min_length=1, max_length=200, description="Id messages refer to it by.")
    model: str | None = Field(None, max_length=200, description="The model's name.")
    input_tokens: int | None = Field(None, alias="inputTokens", ge=0, le=2**62)
    output_tokens: int | None = Field(None, alias="outputTokens", ge=0, le=2**62)
    cached_tokens: int | None = Field(
        None, alias="cachedTokens", ge=0, le=2**62, description="Input tokens read from a cache."
    )
    duration: float = Field(0, ge=0, description="How long the request took, in ms.")

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens (the cached ones are part of the input)."""
        return (self.input_tokens or 0) + (self.output_tokens or 0)


class Message(_Item):
    """One message of the conversation: who said it, what, when, from which model call."""

    role: Role = Field(description="user, assistant, system or tool.")
    text: str = Field(description="The message's text (cut at the stated cap).")
    model_call: str | None = Field(
        None, alias="modelCall", description="Id of the model call an assistant message came from."
    )

    @field_validator("role", mode="before")
    @classmethod
    def _role(cls, value: object) -> object:
        return normalise_role(value) if isinstance(value, str) else value

    @field_validator("text")
    @classmethod
    def _clip(cls, value: str) -> str:
        return clip_text(value)


class Conversation(BaseModel):
    """A session's conversation: its messages and model calls in time order, and its output."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    messages: list[Message] = Field(default_factory=list)
    model_calls: list[ModelCall] = Field(default_factory=list, alias="modelCalls")
    output: str | None = Field(None, description="The agent's final output (cut at the cap).")
    dropped: int = Field(0, ge=0, description="Messages and model calls over the cap, counted.")

    @field_validator("output")
    @classmethod
    def _clip(cls, value: str | None) -> str | None:
        return None if value is None else clip_text(value)

    @property
    def empty(self) -> bool:
        """Whether nothing of the conversation was captured."""
        return not (self.messages or self.model_calls or self.output is not None)

    @property
    def goal(self) -> str | None:
        """The first user message's text: what the agent was asked to do."""
        for message in self.messages:
            if message.role == "user" and message.text.strip():
                return message.text
        return None

    @property
    def final_output(self) -> str | None:
        """The output set for the session, else the last assistant message's text."""
        if self.output is not None:
            return self.output
        for message in reversed(self.messages):
            if message.role == "assistant" and message.text.strip():
                return message.text
        return None

    def tokens(self) -> dict[str, int]:
        """Token usage summed over the model calls: input, output, cached, total."""
        totals = {"input": 0, "output": 0, "cached": 0}
        for call in self.model_calls:
            totals["input"] += call.input_tokens or 0
            totals["output"] += call.output_tokens or 0
            totals["cached"] += call.cached_tokens or 0
        totals["total"] = totals["input"] + totals["output"]
        return totals

    def to_json_dict(self) -> dict[str, Any]:
        """camelCase JSON, empty parts left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def merge(parts: Iterable[Conversation]) -> Conversation:
    """One conversation of several (this process's and other processes'): items in time
    order (ties in the order given), a model call kept once per id, the last output set, the
    caps applied again."""
    messages: list[Message] = []
    calls: dict[str, ModelCall] = {}
    output: str | None = None
    dropped = 0
    for part in parts:
        messages.extend(part.messages)
        for call in part.model_calls:
            calls.setdefault(call.id, call)
        if part.output is not None:
            output = part.output
        dropped += part.dropped
    return bounded(messages, list(calls.values()), output, dropped)


def bounded(
    messages: Sequence[Message],
    model_calls: Sequence[ModelCall],
    output: str | None,
    dropped: int = 0,
) -> Conversation:
    """A Conversation of these items in time order, each list cut at :data:`MAX_ITEMS`."""
    ordered = sorted(messages, key=lambda m: m.timestamp)
    calls = sorted(model_calls, key=lambda c: c.timestamp)
    over = max(0, len(ordered) - MAX_ITEMS) + max(0, len(calls) - MAX_ITEMS)
    return Conversation(
        messages=ordered[:MAX_ITEMS],
        model_calls=calls[:MAX_ITEMS],
        output=output,
        dropped=dropped + over,
    )
