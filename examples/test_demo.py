"""The five scenarios of the ct-grade guide, each run by a protocol-following and a sloppy agent.

The protocol-following runs must reach the ini threshold (B). The anti-pattern runs are graded
in report mode: they pass by showing exactly the letter and the flags the rubric gives them.
"""

from __future__ import annotations

import pytest
from tracker_agent import DemoAgent, TaskTracker

from pytest_cleo_grade import GradeSession

SCENARIOS = [
    "fresh_discovery",
    "task_hygiene",
    "error_recovery",
    "full_lifecycle",
    "multi_domain",
]
#: Their ids in the test names, short enough for the grade table to fit 100 columns.
IDS = ["discovery", "hygiene", "recovery", "lifecycle", "domains"]

NO_SESSION_LIST = "session.list never called (check existing sessions before starting)"
LATE_SESSION_LIST = "session.list called after task ops (should check sessions first)"
NO_SESSION_END = "session.end never called (always end sessions when done)"
NO_HELP = "No admin.help or skill lookup calls (load ct-cleo for guidance)"
NO_MCP = "No MCP query calls (prefer cleo_query over CLI for programmatic access)"
NO_DESCRIPTION = "tasks.add without description (taskId: unknown)"
NO_PARENT_CHECK = "Subtasks created without tasks.exists parent check"
NO_RECOVERY = "E_NOT_FOUND (tasks.show) not followed by recovery lookup"
ONE_DUPLICATE = "1 potentially duplicate task create(s) detected"


def used_list(times: int) -> str:
    return f"tasks.list used {times}x (prefer tasks.find for discovery)"


#: What the rubric must say about each anti-pattern run: letter, score and flags, in order.
ANTI_PATTERNS = {
    "fresh_discovery": ("D", 50, [NO_SESSION_LIST, NO_SESSION_END, used_list(2), NO_HELP]),
    "task_hygiene": ("C", 72, [NO_DESCRIPTION, NO_DESCRIPTION, NO_PARENT_CHECK, ONE_DUPLICATE]),
    "error_recovery": ("C", 70, [used_list(1), NO_RECOVERY, NO_RECOVERY, ONE_DUPLICATE]),
    "full_lifecycle": ("C", 65, [LATE_SESSION_LIST, NO_SESSION_END, NO_HELP]),
    "multi_domain": ("C", 65, [used_list(1), NO_HELP, NO_MCP]),
}


@pytest.fixture
def agent(graded_session: GradeSession) -> DemoAgent:
    return DemoAgent(graded_session.dispatcher, TaskTracker().seed())


@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_good(agent: DemoAgent, scenario: str) -> None:
    getattr(agent, scenario)(follow_protocol=True)


@pytest.mark.cleo_grade(mode="report")
@pytest.mark.parametrize("scenario", SCENARIOS, ids=IDS)
def test_hasty(agent: DemoAgent, graded_session: GradeSession, scenario: str) -> None:
    getattr(agent, scenario)(follow_protocol=False)
    result = graded_session.grade()
    letter, score, flags = ANTI_PATTERNS[scenario]
    assert (result.letter, result.total_score, result.flags) == (letter, score, flags)
