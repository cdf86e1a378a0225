"""Fault injection for the error protocol: make the next matching call fail before it runs.

``graded_session.inject("tasks.show", exit_code=4, error="E_NOT_FOUND: ...", times=1)`` puts
a fault in this registry under the session's id; every adapter that can intercept a call (the
audited dispatcher, the MCP client wrapper and middleware, the pydantic-ai hooks, the
LangChain middleware) takes the first pending fault for the call's ``domain.operation``
before the tool runs, fails the call the way its framework fails a tool, and records it like
a real failure with ``metadata.injected = true``. So a test can check, deterministically,
that its agent recovers from a not-found within CLEO's window of four calls.

In-process only: a tool server in a child process does not see the test's faults.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Final

from pytest_cleo_grade.core.errors import CleoGradeError

__all__ = [
    "INJECTED_KEY",
    "Fault",
    "FaultError",
    "InjectedFault",
    "any_pending",
    "any_queued",
    "clear",
    "inject",
    "never_used",
    "pending",
    "take",
]

#: The metadata key marking an injected failure's entry.
INJECTED_KEY: Final = "injected"
#: The most calls one fault may fail.
MAX_TIMES: Final = 10_000


class FaultError(CleoGradeError):
    """An inject() call with bad arguments."""


@dataclass(frozen=True, slots=True)
class Fault:
    """A failure waiting for the next ``times`` calls of ``domain.operation``."""

    domain: str
    operation: str
    exit_code: int
    error: str


class InjectedFault(Exception):
    """What an intercepted call raises (or turns into its framework's error).

    ``exit_code`` is read by the exit-code rules like any tool's, so the entry is recorded
    exactly as a real failure with that code would be.
    """

    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.error)
        self.fault = fault
        self.exit_code = fault.exit_code


@dataclass(slots=True)
class _Slot:
    fault: Fault
    left: int
    used: bool = False


_lock = threading.Lock()
#: session id -> pending faults in injection order, each with the calls it will still fail.
_pending: dict[str, list[_Slot]] = {}


def inject(
    session_id: str,
    domain_operation: str,
    *,
    exit_code: int = 4,
    error: str | None = None,
    times: int = 1,
) -> Fault:
    """Queue a fault for the session's next ``times`` calls of ``domain_operation``."""
    if not isinstance(domain_operation, str):
        raise FaultError(f"inject: {domain_operation!r} is not 'domain.operation'")
    domain, dot, operation = domain_operation.partition(".")
    if not dot or not domain.strip() or not operation.strip():
        raise FaultError(f"inject: {domain_operation!r} is not 'domain.operation'")
    if isinstance(exit_code, bool) or not isinstance(exit_code, int) or exit_code == 0:
        raise FaultError(f"inject: exit_code must be a non-zero int, not {exit_code!r}")
    if isinstance(times, bool) or not isinstance(times, int) or not 1 <= times <= MAX_TIMES:
        raise FaultError(f"inject: times must be a whole number from 1 to {MAX_TIMES}")
    if error is not None and (not isinstance(error, str) or not error.strip()):
        raise FaultError("inject: error must be a non-empty string")
    text = error or (
        f"E_NOT_FOUND: {domain_operation} failed (injected by cleo-grade)"
        if exit_code == 4
        else f"{domain_operation} failed with exit code {exit_code} (injected by cleo-grade)"
    )
    fault = Fault(domain, operation, exit_code, text)
    with _lock:
        _pending.setdefault(session_id, []).append(_Slot(fault, times))
    return fault


def take(session_id: str | None, domain: str, operation: str) -> Fault | None:
    """The first pending fault for ``domain.operation`` in the session, used up once."""
    if session_id is None:
        return None
    with _lock:
        queue = _pending.get(session_id)
        if not queue:
            return None
        for slot in queue:
            if slot.fault.domain == domain and slot.fault.operation == operation:
                slot.used = True
                slot.left -= 1
                if slot.left <= 0:
                    queue.remove(slot)
                return slot.fault
    return None


def any_queued() -> bool:
    """Whether any session has a fault left (before even finding the caller's session)."""
    return bool(_pending)


def any_pending(session_id: str | None) -> bool:
    """Whether the session has a fault left (a cheap check before mapping a call)."""
    return session_id is not None and bool(_pending.get(session_id))


def pending(session_id: str) -> list[tuple[Fault, int]]:
    """The session's faults not used up yet, with the calls each will still fail."""
    with _lock:
        return [(slot.fault, slot.left) for slot in _pending.get(session_id, [])]


def never_used(session_id: str) -> list[Fault]:
    """The session's faults that failed no call at all (one used once is not among them)."""
    with _lock:
        return [slot.fault for slot in _pending.get(session_id, []) if not slot.used]


def clear(session_id: str) -> None:
    """Forget the session's faults (the session ended)."""
    with _lock:
        _pending.pop(session_id, None)
