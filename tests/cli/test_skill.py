"""``cleo-grade skill``: the ct-grade skill file, and every command it shows, run."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.cli.main import build_parser
from pytest_cleo_grade.cli.skill import skill_text

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
VARIABLES = ("CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID", "CLEO_SESSION_ID", "CLEO_AUDIT_DB")
SKILL = skill_text()


def cli(*args: str, cwd: Path) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with redirect_stdout(out), redirect_stderr(err):
            status = main(list(args))
    finally:
        os.chdir(previous)
    return status, out.getvalue(), err.getvalue()


def fenced(language: str) -> str:
    (block,) = re.findall(rf"^```{language}\n(.*?)^```$", SKILL, flags=re.MULTILINE | re.DOTALL)
    return str(block)


def front_matter(text: str) -> dict[str, str]:
    head = text.split("---\n")[1]
    return dict(line.split(": ", 1) for line in head.splitlines())


def test_skill_prints_the_shipped_file_with_its_front_matter(tmp_path: Path) -> None:
    status, out, err = cli("skill", cwd=tmp_path)
    assert (status, err) == (0, "")
    assert out == SKILL
    meta = front_matter(out)
    assert meta["name"] == "ct-grade"
    assert meta["description"].startswith("Grade an agent session against CLEO's")


def test_install_writes_the_agent_skills_layout_and_replaces_an_older_copy(
    tmp_path: Path,
) -> None:
    skills = tmp_path / ".claude" / "skills"
    target = skills / "ct-grade" / "SKILL.md"
    target.parent.mkdir(parents=True)
    target.write_text("an older copy")
    status, out, _ = cli("skill", "--install", str(skills), cwd=tmp_path)
    assert status == 0
    assert out == f"{target}: ct-grade skill installed\n"
    assert target.read_text() == SKILL


def test_install_into_a_file_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "skills").write_text("not a folder")
    status, out, err = cli("skill", "--install", str(tmp_path / "skills"), cwd=tmp_path)
    assert (status, out) == (2, "")
    assert err == f"cleo-grade skill: --install {tmp_path / 'skills'}: not a directory\n"


def test_every_inline_command_the_skill_names_is_one_the_cli_takes() -> None:
    commands = re.findall(r"`(cleo-grade [^`]*)`", SKILL)
    assert len(commands) >= 3
    parser = build_parser()
    for command in commands:
        argv = shlex.split(command.replace("SESSION_ID", "session-1"))[1:]
        if "--help" in argv:
            continue
        parser.parse_args(argv)  # a CommandError (exit 2) fails the test


def test_every_flag_the_table_names_is_one_the_rubric_raises() -> None:
    source = (ROOT / "pytest_cleo_grade" / "rubrics" / "cleo.py").read_text()
    table = SKILL.split("## What each flag asks the agent to change", 1)[1]
    cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    assert len(cells) == 9
    for cell in cells:
        for flag in re.findall(r"`([^`]+)`", cell):
            for fragment in re.split(r"\.\.\.|\bN(?=x)", flag):
                assert fragment.strip() in source, (flag, fragment)


@pytest.mark.e2e
def test_the_cli_block_runs_in_bash_and_grades_the_session_it_started(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    script = "set -euo pipefail\n" + fenced("bash")
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Score:      90/100  (90%, grade A)" in done.stdout
    graded = json.loads(done.stdout[done.stdout.rindex("\n{") :])
    assert (graded["totalScore"], graded["entryCount"], graded["grade"]) == (90, 5, "A")
    assert graded.get("taskId") is None
    listing = [line for line in done.stdout.splitlines() if line.startswith(graded["sessionId"])]
    assert len(listing) == 1 and "90/100" in listing[0]


def test_the_mcp_calls_the_skill_shows_succeed_on_the_server(tmp_path: Path) -> None:
    pytest.importorskip("mcp.server.mcpserver", reason="needs the mcp extra (MCP SDK 2.x)")
    import anyio
    from mcp import Client

    from pytest_cleo_grade.cli._gateway import Gateway
    from pytest_cleo_grade.cli._mcp_app import build_server

    calls = [json.loads(line) for line in fenced("json").splitlines()]
    (read,) = re.findall(r"^cleo_query (\{.*\})$", SKILL, flags=re.MULTILINE)
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        server = build_server(Gateway(build_parser().parse_args(["mcp"]), env={}))
    finally:
        os.chdir(previous)

    async def run() -> list[dict[str, Any]]:
        answers = []
        async with Client(server) as client:
            for each in calls:
                result = await client.call_tool(each["tool"], each["arguments"])
                answers.append(json.loads(result.content[0].text))
            session_id = answers[0]["data"]["sessionId"]
            arguments = json.loads(read.replace("<id>", session_id))
            result = await client.call_tool("cleo_query", arguments)
            answers.append(json.loads(result.content[0].text))
        return answers

    answers = anyio.run(run)
    assert [a["success"] for a in answers] == [True] * 4
    started, ended, listed, graded = answers
    assert started["data"]["scope"] == "epic:T001"
    assert ended["data"]["sessionId"] == graded["data"]["sessionId"]
    assert [g["sessionId"] for g in listed["data"]] == [ended["data"]["sessionId"]]


def test_the_front_matter_is_yaml_an_agent_reads() -> None:
    yaml = pytest.importorskip("yaml", reason="PyYAML reads the front matter as agents do")
    meta = yaml.safe_load(SKILL.split("---\n")[1])
    assert meta == front_matter(SKILL)
