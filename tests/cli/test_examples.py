"""What the docs point to, a user has: ``cleo-grade examples`` writes every example file the docs
name (the package ships them), the comparison's whole score sheet is one of them, and messages
link the published documentation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.cli.examples import example_files

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A file a page names that a user without a checkout needs to run what the page shows.
NAMED = re.compile(
    r"(examples/(?:sessions|rubrics|comparison)/[\w.-]+\.(?:jsonl|toml)"
    r"|docs/examples/weighted-rubric\.toml|tests/fake_(?:judge|langfuse)\.py)"
)


def test_every_example_file_the_docs_name_ships_with_the_package() -> None:
    shipped = {name for name, _ in example_files()}
    named = {match for page in PAGES for match in NAMED.findall(page.read_text("utf-8"))}
    assert named, "the pattern finds the docs' example files"
    assert sorted(named - shipped) == []


def test_the_shipped_examples_are_the_checkouts_files_byte_for_byte() -> None:
    for name, data in example_files():
        assert (ROOT / name).read_bytes() == data, f"{name}: the package's copy differs"


def test_the_examples_command_writes_them_where_the_docs_commands_find_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["examples"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cleo-grade: wrote 10 example files under cleo-grade-examples:\n")
    written = tmp_path / "cleo-grade-examples"
    assert (written / "tests" / "fake_judge.py").read_bytes() == (
        ROOT / "tests" / "fake_judge.py"
    ).read_bytes()
    # A docs command, run from there.
    monkeypatch.chdir(written)
    entries = "examples/sessions/support-session.jsonl"
    rules = "examples/rubrics/support-rules.toml"
    assert main(["show", "--entries", entries, "--rubric", "rules", "--rubric-file", rules]) == 0
    assert "tool.refund" in capsys.readouterr().out
    # Never over a file of the user's.
    (written / "examples" / "sessions" / "agent-session.jsonl").write_text("mine")
    monkeypatch.chdir(tmp_path)
    assert main(["examples"]) == 2
    assert "exists: nothing written" in capsys.readouterr().err
    assert (written / "examples" / "sessions" / "agent-session.jsonl").read_text() == "mine"


def test_the_comparison_pages_transcript_is_the_shipped_sheets_real_output(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    page = (ROOT / "docs" / "comparison.md").read_text("utf-8")
    for sheet, status in (("scores.toml", 0), ("scores-nogo.toml", 1)):
        command = f"$ cleo-grade compare --baseline sonnet --candidate haiku --sheet {sheet}\n"
        shown = page.split(command, 1)[1].split("$ echo $?", 1)[0]
        monkeypatch.chdir(ROOT / "examples" / "comparison")
        args = ["compare", "--baseline", "sonnet", "--candidate", "haiku", "--sheet", sheet]
        assert main(args) == status
        assert capsys.readouterr().out == shown


def test_nothing_was_captured_links_the_published_page_of_what_to_check() -> None:
    from pytest_cleo_grade.core._links import DOCS_URL
    from pytest_cleo_grade.grading._grader import NOTHING_CAPTURED

    link = f"{DOCS_URL}/capture.md#my-test-recorded-nothing"
    assert NOTHING_CAPTURED.endswith(link)
    assert "docs/capture.md" not in NOTHING_CAPTURED.replace(DOCS_URL, "")
    # The anchor is the page's heading.
    assert "\n### My test recorded nothing\n" in (ROOT / "docs" / "capture.md").read_text("utf-8")
