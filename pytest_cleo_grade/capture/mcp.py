"""MCP (SDK 2.x): record tool calls on the client (``audited_client``) or the server
(``audit_middleware``).

Needs the ``mcp`` extra. Each ``tools/call`` becomes an entry through the shared mapping
(:mod:`pytest_cleo_grade.capture.mapping`): the tool's name and arguments, the result's
``isError`` (its text or CLEO's envelope decide the exit code), JSON-RPC errors, the call's
duration, and the tool's ``readOnlyHint`` for the gateway once the tools were listed.
"""

from __future__ import annotations

import contextvars
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final, TypeVar, cast

try:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
except ImportError as exc:  # pragma: no cover - depends on the environment
    from pytest_cleo_grade.core.errors import missing_extra

    raise missing_extra("pytest_cleo_grade.capture.mcp", "the MCP SDK 2.x", "mcp", exc) from exc

from pydantic import BaseModel

from pytest_cleo_grade.capture._direct import direct_call
from pytest_cleo_grade.capture._faults import Fault
from pytest_cleo_grade.capture.mapping import (
    Call,
    Failure,
    StartedIn,
    ToolMapping,
    elapsed_ms,
    envelope_failure,
    injected_fault,
    raised_failure,
    record_call_started_in,
    record_injected,
    session_at_start,
)

__all__ = ["AuditMiddleware", "audit_middleware", "audited_client", "result_failure"]

ClientT = TypeVar("ClientT")
_AUDITED = "_cleo_grade_audited"
#: Set on a ``Client``'s session whose tool listings feed the client's gateway hints.
_HINTING = "_cleo_grade_hinting"


def _field(value: Any, *names: str) -> Any:
    """A field of a pydantic model or of its JSON dict (snake_case or camelCase)."""
    for name in names:
        if isinstance(value, Mapping):
            if name in value:
                return value[name]
        elif hasattr(value, name):
            return getattr(value, name)
    return None


def result_failure(tool: str, result: Any) -> Failure | None:
    """The failure a ``tools/call`` result reports: ``isError`` (its content decides the
    exit code), or CLEO's error envelope as structured content or as the text; else None."""
    content = _field(result, "content") or []
    structured = _field(result, "structured_content", "structuredContent")
    if _field(result, "is_error", "isError"):
        texts = [t for t in (_field(block, "text") for block in content) if isinstance(t, str)]
        payload: Any = structured if structured is not None else content
        if isinstance(payload, list):
            payload = [
                block.model_dump(mode="json") if hasattr(block, "model_dump") else block
                for block in payload
            ]
        return Failure(tool=tool, payload=payload, message="\n".join(texts) or None)
    if structured is not None:
        found = envelope_failure(tool, structured)
        if found is not None:
            return found
    for block in content:
        text = _field(block, "text")
        if isinstance(text, str):
            found = envelope_failure(tool, text)
            if found is not None:
                return found
    return None


def _input_required(result: Any) -> bool:
    """Whether a ``tools/call`` answer is a round asking the client for input (MCP 2026-07-28's
    ``InputRequiredResult``: an elicitation, a sampling), not the tool's outcome: the client
    answers and resends the same call, whose last round is the outcome."""
    return bool(_field(result, "result_type", "resultType") == "input_required")


# When a call began, by the clock and the monotonic counter, and the session it began in.
_Begun = tuple[datetime, int, StartedIn]


class _Rounds:
    """When each call still asking for input began, by the ``request_state`` its client echoes
    in the next round: one tool call is one entry, timed from its first round, however many
    rounds it takes. A round whose answer carries no state starts its own clock."""

    #: Calls whose client never came back: the oldest are forgotten past this many.
    LIMIT = 1024

    def __init__(self) -> None:
        self._begun: OrderedDict[str, _Begun] = OrderedDict()
        self._lock = threading.Lock()

    def begin(self, state: Any) -> _Begun:
        """The start of the call this round continues (``state``: the round's request state)."""
        if isinstance(state, str):
            with self._lock:
                found = self._begun.pop(state, None)
            if found is not None:
                return found
        return datetime.now(UTC), time.perf_counter_ns(), session_at_start()

    def pending(self, result: Any, begun: _Begun) -> bool:
        """Whether ``result`` only asks for input (then it is no outcome: nothing to record)."""
        if not _input_required(result):
            return False
        state = _field(result, "request_state", "requestState")
        if isinstance(state, str):
            with self._lock:
                self._begun[state] = begun
                while len(self._begun) > self.LIMIT:
                    self._begun.popitem(last=False)
        return True


