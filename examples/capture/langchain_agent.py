"""A LangChain v1 agent graded with AuditMiddleware; the model is LangChain's own fake chat
model, scripted offline."""

from __future__ import annotations

from typing import Any

from common import graded_session, report
from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool

from pytest_cleo_grade.capture.langchain import AuditMiddleware


# The agent's tools as their authors wrote them: nothing about grading here.
@tool
def session_list() -> list[str]:
    """List sessions."""
    return ["S1"]


@tool
def tasks_show(taskId: str) -> dict[str, str]:
    """Show a task."""
    if taskId != "T1":
        raise KeyError(f"Task {taskId} not found")
    return {"id": taskId}


@tool
def tasks_find(query: str) -> list[str]:
    """Find tasks."""
    return ["T1"]


class ScriptedModel(GenericFakeChatModel):
    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedModel:
        return self


PLAN = [
    ("session_list", {}),
    ("tasks_show", {"taskId": "T9"}),  # injected: fails before the tool runs
    ("tasks_find", {"query": "T9"}),  # the agent recovers with a lookup
]
turns = [
    AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": f"call-{i}"}])
    for i, (name, args) in enumerate(PLAN)
]

with graded_session() as session:
    session.inject("tasks.show")  # CLEO's E_NOT_FOUND, deterministically
    # In a test: `middleware=[AuditMiddleware()]` is the one added line.
    agent = create_agent(
        ScriptedModel(messages=iter([*turns, AIMessage(content="done")])),
        [session_list, tasks_show, tasks_find],
        middleware=[AuditMiddleware()],
    )
    agent.invoke({"messages": [HumanMessage("Fix the login bug")]})
    report(session)
