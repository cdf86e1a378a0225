"""A framework that is not installed: one line with the install command, and a skip for
``pytest.importorskip`` (a ModuleNotFoundError), in every adapter and export.

Each case runs in a process of its own whose imports of the framework fail as they do where it
was never installed (a ``sys.meta_path`` finder raising ModuleNotFoundError), so the adapters
and exports already imported by this process are not disturbed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.processes import NO_UNRELATED_PLUGINS

#: Put first in a child: importing any of the modules named in argv[1] (a comma list) fails.
BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys

    class Blocked(importlib.abc.MetaPathFinder):
        names = set(sys.argv.pop(1).split(","))

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.names:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocked())
    for loaded in [m for m in sys.modules if m.split(".")[0] in Blocked.names]:
        del sys.modules[loaded]
    """
)

ADAPTERS = [
    ("pytest_cleo_grade.capture.pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("pytest_cleo_grade.capture.mcp", "mcp", "mcp"),
    ("pytest_cleo_grade.capture.langchain", "langchain", "langchain"),
    ("pytest_cleo_grade.capture.openai_agents", "agents", "openai-agents"),
    ("pytest_cleo_grade.capture.claude", "claude_agent_sdk", "claude"),
    ("pytest_cleo_grade.capture.otel", "opentelemetry", "otel"),
]

PROBE = textwrap.dedent(
    """
    import importlib, json, sys
    import pytest
    from pytest_cleo_grade.core.errors import MissingExtraError

    module = sys.argv[1]
    try:
        importlib.import_module(module)
    except ImportError as exc:
        error = {"type": type(exc).__name__, "text": str(exc),
                 "not_found": isinstance(exc, ModuleNotFoundError),
                 "ours": isinstance(exc, MissingExtraError)}
    else:
        error = None
    try:
        pytest.importorskip(module)
    except pytest.skip.Exception:
        skipped = True
    else:
        skipped = False
    print(json.dumps({"error": error, "skipped": skipped}))
    """
)


def _blocked(blocked: str, *code: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -c BLOCK+code[0] ARGS...`` with ``blocked`` modules missing."""
    return subprocess.run(
        [sys.executable, "-c", BLOCK + code[0], blocked, *code[1:]],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=300,
    )


@pytest.mark.e2e
@pytest.mark.parametrize(("module", "framework", "extra"), ADAPTERS, ids=[a[2] for a in ADAPTERS])
def test_an_adapter_without_its_framework_is_one_line_with_the_install_command_and_a_skip(
    module: str, framework: str, extra: str
) -> None:
    done = _blocked(framework, PROBE, module)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    error = seen["error"]
    assert error is not None
    assert error["type"] == "MissingExtraError"
    assert error["not_found"] and error["ours"]
    assert "\n" not in error["text"]
    assert module in error["text"]
    assert f"pip install 'pytest-cleo-grade[{extra}]'" in error["text"]
    assert f"pip install -e '.[{extra}]'" in error["text"]
    # The suite that has one extra installed skips the others' tests instead of failing them.
    assert seen["skipped"] is True


def test_a_framework_of_the_wrong_release_is_an_import_error_importorskip_does_not_hide() -> None:
    from pytest_cleo_grade.core.errors import MissingExtraError, missing_extra

    wrong = missing_extra("adapter", "the SDK", "mcp", ImportError("cannot import name 'X'"))
    assert not isinstance(wrong, ModuleNotFoundError | MissingExtraError)
    assert "cannot import name 'X'" in str(wrong)
    assert "pip install 'pytest-cleo-grade[mcp]'" in str(wrong)


@pytest.mark.e2e
def test_the_langfuse_export_command_without_httpx_says_which_extra_to_install(
    tmp_path: Path,
) -> None:
    history = tmp_path / "GRADES.jsonl"
    from pytest_cleo_grade import grade_entries
    from pytest_cleo_grade.store.history import append_grade

    append_grade(grade_entries([], session_id="s1"), history)
    cli = (
        "import os, sys\n"
        "os.environ.update(LANGFUSE_PUBLIC_KEY='pk', LANGFUSE_SECRET_KEY='sk',"
        " LANGFUSE_HOST='http://127.0.0.1:9')\n"
        "from pytest_cleo_grade.cli import main\n"
        "sys.exit(main(['export', 'langfuse', '--history', sys.argv[1]]))\n"
    )
    done = _blocked("httpx", cli, str(history))
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "needs the Langfuse SDK (the langfuse extra; httpx is not installed)" in line
    assert "pip install 'pytest-cleo-grade[langfuse]'" in line


PYTEST = "import sys, pytest\nsys.exit(pytest.main(sys.argv[1:]))\n"

GRADED = """
def test_graded(graded_session):
    graded_session.record("session", "list")
"""


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("export", "blocked", "expected"),
    [
        ("langfuse", "httpx", "cleo-grade: langfuse export skipped: the Langfuse export needs"),
        ("otel", "opentelemetry", "cleo-grade: otel export skipped: the OpenTelemetry export"),
    ],
)
def test_a_runs_export_without_its_extra_says_why_it_was_skipped_once_in_one_line(
    tmp_path: Path, export: str, blocked: str, expected: str
) -> None:
    (tmp_path / "test_two.py").write_text(GRADED + GRADED.replace("graded(", "again("))
    args = ["-p", "no:cacheprovider", *NO_UNRELATED_PLUGINS, f"--cleo-grade-export={export}"]
    done = _blocked(blocked, PYTEST, *args, "-W", "default", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if expected in line]
    assert len(lines) == 1, done.stdout
    extra = "langfuse" if export == "langfuse" else "otel"
    assert f"pip install 'pytest-cleo-grade[{extra}]'" in lines[0]
    assert "No module named" not in done.stdout
