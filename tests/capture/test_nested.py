"""A sub-agent run by a tool: its calls are calls of their own, whichever layer records which.

Two pydantic-ai agents, both traced (instrumented with an SDK tracer provider that has the
span processor), the outer one's tool ``delegate`` running the inner one, which calls
``tasks_find``; the capability on either or neither. Every call is recorded once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="needs the pydantic-ai extra (pydantic-ai-slim 2.x)")
pytest.importorskip("opentelemetry.sdk", reason="needs the otel extra (opentelemetry-sdk)")

from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from pytest_cleo_grade.capture.otel import AuditSpanProcessor
from pytest_cleo_grade.capture.pydantic_ai import AuditHooks
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from tests.event_loops import close_the_loop_run_sync_leaves  # noqa: F401 (a fixture)

pytestmark = pytest.mark.usefixtures("close_the_loop_run_sync_leaves")


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    made = TracerProvider()
    processor = AuditSpanProcessor()
    made.add_span_processor(processor)
    yield made
    processor.shutdown()  # it listens for direct calls process-wide until shut down
    made.shutdown()


def calls_once(name: str, arguments: dict[str, Any]) -> FunctionModel:
    """A model that calls ``name`` on its first turn and answers on the next."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not any(isinstance(m, ModelResponse) for m in messages):
            return ModelResponse(parts=[ToolCallPart(name, json.dumps(arguments))])
        return ModelResponse(parts=[TextPart("done")])

    return FunctionModel(respond)


def run_delegation(provider: TracerProvider, *, outer_hooks: bool, inner_hooks: bool) -> None:
    inner: Agent[None, str] = Agent(
        calls_once("tasks_find", {"query": "login"}),
        capabilities=[AuditHooks()] if inner_hooks else [],
    )
    inner.instrument = InstrumentationSettings(tracer_provider=provider)

    @inner.tool_plain
    def tasks_find(query: str) -> list[str]:
        return ["T1"]

    outer: Agent[None, str] = Agent(
        calls_once("delegate", {"question": "which task?"}),
        capabilities=[AuditHooks()] if outer_hooks else [],
    )
    outer.instrument = InstrumentationSettings(tracer_provider=provider)

    @outer.tool_plain
    async def delegate(question: str) -> str:
        return (await inner.run(question)).output

    outer.run_sync("triage the login bug")


@pytest.mark.parametrize(
    ("outer_hooks", "inner_hooks", "sources"),
    [
        (False, False, {"delegate": "otel", "find": "otel"}),
        (True, False, {"delegate": "pydantic-ai", "find": "otel"}),
        (False, True, {"delegate": "otel", "find": "pydantic-ai"}),
    ],
    ids=["spans-only", "hooks-on-the-outer", "hooks-on-the-inner"],
)
def test_a_sub_agents_call_inside_a_traced_tool_is_recorded_once_beside_the_tools(
    session: GradeSession,
    provider: TracerProvider,
    outer_hooks: bool,
    inner_hooks: bool,
    sources: dict[str, str],
) -> None:
    run_delegation(provider, outer_hooks=outer_hooks, inner_hooks=inner_hooks)
    recorded = {e.operation: e.metadata.source for e in session.entries}
    assert recorded == sources
    assert len(session.entries) == 2
