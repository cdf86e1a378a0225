"""An OpenAI Agents SDK agent graded from its traces; the model is scripted offline (the SDK's
Model interface) and nothing is exported to OpenAI."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, Runner, function_tool, set_trace_processors
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from common import graded_session, report
from openai.types.responses import ResponseFunctionToolCall

from pytest_cleo_grade.capture.openai_agents import AuditTracingProcessor


def tell_the_model(context: Any, error: Exception) -> str:
    return f"Error: {error}"


# The agent's tools as their authors wrote them: nothing about grading here.
@function_tool
def session_list() -> list[str]:
    """List sessions."""
    return ["S1"]


@function_tool(failure_error_function=tell_the_model)
def tasks_show(taskId: str) -> dict[str, str]:
    """Show a task."""
    raise KeyError(f"Task {taskId} not found")


PLAN = [("session_list", {}), ("tasks_show", {"taskId": "T9"})]


class ScriptedModel(Model):
    def __init__(self) -> None:
        self.turn = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        turn, self.turn = self.turn, self.turn + 1
        if turn >= len(PLAN):
            return ModelResponse(output=[], usage=Usage(), response_id=None)
        name, arguments = PLAN[turn]
        call = ResponseFunctionToolCall(
            type="function_call", name=name, arguments=json.dumps(arguments), call_id=f"c{turn}"
        )
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("this example does not stream")


with graded_session() as session:
    # In a test (or a conftest): this is the one added line.
    set_trace_processors([AuditTracingProcessor()])
    agent = Agent(name="triage", model=ScriptedModel(), tools=[session_list, tasks_show])
    asyncio.run(Runner.run(agent, "Fix the login bug"))
    report(session)
