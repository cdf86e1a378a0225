"""docs/ci.md's GitHub Actions workflow, run verbatim on three local shards, decides the run
exactly as the unsharded pytest run does."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.inner_runs import inner_addopts
from tests.plugin_suites import AGENTS

ROOT = Path(__file__).resolve().parent.parent
PAGE = (ROOT / "docs" / "ci.md").read_text(encoding="utf-8")
BIN = Path(sys.executable).parent
DEADLINE = 300


def _workflow() -> str:
    start = PAGE.index("## GitHub Actions")
    block = PAGE[PAGE.index("```yaml\n", start) + len("```yaml\n") :]
    return block[: block.index("\n```")]


def _commands(job: str) -> list[str]:
    """The ``run:`` lines of one job of the page's workflow that run the product."""
    text = _workflow()
    body = text[text.index(f"  {job}:\n") :]
    following = re.search(r"\n  [a-z]+:\n", body[len(job) + 4 :])
    if following is not None:
        body = body[: following.start() + len(job) + 4]
    runs = re.findall(r"^\s+- run: (.+)$", body, flags=re.MULTILINE)
    return [run for run in runs if run.startswith(("pytest ", "cleo-grade "))]


# Six tests whose mean (70 %) is below the page's gate B, one below its own threshold, and
# shards whose own means differ from the whole run's; passing, their mean is 87.5 %.
SUITE = """
import pytest
from suite_agents import perfect, seventy_five, forty

def test_a(graded_session):
    perfect(graded_session)

def test_b(graded_session):
    forty(graded_session)

@pytest.mark.cleo_grade(fail_under="F")
def test_c(graded_session):
    forty(graded_session)

def test_d(graded_session):
    perfect(graded_session)

@pytest.mark.cleo_grade(fail_under="C")
def test_e(graded_session):
    forty(graded_session)

def test_f(graded_session):
    perfect(graded_session)
"""
PASSING = SUITE.replace("forty(graded_session)", "seventy_five(graded_session)")


def _project(where: Path, suite: str) -> Path:
    where.mkdir(parents=True)
    (where / "suite_agents.py").write_text(AGENTS)
    (where / "test_agents.py").write_text(textwrap.dedent(suite))
    (where / "pytest.ini").write_text(
        f"[pytest]\naddopts = {inner_addopts(['pytest-split'])} -p no:cacheprovider -p no:xdist\n"
    )
    return where


def _run(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command,
        shell=True,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=False,
    )


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("GITHUB_", "CI_", "CLEO_", "PYTEST_", "BUILDKITE", "CIRCLE"))
    }
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def _section(stdout: str) -> list[str]:
    """The cleo-grade section pytest prints: the table, the run line, the verdict."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"-+ cleo-grade -+", line))
    section = []
    for line in lines[start + 1 :]:
        if line.startswith(("=", "cleo-grade: HTML report", "FAILED", "-")):
            break
        section.append(line)
    return section


def _history(path: Path) -> list[dict[str, object]]:
    shard_fields = {"sessionId", "timestamp", "runId", "shard"}
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return sorted(
        ({k: v for k, v in line.items() if k not in shard_fields} for line in lines),
        key=lambda line: str(line["testId"]),
    )


def _html_verdict(path: Path) -> tuple[str, list[str]]:
    text = path.read_text(encoding="utf-8")
    verdict = re.search(r"gate (?:FAILED|passed)[^<]*", text)
    assert verdict is not None
    tests = sorted(set(re.findall(r"test_agents\.py::test_[a-f]\b", text)))
    return verdict.group(), tests


@pytest.mark.e2e
@pytest.mark.parametrize(("suite", "status"), [(SUITE, 1), (PASSING, 0)], ids=["fails", "passes"])
def test_the_pages_workflow_on_three_shards_decides_as_the_unsharded_run(
    tmp_path: Path, suite: str, status: int
) -> None:
    shard_commands, gate_commands = _commands("shard"), _commands("gate")
    assert len(shard_commands) == 1 and len(gate_commands) == 2
    # The unsharded run: the shard's command without its split, with the HTML report.
    whole = _project(tmp_path / "whole", suite)
    unsplit = re.sub(r"--splits \S+ --group \$\{\{ matrix\.group \}\} ", "", shard_commands[0])
    assert "--splits" not in unsplit
    single = _run(
        f"{unsplit} --cleo-grade-html=cleo-report.html",
        whole,
        _env(tmp_path, GITHUB_RUN_ID="7", GITHUB_RUN_ATTEMPT="1"),
    )
    assert single.returncode == status, single.stdout + single.stderr

    # Three shard jobs, each on its own "machine", of one CI run.
    run = {"GITHUB_RUN_ID": "4242", "GITHUB_RUN_ATTEMPT": "1"}
    gate = _project(tmp_path / "gate", suite)
    shard_status = []
    for group in (1, 2, 3):
        job = _project(tmp_path / f"job-{group}", suite)
        command = shard_commands[0].replace("${{ matrix.group }}", str(group))
        done = _run(command, job, _env(tmp_path, **run))
        shard_status.append(done.returncode)
        assert "deferred, this is shard" in done.stdout, done.stdout + done.stderr
        # actions/upload-artifact + download-artifact: shards/cleo-N/ is the job's .cleo/.
        shutil.copytree(job / ".cleo", gate / "shards" / f"cleo-{group}")
    # A shard fails for its own tests only (test_e is below its threshold), never for the gate.
    failed_tests = [g for g, rc in enumerate(shard_status, 1) if rc != 0]
    assert len(failed_tests) == (1 if suite is SUITE else 0)

    summary = tmp_path / "step-summary.md"
    outputs = []
    for command in gate_commands:
        done = _run(command, gate, _env(tmp_path, **run, GITHUB_STEP_SUMMARY=str(summary)))
        outputs.append(done)
    combined, report = outputs
    assert combined.returncode == 0, combined.stderr
    assert "combined 3 shards of run github-4242-1: 6 new grades" in combined.stdout
    assert report.returncode == status, report.stdout + report.stderr

    # The same table, run line and verdict as the unsharded run printed.
    printed = [line for line in report.stdout.splitlines() if not line.startswith("cleo-grade:")]
    assert printed == _section(single.stdout)
    verdict = "gate FAILED: mean 70% is below 75% (B)" if status else "gate passed: mean 87.5%"
    assert any(line.startswith(verdict) for line in printed), printed
    # The same history, but for the shard fields.
    history = gate / ".cleo" / "metrics" / "GRADES.jsonl"
    assert _history(history) == _history(whole / ".cleo" / "metrics" / "GRADES.jsonl")
    # The same HTML verdict and tests.
    assert _html_verdict(gate / "cleo-report.html") == _html_verdict(whole / "cleo-report.html")
    assert "### cleo-grade" in summary.read_text()
    assert (gate / "cleo-junit.xml").read_text().count("<testcase") == 6

    # Combining the same shards again adds nothing.
    again = _run(gate_commands[0], gate, _env(tmp_path, **run))
    assert "0 new grades" in again.stdout and "0 new audit entries" in again.stdout
    assert len(history.read_text().splitlines()) == 6
