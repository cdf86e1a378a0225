"""The docs' advice a newcomer follows is right: tox passes GITHUB_STEP_SUMMARY on, the
recovery window is the specification's next 4 entries (not the guide's "within 5 ops")."""

from __future__ import annotations

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PYTEST_PAGE = (ROOT.parent / "docs" / "pytest.md").read_text(encoding="utf-8")
RUBRICS_PAGE = (ROOT.parent / "docs" / "rubrics.md").read_text(encoding="utf-8")


def test_the_tox_snippet_passes_the_step_summary_variable_on() -> None:
    block = PYTEST_PAGE.split("```ini\n[testenv]\n", 1)[1].split("```", 1)[0]
    parser = configparser.ConfigParser()
    parser.read_string("[testenv]\n" + block)
    assert parser.get("testenv", "pass_env").split() == ["GITHUB_STEP_SUMMARY"]


def test_the_recovery_window_is_stated_as_the_specifications_next_four_entries() -> None:
    from pytest_cleo_grade import grade_entries

    assert "within 5 ops" in RUBRICS_PAGE and "the next 4 entries" in RUBRICS_PAGE
    assert "a lookup as\n  the 5th entry after the miss is too late" in RUBRICS_PAGE

    def entry(op: str, second: int, exit_code: int = 0) -> dict[str, object]:
        return {
            "timestamp": f"2026-03-01T12:00:{second:02d}Z",
            "domain": "tasks",
            "operation": op,
            "result": {"success": exit_code == 0, "exitCode": exit_code},
        }

    fifth = [entry("show", 0, 4), *(entry("list", n) for n in (1, 2, 3, 4)), entry("find", 5)]
    fourth = [entry("show", 0, 4), *(entry("list", n) for n in (1, 2, 3)), entry("find", 4)]
    assert grade_entries(fifth, session_id="s").dimensions["errorProtocol"].score == 15
    assert grade_entries(fourth, session_id="s").dimensions["errorProtocol"].score == 20
