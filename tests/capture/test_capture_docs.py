"""docs/capture.md shows each capture example's real output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "capture"


@pytest.mark.parametrize(
    ("script", "needs"),
    [
        ("pydantic_ai_agent.py", "pydantic_ai"),
        ("mcp_pair.py", "mcp.server.mcpserver"),
        ("otel_subprocess.py", "opentelemetry.exporter.otlp.proto.http"),
        ("langchain_agent.py", "langchain.agents"),
        ("openai_agents_agent.py", "agents.tracing"),
        ("claude_hooks.py", "claude_agent_sdk"),
    ],
)
def test_the_capture_page_shows_the_examples_real_output(script: str, needs: str) -> None:
    pytest.importorskip(needs, reason=f"{script} needs {needs} (a capture extra)")
    done = subprocess.run(
        [sys.executable, script],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert done.stdout.count("\n") >= 3
    page = (ROOT / "docs" / "capture.md").read_text(encoding="utf-8")
    assert f"```\n{done.stdout}```" in page
    assert f"examples/capture/{script}" in page
