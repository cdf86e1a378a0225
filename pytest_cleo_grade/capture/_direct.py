"""Which tool calls an adapter records directly, so another layer does not record them again.

One tool call is often seen at several layers: an MCP client call is traced by the MCP SDK
(a ``tools/call`` span) and recorded by ``audited_client``; a pydantic-ai tool call is traced
(``execute_tool``) and recorded by ``AuditHooks``; a LangChain tool call passes the agent
middleware and then the callbacks. An adapter runs the call inside :func:`direct_call`; the
other layers leave out what is the same call, and only that: a tool can run a sub-agent whose
own tool calls are separate calls, to be recorded. Standard library only: the span processor
registers a listener here, so this module never imports OpenTelemetry.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "CallIdentity",
    "DirectCall",
    "SpanClaims",
    "add_listener",
    "current_direct_call",
    "direct_call",
    "expect_call",
    "expected_call_ended",
    "forget_expected_calls",
    "is_expected_call",
    "own_tool_run",
    "remove_listener",
    "same_call",
]

#: What separates a toolset's prefix from the tool's own name (pydantic-ai's ``PrefixedToolset``
#: and langchain-mcp-adapters write ``prefix_name``): the agent's span names the prefixed tool,
#: the MCP span inside it the server's.
_PREFIX_SEPARATORS: Final = "_.:/-"


@dataclass(frozen=True)
class CallIdentity:
    """What a layer knows of a tool call: each part None when that layer does not know it."""

    tool: str | None = None
    call_id: str | None = None
    #: Parsed arguments (a JSON text is parsed); None when absent or unreadable.
    arguments: Any = None

    @classmethod
    def of(cls, tool: str | None, call_id: Any = None, arguments: Any = None) -> CallIdentity:
        return cls(
            tool=tool or None,
            call_id=call_id if isinstance(call_id, str) and call_id else None,
            arguments=_parsed(arguments),
        )


def _parsed(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return None  # a repr, not JSON: says nothing comparable
    return arguments if isinstance(arguments, dict | list) else None


def _same_tool(one: str, other: str) -> bool:
    if one == other:
        return True
    shorter, longer = sorted((one, other), key=len)
    return longer.endswith(shorter) and longer[-len(shorter) - 1] in _PREFIX_SEPARATORS


def same_call(one: CallIdentity, other: CallIdentity) -> bool:
    """Whether two layers directly nested (no model or agent turn between them) show the same
    call: the same tool-call id, else the same tool (a toolset prefix aside) with the same
    arguments where both layers know them. A layer that names no tool is any call."""
    if one.call_id is not None and other.call_id is not None:
        return one.call_id == other.call_id
    if one.tool is None or other.tool is None:
        return True
    if not _same_tool(one.tool, other.tool):
        return False
    if isinstance(one.arguments, dict) and isinstance(other.arguments, dict):
        return bool(one.arguments == other.arguments)
    return True


@dataclass(eq=False)
class DirectCall:
    """One call an adapter records itself; ``identity`` is what the adapter said of it."""

    identity: CallIdentity
    #: Whether the call's own tool run is going on now (see own_tool_run).
    _run_open: bool = field(default=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def own_run_ended(self) -> None:
        """The run :func:`own_tool_run` took as this call's own has ended."""
        with self._lock:
            self._run_open = False


_CURRENT: Final[ContextVar[DirectCall | None]] = ContextVar("cleo_grade_direct_call", default=None)
#: Called when a direct call starts, in its context (the OTel processor notes the span that
#: is current then: the span around the call).
_listeners: list[Callable[[DirectCall], None]] = []


@contextmanager
def direct_call(
    tool: str | None = None, *, call_id: str | None = None, arguments: Any = None
) -> Iterator[DirectCall]:
    """Run a tool call that the calling adapter records itself.

    Name the tool (and its call id and arguments) when known: a layer inside the call that
    names another tool is then known to be another call, not this one.
    """
    call = DirectCall(CallIdentity.of(tool, call_id, arguments))
    for listener in tuple(_listeners):
        listener(call)
    token = _CURRENT.set(call)
    try:
        yield call
    finally:
        _CURRENT.reset(token)


def current_direct_call() -> DirectCall | None:
    """The innermost :func:`direct_call` the current context runs in, if any.

    Everything the call's code runs inherits it, a sub-agent's tool calls included: whether
    something inside it is the call itself is for the caller to decide.
    """
    return _CURRENT.get()


def own_tool_run(identity: CallIdentity) -> DirectCall | None:
    """The current direct call when a tool run starting now is that call's own run (a callback
    seeing the call the middleware records), else None: a separate call made inside it.

    The call's own run starts before its tool's code does, so a run that starts while the own
    run is going on is a call the tool makes (a sub-agent's). One that starts after it ended is
    the call once more: a retry middleware inside the recording one runs the tool again per
    attempt, and the call is still recorded once. Tell the call when its own run ends
    (:meth:`DirectCall.own_run_ended`).
    """
    call = _CURRENT.get()
    if call is None:
        return None
    with call._lock:
        if call._run_open or not same_call(identity, call.identity):
            return None
        call._run_open = True
    return call


def add_listener(listener: Callable[[DirectCall], None]) -> None:
    if listener not in _listeners:
        _listeners.append(listener)


def remove_listener(listener: Callable[[DirectCall], None]) -> None:
    if listener in _listeners:
        _listeners.remove(listener)


# Calls an adapter records although the tool runs outside the adapter's context: the Claude
# Agent SDK's hooks see a call in PreToolUse and PostToolUse, and the SDK's in-process MCP
# server runs the tool in between, in its own task, traced by the MCP SDK. While such a call
# is open, a tool span that is that call is left to the adapter.
_expected: dict[object, CallIdentity] = {}
_expected_lock = threading.Lock()
#: Calls that never end (a tool the user's own hook denied): the oldest are forgotten.
_EXPECTED_LIMIT: Final = 1024


def expect_call(
    key: object, tool: str | None, *, call_id: Any = None, arguments: Any = None
) -> None:
    """Note that an adapter records the call ``key`` itself until :func:`expected_call_ended`."""
    with _expected_lock:
        _expected[key] = CallIdentity.of(tool, call_id, arguments)
        while len(_expected) > _EXPECTED_LIMIT:
            del _expected[next(iter(_expected))]


def expected_call_ended(key: object) -> None:
    with _expected_lock:
        _expected.pop(key, None)


def forget_expected_calls() -> None:
    """Forget every noted call (a graded session ended): a call that never ended, a tool the
    user's own hook denied, must not make a later test's spans of that tool look recorded."""
    with _expected_lock:
        _expected.clear()


def is_expected_call(identity: CallIdentity) -> bool:
    """Whether a layer's call is one an adapter records itself outside the layer's context
    (see :func:`expect_call`): the same call id, else the same tool and arguments."""
    with _expected_lock:
        expected = list(_expected.values())
    return any(
        call.tool is not None and identity.tool is not None and same_call(identity, call)
        for call in expected
    )


class SpanClaims:
    """Each span recorded once however many processors of one kind see it: the first to
    claim a span records it, the others leave it. A tracing SDK hands an ended span to
    every processor one after the other, at once, so a span's repeats come before thousands
    of other spans can end: keeping the last ``limit`` claims loses nothing."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._claimed: OrderedDict[Hashable, None] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._claimed)

    def first(self, key: Hashable) -> bool:
        """Claim ``key`` (a trace and span id): True for the first to ask, False after."""
        with self._lock:
            if key in self._claimed:
                return False
            self._claimed[key] = None
            if len(self._claimed) > self.limit:
                self._claimed.popitem(last=False)
        return True
