"""A pydantic-ai agent graded with AuditHooks; the model is scripted offline (FunctionModel)."""

from __future__ import annotations

import json

from common import graded_session, report
from pydantic_ai import Agent, ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pytest_cleo_grade.capture.pydantic_ai import audit_agent

# The agent as its authors wrote it: nothing about grading here.
agent: Agent[None, str] = Agent(retries=2)


@agent.tool_plain
def session_list() -> list[str]:
    return ["S1"]


@agent.tool_plain
def tasks_show(taskId: str) -> dict[str, str]:
    if taskId != "T1":
        raise ModelRetry(f"Task {taskId} not found")
    return {"id": taskId, "title": "Fix login"}


@agent.tool_plain
def tasks_add(title: str, description: str = "") -> str:
    return "T2"


PLAN = [
    ("session_list", {}),
    ("tasks_show", {"taskId": "T9"}),  # not found, and the agent does not look it up
    ("tasks_add", {"title": "Fix login", "description": "Users cannot log in"}),
]


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if turn < len(PLAN):
        name, arguments = PLAN[turn]
        return ModelResponse(parts=[ToolCallPart(name, json.dumps(arguments))])
    return ModelResponse(parts=[TextPart("done")])


with graded_session() as session:
    # In a test: `with audit_agent(agent):` is the one added line.
    with audit_agent(agent), agent.override(model=FunctionModel(scripted)):
        agent.run_sync("Fix the login bug")
    report(session)
