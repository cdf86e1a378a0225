"""capture.claude: the Claude Agent SDK's hooks record tool calls (the hook callables are
called with the payloads the SDK documents; its CLI is not available offline)."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("claude_agent_sdk", reason="needs the claude extra (claude-agent-sdk)")

from claude_agent_sdk import ClaudeAgentOptions, HookMatcher

from pytest_cleo_grade.capture.claude import audit_hooks
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.capture_scenario import CALLS, MISSING_TASK, assert_same_grade, grade_by_hand


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def base(event: str) -> dict[str, Any]:
    return {
        "session_id": "claude-session-1",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/repo",
        "hook_event_name": event,
    }


class Claude:
    """What the SDK does around each tool call: PreToolUse, the tool, then PostToolUse or
    PostToolUseFailure, with the tool_use_id pairing them."""

    def __init__(self, hooks: dict[Any, list[Any]]) -> None:
        self.hooks = hooks

    async def fire(self, event: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            await callback({**base(event), **data}, data.get("tool_use_id"), {"signal": None})
            for matcher in self.hooks[event]
            for callback in matcher.hooks
        ]

    async def call(self, index: int, name: str, arguments: dict[str, Any], outcome: Any) -> Any:
        use = {"tool_name": name, "tool_input": arguments, "tool_use_id": f"toolu_{index}"}
        decisions = await self.fire("PreToolUse", use)
        denied = [
            d
            for d in decisions
            if d.get("hookSpecificOutput", {}).get("permissionDecision") == "deny"
        ]
        if denied:
            return denied[0]
        if isinstance(outcome, Exception):
            await self.fire("PostToolUseFailure", {**use, "error": str(outcome), "duration_ms": 12})
        else:
            await self.fire("PostToolUse", {**use, "tool_response": outcome, "duration_ms": 12})
        return outcome


def outcome(name: str, arguments: dict[str, Any]) -> Any:
    if name == "tasks_show" and arguments.get("taskId") == MISSING_TASK:
        return RuntimeError(f"Task {MISSING_TASK} not found")
    return {"content": [{"type": "text", "text": json.dumps({"ok": True})}]}


def test_mcp_tools_through_the_hooks_grade_like_hand_recorded_calls(session: GradeSession) -> None:
    claude = Claude(audit_hooks())

    async def run() -> None:
        for index, (name, arguments) in enumerate(CALLS):
            await claude.call(index, f"mcp__tasks__{name}", arguments, outcome(name, arguments))

    asyncio.run(run())
    assert_same_grade(session.entries, grade_by_hand(session.id))
    show = session.entries[3]
    assert show.error == "Task T9 not found" and show.result.duration == 12
    assert (show.metadata.model_extra or {})["tool"] == "mcp__tasks__tasks_show"


def test_cleos_own_mcp_tools_and_an_is_error_result(session: GradeSession) -> None:
    claude = Claude(audit_hooks())
    query = {"domain": "tasks", "operation": "show", "params": {"taskId": "T1"}}
    refused = {"content": [{"type": "text", "text": "E_NOT_FOUND: task T1"}], "isError": True}

    async def run() -> None:
        await claude.call(0, "mcp__cleo__cleo_query", query, refused)
        await claude.call(
            1, "mcp__cleo__cleo_mutate", {"domain": "session", "operation": "end"}, {}
        )
        await claude.call(2, "Bash", {"command": "ls"}, {"stdout": ""})

    asyncio.run(run())
    rows = [
        (e.domain, e.operation, e.metadata.gateway, e.result.exit_code) for e in session.entries
    ]
    assert rows == [
        ("tasks", "show", "cleo_query", 4),
        ("session", "end", "cleo_mutate", 0),
        ("tool", "Bash", None, 0),
    ]


def test_an_injected_fault_is_denied_before_the_tool_runs(session: GradeSession) -> None:
    claude = Claude(audit_hooks())
    session.inject("tasks.find")

    async def run() -> Any:
        return await claude.call(0, "mcp__tasks__tasks_find", {"query": "x"}, {"content": []})

    decision = asyncio.run(run())
    assert decision["hookSpecificOutput"]["permissionDecisionReason"].startswith("E_NOT_FOUND")
    [entry] = session.entries
    assert (entry.result.exit_code, (entry.metadata.model_extra or {})["injected"]) == (4, True)


def test_the_hooks_are_what_claude_agent_options_takes() -> None:
    hooks = audit_hooks()
    options = ClaudeAgentOptions(hooks=hooks)
    assert set(options.hooks or {}) == {
        "PreToolUse",
        "PostToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "Stop",
    }
    assert all(isinstance(m, HookMatcher) for matchers in hooks.values() for m in matchers)


@pytest.mark.parametrize("reported", [float("inf"), float("nan"), -5, "12", True])
def test_a_duration_the_sdk_reports_that_is_no_duration_is_measured_instead(
    session: GradeSession, reported: Any
) -> None:
    hooks = audit_hooks()
    use = {"tool_name": "mcp__tasks__tasks_find", "tool_input": {}, "tool_use_id": "toolu_1"}

    async def run() -> None:
        for event, extra in (("PreToolUse", {}), ("PostToolUse", {"tool_response": {}})):
            for matcher in hooks[event]:
                for callback in matcher.hooks:
                    data = {**base(event), **use, **extra, "duration_ms": reported}
                    await callback(data, "toolu_1", {"signal": None})

    asyncio.run(run())
    (entry,) = session.entries
    assert math.isfinite(entry.result.duration) and 0 <= entry.result.duration < 1000
    assert session.refused == []


def run_one(hooks: dict[Any, list[Any]], event: str, data: dict[str, Any]) -> None:
    use = {"tool_use_id": "toolu_1", **data}

    async def run() -> None:
        for fired, extra in (("PreToolUse", {}), (event, {})):
            for matcher in hooks[fired]:
                for callback in matcher.hooks:
                    await callback({**base(fired), **use, **extra}, "toolu_1", {"signal": None})

    asyncio.run(run())


def test_cleo_params_sent_as_json_text_keep_the_calls_params(session: GradeSession) -> None:
    # Claude often passes an object argument as its JSON text; CLEO accepts it.
    params = {"title": "Fix login", "description": "Users cannot log in", "taskId": "T1"}
    arguments = {"domain": "tasks", "operation": "add", "params": json.dumps(params)}
    data = {"tool_name": "mcp__cleo__cleo_mutate", "tool_input": arguments}
    run_one(
        audit_hooks(), "PostToolUse", {**data, "tool_response": [{"type": "text", "text": "ok"}]}
    )
    (entry,) = session.entries
    assert (entry.operation, entry.params, entry.metadata.task_id) == ("add", params, "T1")


ENVELOPE = json.dumps(
    {
        "success": False,
        "error": {
            "code": "E_VALIDATION",
            "exitCode": 6,
            "message": "parentId P1: parent task not found in this epic",
        },
    }
)


@pytest.mark.parametrize(
    ("event", "extra"),
    [
        # Claude Code reports an MCP isError result through PostToolUseFailure, its text as error.
        ("PostToolUseFailure", {"error": ENVELOPE}),
        ("PostToolUseFailure", {"error": ENVELOPE + "\nHint: check the epic"}),
        (
            "PostToolUse",
            {"tool_response": {"content": [{"type": "text", "text": ENVELOPE}], "isError": True}},
        ),
    ],
)
def test_cleos_envelope_exit_code_wins_over_its_text_in_every_hook(
    session: GradeSession, event: str, extra: dict[str, Any]
) -> None:
    arguments = {"domain": "tasks", "operation": "add", "params": {"parentId": "P1"}}
    data = {"tool_name": "mcp__cleo__cleo_mutate", "tool_input": arguments, **extra}
    run_one(audit_hooks(), event, data)
    (entry,) = session.entries
    assert (entry.result.success, entry.result.exit_code) == (False, 6)


def test_with_otel_capture_on_an_sdk_mcp_tool_is_recorded_once_by_the_hooks(
    session: GradeSession,
) -> None:
    # The SDK's own tools (create_sdk_mcp_server) run in this process on an MCP server the
    # MCP SDK traces, between PreToolUse and PostToolUse: the hooks record the call, the
    # tools/call span must not record it again.
    otel = pytest.importorskip("pytest_cleo_grade.capture.otel", reason="needs the otel extra")
    from claude_agent_sdk import create_sdk_mcp_server, tool
    from claude_agent_sdk._internal.sdk_mcp_bridge import SdkMcpBridge

    @tool("tasks_show", "Show a task", {"taskId": str})
    async def tasks_show(args: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": f"Task {args['taskId']} not found"}]}

    # What the CLI does: it sends the SDK the MCP messages, which its bridge serves.
    bridge = SdkMcpBridge("cleo", create_sdk_mcp_server("cleo", tools=[tasks_show])["instance"])
    claude = Claude(audit_hooks())
    use = {"tool_name": "mcp__cleo__tasks_show", "tool_input": {"taskId": "T9"}}

    async def run() -> None:
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c"}}
        await bridge.handle({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
        await bridge.handle({"jsonrpc": "2.0", "method": "notifications/initialized"})
        for index in (1, 2):
            call = {**use, "tool_use_id": f"toolu_{index}"}
            await claude.fire("PreToolUse", call)
            params = {"name": "tasks_show", "arguments": use["tool_input"]}
            answer = await bridge.handle(
                {"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": params}
            )
            assert answer is not None and "result" in answer
            await claude.fire("PostToolUse", {**call, "tool_response": answer["result"]})
        await bridge.aclose()

    uninstall = otel.install_otel_capture()
    try:
        asyncio.run(run())
    finally:
        uninstall()
    rows = [(e.operation, e.params, e.metadata.source) for e in session.entries]
    assert rows == [("show", {"taskId": "T9"}, "claude")] * 2


TRANSCRIPT = (
    Path(__file__).resolve().parents[2] / "examples" / "sessions" / "claude-code-cleo.jsonl"
)


def test_the_prompt_and_the_transcripts_answers_and_usage_reach_the_session(
    session: GradeSession,
) -> None:
    claude = Claude(audit_hooks())
    asyncio.run(claude.fire("UserPromptSubmit", {"prompt": "Fix the login bug (use CLEO)"}))
    asyncio.run(
        claude.fire("Stop", {"transcript_path": str(TRANSCRIPT), "stop_hook_active": False})
    )
    talk = session.conversation
    assert [m.text for m in talk.messages].count("Fix the login bug (use CLEO)") == 1
    assert talk.output == "Done: T10 tracks the redirect fix."
    assert talk.tokens()["total"] == 1280


def test_without_a_transcript_the_stop_hooks_last_message_is_the_output(
    session: GradeSession, tmp_path: Path
) -> None:
    claude = Claude(audit_hooks())
    asyncio.run(
        claude.fire(
            "Stop",
            {
                "transcript_path": str(tmp_path / "absent.jsonl"),
                "stop_hook_active": False,
                "last_assistant_message": "All done.",
            },
        )
    )
    assert session.conversation.output == "All done."
