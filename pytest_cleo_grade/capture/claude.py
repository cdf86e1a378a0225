"""Claude Agent SDK: tool calls recorded through the SDK's hooks (extra ``claude``).

``ClaudeAgentOptions(hooks=audit_hooks())`` adds a ``PreToolUse``, a ``PostToolUse`` and a
``PostToolUseFailure`` hook. Pre and Post are paired by ``tool_use_id`` for the start time and
the duration (the SDK's ``duration_ms`` when it gives one). MCP tools arrive named
``mcp__<server>__<tool>`` and map by their tool name, CLEO's ``cleo_query``/``cleo_mutate``
included; built-in tools (Bash, Read...) become domain ``tool``. A call that
``graded_session.inject()`` queued is denied in ``PreToolUse`` with the fault's error as the
reason, so the model sees the failure and the tool never runs. Merge with hooks of your own by
extending the lists.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

try:
    from claude_agent_sdk import HookMatcher
except ImportError as exc:  # pragma: no cover - depends on the environment
    from pytest_cleo_grade.core.errors import missing_extra

    raise missing_extra(
        "pytest_cleo_grade.capture.claude", "the Claude Agent SDK", "claude", exc
    ) from exc

from pytest_cleo_grade.capture._conversation import message, record_conversation
from pytest_cleo_grade.capture._direct import expect_call, expected_call_ended
from pytest_cleo_grade.capture.claude_code import answers_in_envelopes
from pytest_cleo_grade.capture.mapping import (
    Call,
    Failure,
    StartedIn,
    ToolMapping,
    elapsed_ms,
    envelope_failure,
    injected_fault,
    record_call_started_in,
    record_injected,
    session_at_start,
    texts_envelope_failure,
)
from pytest_cleo_grade.core.errors import CleoGradeError

__all__ = ["audit_hooks", "response_failure"]

SOURCE = "claude"


def response_failure(tool: str, response: Any) -> Failure | None:
    """The failure a ``tool_response`` reports: an MCP result with ``isError`` (its text is
    the error), or, for an MCP tool, CLEO's error envelope (as the response, its text, or a
    content block)."""
    if isinstance(response, Mapping) and (response.get("isError") or response.get("is_error")):
        blocks = response.get("content")
        texts = (
            [b.get("text") for b in blocks if isinstance(b, Mapping)]
            if isinstance(blocks, list)
            else []
        )
        message = "\n".join(t for t in texts if isinstance(t, str)) or None
        return Failure(tool=tool, payload=dict(response), message=message)
    if not answers_in_envelopes(tool):
        return None
    if isinstance(response, Mapping):
        found = envelope_failure(tool, dict(response))
        if found is not None:
            return found
        blocks = response.get("content")
        response = blocks if isinstance(blocks, list) else None
    if isinstance(response, str):
        return texts_envelope_failure(tool, [response])
    if isinstance(response, list):
        return texts_envelope_failure(
            tool, [block.get("text") for block in response if isinstance(block, Mapping)]
        )
    return None


def _server_tool(tool: str) -> str:
    """The MCP server's own name of a tool Claude names ``mcp__<server>__<tool>``."""
    if tool.startswith("mcp__"):
        server_and_tool = tool[len("mcp__") :]
        _, separator, name = server_and_tool.partition("__")
        if separator and name:
            return name
    return tool


