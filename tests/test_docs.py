"""The documentation cannot drift: the CLEO rules table quotes the rubric's own texts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUBRIC = (ROOT / "pytest_cleo_grade" / "rubrics" / "cleo.py").read_text(encoding="utf-8")


def table_texts() -> list[str]:
    page = (ROOT / "docs" / "rubrics.md").read_text(encoding="utf-8")
    section = page.split("## CLEO's rules", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    texts = []
    for row in rows[1:]:  # the header row names the columns
        last = row.rstrip(" |").rsplit("|", 1)[1]
        texts += re.findall(r"`([^`]+)`", last)
    return texts


def test_the_table_covers_every_dimension_and_quotes_twenty_two_texts() -> None:
    assert len(table_texts()) == 22


@pytest.mark.parametrize("text", table_texts())
def test_every_text_in_the_rules_table_is_the_rubrics_own(text: str) -> None:
    # <N>, <id> and <op> stand for values; the literal parts must be in the rubric's code.
    for part in re.split(r"<[A-Za-z]+>", text):
        assert part.strip() in RUBRIC, f"{part!r} is not in rubrics/cleo.py"


def _block_after(page: str, command: str) -> str:
    """The output shown under ``$ command`` in a fenced block of the page."""
    after = page.split(f"$ {command}\n", 1)[1]
    return after.split("\n```", 1)[0]


@pytest.mark.parametrize(
    "command",
    [
        "cleo-grade show --entries examples/sessions/agent-session.jsonl",
        "cleo-grade show --entries examples/sessions/support-session.jsonl --rubric rules "
        "--rubric-file examples/rubrics/support-rules.toml",
        "cleo-grade show --entries examples/sessions/support-session.jsonl --rubric trajectory "
        "--rubric-file examples/rubrics/support-trajectory.toml",
    ],
)
def test_the_show_transcripts_in_the_rubrics_page_are_real_output(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_cleo_grade.cli import main

    page = (ROOT / "docs" / "rubrics.md").read_text(encoding="utf-8")
    monkeypatch.chdir(ROOT)
    assert main(command.split()[1:]) == 0
    assert capsys.readouterr().out.rstrip("\n") == _block_after(page, command)
