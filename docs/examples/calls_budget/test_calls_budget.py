"""Grade an agent's session with the calls-budget rubric, found through its entry point."""

from __future__ import annotations

from pytest_cleo_grade.rubrics.registry import grade_with_rubric, rubric_names


def call(operation: str, second: int, *, success: bool = True) -> dict[str, object]:
    return {
        "timestamp": f"2026-03-01T12:00:{second:02d}.000Z",
        "sessionId": "demo",
        "domain": "tasks",
        "operation": operation,
        "result": {"success": success},
    }


def test_the_rubric_is_registered_by_its_entry_point() -> None:
    assert "calls-budget" in rubric_names()


def test_an_agent_within_its_call_budget_gets_an_a() -> None:
    session = [call("find", 1), call("show", 2), call("update", 3)]
    result = grade_with_rubric("calls-budget", session, session_id="demo")
    print(result.model_dump_json(by_alias=True, exclude_none=True, indent=1))
    assert result.letter == "A", result.flags


def test_an_agent_that_flails_fails_the_budget() -> None:
    session = [call("find", i, success=i % 2 == 0) for i in range(9)]
    result = grade_with_rubric("calls-budget", session, session_id="demo")
    assert result.total_score == 10 + 28
    assert result.flags == ["4 call(s) over the budget of 5"]
    assert result.letter == "F"
