"""LangChain and LangGraph: tool calls recorded with no glue (extra ``langchain``).

Two ways in, use either:

- :class:`AuditMiddleware`, a LangChain v1 agent middleware (``create_agent(...,
  middleware=[AuditMiddleware()])``); its :func:`audit_tool_call` / :func:`aaudit_tool_call`
  are the same interceptor for LangGraph's ``ToolNode(tools, wrap_tool_call=...,
  awrap_tool_call=...)``. It sees every call, can fail one that ``graded_session.inject()``
  queued before the tool runs, and reads a ``ToolMessage(status="error")`` as a failure.
- :class:`AuditCallbackHandler`, a callback handler (``config={"callbacks": [handler]}``) for
  any runnable: ``on_tool_start`` / ``on_tool_end`` / ``on_tool_error``, paired by ``run_id``
  for the duration. A call the middleware records is not recorded again by the handler; the
  calls a tool makes (a sub-agent's) are recorded, by either.

Either records a call into the session active when it started: a tool run a test left going (in
a thread) that ends during the next test is the first test's call, not the next one's.

A LangGraph ``interrupt()`` in a tool (a human approval) pauses the graph: that is no call yet,
and nothing is recorded; the call resumed with ``Command(resume=...)`` is.

Names and exit codes go through the shared mapping (docs/capture.md): a ``KeyError`` or a
"not found" error message is CLEO's E_NOT_FOUND (exit code 4).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

try:
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import ToolMessage
    from langchain_core.tracers.context import register_configure_hook
except ImportError as exc:  # pragma: no cover - depends on the environment
    from pytest_cleo_grade.core.errors import missing_extra

    raise missing_extra(
        "pytest_cleo_grade.capture.langchain", "langchain 1.x and langchain-core", "langchain", exc
    ) from exc

from pytest_cleo_grade.capture._direct import CallIdentity, DirectCall, direct_call, own_tool_run
from pytest_cleo_grade.capture._faults import Fault
from pytest_cleo_grade.capture.mapping import (
    Call,
    Failure,
    StartedIn,
    ToolMapping,
    elapsed_ms,
    envelope_failure,
    injected_fault,
    parse_arguments,
    record_call_started_in,
    record_injected,
    session_at_start,
)

__all__ = [
    "AuditCallbackHandler",
    "AuditMiddleware",
    "aaudit_tool_call",
    "audit_tool_call",
    "message_failure",
]

SOURCE = "langchain"

try:
    # LangGraph's control flow (interrupt(), a Command to the parent graph) travels as this
    # exception through the tool: the call paused or handed over, it did not fail.
    from langgraph.errors import GraphBubbleUp as _GraphBubbleUp

    _CONTROL_FLOW: tuple[type[BaseException], ...] = (_GraphBubbleUp,)
except ImportError:  # pragma: no cover - langchain without langgraph
    _CONTROL_FLOW = ()


def message_failure(tool: str, result: Any) -> Failure | None:
    """The failure a tool's result reports: ``ToolMessage(status="error")`` (its content is
    the error text), or CLEO's error envelope in its content; else None."""
    content = getattr(result, "content", result)
    if getattr(result, "status", None) == "error":
        text = content if isinstance(content, str) else None
        return Failure(tool=tool, payload=content, message=text)
    if isinstance(content, str | dict):
        return envelope_failure(tool, content)
    return None


def _injected_message(fault: Fault, tool_call: Any) -> ToolMessage:
    # What ToolNode gives the model for a tool that failed: an error ToolMessage.
    return ToolMessage(
        content=fault.error,
        tool_call_id=tool_call.get("id") or "",
        name=tool_call.get("name"),
        status="error",
    )


class _OwnRunError(BaseCallbackHandler):
    """What the tool of one middleware call raised, when its node turned that into text.

    ``ToolNode(handle_tool_errors=...)`` gives the middleware an error ``ToolMessage`` whose
    text is whatever the setting makes of the exception ("The tool failed" from a string, a
    function's reply): a ``KeyError`` would be no not-found. The tool's own run still reports
    the exception to the callbacks, and this handler, added to every run configured inside the
    call, keeps it: the last of the call's own runs (a retry middleware inside runs it again),
    not the runs a tool's code starts while its own run goes on.
    """

    run_inline = True  # called where the run is, even by an async callback manager

    def __init__(self) -> None:
        super().__init__()
        self.error: BaseException | None = None
        self._open: UUID | None = None

    def on_tool_start(
        self, serialized: Any, input_str: str, *, run_id: UUID, **kwargs: Any
    ) -> None:
        if self._open is None:
            self._open, self.error = run_id, None

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id == self._open:
            self._open = None

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if run_id == self._open:
            self._open, self.error = None, error


_own_run_error: ContextVar[_OwnRunError | None] = ContextVar(
    "cleo_grade_langchain_own_run_error", default=None
)
# LangChain's own way to add a handler to the runs configured in a context (as its
# collect_runs() does): the tool run inside the middleware's call gets the handler above.
register_configure_hook(_own_run_error, inheritable=False)


