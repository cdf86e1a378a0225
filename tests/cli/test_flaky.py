"""``cleo-grade flaky``: flip rates over the history, and the quarantine file it writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._flaky import flip_table
from pytest_cleo_grade.store._quarantine import read_quarantine
from pytest_cleo_grade.store.history import append_grades

START = datetime(2026, 1, 1, tzinfo=UTC)


def grade(test_id: str, total: float, at: int, **extra: object) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": f"s-{test_id}-{at}",
            "totalScore": total,
            "maxScore": 100,
            "dimensions": {"trajectory": DimensionScore(score=total, max=100)},
            "timestamp": START + timedelta(minutes=at),
            "entryCount": 3,
            "testId": test_id,
            **extra,
        }
    )


def history(path: Path, results: list[GradeResult]) -> Path:
    append_grades(results, path)
    return path


def test_flip_rate_counts_verdict_changes_between_consecutive_runs() -> None:
    # fail, pass, pass, fail, pass against 70 %: 3 flips over 4 pairs.
    lines = [grade("t::a", p, at) for at, p in enumerate([40, 90, 95, 50, 80])]
    (test,) = flip_table(lines, threshold=70)
    assert test.verdicts == (False, True, True, False, True)
    assert (test.flips, test.runs, test.passed) == (3, 5, 3)
    assert test.flip_rate == 0.75
    assert test.last_flip_at == 5
    assert test.mean == 71
    # Sample standard deviation of 40, 90, 95, 50, 80 (mean 71): sqrt((961+361+576+441+81)/4).
    assert round(test.spread, 4) == round((2420 / 4) ** 0.5, 4)


def test_statuses_and_line_thresholds_beat_the_given_threshold() -> None:
    lines = [
        grade("t::a", 90, 0, cleoStatus="below"),  # a status says it
        grade("t::a", 50, 1, cleoThreshold=40),  # its own threshold
        grade("t::a", 90, 2, cleoStatus="ungradable"),
    ]
    (test,) = flip_table(lines, threshold=95)
    assert test.verdicts == (False, True, False)


def test_the_window_is_the_last_k_pytest_runs_by_run_id_else_series_else_line() -> None:
    lines = [
        grade("t::a", 90, 0, runId="r1"),
        grade("t::a", 90, 1, runId="r2"),
        grade("t::a", 40, 2, runId="r3", run=1, runs=2),
        grade("t::a", 90, 3, runId="r3", run=2, runs=2),
        grade("t::b", 40, 4, series="x", run=2, runs=2),
        grade("t::b", 90, 5, series="x", run=1, runs=2),
        grade("t::b", 90, 6),
    ]
    table = {test.test_id: test for test in flip_table(lines, runs=2, threshold=70)}
    # a: runs r2 and r3 (two lines): pass, fail, pass.
    assert table["t::a"].verdicts == (True, False, True)
    # b: series x in run order (run 1: 90, run 2: 40), then the single line.
    assert table["t::b"].verdicts == (True, False, True)


def test_cleo_grade_flaky_lists_the_flipped_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [grade("t::flaky", 40 if at % 2 else 90, at) for at in range(12)]
    lines += [grade("t::steady", 90, at) for at in range(12)]
    path = history(tmp_path / "GRADES.jsonl", lines)
    assert main(["flaky", "--history", str(path), "--fail-under", "70"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"1 of 2 tests flipped in their last 10 runs ({path})"
    assert out[1].split() == [
        "test",
        "runs",
        "passed",
        "flips",
        "flip",
        "rate",
        "mean",
        "spread",
        "last",
        "flip",
    ]
    assert out[2].split()[:7] == ["t::flaky", "10", "5", "9", "100%", "65.00%", "26.35"]
    assert "run 10 of 10, 2026-01-01T00:11:00Z" in out[2]
    assert len(out) == 3  # the steady test is not listed
    assert main(["flaky", "--history", str(path), "--fail-under", "70", "--runs", "3"]) == 0
    assert "last 3 runs" in capsys.readouterr().out
    assert main(["flaky", "--history", str(path), "--fail-under", "70", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["flaky"][0]["testId"] == "t::flaky"
    assert data["flaky"][0]["flipRate"] == 1.0


def test_without_any_threshold_flaky_says_which_option_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = history(tmp_path / "GRADES.jsonl", [grade("t::a", 40, 0)])
    assert main(["flaky", "--history", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "cleo-grade flaky: t::a: its history lines carry no status or threshold; "
        "pass --fail-under GRADE"
    )
    assert main(["flaky", "--history", str(path), "--runs", "0"]) == 2
    assert "invalid count '0'" in capsys.readouterr().err


def test_write_quarantine_adds_flipped_tests_and_releases_them_after_m_stable_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "GRADES.jsonl"
    quarantine = tmp_path / "q.json"
    history(path, [grade("t::a", 40 if at % 2 else 90, at, cleoThreshold=70) for at in range(4)])
    args = ["flaky", "--history", str(path), "--write-quarantine", str(quarantine)]
    assert main([*args, "--stable-runs", "3"]) == 0
    assert "quarantine" in capsys.readouterr().out
    first = read_quarantine(quarantine)
    assert first.ids == {"t::a"}
    assert first.stable_runs == 3
    assert first.tests[0].reason == "3 flips in 4 runs (100%)"
    # Two passing runs: stable for 2 of the 3 the file asks; still quarantined.
    history(path, [grade("t::a", 90, at, cleoThreshold=70) for at in (10, 11)])
    assert main(args) == 0
    assert read_quarantine(quarantine).ids == {"t::a"}
    # The third: released (M is kept in the file).
    history(path, [grade("t::a", 90, 12, cleoThreshold=70)])
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["quarantine"]["released"] == ["t::a"]
    assert read_quarantine(quarantine).ids == frozenset()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a quarantine file: invalid JSON"),
        ('{"tests": []}', 'expected an object with "quarantine": 1'),
        ('{"quarantine": 1, "stableRuns": 0}', "stableRuns: 0 is not a whole number >= 1"),
        ('{"quarantine": 1, "tests": [{"id": "x"}]}', "tests[0].testId: expected a test id"),
    ],
)
def test_a_bad_quarantine_file_is_one_line_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = history(tmp_path / "GRADES.jsonl", [grade("t::a", 40, 0, cleoThreshold=70)])
    quarantine = tmp_path / "q.json"
    quarantine.write_text(text)
    assert main(["flaky", "--history", str(path), "--write-quarantine", str(quarantine)]) == 2
    err = capsys.readouterr().err
    assert (
        f"{quarantine}: not a quarantine file: {message.removeprefix('not a quarantine file: ')}"
        in err
    )
    assert len(err.splitlines()) == 1
    assert quarantine.read_text() == text  # left as it was
