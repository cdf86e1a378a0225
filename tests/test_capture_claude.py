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
from pytest_cleo_grade.session import GradeSession, SessionSettings
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
    assert set(options.hooks or {}) == {"PreToolUse", "PostToolUse", "PostToolUseFailure"}
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
