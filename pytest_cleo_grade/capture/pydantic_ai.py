"""pydantic-ai: a capability that records every tool call of an agent as an audit entry.

Needs the ``pydantic-ai`` extra (``pydantic-ai-slim`` 2.x, whose capabilities replaced the
1.x hooks). :class:`AuditHooks` wraps tool validation and execution, so argument-validation
failures, ``ModelRetry`` and ``ToolFailed`` are recorded as failures, mapped by
:mod:`pytest_cleo_grade.capture.mapping` (a retry whose text says "not found" is CLEO's
E_NOT_FOUND, 4). Give it to ``Agent(capabilities=[...])`` or ``agent.run(...,
capabilities=[...])``, or wrap the agent's own runs with :func:`audit_agent`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

try:
    from pydantic_ai import _utils as _pai_utils
    from pydantic_ai.capabilities import AbstractCapability, CombinedCapability, WrapperCapability
    from pydantic_ai.capabilities.abstract import WrapToolExecuteHandler, WrapToolValidateHandler
    from pydantic_ai.exceptions import (
        ApprovalRequired,
        CallDeferred,
        ModelRetry,
        SkipToolExecution,
        SkipToolValidation,
        ToolRetryError,
        UnexpectedModelBehavior,
    )
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        SystemPromptPart,
        TextPart,
        ToolCallPart,
        UserPromptPart,
    )
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import RunContext, ToolDefinition
except ImportError as exc:  # pragma: no cover - depends on the environment
    from pytest_cleo_grade.core.errors import missing_extra

    raise missing_extra(
        "pytest_cleo_grade.capture.pydantic_ai", "pydantic-ai 2.x", "pydantic-ai", exc
    ) from exc

from pytest_cleo_grade.capture._direct import DirectCall, direct_call
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
from pytest_cleo_grade.core.errors import CleoGradeError

__all__ = ["AuditHooks", "audit_agent"]

#: Control flow, not failures: the call was deferred or replaced, not run and failed.
_NOT_FAILURES = (CallDeferred, ApprovalRequired, SkipToolExecution, SkipToolValidation)
#: What a tool's failure is when it asks the model to try again: once the tool has used up its
#: retries, pydantic-ai raises UnexpectedModelBehavior ``from`` one of these.
_RETRY_REQUESTS = (ModelRetry, ToolRetryError, ValidationError)


def _failure(ctx: RunContext[Any], call: ToolCallPart, exc: BaseException) -> Failure:
    """How the call failed: what the tool (or its validation) said, not pydantic-ai's verdict
    that it said so once too often.

    On the last allowed attempt pydantic-ai replaces the tool's ``ModelRetry`` with "Tool 'x'
    exceeded max retries count of N", raised ``from`` it. That is the same failure as every
    earlier attempt's, so the entry takes the cause's class and text (a "not found" stays
    E_NOT_FOUND, 4). Only on the last attempt (``ctx.retry`` has reached ``ctx.max_retries``,
    the test pydantic-ai's ``_check_max_retries`` makes): before it, such an error came from
    the tool itself (e.g. an agent it runs that gave up), and is the tool's failure as it is.
    """
    cause = exc.__cause__
    if (
        isinstance(exc, UnexpectedModelBehavior)
        and isinstance(cause, _RETRY_REQUESTS)
        and ctx.retry >= ctx.max_retries
    ):
        return Failure(tool=call.tool_name, exception=cause)
    return raised_failure(call.tool_name, exc)


def _this_call(call: ToolCallPart, args: Any) -> AbstractContextManager[DirectCall]:
    """The call as one these hooks record themselves, named: a tool span inside it that names
    another tool (a call the tool's own code makes, through an MCP client say) is another
    call, recorded by whoever sees it, not this one."""
    return direct_call(call.tool_name, call_id=call.tool_call_id, arguments=args)


class AuditHooks(AbstractCapability[Any]):
    """Records each tool call of the agent into the graded session active in this process.

    One entry per call: a call whose arguments fail validation (or a validator's
    ``ModelRetry``) is recorded when validation fails; any other call when it has run, as a
    success or, when it raised (``ModelRetry``, ``ToolFailed``, any exception) or returned
    CLEO's error envelope, as a failure. Deferred calls are not recorded (they did not run).
    """

    def __init__(self, *, mapping: ToolMapping | None = None, source: str = "pydantic-ai") -> None:
        self.mapping = mapping
        self.source = source

    def _record(
        self,
        call: ToolCallPart,
        arguments: Any,
        failure: Failure | None,
        started: datetime,
        clock: int,
        started_in: StartedIn,
        result: Any = None,
    ) -> None:
        # The session the call started in: one a test left running (in a thread) that ends
        # during the next test is still the first test's call.
        record_call_started_in(
            Call(
                tool=call.tool_name,
                arguments=arguments,
                failure=failure,
                started=started,
                duration_ms=elapsed_ms(clock),
                source=self.source,
                extra={"toolCallId": call.tool_call_id} if call.tool_call_id else {},
                result=result,
            ),
            started_in,
            mapping=self.mapping,
        )

    async def after_run(
        self, ctx: RunContext[Any], *, result: AgentRunResult[Any]
    ) -> AgentRunResult[Any]:
        """The run's conversation into the session: its user prompts, the model's text
        answers with each response's model and token usage, and the run's output."""
        try:
            _record_run(result)
        except Exception as exc:  # never break the agent for its grade
            from pytest_cleo_grade.capture._conversation import warn_not_recorded

            warn_not_recorded("the pydantic-ai run's conversation", exc)
        return result

    async def wrap_tool_validate(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: WrapToolValidateHandler,
    ) -> Any:
        started, clock, started_in = datetime.now(UTC), time.perf_counter_ns(), session_at_start()
        try:
            with _this_call(call, args):
                return await handler(args)
        except _NOT_FAILURES:
            raise
        except BaseException as exc:
            self._record(call, args, _failure(ctx, call, exc), started, clock, started_in)
            raise

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        fault = injected_fault(call.tool_name, args, mapping=self.mapping)
        if fault is not None:
            # The tool never runs; the model is told what a failing tool would tell it. Still
            # a call recorded here: the execute_tool span around it, which ends with this
            # ModelRetry, must not record it again (as a failure of its own).
            with _this_call(call, args):
                record_injected(
                    fault, call.tool_name, args, source=self.source, mapping=self.mapping
                )
                raise ModelRetry(fault.error)
        started, clock, started_in = datetime.now(UTC), time.perf_counter_ns(), session_at_start()
        try:
            with _this_call(call, args):
                result = await handler(args)
        except _NOT_FAILURES:
            raise
        except BaseException as exc:
            self._record(call, args, _failure(ctx, call, exc), started, clock, started_in)
            raise
        failure = envelope_failure(call.tool_name, result)
        self._record(call, args, failure, started, clock, started_in, result)
        return result


def _record_run(result: AgentRunResult[Any]) -> None:
    from pydantic_core import to_json

    from pytest_cleo_grade.capture._conversation import (
        message,
        model_call,
        record_conversation,
        text_of,
    )

    messages: list[Any] = []
    calls: list[Any] = []
    for item in result.new_messages():
        if isinstance(item, ModelRequest):
            for part in item.parts:
                if isinstance(part, UserPromptPart):
                    text = text_of(part.content)
                    if text:
                        messages.append(message("user", text, timestamp=part.timestamp))
                elif isinstance(part, SystemPromptPart) and part.content:
                    messages.append(message("system", part.content, timestamp=part.timestamp))
        elif isinstance(item, ModelResponse):
            usage = item.usage
            call = model_call(
                item.model_name,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_tokens=usage.cache_read_tokens or None,
                timestamp=item.timestamp,
            )
            calls.append(call)
            text = "\n".join(p.content for p in item.parts if isinstance(p, TextPart) and p.content)
            if text:
                messages.append(
                    message(
                        "assistant",
                        text,
                        timestamp=item.timestamp,
                        model_call=call.id if call is not None else None,
                    )
                )
    output = result.output
    shown = output if isinstance(output, str) else to_json(output, fallback=str).decode()
    record_conversation(messages, calls, output=shown)


def _hooks_in(capability: AbstractCapability[Any]) -> AuditHooks | None:
    """The first AuditHooks in a capability tree (behind wrappers such as ``prefix_tools()``
    too, which ``apply`` visits but does not open), else None."""
    leaves: list[AbstractCapability[Any]] = []
    capability.apply(leaves.append)
    for leaf in leaves:
        while isinstance(leaf, WrapperCapability):
            leaf = leaf.wrapped
        if isinstance(leaf, AuditHooks):
            return leaf
    return None


@contextmanager
def audit_agent(agent: Any, *, mapping: ToolMapping | None = None) -> Iterator[AuditHooks]:
    """Within the block, every run of ``agent`` (in this context) also has :class:`AuditHooks`,
    so the agent's own code need not change; like ``Agent.override``, whose mechanism it uses.

    An agent that already has AuditHooks (its own ``capabilities=[AuditHooks()]``, or an
    enclosing ``audit_agent``) is left as it is and those hooks are yielded: each call is
    recorded once. Raises CleoGradeError when this pydantic-ai has no such mechanism (then pass
    ``capabilities=[AuditHooks()]`` to the agent or its runs), or when ``mapping`` differs from
    the mapping of the hooks already there.
    """
    override = getattr(agent, "_override_root_capability", None)
    effective = getattr(agent, "_effective_root_capability", None)
    if override is None or effective is None:
        raise CleoGradeError(
            f"cleo-grade: cannot add AuditHooks to {type(agent).__name__} from outside; pass "
            "capabilities=[AuditHooks()] to the agent or to its run"
        )
    current = effective()
    present = _hooks_in(current)
    if present is not None:
        # A second AuditHooks would record every call again (each hook records what it wraps).
        # Setting no override also makes the nested case restore itself: the enclosing block's
        # override stays until that block resets it.
        if mapping is not None and mapping != present.mapping:
            # Its hooks would map the calls, not this mapping: refuse rather than grade the
            # calls under a mapping the caller did not ask for.
            raise CleoGradeError(
                f"cleo-grade: {type(agent).__name__} already has AuditHooks with another tool "
                "mapping; pass the mapping to those hooks, or audit the agent once"
            )
        yield present
        return
    hooks = AuditHooks(mapping=mapping)
    combined = CombinedCapability([current, hooks]).for_agent(agent)
    token = override.set(_pai_utils.Some(combined))
    try:
        yield hooks
    finally:
        override.reset(token)
