"""The README's quick start and the pytest page show what a run of that quick start prints."""

from __future__ import annotations

import argparse
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYTEST_PAGE = (ROOT / "docs" / "pytest.md").read_text(encoding="utf-8")
OPTIONS = ("--cleo-grade-fail-under=B", "--cleo-grade-gate=B")
# The README's run was made in /tmp/qs; a session id is new in every run.
SESSION = re.compile(r"session-\d+-[0-9a-f]+")
SEPARATOR = re.compile(r"^[-=_]+ (.*) [-=_]+$")


def _fenced(page: str, opening: str) -> str:
    """The text of the fenced block that starts with the line ``opening`` (kept)."""
    start = page.index(opening)
    return page[start : page.index("\n```", start)]


def _normalised(text: str, rootdir: Path) -> list[str]:
    """Lines as two runs in other directories, at other widths and speeds, share them."""
    lines = []
    for line in text.splitlines():
        if line.startswith(("platform ", "rootdir:", "plugins:")):
            continue
        line = SESSION.sub("SESSION", line)
        line = line.replace(str(rootdir), "ROOT").replace("/tmp/qs", "ROOT")
        line = re.sub(r" in \d+\.\d+s\b", " in Ns", line)
        # A separator's width depends on the text it frames; the run's, on the terminal.
        line = SEPARATOR.sub(r"\1", line)
        lines.append(" ".join(line.split()))
    return lines


@pytest.fixture
def quick_start(pytester: pytest.Pytester) -> pytest.Pytester:
    source = README.split("```python\n# test_agent.py\n", 1)[1].split("```", 1)[0]
    pytester.makepyfile(test_agent=source)
    return pytester


def test_the_readme_shows_what_its_quick_start_prints(quick_start: pytest.Pytester) -> None:
    command = "$ pytest --cleo-grade-fail-under=B --cleo-grade-gate=B --junitxml=junit.xml\n"
    shown = README.split(command, 1)[1].split("\n$ echo $?", 1)[0]
    result = quick_start.runpytest(*OPTIONS, "--junitxml=junit.xml")
    assert result.ret == 1
    real = "\n".join(result.outlines)
    assert _normalised(real, quick_start.path) == _normalised(shown, quick_start.path)


def test_the_readmes_quiet_summary_is_the_one_line_a_quiet_run_prints(
    quick_start: pytest.Pytester,
) -> None:
    shown = README.split("With `-q` the summary is one line:\n\n```\n", 1)[1].split("\n```")[0]
    assert shown in quick_start.runpytest("-q", *OPTIONS).outlines


def test_the_step_summary_shown_is_the_quick_starts(
    quick_start: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = quick_start.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    quick_start.runpytest(*OPTIONS)
    shown = _fenced(PYTEST_PAGE, "### cleo-grade\n")
    assert summary.read_text(encoding="utf-8").rstrip("\n") == shown


def test_the_junit_properties_table_names_every_property_a_graded_test_carries(
    quick_start: pytest.Pytester,
) -> None:
    quick_start.runpytest(*OPTIONS, "--junitxml=junit.xml")
    case = ET.parse(quick_start.path / "junit.xml").find(".//testcase[@name='test_hasty_agent']")
    assert case is not None
    names = {
        re.sub(r"^cleo_dim_.*", "cleo_dim_<dimension>", p.get("name", ""))
        for p in case.iter("property")
    }
    section = PYTEST_PAGE.split("## JUnit XML", 1)[1].split("\n## ", 1)[0]
    table = re.findall(r"^\| `(cleo_[^`]+)` \|", section, flags=re.MULTILINE)
    # The table's last rows are properties of other rubrics and of comparison tests, and
    # cleo_reason is a test's that could not be graded.
    assert names == set(table) - {"cleo_rubric", "cleo_variant", "cleo_reason"}


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return found


def _commands() -> dict[str, argparse.ArgumentParser]:
    from pytest_cleo_grade.cli.main import build_parser

    return _subcommands(build_parser())


def test_the_cli_page_has_a_row_for_every_command() -> None:
    cli_page = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    rows = "\n".join(line for line in cli_page.splitlines() if line.startswith("| `cleo-grade"))
    missing = [name for name in _commands() if f"`cleo-grade {name} " not in rows]
    assert missing == []


def test_every_option_of_every_command_is_documented() -> None:
    docs = README + "".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md"))
    # Each option is documented under one of its long names (an alias may stay unnamed).
    undocumented = [
        f"{name} {'/'.join(longs)}"
        for name, command in _commands().items()
        # A command's own actions (``baseline save``...) too.
        for parser in (command, *_subcommands(command).values())
        for action in parser._actions
        if (longs := [o for o in action.option_strings if o.startswith("--") and o != "--help"])
        and not any(option in docs for option in longs)
    ]
    assert undocumented == []


def test_the_top_level_help_names_cleos_own_spellings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_cleo_grade.cli import main

    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "`cleo-grade --list`" in out
    assert "`cleo-grade SESSION_ID` grades" in out
