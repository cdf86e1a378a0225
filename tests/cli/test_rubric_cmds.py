"""``cleo-grade rubrics`` and the --rubric/judge options, on a parser of their own."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import _rubric_args as rubric_args
from pytest_cleo_grade.cli import rubrics as rubric_cmds
from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.rubrics.cleo import CLEO_DIMENSIONS
from pytest_cleo_grade.rubrics.registry import grade_with_rubric
from tests.entries import NOW, entry
from tests.fake_judge import FakeJudgeServer, Reply, serve
from tests.rubrics.test_weighted_file import RUBRIC_TOML


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="cleo-grade")
    subparsers = root.add_subparsers(dest="command")
    rubric_cmds.register(subparsers)
    grade = subparsers.add_parser("grade")
    rubric_args.add_rubric_options(grade)
    return root


def run(*argv: str) -> int:
    args = parser().parse_args(argv)
    status: int = args.handler(args)
    return status


@pytest.fixture
def server() -> Iterator[FakeJudgeServer]:
    yield from serve()


def test_rubrics_lists_the_default_first_with_versions_and_maxima(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run("rubrics") == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "cleo 1.0.0 (default): sessionDiscipline 20, discoveryEfficiency 20, taskHygiene 20, "
        "errorProtocol 20, disclosureUse 20"
    )
    assert lines[-1].startswith("weighted 1.0.0: goal_achievement 30, tool_efficiency 20")


def test_rubrics_json_describes_every_rubric(capsys: pytest.CaptureFixture[str]) -> None:
    run("rubrics", "--json")
    data = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["default"]) for r in data] == [
        ("cleo", True),
        ("comparison", False),
        ("rules", False),
        ("trajectory", False),
        ("weighted", False),
    ]
    assert data[1]["dimensions"] == {"structural": 6, "substantive": 30}
    assert data[2]["dimensions"] == dict.fromkeys(CLEO_DIMENSIONS, 20)
    assert data[3]["dimensions"] == {"trajectory": 100}
    assert sum(data[4]["dimensions"].values()) == 100


def test_rubrics_check_validates_a_file_and_shows_its_dimensions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(RUBRIC_TOML)
    assert run("rubrics", "--check", str(path)) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{path}: ok (release-review 2.1.0)"
    assert out[1].split() == ["shipped", "categorical", "0.5", "no", "<", "broken", "<", "yes"]
    assert out[3].split() == ["speed", "numeric", "0.2", "1..5"]


def test_rubrics_check_of_an_invalid_file_raises_the_rubric_error(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(RUBRIC_TOML.replace("weight = 0.2", "weight = 0.3"))
    with pytest.raises(RubricError, match=r"weights must sum to 1, they sum to 1\.1"):
        run("rubrics", "--check", str(path))


def test_grade_options_default_to_the_cleo_rubric_with_the_cache_on() -> None:
    args = parser().parse_args(["grade"])
    config = rubric_args.rubric_config_from_args(args, cache_path=None)
    assert args.rubric == "cleo"
    assert config.cache_mode == "on"
    assert config.rubric_file is None
    assert config.judge_overrides == {}


def test_grade_options_configure_a_weighted_grade_against_an_endpoint(
    tmp_path: Path, server: FakeJudgeServer
) -> None:
    rubric = tmp_path / "rubric.json"
    rubric.write_text('{"dimensions": [{"name": "done", "type": "numeric", "weight": 1}]}')
    server.default = Reply('{"done": {"score": 0.9, "evidence": ["#1"]}}')
    args = parser().parse_args(
        [
            "grade",
            "--rubric",
            "weighted",
            "--rubric-file",
            str(rubric),
            "--judge-url",
            server.base_url,
            "--judge-model",
            "m",
            "--judge-cache",
            "refresh",
            "--task",
            "Close the ticket",
        ]
    )
    store = tmp_path / "audit.db"
    result = grade_with_rubric(
        args.rubric,
        [entry("tasks", "complete")],
        session_id="s1",
        now=NOW,
        config=rubric_args.rubric_config_from_args(args, cache_path=store),
        context=rubric_args.grade_context_from_args(args, task_id="T1"),
    )
    assert result.total_score == 90.0
    assert result.letter == "A"
    assert result.task_id == "T1"
    assert "Close the ticket" in server.received[0].prompt
    assert server.received[0].body["model"] == "m"
    assert store.exists()
