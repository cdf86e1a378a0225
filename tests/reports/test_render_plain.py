"""The grade report found plain by one search of it is the report escaped piece by piece."""

from __future__ import annotations

import itertools

import pytest

from pytest_cleo_grade.core._text import terminal_text
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.reports import _display
from pytest_cleo_grade.reports._display import render_grade

#: Text an agent may put in any field of its grade, each needing an escape but the first.
_TEXTS = (
    "plain words",
    "a\nforged line",
    "tab\there",
    "\x1b[31mred",
    "\x85",
    "\u202eevil",
    "\ud800",
)


def _grade(session: str, task: str | None, name: str, evidence: str, flag: str) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": session,
            "taskId": task,
            "totalScore": 30,
            "maxScore": 40,
            "dimensions": {
                name: DimensionScore(score=10, max=20, evidence=[evidence, "more"]),
                "taskHygiene": DimensionScore(score=20, max=20),
            },
            "flags": [flag, "second flag"],
            "timestamp": "2026-03-01T12:00:00.000Z",
            "entryCount": 4,
        }
    )


@pytest.mark.parametrize("field", range(5))
@pytest.mark.parametrize("text", _TEXTS, ids=repr)
def test_a_report_is_the_report_escaped_piece_by_piece(field: int, text: str) -> None:
    pieces = ["s-1", "T-1", "sessionDiscipline", "an observation", "a flag"]
    pieces[field] = text
    result = _grade(*pieces)
    escaped = _display._render(result, terminal_text)
    assert render_grade(result) == escaped
    if text != "plain words":
        assert text not in escaped  # each really needed its escape


def test_a_grade_without_task_flags_or_evidence_renders_as_before() -> None:
    for task, flags, evidence in itertools.product((None, "T\n2"), ([], ["f\tg"]), ([], ["e"])):
        result = GradeResult.model_validate(
            {
                **_grade("s", task, "d", "x", "y").model_dump(by_alias=True),
                "flags": flags,
                "dimensions": {"d\n": DimensionScore(score=1, max=2, evidence=evidence)},
            }
        )
        assert render_grade(result) == _display._render(result, terminal_text)


def test_terminal_text_escapes_every_character_it_escaped_before_its_shortcut() -> None:
    # The shortcut (printable ASCII) must let through only what the table leaves alone.
    from pytest_cleo_grade.core import _text

    table = _text._escape_table()
    for code in [*range(0x3000), *range(0xD7F0, 0xE010), 0xFEFF, 0x1F600]:
        text = f"a{chr(code)}b"
        assert terminal_text(text) == text.translate(table), hex(code)
        assert _text.needs_escape_but_newline(text) == (
            code != 0x0A and text.translate(table) != text
        ), hex(code)
