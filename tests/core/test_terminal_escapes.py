"""Terminal output escapes the agent's control characters: one function in display.py, used by
the plugin's summary and failure message and by the CLI (issue 10, item 14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core._text import _escape_table, terminal_text
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.reports._display import render_grade
from pytest_cleo_grade.store.history import append_grade
from tests.entries import sequence
from tests.plugin_suites import make_suite

#: Control characters an agent can put in its own data, and what reaches the terminal.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31m\u202e\r\n#99 forged line\x00\x7f\ud800"
SHOWN = "\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\u202e\\r\\n#99 forged line\\x00\\x7f\\ud800"


def is_clean(text: str) -> bool:
    """No control character but the layout's own newlines."""
    return not any(
        (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0 or c in "\u202e\u2028" for c in text
    ) and not any(0xD800 <= ord(c) < 0xE000 for c in text)


def test_terminal_text_escapes_controls_and_keeps_other_text() -> None:
    assert terminal_text(HOSTILE) == SHOWN
    assert terminal_text("tâche ☃ 任务 \\ plain") == "tâche ☃ 任务 \\ plain"


def test_every_character_is_escaped_exactly_when_it_needs_to_be() -> None:
    # Text with nothing to escape skips the translation (a search first): that search must
    # find each character the escapes name, and nothing else, also amid plain text.
    escapes = _escape_table()
    assert len(escapes) == 32 + 33 + 7 + 4 + 2048  # C0; DEL and C1; U+2028 to U+202E; ...
    kept = [code for code in range(0x110000) if terminal_text(chr(code)) == chr(code)]
    assert len(kept) == 0x110000 - len(escapes)
    assert not set(kept) & escapes.keys()
    for code, escape in escapes.items():
        assert terminal_text(f"plain {chr(code)} text") == f"plain {escape} text", hex(code)


def hostile_grade(session: str = "s1", hostile: str = HOSTILE) -> GradeResult:
    return GradeResult(
        sessionId=session + hostile,
        totalScore=40,
        maxScore=100,
        dimensions={
            "steps" + hostile: DimensionScore(score=40, max=100, evidence=["saw " + hostile])
        },
        flags=["flag " + hostile],
        timestamp="2026-03-01T12:00:00Z",
        entryCount=3,
        taskId="T1" + hostile,
    )


def test_the_grade_report_escapes_every_agent_field() -> None:
    text = render_grade(hostile_grade())
    assert is_clean(text)
    assert text.count(SHOWN) == 5  # session, task, dimension, evidence, flag
    assert "\n#99 forged line" not in text


def test_cli_list_and_json_outputs_carry_no_raw_controls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    history = tmp_path / "GRADES.jsonl"
    # A lone surrogate cannot be written to the history; everything else can.
    append_grade(hostile_grade(hostile=HOSTILE[:-1]), history)
    for argv in (["list"], ["list", "--json"], ["query", "admin", "grade.list"]):
        assert main([*argv, "--history", str(history)]) == 0
        out, err = capsys.readouterr()
        assert is_clean(out) and is_clean(err), argv
        if "--json" in argv or "query" in argv:
            assert json.loads(out)[0]["sessionId"] == "s1" + HOSTILE[:-1]


def test_cli_grade_and_errors_carry_no_raw_controls(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    entries = sequence(("session", "list"), ("tasks", "find"))
    for item in entries:
        item["sessionId"] = "s" + HOSTILE[:-1]
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    assert main(["grade", "--entries", str(path), "--no-save"]) == 0
    out, err = capsys.readouterr()
    assert is_clean(out) and is_clean(err)
    assert SHOWN[:-8] in out
    bad = tmp_path / "bad\x1b[2J\x9b31m\u202e\n.jsonl"  # what a file name can hold
    bad.write_text("{broken\n")
    assert main(["import", str(bad), "--db", str(tmp_path / "a.db")]) == 2
    out, err = capsys.readouterr()
    assert is_clean(err) and len(err.splitlines()) == 1


RUBRIC = """
from pytest_cleo_grade.core.models import DimensionScore, GradeResult

HOSTILE = {hostile!r}


class Hostile:
    name = "hostile"
    version = "0.1"
    dimensions = {{"steps": 100}}

    def grade(self, entries, *, session_id, now=None, context=None):
        return GradeResult(
            sessionId=session_id,
            totalScore=40,
            maxScore=100,
            dimensions={{"steps": DimensionScore(score=40, max=100, evidence=["saw" + HOSTILE])}},
            flags=["flag" + HOSTILE],
            timestamp="2026-01-01T00:00:00Z",
            entryCount=len(list(entries)),
        )


def cleo_grade_register_rubrics(register):
    register(Hostile())
"""


def test_the_plugin_failure_message_and_summary_carry_no_raw_controls(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(RUBRIC.format(hostile=HOSTILE[:-1]))
    make_suite(
        pytester,
        "@pytest.mark.cleo_grade(fail_under='A')\n"
        "def test_agent(graded_session):\n    seventy_five(graded_session)\n",
    )
    result = pytester.runpytest("--cleo-grade-rubric=hostile")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "flag" + SHOWN[:-8] in output
    assert is_clean(output)