def _continues(request_state: Any, input_responses: Any) -> bool:
    """Whether a ``tools/call`` round resends a call that asked for input (not a new call)."""
    return request_state is not None or input_responses is not None


def _read_only_hints(listing: Any) -> dict[str, bool | None]:
    tools = _field(listing, "tools")
    if tools is None and isinstance(listing, list):
        tools = listing
    hints: dict[str, bool | None] = {}
    for tool in tools or []:
        name = _field(tool, "name")
        annotations = _field(tool, "annotations")
        if isinstance(name, str):
            hint = _field(annotations, "read_only_hint", "readOnlyHint") if annotations else None
            hints[name] = hint if isinstance(hint, bool) else None
    return hints


def audited_client(
    client: ClientT, *, mapping: ToolMapping | None = None, source: str = "mcp"
) -> ClientT:
    """Record every ``call_tool`` of an MCP ``Client`` or ``ClientSession``; returns it.

    The same object comes back (its ``call_tool`` and ``list_tools`` wrapped), so it can be
    wrapped before or after ``async with``. A call that raises (a JSON-RPC error, a timeout)
    or is cancelled (the caller's ``move_on_after``) is recorded as a failure and the exception
    propagates unchanged; a result is returned unchanged. Tools listed through the client lend
    their ``readOnlyHint`` to the gateway. Wrapping twice records once, and so does wrapping
    both a ``Client`` and its ``session``. A call that asks the
    user for input is one entry: a session's rounds that return an ``InputRequiredResult`` are
    not recorded, its last round is.
    """
    if getattr(client, _AUDITED, False):
        return client
    original_call: Callable[..., Awaitable[Any]] = client.call_tool  # type: ignore[attr-defined]
    original_list: Callable[..., Awaitable[Any]] = client.list_tools  # type: ignore[attr-defined]
    hints: dict[str, bool | None] = {}
    rounds = _Rounds()

    async def list_tools(*args: Any, **kwargs: Any) -> Any:
        listing = await original_list(*args, **kwargs)
        hints.update(_read_only_hints(listing))
        return listing

    async def call_tool(name: str, arguments: Any = None, *args: Any, **kwargs: Any) -> Any:
        if _passing_on.get() == name:
            # An audited Client's call reaching its audited session: the Client records it
            # (once, with its rounds and resends), so the session passes it on unrecorded.
            return await original_call(name, arguments, *args, **kwargs)
        state = kwargs.get("request_state")
        fault = None
        if not _continues(state, kwargs.get("input_responses")):
            fault = injected_fault(name, arguments, mapping=mapping)
        if fault is not None:
            # The server is never asked: the client sees the tool error a server would send.
            record_injected(
                fault, name, arguments, read_only=hints.get(name), source=source, mapping=mapping
            )
            return _error_result(fault)
        _hint_from_session(client, hints)
        begun = rounds.begin(state)
        try:
            # Named: a tool span around it of another tool (the tool whose code makes this
            # call) is another call, and so is one inside it of another tool.
            with direct_call(name, arguments=arguments):
                passing_on = _passing_on.set(name)
                try:
                    result = await original_call(name, arguments, *args, **kwargs)
                finally:
                    _passing_on.reset(passing_on)
        except BaseException as exc:
            failure: Failure | None = raised_failure(name, exc)
            _record(name, arguments, failure, hints.get(name), begun, source, mapping)
            raise
        if rounds.pending(result, begun):
            return result
        failure = result_failure(name, result)
        _record(name, arguments, failure, hints.get(name), begun, source, mapping, result=result)
        return result

    for attribute, value in (
        ("call_tool", call_tool),
        ("list_tools", list_tools),
        (_AUDITED, True),
    ):
        # object.__setattr__: Client is a dataclass and may refuse plain assignment later.
        object.__setattr__(client, attribute, value)
    return client


