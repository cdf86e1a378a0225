"""Which tool calls an adapter records directly, so a span processor does not record them again.

An MCP client call is traced by the MCP SDK (a ``tools/call`` span) and recorded by
``audited_client``; a pydantic-ai tool call is traced (``execute_tool``) and recorded by
``AuditHooks``. With ``--cleo-grade-capture=otel`` on as well, each call would count twice.
An adapter runs the call inside :func:`direct_call`; the span processor leaves out the tool
spans started inside it and the tool spans around it. Standard library only: the processor
registers a listener here, so this module never imports OpenTelemetry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Final

__all__ = ["add_listener", "direct_call", "in_direct_call", "remove_listener"]

_DIRECT: Final[ContextVar[bool]] = ContextVar("cleo_grade_direct_call", default=False)
#: Called when a direct call starts, in its context (the OTel processor notes the span that
#: is current then: the span around the call).
_listeners: list[Callable[[], None]] = []


@contextmanager
def direct_call() -> Iterator[None]:
    """Run a tool call that the calling adapter records itself."""
    for listener in tuple(_listeners):
        listener()
    token = _DIRECT.set(True)
    try:
        yield
    finally:
        _DIRECT.reset(token)


def in_direct_call() -> bool:
    """Whether the current context is inside a :func:`direct_call`."""
    return _DIRECT.get()


def add_listener(listener: Callable[[], None]) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def remove_listener(listener: Callable[[], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)
