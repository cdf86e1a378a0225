"""What a session cost, from what was captured: latency, tokens, calls (and a price, if told).

Latency is measured from the first user message to the final output when the conversation
was captured (the output's time: the last assistant message, else the conversation's last
item); without a user message it falls back to the first to the last call, and says so.
Tokens are summed over the model calls. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal

from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core.models import AuditEntry

__all__ = [
    "LATENCY_FALLBACK",
    "LATENCY_MEASURED",
    "SessionMetrics",
    "session_cost",
    "session_metrics",
]

LatencySource = Literal["conversation", "calls", "none"]
#: How each latency source reads in a result and in the comparison's notes.
LATENCY_MEASURED: Final = "from the first user message to the final output"
LATENCY_FALLBACK: Final = "from the first to the last call (fallback: no user message was captured)"


@dataclass(frozen=True, slots=True)
class SessionMetrics:
    """A session's operational figures; None where nothing was captured to tell."""

    latency_seconds: float | None
    latency_source: LatencySource
    tool_calls: int
    model_calls: int
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None

    @property
    def tokens(self) -> int | None:
        """Input plus output tokens, or None when no model call reported any."""
        if self.input_tokens is None and self.output_tokens is None:
            return None
        return (self.input_tokens or 0) + (self.output_tokens or 0)

    @property
    def latency_text(self) -> str:
        """How the latency was measured, in words."""
        if self.latency_source == "conversation":
            return LATENCY_MEASURED
        if self.latency_source == "calls":
            return LATENCY_FALLBACK
        return "unknown (nothing was captured)"


def _end_of(entry: AuditEntry) -> datetime:
    return entry.timestamp + timedelta(milliseconds=entry.result.duration)


def session_metrics(
    entries: Sequence[AuditEntry], conversation: Conversation | None
) -> SessionMetrics:
    """The figures of ``entries`` (in session order) and ``conversation``."""
    talk = conversation or Conversation()
    latency: float | None = None
    source: LatencySource = "none"
    start = next((m.timestamp for m in talk.messages if m.role == "user"), None)
    if start is not None:
        answers = [m.timestamp for m in talk.messages if m.role == "assistant"]
        # The final output is the last answer; without one, whatever happened last.
        ends = answers or [
            *(m.timestamp for m in talk.messages),
            *(c.timestamp + timedelta(milliseconds=c.duration) for c in talk.model_calls),
            *(_end_of(e) for e in entries),
        ]
        end = max(ends)
        latency = max(0.0, (end - start).total_seconds())
        source = "conversation"
    elif entries:
        first = min(e.timestamp for e in entries)
        latency = (max(_end_of(e) for e in entries) - first).total_seconds()
        source = "calls"
    reported_in = [c.input_tokens for c in talk.model_calls if c.input_tokens is not None]
    reported_out = [c.output_tokens for c in talk.model_calls if c.output_tokens is not None]
    reported_cached = [c.cached_tokens for c in talk.model_calls if c.cached_tokens is not None]
    return SessionMetrics(
        latency_seconds=latency,
        latency_source=source,
        tool_calls=len(entries),
        model_calls=len(talk.model_calls),
        input_tokens=sum(reported_in) if reported_in else None,
        output_tokens=sum(reported_out) if reported_out else None,
        cached_tokens=sum(reported_cached) if reported_cached else None,
    )


def session_cost(
    conversation: Conversation | None, prices: Mapping[str, tuple[float, float]]
) -> tuple[float, list[str]]:
    """The session's cost from a price table (model -> (input, output) price per million
    tokens): the sum over model calls, and the models the table has no price for."""
    talk = conversation or Conversation()
    total = 0.0
    unpriced: list[str] = []
    for call in talk.model_calls:
        price = prices.get(call.model or "")
        if price is None:
            name = call.model or "(unnamed model)"
            if name not in unpriced:
                unpriced.append(name)
            continue
        total += ((call.input_tokens or 0) * price[0] + (call.output_tokens or 0) * price[1]) / 1e6
    return total, unpriced
