"""docs/capture.md shows each capture example's real output."""

from __future__ import annotations

import runpy
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.event_loops import close_the_loop_run_sync_leaves  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "capture"


@pytest.fixture
def as_a_script(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An example run as ``python SCRIPT`` runs it, but in this process (what it prints is
    the same; importing its framework again in a process of its own cost seconds): in its
    directory, importing its ``common`` module from there, warnings shown (not errors, as
    this project's filterwarnings makes them). What it leaves behind is undone after it."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "common", raising=False)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        yield
    sys.modules.pop("common", None)
    if "agents" in sys.modules:  # the OpenAI Agents example registers a trace processor
        from agents import set_trace_processors

        set_trace_processors([])


@pytest.mark.parametrize(
    ("script", "needs"),
    [
        ("pydantic_ai_agent.py", "pydantic_ai"),
        ("mcp_pair.py", "mcp.server.mcpserver"),
        pytest.param(
            "otel_subprocess.py",
            "opentelemetry.exporter.otlp.proto.http",
            marks=pytest.mark.e2e,  # its agent runs in a process of its own
        ),
        ("langchain_agent.py", "langchain.agents"),
        ("openai_agents_agent.py", "agents.tracing"),
        ("claude_hooks.py", "claude_agent_sdk"),
    ],
)
@pytest.mark.usefixtures("close_the_loop_run_sync_leaves", "as_a_script")
def test_the_capture_page_shows_the_examples_real_output(
    capfd: pytest.CaptureFixture[str], script: str, needs: str
) -> None:
    pytest.importorskip(needs, reason=f"{script} needs {needs} (a capture extra)")
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    out = capfd.readouterr().out
    assert out.count("\n") >= 3
    page = (ROOT / "docs" / "capture.md").read_text(encoding="utf-8")
    assert f"```\n{out}```" in page
    assert f"examples/capture/{script}" in page
