"""``cleo-grade grade --rubric``: a non-default rubric from the command line, end to end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cleo_grade import read_grades
from pytest_cleo_grade.cli import main
from tests.entries import sequence
from tests.fake_judge import FakeJudgeServer, Reply


@pytest.fixture
def server() -> Iterator[FakeJudgeServer]:
    with FakeJudgeServer() as fake:
        yield fake


def entries_file(tmp_path: Path) -> Path:
    path = tmp_path / "e.jsonl"
    rows = sequence(("session", "list"), ("tasks", "find"), ("session", "end"))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_grading_with_the_weighted_rubric_uses_the_judge_and_saves_the_rubric(
    tmp_path: Path, server: FakeJudgeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    rubric = tmp_path / "rubric.json"
    rubric.write_text('{"dimensions": [{"name": "done", "type": "numeric", "weight": 1}]}')
    server.default = Reply('{"done": {"score": 0.7, "evidence": ["closed it"]}}')
    history = tmp_path / "GRADES.jsonl"
    argv = [
        "grade",
        "--entries",
        str(entries_file(tmp_path)),
        "--rubric",
        "weighted",
        "--rubric-file",
        str(rubric),
        "--judge-url",
        server.base_url,
        "--judge-model",
        "judge-1",
        "--task",
        "Close the ticket",
        "--history",
        str(history),
        "--json",
        "--fail-under",
        "B",
    ]
    assert main(argv) == 1  # 70 % is a C
    data = json.loads(capsys.readouterr().out)
    assert (data["totalScore"], data["grade"], data["rubric"]) == (70.0, "C", "weighted")
    assert server.received[0].body["model"] == "judge-1"
    assert "Close the ticket" in server.received[0].prompt
    saved = read_grades(history)
    assert saved[0].model_extra is not None and saved[0].model_extra["rubric"] == "weighted"


def test_an_unknown_rubric_is_a_usage_error_listing_the_available_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    status = main(["grade", "--entries", str(entries_file(tmp_path)), "--rubric", "nope"])
    err = capsys.readouterr().err
    assert status == 2
    assert err.count("\n") == 1
    available = "cleo, comparison, rules, trajectory, weighted"
    assert f"unknown rubric 'nope'; available rubrics: {available}" in err
    assert not (tmp_path / ".cleo").exists()


RULE_FILE = Path(__file__).resolve().parents[2] / "examples" / "rubrics" / "support-rules.toml"


@pytest.mark.parametrize(
    ("command", "rubric", "message"),
    [
        ("grade", [], "rubric 'cleo' reads no rubric file; name the rubric it is for"),
        ("show", [], "rubric 'cleo' reads no rubric file; name the rubric it is for"),
        (
            "grade",
            ["--rubric", "cleo:1,trajectory:1"],
            "no part of rubric 'cleo:0.5,trajectory:0.5' reads it (a rule file: it is for rules)",
        ),
    ],
)
def test_a_rubric_file_no_rubric_reads_is_refused_not_ignored(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
    rubric: list[str],
    message: str,
) -> None:
    argv = [command, "--entries", str(entries_file(tmp_path)), *rubric]
    save = ["--no-save"] if command == "grade" else []
    assert main([*argv, *save, "--rubric-file", str(RULE_FILE)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_judge_that_cannot_be_reached_is_a_clean_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with FakeJudgeServer() as fake:
        url = fake.base_url  # closed on exit: nothing listens there any more
    rubric = tmp_path / "rubric.json"
    # No retries: the refused connection is the error under test, not the backoff before it.
    rubric.write_text(
        '{"judge": {"retries": 0}, '
        '"dimensions": [{"name": "done", "type": "numeric", "weight": 1}]}'
    )
    code = main(
        [
            "grade",
            "--entries",
            str(entries_file(tmp_path)),
            "--rubric",
            "weighted",
            "--rubric-file",
            str(rubric),
            "--judge-url",
            url,
            "--judge-model",
            "judge-1",
            "--no-save",
        ]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and url in err


@pytest.mark.parametrize(
    ("given", "missing"),
    [
        pytest.param(["--judge-url", "http://127.0.0.1:9"], "model", id="no model"),
        pytest.param(["--judge-model", "judge-1"], "url", id="no url"),
    ],
)
def test_a_judge_without_its_endpoint_says_which_option_sets_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: list[str], missing: str
) -> None:
    # The message told a command-line user to "pass a judge" (a Python argument).
    rubric = tmp_path / "rubric.json"
    rubric.write_text('{"dimensions": [{"name": "done", "type": "numeric", "weight": 1}]}')
    argv = ["grade", "--entries", str(entries_file(tmp_path)), "--rubric", "weighted"]
    assert main([*argv, "--rubric-file", str(rubric), *given]) == 2
    key = "base_url" if missing == "url" else "model"
    assert capsys.readouterr().err == (
        f"cleo-grade: error: judge.{key} is not set: set {key} in the rubric file's [judge] "
        f"table, or pass --judge-{missing} (cleo-grade) or --cleo-grade-judge-{missing} (pytest)\n"
    )
