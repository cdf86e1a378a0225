"""One agent scenario every capture adapter replays, and the same calls written by hand."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from pytest_cleo_grade.core.models import AuditEntry, GradeResult
from pytest_cleo_grade.rubrics.cleo import grade_entries

NOW = datetime(2026, 3, 1, 13, 0, tzinfo=UTC)
MISSING_TASK = "T9"

#: (tool name, arguments): the agent lists sessions, asks for help, finds a task, asks for a
#: task that does not exist and ignores the "not found", adds a task, ends the session.
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("session_list", {}),
    ("admin_help", {}),
    ("tasks_find", {"query": "login"}),
    ("tasks_show", {"taskId": MISSING_TASK}),
    ("tasks_add", {"title": "Fix login", "description": "Users cannot log in"}),
    ("session_end", {}),
]


def run_tool(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The tools' behaviour: tasks_show of the missing task raises KeyError (not found)."""
    if name == "tasks_show" and arguments.get("taskId") == MISSING_TASK:
        raise KeyError(f"task {MISSING_TASK} not found")
    return {"ok": True, "tool": name}


def hand_entries(
    session_id: str, gateways: Sequence[str | None] | None = None
) -> list[dict[str, Any]]:
    """The scenario's entries as a user would write them with record(): exit 4 for the miss."""
    base = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    rows = []
    for index, (name, arguments) in enumerate(CALLS):
        domain, _, operation = name.partition("_")
        failed = name == "tasks_show"
        rows.append(
            {
                "timestamp": (base + timedelta(seconds=index)).isoformat(),
                "sessionId": session_id,
                "domain": domain,
                "operation": operation,
                "params": arguments,
                "result": {"success": not failed, "exitCode": 4 if failed else 0},
                "metadata": {"gateway": gateways[index] if gateways else None},
            }
        )
    return rows


def grade_by_hand(session_id: str, gateways: Sequence[str | None] | None = None) -> GradeResult:
    return grade_entries(hand_entries(session_id, gateways), session_id=session_id, now=NOW)


def assert_same_grade(captured: Sequence[AuditEntry], expected: GradeResult) -> None:
    """The captured entries grade exactly like the hand-written ones."""
    got = grade_entries(captured, session_id=expected.session_id, now=NOW)
    assert [(e.domain, e.operation, e.result.exit_code) for e in captured] == [
        (n.partition("_")[0], n.partition("_")[2], 4 if n == "tasks_show" else 0) for n, _ in CALLS
    ]
    assert got.model_dump() == expected.model_dump()
    # The ignored "not found" costs errorProtocol points on every path.
    assert got.dimensions["errorProtocol"].score < 20


class PromptReader:
    """A judge that reads the prompt it is given and answers the default rubric's scores."""

    def __init__(self) -> None:
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        from tests.fake_judge import verdict_json

        self.prompts.append(prompt)
        return verdict_json()


def judged_prompt(session: Any) -> str:
    """Grade ``session`` (a GradeSession) with the weighted rubric as a test would, and
    return the one prompt its judge read."""
    from pytest_cleo_grade.grading._grader import GradingPlan, TestGrader
    from pytest_cleo_grade.rubrics.protocol import RubricConfig

    judge = PromptReader()
    session.grader = TestGrader(GradingPlan(rubric="weighted", config=RubricConfig(judge=judge)))
    session.grade()
    [prompt] = judge.prompts
    return prompt


def goal_and_output(prompt: str) -> tuple[str, str]:
    """The part of a judge's prompt before the log (the goal), and after it (the output)."""
    before, rest = prompt.split("```jsonl", 1)
    return before, rest.split("Dimensions:", 1)[0]