def _hint_from_session(client: object, hints: dict[str, bool | None]) -> None:
    """A ``Client``'s session lists the tools by itself before calling one it has not seen
    (for their output schemas): those listings lend their ``readOnlyHint`` too, as they do to
    an audited session, so wrapping the Client or its session grades the same calls alike."""
    if not isinstance(getattr(type(client), "session", None), property):
        return  # a ClientSession: its own list_tools is wrapped
    try:
        session = client.session  # type: ignore[attr-defined]
    except Exception:  # not entered yet (the Client raises RuntimeError)
        return
    if session is None or getattr(session, _HINTING, False):
        return
    listed: Callable[..., Awaitable[Any]] = session.list_tools

    async def list_tools(*args: Any, **kwargs: Any) -> Any:
        listing = await listed(*args, **kwargs)
        hints.update(_read_only_hints(listing))
        return listing

    object.__setattr__(session, "list_tools", list_tools)
    object.__setattr__(session, _HINTING, True)


#: The tool an audited ``call_tool`` is calling, in the task making the call: an audited
#: object it calls through (a Client's ``session``, wrapped too) does not record it again. A
#: tool's own code runs in the server's tasks, which never see it: its calls are recorded.
_passing_on: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "cleo_grade_mcp_passing_on", default=None
)


def _error_result(fault: Fault) -> BaseModel:
    """A ``tools/call`` result with ``isError``, as a server reports a failing tool."""
    from mcp.types import CallToolResult, TextContent

    result = CallToolResult(content=[TextContent(type="text", text=fault.error)], is_error=True)
    return cast(BaseModel, result)


def _record(
    name: str,
    arguments: Any,
    failure: Failure | None,
    read_only: bool | None,
    begun: _Begun,
    source: str,
    mapping: ToolMapping | None,
    extra: Mapping[str, Any] | None = None,
    result: Any = None,
) -> None:
    started, clock, started_in = begun
    call = Call(
        tool=name,
        arguments=arguments,
        failure=failure,
        read_only=read_only,
        started=started,
        duration_ms=elapsed_ms(clock),
        source=source,
        extra=extra or {},
        result=result,
    )
    # Into the session the call started in: a call a test left running is not the next one's.
    record_call_started_in(call, started_in, mapping=mapping)


# MCPServer turns a crashing tool into an ``isError`` result that says only "Error executing
# tool NAME", and logs the exception. The middleware listens to that log record (for its
# own call only, through a context variable) so a KeyError still counts as "not found".
_crash: contextvars.ContextVar[list[BaseException] | None] = contextvars.ContextVar(
    "cleo_grade_mcp_crash", default=None
)


_SERVER_LOGGER = "mcp.server.mcpserver.server"
_listening = False


def _listen_for_crashes() -> None:
    """Hear the SDK's crash records during an audited call, whatever the logger's settings.

    A user who quiets the SDK's logger (``setLevel(CRITICAL)``, ``logging.disable``, or
    ``logging.config.dictConfig``, which disables the loggers that exist already) would
    otherwise stop the record being made or handled (a disabled logger runs no filters), and
    a KeyError would count as exit 1. So during an audited call the logger makes its error
    records, its ``handle`` takes the crash first, and then passes each record on only where
    the logger's own settings would have.
    """
    global _listening
    if _listening:
        return
    logger = logging.getLogger(_SERVER_LOGGER)
    enabled = logger.isEnabledFor
    handle = logger.handle

    def enabled_while_audited(level: int) -> bool:
        return (level >= logging.ERROR and _crash.get() is not None) or enabled(level)

    def handle_while_audited(record: logging.LogRecord) -> None:
        slot = _crash.get()
        if slot is not None and record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            slot.append(error.__cause__ or error)
        # The original isEnabledFor reads the level, logging.disable and `disabled` as they
        # are now: a record the logger would not have made goes nowhere.
        if enabled(record.levelno):
            handle(record)

    logger.isEnabledFor = enabled_while_audited  # type: ignore[method-assign]
    logger.handle = handle_while_audited  # type: ignore[method-assign]
    _listening = True