@contextmanager
def _watching_own_run() -> Iterator[_OwnRunError]:
    watch = _OwnRunError()
    token = _own_run_error.set(watch)
    try:
        yield watch
    finally:
        _own_run_error.reset(token)


def _result_failure(tool: str, result: Any, watch: _OwnRunError) -> Failure | None:
    """The failure a call's result reports; for an error message its node made of the tool's
    exception, with that exception (its class decides the exit code, as when it propagates)."""
    failure = message_failure(tool, result)
    error = watch.error
    if failure is None or getattr(result, "status", None) != "error":
        return failure
    if isinstance(error, Exception) and not isinstance(error, _CONTROL_FLOW):
        # The text stays what the model was told; the exception decides the exit code.
        return dataclasses.replace(failure, exception=error)
    return failure


@dataclass(frozen=True)
class _Started:
    tool: str
    arguments: Any
    started: datetime
    clock: int
    #: The session active when the call started: it is that test's call wherever it ends.
    session: StartedIn
    call_id: str | None = None


class AuditMiddleware(AgentMiddleware[Any, Any, Any]):
    """Records every tool call of a LangChain v1 agent (or a LangGraph ``ToolNode``)."""

    def __init__(self, *, mapping: ToolMapping | None = None, source: str = SOURCE) -> None:
        super().__init__()
        self.mapping = mapping
        self.source = source

    def _record(self, started: _Started, failure: Failure | None, result: Any = None) -> None:
        record_call_started_in(
            Call(
                tool=started.tool,
                arguments=started.arguments,
                failure=failure,
                started=started.started,
                duration_ms=elapsed_ms(started.clock),
                source=self.source,
                result=result,
            ),
            started.session,
            mapping=self.mapping,
        )

    def _begin(self, request: Any) -> tuple[_Started, ToolMessage | None]:
        tool_call = request.tool_call
        name = str(tool_call.get("name"))
        arguments = tool_call.get("args")
        fault = injected_fault(name, arguments, mapping=self.mapping)
        if fault is not None:
            record_injected(fault, name, arguments, source=self.source, mapping=self.mapping)
        call_id = tool_call.get("id")
        begun = _Started(
            name,
            arguments,
            datetime.now(UTC),
            time.perf_counter_ns(),
            session_at_start(),
            call_id or None,
        )
        return begun, None if fault is None else _injected_message(fault, tool_call)

    # The conversation: the input when the agent starts, each model answer as it comes (so
    # messages interleave with the calls), the last answer as the output when it ends.

    def before_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        _record_messages(_state_messages(state))
        return None

    async def abefore_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    def after_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        _record_messages(_state_messages(state)[-1:])
        return None

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.after_model(state, runtime)

    def after_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        _record_output(_state_messages(state))
        return None

    async def aafter_agent(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        return self.after_agent(state, runtime)

    def wrap_tool_call(self, request: Any, handler: Callable[[Any], Any]) -> Any:
        begun, injected = self._begin(request)
        if injected is not None:
            return injected
        try:
            with (
                direct_call(begun.tool, call_id=begun.call_id, arguments=begun.arguments),
                _watching_own_run() as watch,
            ):
                result = handler(request)
        except _CONTROL_FLOW:
            raise  # paused (interrupt()) or handed over: recorded when it really runs
        except Exception as exc:
            self._record(begun, Failure(tool=begun.tool, exception=exc))
            raise
        self._record(begun, _result_failure(begun.tool, result, watch), result)
        return result

    async def awrap_tool_call(self, request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        begun, injected = self._begin(request)
        if injected is not None:
            return injected
        try:
            with (
                direct_call(begun.tool, call_id=begun.call_id, arguments=begun.arguments),
                _watching_own_run() as watch,
            ):
                result = await handler(request)
        except _CONTROL_FLOW:
            raise  # paused (interrupt()) or handed over: recorded when it really runs
        except Exception as exc:
            self._record(begun, Failure(tool=begun.tool, exception=exc))
            raise
        self._record(begun, _result_failure(begun.tool, result, watch), result)
        return result


_default = AuditMiddleware()


def audit_tool_call(request: Any, handler: Callable[[Any], Any]) -> Any:
    """``ToolNode(tools, wrap_tool_call=audit_tool_call)``: the middleware's interceptor."""
    return _default.wrap_tool_call(request, handler)


async def aaudit_tool_call(request: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
    """``ToolNode(tools, awrap_tool_call=aaudit_tool_call)``: the async interceptor."""
    return await _default.awrap_tool_call(request, handler)


class AuditCallbackHandler(BaseCallbackHandler):
    """Records tool runs from LangChain's callbacks, paired by ``run_id``."""

    def __init__(self, *, mapping: ToolMapping | None = None, source: str = SOURCE) -> None:
        super().__init__()
        self.mapping = mapping
        self.source = source
        self._runs: dict[UUID, _Started] = {}
        #: Runs that are a middleware's call, by run id: the call is told when each ends.
        self._own: dict[UUID, DirectCall] = {}
        self._lock = threading.Lock()
        #: (role, text) of the messages already recorded.
        self._said: set[tuple[str, str]] = set()

    def on_chat_model_start(
        self,
        serialized: dict[str, Any],
        messages: list[list[Any]],
        *,
        run_id: UUID,
        **kwargs: Any,
    ) -> None:
        """A chat model's input: the messages not seen before (each request repeats the
        conversation before it)."""
        _record_messages([m for batch in messages[:1] for m in batch], seen=self._said)

    def on_llm_end(self, response: Any, *, run_id: UUID, **kwargs: Any) -> None:
        """A model's answer, with its model name and token usage."""
        generations = getattr(response, "generations", None) or []
        first = generations[0][0] if generations and generations[0] else None
        answer = getattr(first, "message", None)
        if answer is not None:
            output = getattr(response, "llm_output", None) or {}
            _record_messages(
                [answer], seen=self._said, model=output.get("model_name") or output.get("model")
            )

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        name = (serialized or {}).get("name") or kwargs.get("name") or "tool"
        arguments = inputs if inputs is not None else parse_arguments(input_str)
        own = own_tool_run(CallIdentity.of(str(name), kwargs.get("tool_call_id"), arguments))
        if own is not None:
            # The middleware records this call (not the calls its tool makes), once however
            # many attempts a retry middleware inside it makes.
            with self._lock:
                self._own[run_id] = own
            return
        with self._lock:
            self._runs[run_id] = _Started(
                str(name), arguments, datetime.now(UTC), time.perf_counter_ns(), session_at_start()
            )

    def _finish(
        self, run_id: UUID, failure_of: Callable[[str], Failure | None], result: Any = None
    ) -> None:
        with self._lock:
            begun = self._runs.pop(run_id, None)
            own = self._own.pop(run_id, None)
        if own is not None:
            own.own_run_ended()
        if begun is None:
            return
        record_call_started_in(
            Call(
                tool=begun.tool,
                arguments=begun.arguments,
                failure=failure_of(begun.tool),
                started=begun.started,
                duration_ms=elapsed_ms(begun.clock),
                source=self.source,
                result=result,
            ),
            begun.session,
            mapping=self.mapping,
        )

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self._finish(run_id, lambda tool: message_failure(tool, output), output)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        if isinstance(error, _CONTROL_FLOW):
            # Paused by interrupt() (or handed over): the resumed run is a new tool run.
            with self._lock:
                self._runs.pop(run_id, None)
                own = self._own.pop(run_id, None)
            if own is not None:
                own.own_run_ended()
            return
        self._finish(run_id, lambda tool: Failure(tool=tool, exception=error))


# -- the conversation ----------------------------------------------------------------------

#: LangChain's message types and the roles they are.
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool"}


def _state_messages(state: Any) -> list[Any]:
    messages = (
        state.get("messages") if isinstance(state, dict) else getattr(state, "messages", None)
    )
    return list(messages) if isinstance(messages, list) else []


def _usage(message: Any) -> tuple[int | None, int | None, int | None]:
    usage = getattr(message, "usage_metadata", None) or {}
    details = usage.get("input_token_details") or {}
    return usage.get("input_tokens"), usage.get("output_tokens"), details.get("cache_read")


def _record_messages(
    messages: list[Any], *, seen: set[tuple[str, str]] | None = None, model: Any = None
) -> None:
    from pytest_cleo_grade.capture._conversation import (
        message,
        model_call,
        record_conversation,
        text_of,
    )

    found: list[Any] = []
    calls: list[Any] = []
    for item in messages:
        role = _ROLES.get(str(getattr(item, "type", "")))
        if role is None or role == "tool":
            continue  # a tool's answer is part of its call
        text = text_of(getattr(item, "content", None))
        call = None
        if role == "assistant":
            metadata = getattr(item, "response_metadata", None) or {}
            inputs, outputs, cached = _usage(item)
            call = model_call(
                model or metadata.get("model_name") or metadata.get("model"),
                input_tokens=inputs,
                output_tokens=outputs,
                cached_tokens=cached,
                call_id=(str(getattr(item, "id", "") or "") or None),
            )
            calls.append(call)
        if not text:
            continue
        if seen is not None:
            if (role, text) in seen:
                continue
            seen.add((role, text))
        found.append(message(role, text, model_call=call.id if call is not None else None))
    record_conversation(found, calls)


def _record_output(messages: list[Any]) -> None:
    from pytest_cleo_grade.capture._conversation import record_conversation, text_of

    for item in reversed(messages):
        if getattr(item, "type", None) == "ai":
            text = text_of(getattr(item, "content", None))
            if text:
                record_conversation(output=text)
            return
