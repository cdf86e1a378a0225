"""``cleo-grade review`` and ``cleo-grade calibrate`` against a judge stand-in of known bias."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.grading._calibration import spearman, weighted_kappa
from pytest_cleo_grade.rubrics.weighted.rubric import WeightedJudgeRubric
from pytest_cleo_grade.rubrics.weighted.spec import load_rubric_file
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import append_grade, read_grades
from tests.entries import NOW, entry

RUBRIC = """
name = "release-judge"

[[dimensions]]
name = "goal"
type = "categorical"
weight = 0.6
description = "Was the release done?"
categories = [
  { label = "failed", value = 0 },
  { label = "partial", value = 1 },
  { label = "complete", value = 2 },
]

[[dimensions]]
name = "quality"
type = "numeric"
weight = 0.4
description = "How careful was it?"
"""
LABELS = ("failed", "partial", "complete")
#: What a person saw in eight sessions: the goal's category, and the quality.
TRUTH = [(0, 0.1), (0, 0.3), (1, 0.5), (1, 0.2), (1, 0.6), (2, 0.7), (2, 0.9), (2, 0.4)]


def biased_judge(prompt: str) -> str:
    """A judge stand-in that reads the truth from the session's call and is lenient:
    one category higher (capped), quality +0.2 (capped at 1)."""
    found = re.search(r"goal_(\d)_q(\d+)", prompt)
    assert found is not None
    goal, quality = int(found[1]), int(found[2]) / 10
    return json.dumps(
        {
            "goal": {"score": LABELS[min(goal + 1, 2)], "evidence": ["seen"]},
            "quality": {"score": round(min(quality + 0.2, 1.0), 4)},
        }
    )


@pytest.fixture
def calibration_set(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Eight sessions in a store, each judged by the biased stand-in into the history."""
    rubric_file = tmp_path / "judge.toml"
    rubric_file.write_text(RUBRIC)
    db = tmp_path / "audit.db"
    history = tmp_path / "GRADES.jsonl"
    rubric = WeightedJudgeRubric(load_rubric_file(rubric_file).spec, judge=biased_judge)
    with AuditStore(db) as store:
        for number, (goal, quality) in enumerate(TRUTH):
            session = f"s{number}"
            made = entry("release", f"goal_{goal}_q{round(quality * 10)}", session=session)
            store.append(AuditEntry.model_validate(made))
            append_grade(rubric.grade([made], session_id=session, now=NOW), history)
    return rubric_file, db, history


def review(files: tuple[Path, Path, Path], session: str, scores: object) -> int:
    rubric_file, db, history = files
    return main(
        [
            "review",
            session,
            "--scores",
            json.dumps(scores),
            "--rubric-file",
            str(rubric_file),
            "--db",
            str(db),
            "--history",
            str(history),
        ]
    )