class AuditMiddleware:
    """MCP server middleware (``MCPServer(middleware=[...])``) recording every ``tools/call``
    where it is served, so a server started by the code under test (stdio) records too.

    ``server``: the MCPServer, to read the tools' ``readOnlyHint`` from its listing.
    """

    def __init__(
        self,
        *,
        server: Any = None,
        mapping: ToolMapping | None = None,
        source: str = "mcp",
    ) -> None:
        self.server = server
        self.mapping = mapping
        self.source = source
        self._hints: dict[str, bool | None] | None = None
        self._rounds = _Rounds()

    async def _hint(self, name: str) -> bool | None:
        if self.server is None:
            return None
        if self._hints is None or name not in self._hints:
            self._hints = _read_only_hints(await self.server.list_tools())
        return self._hints.get(name)

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.method != "tools/call" or not ctx.params:
            return await call_next(ctx)
        name = ctx.params.get("name")
        if not isinstance(name, str):
            return await call_next(ctx)
        arguments = ctx.params.get("arguments")
        state = ctx.params.get("requestState")
        # Only the domain and operation decide a fault: no hint (a tool listing) is needed
        # before the call, and none is fetched unless a fault is recorded. A round that
        # resends a call asking for input is that call, already past its fault check.
        fault = None
        if not _continues(state, ctx.params.get("inputResponses")):
            fault = injected_fault(name, arguments, mapping=self.mapping)
        if fault is not None:
            # Still a call recorded here: the SDK's tools/call span around it, which ends with
            # this isError result, must not record it again (as a failure of its own).
            with direct_call(name, arguments=arguments):
                read_only = await self._hint(name)
                record_injected(
                    fault,
                    name,
                    arguments,
                    read_only=read_only,
                    source=self.source,
                    mapping=self.mapping,
                )
                return _error_result(fault)
        caller = _caller(ctx.meta)
        _listen_for_crashes()
        crashes: list[BaseException] = []
        token = _crash.set(crashes)
        begun = self._rounds.begin(state)
        try:
            # Named: a tool span inside it that names another tool (a call the tool's own
            # code makes) is another call, recorded by whoever sees it, not this one.
            with direct_call(name, arguments=arguments):
                result = await call_next(ctx)
        except BaseException as exc:
            # A cancelled task cannot wait for the tool listing: the hint known so far.
            if isinstance(exc, Exception):
                read_only = await self._hint(name)
            else:
                read_only = (self._hints or {}).get(name)
            raised = raised_failure(name, exc)
            _record(name, arguments, raised, read_only, begun, self.source, self.mapping, caller)
            raise
        finally:
            _crash.reset(token)
        if self._rounds.pending(result, begun):
            return result
        failure = result_failure(name, result)
        if failure is not None and crashes:
            failure = Failure(
                tool=name, exception=crashes[-1], payload=failure.payload, message=failure.message
            )
        read_only = await self._hint(name)
        _record(
            name, arguments, failure, read_only, begun, self.source, self.mapping, caller, result
        )
        return result


#: W3C trace context: version, trace id, parent (the caller's span) id, flags.
_TRACEPARENT: Final = re.compile(r"[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")


def _caller(meta: Any) -> dict[str, str]:
    """The client's span a request was sent in, from the ``traceparent`` the MCP SDK puts in
    the request's ``_meta``: the client's trace of this call, in another process, is then
    known as this call (see ``_one_call``)."""
    value = meta.get("traceparent") if isinstance(meta, Mapping) else None
    found = _TRACEPARENT.fullmatch(value.strip().lower()) if isinstance(value, str) else None
    if found is None or set(found[1]) == {"0"} or set(found[2]) == {"0"}:
        return {}
    return {"traceId": found[1], "callerSpanId": found[2]}


#: The ready-made middleware: ``MCPServer("tasks", middleware=[audit_middleware])``.
audit_middleware = AuditMiddleware()