def _sdk_duration(value: Any) -> float | None:
    """The SDK's ``duration_ms`` when it is a usable one (a finite, non-negative number);
    otherwise None, and the adapter's own clock is used."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    duration = float(value)
    return duration if math.isfinite(duration) and duration >= 0 else None


def audit_hooks(
    *, mapping: ToolMapping | None = None, source: str = SOURCE
) -> dict[Any, list[Any]]:
    """The ``hooks=`` mapping for ``ClaudeAgentOptions`` recording every tool call."""
    # When each call began, and in which session (a call that ends in the next test is not
    # that test's).
    started: dict[str, tuple[datetime, int, StartedIn]] = {}
    lock = threading.Lock()
    # These hooks' own calls, told apart from another audit_hooks()'s with the same ids.
    own = object()

    def record(data: Mapping[str, Any], tool_use_id: str | None, failure: Failure | None) -> None:
        key = str(data.get("tool_use_id") or tool_use_id or "")
        expected_call_ended((own, key))
        with lock:
            begun = started.pop(key, None)
        if begun is None:
            begun = (datetime.now(UTC), time.perf_counter_ns(), session_at_start())
        when, clock, started_in = begun
        duration = _sdk_duration(data.get("duration_ms"))
        record_call_started_in(
            Call(
                tool=str(data.get("tool_name")),
                arguments=data.get("tool_input"),
                failure=failure,
                started=when,
                duration_ms=elapsed_ms(clock) if duration is None else duration,
                source=source,
                extra={"toolUseId": key} if key else {},
                # PostToolUse's answer: the id of the task a tasks.add created (if it says).
                result=data.get("tool_response"),
            ),
            started_in,
            mapping=mapping,
        )

    async def pre_tool_use(
        data: Mapping[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        tool = str(data.get("tool_name"))
        arguments = data.get("tool_input")
        fault = injected_fault(tool, arguments, mapping=mapping)
        if fault is not None:
            record_injected(fault, tool, arguments, source=source, mapping=mapping)
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": fault.error,
                }
            }
        key = str(data.get("tool_use_id") or tool_use_id or "")
        # An SDK MCP tool (create_sdk_mcp_server) runs in this process before PostToolUse,
        # traced by the MCP SDK: --cleo-grade-capture=otel leaves that span to these hooks.
        # By tool and arguments: the span knows nothing of Claude's tool_use_id.
        expect_call((own, key), _server_tool(tool), arguments=arguments)
        with lock:
            started[key] = (datetime.now(UTC), time.perf_counter_ns(), session_at_start())
        return {}

    async def post_tool_use(
        data: Mapping[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        tool = str(data.get("tool_name"))
        record(data, tool_use_id, response_failure(tool, data.get("tool_response")))
        return {}

    async def post_tool_use_failure(
        data: Mapping[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        tool = str(data.get("tool_name"))
        error = data.get("error")
        # Claude Code reports an MCP isError result here with its text as the error: CLEO's
        # envelope in it gives its exitCode, as in PostToolUse, before any text rule.
        text = str(error) if error else None
        failure = texts_envelope_failure(tool, [text]) if text else None
        record(data, tool_use_id, failure or Failure(tool=tool, message=text))
        return {}

    # The conversation: each prompt when it is submitted; at Stop, the transcript's answers
    # and token usage (Claude Code writes them there), else the last answer the hook is told.
    said: set[tuple[str, str]] = set()

    async def user_prompt_submit(
        data: Mapping[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        prompt = data.get("prompt")
        if isinstance(prompt, str) and prompt:
            said.add(("user", prompt))
            record_conversation([message("user", prompt)])
        return {}

    async def stop(
        data: Mapping[str, Any], tool_use_id: str | None, context: Any
    ) -> dict[str, Any]:
        _record_stop(data, said)
        return {}

    # The SDK types each callback for every hook input; ours read the tool events' keys.
    callbacks: dict[str, Any] = {
        "PreToolUse": pre_tool_use,
        "PostToolUse": post_tool_use,
        "PostToolUseFailure": post_tool_use_failure,
        "UserPromptSubmit": user_prompt_submit,
        "Stop": stop,
    }
    return {event: [HookMatcher(hooks=[callback])] for event, callback in callbacks.items()}


def _record_stop(data: Mapping[str, Any], said: set[tuple[str, str]]) -> None:
    """At Stop: the transcript's conversation (messages not told already, model calls with
    their usage), else the last assistant message the hook input carries."""
    path = data.get("transcript_path")
    talk = None
    if isinstance(path, str) and path:
        from pytest_cleo_grade.capture.claude_code import load_transcript_conversation

        try:
            talk = load_transcript_conversation(path)
        except CleoGradeError:
            talk = None  # no transcript here (an SDK run elsewhere): the hook input's text
    if talk is not None and not talk.empty:
        fresh = [m for m in talk.messages if (m.role, m.text) not in said]
        said.update((m.role, m.text) for m in fresh)
        record_conversation(fresh, talk.model_calls, output=talk.output)
        return
    last = data.get("last_assistant_message")
    if isinstance(last, str) and last:
        record_conversation([message("assistant", last)], output=last)
