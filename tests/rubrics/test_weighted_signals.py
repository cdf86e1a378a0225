"""Automatic signals beside the judged dimensions (the Enhanced Scoring System Design's
"partial auto-signals"): counted from the log, given to the judge as facts, shown beside its
scores, and a judged score they contradict is flagged."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_cleo_grade.core.models import AuditEntry, GradeResult, order_entries
from pytest_cleo_grade.reports._display import render_grade
from pytest_cleo_grade.reports._points import render_session
from pytest_cleo_grade.rubrics.weighted._signals import auto_signals
from pytest_cleo_grade.rubrics.weighted.rubric import WeightedJudgeRubric
from tests.entries import NOW, entry
from tests.fake_judge import verdict_json

#: A session that retries a failing call twice, re-reads a file, lists twice and finds
#: once, and ends on an error nothing recovers from.
LOG = [
    entry("tasks", "list", at=0),
    entry("tasks", "list", at=1),
    entry("tasks", "find", at=2, params={"query": "login"}),
    entry("tool", "Read", at=3, params={"path": "src/app.py"}),
    entry("tool", "Read", at=4, params={"path": "src/app.py"}),
    entry("tool", "Read", at=5, params={"path": "src/app.py"}),
    entry("tasks", "show", at=6, params={"taskId": "T9"}, success=False, exit_code=4),
    entry("tasks", "show", at=7, params={"taskId": "T9"}, success=False, exit_code=4),
    entry("tasks", "show", at=8, params={"taskId": "T9"}, success=False, exit_code=4),
]


class Judge:
    def __init__(self, **scores: Any) -> None:
        self.reply = verdict_json(**scores)
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        return self.reply


def grade(judge: Judge, entries: list[dict[str, Any]] = LOG) -> GradeResult:
    return WeightedJudgeRubric(judge=judge).grade(entries, session_id="s1", now=NOW)


def test_the_counts_are_what_the_log_proves() -> None:
    signals = auto_signals(order_entries([AuditEntry.model_validate(e) for e in LOG]))
    assert signals.counts() == {
        "retries": 2,
        "repeatedReads": 2,  # src/app.py read three times (a failed show read nothing)
        "listCalls": 2,
        "findCalls": 1,
        "errors": 3,
        "errorsWithoutRecovery": 3,
    }
    assert (signals.retries, signals.repeated_reads) == ((7, 8), (4, 5))


def test_an_error_followed_by_a_success_within_four_calls_is_recovered() -> None:
    entries = [
        AuditEntry.model_validate(e)
        for e in (
            entry("tasks", "show", at=0, success=False, exit_code=4),
            entry("tasks", "find", at=1),
        )
    ]
    assert auto_signals(entries).counts()["errorsWithoutRecovery"] == 0


def test_every_weighted_grade_carries_the_counts_and_the_judge_is_given_them_as_facts() -> None:
    judge = Judge()
    result = grade(judge)
    assert result.model_extra is not None
    assert result.model_extra["autoSignals"]["retries"] == 2
    prompt = judge.prompts[0]
    facts = prompt.index("Facts the grader counted from the whole log")
    assert facts < prompt.index("Dimensions:")
    # The counts as one JSON object between fences: data, not instructions.
    lines = prompt[facts:].splitlines()
    assert lines[1] == "```json"
    assert json.loads(lines[2]) == result.model_extra["autoSignals"]
    assert lines[3] == "```"


def test_the_signals_stand_beside_the_judged_scores_in_the_grade_and_in_show() -> None:
    result = grade(Judge())
    assert result.dimensions["tool_efficiency"].evidence[-2:] == [
        "auto-signal: 2 retries of a failed call (#7, #8)",
        "auto-signal: 2 list calls, 1 find call",
    ]
    assert result.dimensions["context_efficiency"].evidence[-1] == (
        "auto-signal: 2 repeated reads (#4, #5)"
    )
    assert "auto-signal: 3 errors without recovery (#6, #7, #8)" in render_grade(result)
    # Zero-point items naming the calls: cleo-grade show puts them on the calls' lines.
    entries = order_entries([AuditEntry.model_validate(e) for e in LOG])
    shown = render_session(result, entries).splitlines()
    line_8 = next(line for line in shown if line.startswith("#8 "))
    assert "tool_efficiency.signal.retries 0 (shared by 2 calls)" in line_8
    assert "error_handling.signal.unrecovered 0 (shared by 3 calls)" in line_8
    # They never change a score: the dimension's points still sum to the judge's.
    for name, dimension in result.dimensions.items():
        assert sum(p.points for p in result.points if p.dimension == name) == dimension.score


@pytest.mark.parametrize(
    ("scores", "flag"),
    [
        pytest.param(
            {"tool_efficiency": 0.95},
            "auto-signal contradicts the judge: tool_efficiency judged 0.95 of 1, but the log "
            "shows 2 retries of a failed call (#7, #8)",
            id="optimal-tools-with-retries",
        ),
        pytest.param(
            {"context_efficiency": 1.0},
            "auto-signal contradicts the judge: context_efficiency judged 1.00 of 1, but the "
            "log shows 2 repeated reads (#4, #5)",
            id="minimal-context-with-re-reads",
        ),
        pytest.param(
            {"error_handling": "prevented"},
            "auto-signal contradicts the judge: error_handling judged its best category, but "
            "the log shows 3 failed calls (#6, #7, #8)",
            id="prevented-with-errors",
        ),
        pytest.param(
            {"error_handling": "recovered"},
            "auto-signal contradicts the judge: error_handling judged a recovery, but the log "
            "shows 3 errors without recovery (#6, #7, #8)",
            id="recovered-without-recovery",
        ),
    ],
)
def test_a_judged_score_a_signal_contradicts_is_flagged(scores: dict[str, Any], flag: str) -> None:
    # The defaults of the other dimensions contradict nothing here but error_handling's.
    base = {"error_handling": "poor", **scores}
    assert grade(Judge(**base)).flags == [flag]


def test_a_poor_error_handling_score_for_a_session_without_errors_is_flagged() -> None:
    clean = [entry("tasks", "find", at=0), entry("tasks", "show", at=1)]
    result = grade(Judge(error_handling="poor"), clean)
    assert result.flags == [
        "auto-signal contradicts the judge: error_handling judged its worst category, but the "
        "log shows no failed call at all"
    ]


def test_scores_the_signals_agree_with_raise_no_flag() -> None:
    assert grade(Judge(error_handling="poor", tool_efficiency=0.3)).flags == []
