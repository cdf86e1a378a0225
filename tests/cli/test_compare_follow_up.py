"""``cleo-grade compare`` reaches a final decision: the follow-up round after a CONDITIONAL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.rubrics.comparison import comparison_grade
from pytest_cleo_grade.rubrics.comparison.scores import METRIC_IDS, Mode
from pytest_cleo_grade.store.history import append_grade
from tests.cli.test_compare import ENTRIES, compare, scores, write_history
from tests.entries import NOW
from tests.rubrics.test_comparison_structural import GOOD_OUTPUT

# Two thorough queries 1.17 below the baseline (Degraded): CONDITIONAL [M6], exit 3.
CONDITIONAL = [24, 24, 24, 17, 17]


def add_follow_up(path: Path, totals: dict[str, tuple[Mode, int]]) -> None:
    """The additional queries, named as the follow-up round; sonnet scores 24 on each."""
    for query, (mode, total) in totals.items():
        for variant, value in (("sonnet", 24), ("haiku", total)):
            append_grade(
                comparison_grade(
                    ENTRIES,
                    GOOD_OUTPUT,
                    mode,
                    dict(zip(METRIC_IDS, scores(value), strict=True)),
                    session_id=f"{variant}-{query}",
                    variant=variant,
                    query=query,
                    now=NOW,
                    round="follow-up",
                ),
                path,
            )


def test_without_a_follow_up_round_conditional_asks_for_three_more_queries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", CONDITIONAL)
    assert main(compare(history)) == 3
    out = capsys.readouterr().out
    assert "Decision: CONDITIONAL [M6]" in out
    assert "run 3 more queries before the final decision" in out
    assert "Round:" not in out  # no follow-up round: the report is unchanged


def test_three_equivalent_follow_up_queries_make_the_final_decision_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", CONDITIONAL)
    add_follow_up(
        history, {"TQ-6": ("quick", 24), "TQ-7": ("medium", 24), "TQ-8": ("thorough", 24)}
    )
    assert main(compare(history)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].split() == ["Query", "Mode", "sonnet", "haiku", "Diff", "Verdict", "Round"]
    assert lines[3].split()[-1] == "original"
    assert lines[8].split() == ["TQ-6", "quick", "4.00", "4.00", "0.00", "Equivalent", "follow-up"]
    assert "Decision: GO (with monitoring note) [F1]" in lines
    assert (
        "Reason:   5 original + 3 follow-up queries: CONDITIONAL over both rounds (6/8 OK, "
        "2 Degraded, all in thorough mode: TQ-4 (thorough), TQ-5 (thorough)); the follow-up "
        "round has no Degraded query"
    ) in lines
    assert "Round:    the decision rests on the follow-up round (TQ-6, TQ-7, TQ-8); final" in lines


def test_a_degraded_follow_up_query_makes_the_final_decision_no_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # One more thorough Degraded among the follow-ups: 3 Degraded is no CONDITIONAL row (M7).
    history = write_history(tmp_path / "GRADES.jsonl", CONDITIONAL)
    add_follow_up(
        history, {"TQ-6": ("quick", 24), "TQ-7": ("medium", 24), "TQ-8": ("thorough", 17)}
    )
    assert main(compare(history, "--json")) == 1
    decision = json.loads(capsys.readouterr().out)["decision"]
    assert (decision["decision"], decision["rule"], decision["round"], decision["final"]) == (
        "NO-GO",
        "M7",
        "original + follow-up",
        True,
    )


def test_the_conservative_tie_break_settles_a_conditional_the_follow_up_repeats(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Original: one thorough Degraded of 5 (GO with monitoring). Follow-up: one more
    # thorough Degraded: both rounds together are CONDITIONAL, and the follow-up round
    # repeats the degradation, so the final decision is the conservative one.
    history = write_history(tmp_path / "GRADES.jsonl", [24, 24, 24, 24, 17])
    add_follow_up(
        history, {"TQ-6": ("quick", 24), "TQ-7": ("medium", 24), "TQ-8": ("thorough", 17)}
    )
    assert main(compare(history)) == 1
    out = capsys.readouterr().out
    assert "Decision: NO-GO [F2]" in out
    assert "the follow-up round has 1 Degraded: TQ-8 (thorough)" in out


def test_fewer_than_three_follow_up_queries_stay_conditional_naming_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", CONDITIONAL)
    add_follow_up(history, {"TQ-6": ("quick", 24)})
    assert main(compare(history)) == 3
    out = capsys.readouterr().out
    assert "Decision: CONDITIONAL [M6]" in out
    assert "run 2 more follow-up queries before the final decision" in out
    assert (
        "Round:    the decision rests on the original and the follow-up round (TQ-6); not final"
        in out
    )


SHEET = """\
[[scores]]
variant = "sonnet"
query = "TQ-6"
mode = "medium"
round = "follow-up"
substantive = { Q-01 = 4, Q-02 = 4, Q-03 = 4, Q-04 = 4, Q-05 = 4, Q-06 = 4 }

[[scores]]
variant = "haiku"
query = "TQ-6"
mode = "medium"
round = "follow-up"
substantive = { Q-01 = 4, Q-02 = 4, Q-03 = 4, Q-04 = 4, Q-05 = 4, Q-06 = 4 }
"""


def test_a_score_sheet_names_its_rows_as_the_follow_up_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", CONDITIONAL)
    sheet = tmp_path / "follow-up.toml"
    sheet.write_text(SHEET)
    assert main(compare(history, "--sheet", str(sheet))) == 3
    assert "run 2 more follow-up queries" in capsys.readouterr().out


def test_a_query_in_both_rounds_is_an_input_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", CONDITIONAL)
    sheet = tmp_path / "follow-up.toml"
    sheet.write_text(SHEET.replace("TQ-6", "TQ-1").replace('"medium"', '"quick"'))
    assert main(compare(history, "--sheet", str(sheet))) == 2
    err = capsys.readouterr().err
    assert "query 'TQ-1' is in both the original and the follow-up round" in err
    assert "Traceback" not in err
