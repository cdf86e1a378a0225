"""Claude Agent SDK hooks: audit_hooks() goes into ClaudeAgentOptions(hooks=...). The Claude
Code CLI the SDK drives is not available offline, so this calls the hooks with the payloads
the SDK documents, in the order it calls them around each tool."""

from __future__ import annotations

import asyncio
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions
from common import graded_session, report

from pytest_cleo_grade.capture.claude import audit_hooks

CALLS: list[tuple[str, dict[str, Any], Any]] = [
    ("mcp__cleo__cleo_query", {"domain": "session", "operation": "list", "params": {}}, {}),
    (
        "mcp__cleo__cleo_query",
        {"domain": "tasks", "operation": "show", "params": {"taskId": "T9"}},
        {"content": [{"type": "text", "text": "E_NOT_FOUND: Task T9 not found"}], "isError": True},
    ),
    ("Bash", {"command": "pytest -q"}, {"stdout": "3 passed"}),
]


async def claude(options: ClaudeAgentOptions) -> None:
    hooks = options.hooks or {}
    for index, (name, tool_input, response) in enumerate(CALLS):
        data = {
            "session_id": "s",
            "transcript_path": "/tmp/t.jsonl",
            "cwd": "/repo",
            "tool_name": name,
            "tool_input": tool_input,
            "tool_use_id": f"toolu_{index}",
        }
        for event, extra in (("PreToolUse", {}), ("PostToolUse", {"tool_response": response})):
            for matcher in hooks[event]:
                for hook in matcher.hooks:
                    await hook({**data, **extra, "hook_event_name": event}, data["tool_use_id"], {})


with graded_session() as session:
    # In a test: `hooks=audit_hooks()` is the one added line.
    asyncio.run(claude(ClaudeAgentOptions(hooks=audit_hooks())))
    report(session)
