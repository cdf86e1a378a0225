"""Every Python snippet of docs/capture.md runs, and each adapter's import path is where a reader
looks first: the first table, and the first snippet of the adapter's section.

A snippet is one of three kinds: a test (it defines ``test_`` functions: run by pytest, it must
pass), an excerpt of an example script the paragraph before it names (its lines appear in the
script, in order, and the script runs, printing the output block that follows), or a script
(run as ``python -c``, printing the output block that follows, session ids aside).
"""

from __future__ import annotations

import os
import re
import runpy
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.event_loops import close_the_loop_run_sync_leaves  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "capture.md").read_text(encoding="utf-8")
EXAMPLES = ROOT / "examples" / "capture"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
SESSION = re.compile(r"session-\d+-[0-9a-f]{6}")

#: Each adapter section, the module its first snippet imports, and the framework it needs.
SECTIONS = {
    "pydantic-ai": ("pydantic_ai", "pydantic_ai"),
    "MCP": ("mcp", "mcp.server.mcpserver"),
    "LangChain and LangGraph": ("langchain", "langchain.agents"),
    "OpenAI Agents SDK": ("openai_agents", "agents.tracing"),
    "Claude Agent SDK": ("claude", "claude_agent_sdk"),
    "OpenTelemetry": ("otel", "opentelemetry.sdk"),
}


@dataclass(frozen=True)
class Snippet:
    section: str
    code: str
    before: str  # the page's text from the previous block to this one
    after: str | None  # the plain block right after it (its output), if any

    @property
    def id(self) -> str:
        first = next(line for line in self.code.splitlines() if line.strip())
        return f"{self.section}: {first[:40]}"


def _snippets() -> list[Snippet]:
    found = []
    blocks = list(FENCE.finditer(PAGE))
    for index, block in enumerate(blocks):
        if block.group(1) != "python":
            continue
        start = blocks[index - 1].end() if index else 0
        headings = re.findall(r"^#+ (.+)$", PAGE[: block.start()], re.M)
        following = blocks[index + 1] if index + 1 < len(blocks) else None
        after = None
        plain = following is not None and following.group(1) == ""
        if plain and following is not None and not PAGE[block.end() : following.start()].strip():
            after = following.group(2)
        found.append(Snippet(headings[-1], block.group(2), PAGE[start : block.start()], after))
    return found


SNIPPETS = _snippets()


def _needs(code: str) -> list[str]:
    """The third-party modules a snippet imports (skipped without them: a capture extra)."""
    names = re.findall(r"^(?:from|import) ([\w.]+)", code, re.M)
    return [name for name in names if not name.startswith(("pytest_cleo_grade", "__future__"))]


def _example_of(snippet: Snippet) -> Path | None:
    named = re.findall(r"`examples/capture/(\w+\.py)`", snippet.before)
    return EXAMPLES / named[-1] if named else None


def _in_order(lines: list[str], within: list[str]) -> bool:
    rest = iter(within)
    return all(any(line == other for other in rest) for line in lines)


def test_the_page_has_its_snippets() -> None:
    sections = {snippet.section for snippet in SNIPPETS}
    assert set(SECTIONS) <= sections
    assert len(SNIPPETS) >= 10


@pytest.mark.parametrize("section", list(SECTIONS))
def test_each_adapter_sections_first_snippet_opens_with_its_import(section: str) -> None:
    module, _ = SECTIONS[section]
    first = next(snippet for snippet in SNIPPETS if snippet.section == section)
    imports = [
        line for line in first.code.splitlines() if line.startswith("from pytest_cleo_grade")
    ]
    assert imports and imports[0].startswith(f"from pytest_cleo_grade.capture.{module} import ")


def test_the_first_table_names_every_adapters_import_line() -> None:
    table = PAGE.split("| Framework | Install |", 1)[1].split("\n\n", 1)[0]
    for module, _ in SECTIONS.values():
        assert f"`from pytest_cleo_grade.capture.{module} import " in table, module
    # Each import line of the table imports names the module has.
    import importlib

    for line in re.findall(r"`(from pytest_cleo_grade\.capture\.\w+ import [\w, ]+)`", table):
        module_name, names = re.fullmatch(r"from (\S+) import (.+)", line).groups()  # type: ignore[union-attr]
        needs = next(need for mod, need in SECTIONS.values() if module_name.endswith("." + mod))
        pytest.importorskip(needs, reason=f"{module_name} needs {needs} (a capture extra)")
        module = importlib.import_module(module_name)
        for name in names.split(", "):
            assert hasattr(module, name), line


@pytest.mark.parametrize(
    "snippet", [s for s in SNIPPETS if "def test_" in s.code], ids=lambda s: s.id
)
def test_a_test_snippet_passes(pytester: pytest.Pytester, snippet: Snippet) -> None:
    for module in _needs(snippet.code):
        pytest.importorskip(module, reason=f"the snippet needs {module} (a capture extra)")
    pytester.makepyfile(test_snippet=snippet.code)
    tests = len(re.findall(r"^def test_", snippet.code, re.M))
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=tests)


@pytest.fixture
def as_a_script(monkeypatch: pytest.MonkeyPatch) -> None:
    """An example run in this process as ``python SCRIPT`` runs it (see test_capture_docs)."""
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.delitem(sys.modules, "common", raising=False)


EXCERPTS = [s for s in SNIPPETS if "def test_" not in s.code and _example_of(s) is not None]


@pytest.mark.parametrize("snippet", EXCERPTS, ids=lambda s: s.id)
@pytest.mark.usefixtures("close_the_loop_run_sync_leaves", "as_a_script")
def test_an_excerpt_is_its_examples_and_the_example_prints_what_follows(
    snippet: Snippet, capfd: pytest.CaptureFixture[str]
) -> None:
    example = _example_of(snippet)
    assert example is not None
    lines = [line for line in snippet.code.splitlines() if line.strip()]
    assert _in_order(lines, example.read_text(encoding="utf-8").splitlines()), example.name
    if "subprocess.run(" in example.read_text(encoding="utf-8"):
        pytest.skip("its agent runs in a process of its own: test_capture_docs runs it (e2e)")
    for module in _needs(example.read_text(encoding="utf-8")):
        if module != "common":
            pytest.importorskip(module, reason=f"{example.name} needs {module} (a capture extra)")
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        try:
            runpy.run_path(str(example), run_name="__main__")
        finally:
            sys.modules.pop("common", None)
            if "agents" in sys.modules:
                from agents import set_trace_processors

                set_trace_processors([])
    assert snippet.after is not None
    assert capfd.readouterr().out == snippet.after


SCRIPTS = [s for s in SNIPPETS if "def test_" not in s.code and _example_of(s) is None]


@pytest.mark.e2e
@pytest.mark.parametrize("snippet", SCRIPTS, ids=lambda s: s.id)
def test_a_script_snippet_prints_the_output_shown_after_it(
    snippet: Snippet, tmp_path: Path
) -> None:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for name in ("CLEO_AUDIT_DB", "CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID", "CLEO_SESSION_ID"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-c", snippet.code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert snippet.after is not None
    assert SESSION.sub("SESSION", done.stdout) == SESSION.sub("SESSION", snippet.after)