def test_quadratic_kappa_and_spearman_on_small_tables() -> None:
    assert weighted_kappa([0, 1, 2], [0, 1, 2], 3) == 1
    # Complete disagreement at the extremes: observed 1, expected 1/2: kappa = 1 - 2 = -1.
    assert weighted_kappa([0, 2], [2, 0], 3) == -1
    assert weighted_kappa([1, 1], [1, 1], 3) is None  # no chance disagreement: undefined
    assert spearman([1, 2, 3], [10, 20, 30]) == 1
    assert spearman([1, 2, 3], [3, 2, 1]) == -1
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_review_records_a_manual_grade_scored_as_the_rubric_scores(
    calibration_set: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert review(calibration_set, "s2", {"goal": "partial", "quality": 0.5}) == 0
    assert "manual grade of s2: 50/100 (D) saved to" in capsys.readouterr().out
    manual = read_grades(calibration_set[2], session_id="s2")[-1]
    assert manual.evaluator == "manual"
    # goal partial: 0.6 x 1/2 = 30 points; quality 0.5: 0.4 x 0.5 = 20.
    assert {name: d.score for name, d in manual.dimensions.items()} == {"goal": 30, "quality": 20}
    assert (manual.model_extra or {})["manualScores"] == {"goal": "partial", "quality": 0.5}
    assert manual.entry_count == 1


@pytest.mark.parametrize(
    ("session", "scores", "status", "message"),
    [
        ("s1", {"goal": "maybe", "quality": 0.5}, 2, "--scores: goal: 'maybe' is not one of"),
        ("s1", {"goal": "failed"}, 2, "--scores: quality: missing"),
        ("s1", {"goal": 0, "quality": 2}, 2, "--scores: quality: 2 is outside 0..1"),
        ("s1", {"goal": 0, "quality": 0, "x": 1}, 2, "--scores: x: not a dimension of rubric"),
        ("s1", [1], 2, "--scores: expected a JSON object"),
        ("nope", {"goal": 0, "quality": 0}, 4, "session nope not found"),
    ],
)
def test_bad_reviews_are_one_line_and_save_nothing(
    calibration_set: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    session: str,
    scores: object,
    status: int,
    message: str,
) -> None:
    before = calibration_set[2].read_bytes()
    assert review(calibration_set, session, scores) == status
    err = capsys.readouterr().err
    assert message in err
    assert len(err.splitlines()) == 1
    assert calibration_set[2].read_bytes() == before


def test_review_asks_one_dimension_at_a_time(
    calibration_set: tuple[Path, Path, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rubric_file, db, history = calibration_set
    monkeypatch.setattr("sys.stdin", io.StringIO("maybe\ncomplete\nlots\n0.75\n"))
    args = ["review", "s7", "--rubric-file", str(rubric_file), "--db", str(db)]
    assert main([*args, "--history", str(history), "--reviewer", "ana"]) == 0
    out = capsys.readouterr().out
    assert "goal: Was the release done?" in out
    assert "failed (0), partial (1), complete (2)? " in out
    assert "'maybe' is not one of failed (0), partial (1), complete (2)" in out
    assert "a number from 0 to 1? " in out
    manual = read_grades(history, session_id="s7")[-1]
    assert (manual.model_extra or {})["manualScores"] == {"goal": "complete", "quality": 0.75}
    assert (manual.model_extra or {})["reviewer"] == "ana"
    # End of input before every dimension is scored: nothing saved.
    monkeypatch.setattr("sys.stdin", io.StringIO("complete\n"))
    before = history.read_bytes()
    assert main([*args, "--history", str(history)]) == 2
    assert "no answer for quality: nothing saved" in capsys.readouterr().err
    assert history.read_bytes() == before


def test_calibrate_gives_the_hand_computed_kappa_of_a_biased_judge(
    calibration_set: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for number, (goal, quality) in enumerate(TRUTH):
        assert (
            review(calibration_set, f"s{number}", {"goal": LABELS[goal], "quality": quality}) == 0
        )
    capsys.readouterr()
    history = str(calibration_set[2])
    assert main(["calibrate", "--history", history, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    goal, quality = data["dimensions"]
    # Person 0,0,1,1,1,2,2,2; judge one higher, capped: 1,1,2,2,2,2,2,2.
    # Observed (rows person): [0,2,0], [0,0,3], [0,0,3]; margins rows 2,3,3, columns 0,2,6.
    # Quadratic weights (i-j)^2/4: disagreement 0.25*2 + 0.25*3 = 1.25 of 8 = 10/64;
    # by chance 0.25*2*2 + 1*2*6 + 0.25*3*6 + 0.25*3*2 = 19 of 64: kappa = 1 - 10/19 = 9/19.
    assert goal["kappa"] == round(9 / 19, 4)
    assert goal["kappaWeights"] == "quadratic"
    assert goal["agreement"] == 0.375  # only the three "complete" sessions agree
    assert goal["confusion"] == [[0, 2, 0], [0, 0, 3], [0, 0, 3]]
    assert goal["labels"] == list(LABELS)
    # Quality +0.2 everywhere but 0.9 -> 1.0: within 0.1 once; ranks kept: rho 1;
    # mean absolute difference (7 x 0.2 + 0.1) / 8 = 0.1875.
    assert quality["agreement"] == 0.125
    assert quality["spearman"] == 1.0
    assert quality["meanAbsDiff"] == 0.1875
    assert main(["calibrate", "--history", history, "--min-agreement", "0.3"]) == 1
    out = capsys.readouterr().out
    assert "calibration gate FAILED: agreement below 30%: quality 12.5%" in out
    assert "confusion of goal (rows: person, columns: judge):" in out
    assert re.search(r"goal\s+categorical\s+8\s+37\.5%\s+0\.474\s+-\s+-", out)
    assert main(["calibrate", "--history", history, "--min-agreement", "10%"]) == 0
    assert "calibration gate passed" in capsys.readouterr().out


def test_calibrate_without_pairs_says_what_to_do(
    calibration_set: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["calibrate", "--history", str(calibration_set[2])]) == 2
    err = capsys.readouterr().err
    assert "no session has both a judged grade and a manual one" in err
    assert main(["calibrate", "--history", str(calibration_set[2]), "--min-agreement", "2"]) == 2
    assert "invalid agreement '2'" in capsys.readouterr().err


def test_the_html_report_shows_the_calibration(
    calibration_set: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for number, (goal, quality) in enumerate(TRUTH):
        assert (
            review(calibration_set, f"s{number}", {"goal": LABELS[goal], "quality": quality}) == 0
        )
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page), "--history", str(calibration_set[2])]) == 0
    html = page.read_text()
    assert "<h2>Judge calibration</h2>" in html
    assert "8 sessions graded by the judge and by a person" in html
    assert "<td>goal</td><td>categorical</td><td>8</td><td>37.5%</td><td>0.474</td>" in html
    # The manual grades are labels, not tests of the run: the eight judged sessions only.
    assert html.count("class='test'") == 8
