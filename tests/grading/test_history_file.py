"""Baselines read from a history file in two passes equal those of the whole history."""

from __future__ import annotations

import random
import warnings
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._baseline import latest_from_history, short_in_history
from pytest_cleo_grade.grading._history_file import latest_from_history_file
from pytest_cleo_grade.store.history import append_grades, read_grades


def grade(test_id: str, total: int, **extra: object) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": f"s-{test_id}-{total}",
            "totalScore": total,
            "maxScore": 100,
            "dimensions": {"sessionDiscipline": DimensionScore(score=total // 5, max=20)},
            "timestamp": datetime(2026, 1, 1, tzinfo=UTC),
            "entryCount": 3,
            "testId": test_id,
            **extra,
        }
    )


def mixed_history(path: Path, seed: int) -> None:
    """Runs of single and repeated tests: short series (``-k``), ungradable lines, old lines
    without a run id or a series, a test that leaves the suite, xfailed grades."""
    rng = random.Random(seed)
    lines: list[GradeResult] = []
    for run in range(12):
        run_id = None if run < 2 else f"run-{run}"
        ids = {} if run_id is None else {"runId": run_id}
        for test in ("t::a", "t::b", "t::c", "t::gone"):
            if test == "t::gone" and run > 6:
                continue
            if rng.random() < 0.15:
                continue  # not run this time
            score = rng.randrange(0, 101)
            if test == "t::b":
                runs = 3
                done = runs if rng.random() < 0.6 else rng.randrange(1, runs)
                for index in range(1, done + 1):
                    series = {} if run < 3 else {"series": f"{run}"}
                    lines.append(
                        grade(test, (score + index) % 101, run=index, runs=runs, **series, **ids)
                    )
                continue
            extra: dict[str, object] = dict(ids)
            if rng.random() < 0.1:
                extra["cleoStatus"] = "ungradable"
            if test == "t::c" and rng.random() < 0.2:
                extra["excluded"] = "xfailed"
            lines.append(grade(test, score, **extra))
    append_grades(lines, path)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("candidate", [False, True])
def test_two_passes_give_the_baseline_of_the_whole_history(
    tmp_path: Path, seed: int, candidate: bool
) -> None:
    path = tmp_path / "GRADES.jsonl"
    mixed_history(path, seed)
    whole = read_grades(path)
    grades, short, count = latest_from_history_file(path, whole=not candidate, candidate=candidate)
    assert grades == latest_from_history(whole, whole=not candidate)
    assert short == (short_in_history(whole) if candidate else {})
    assert count == len(whole)
    assert grades  # the history made a baseline at all


def test_a_corrupt_line_is_said_once_and_a_missing_history_holds_nothing(tmp_path: Path) -> None:
    path = tmp_path / "GRADES.jsonl"
    append_grades([grade("t::a", 40)], path)
    with path.open("a", encoding="utf-8") as handle:
        handle.write('{"sessionId": "torn"\n')
    append_grades([grade("t::a", 70)], path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        grades, _, count = latest_from_history_file(path)
    assert [str(w.message) for w in caught if w.category is CleoGradeWarning] == [
        f"{path}:2: skipped corrupt grade line: invalid JSON "
        "(Expecting ',' delimiter: line 1 column 21 (char 20))"
    ]
    assert grades["t::a"].totals == (70.0,) and count == 2
    assert latest_from_history_file(tmp_path / "nope.jsonl") == ({}, {}, 0)


def test_a_short_latest_series_takes_the_whole_one_before_it_from_the_second_pass(
    tmp_path: Path,
) -> None:
    path = tmp_path / "GRADES.jsonl"
    append_grades(
        [
            grade("t::b", 60, run=1, runs=2, series="s1", runId="r1"),
            grade("t::b", 70, run=2, runs=2, series="s1", runId="r1"),
            grade("t::a", 10, runId="r1"),
            *(grade("t::a", 20 + n, runId=f"r{n}") for n in range(2, 30)),
            grade("t::b", 90, run=2, runs=2, series="s9", runId="r30"),  # -k "run-2"
            grade("t::a", 99, runId="r30"),
        ],
        path,
    )
    whole = read_grades(path)
    grades, _, _ = latest_from_history_file(path)
    assert grades == latest_from_history(whole)
    assert grades["t::b"].totals == (60.0, 70.0)
    assert grades["t::a"].totals == (99.0,)


def test_the_latest_runs_lines_are_the_ones_a_whole_read_would_pick(tmp_path: Path) -> None:
    from pytest_cleo_grade.grading._history_file import run_lines_file
    from pytest_cleo_grade.grading._run_ids import latest_run_id, of_run

    path = tmp_path / "GRADES.jsonl"
    append_grades(
        [
            grade("t::a", 10, runId="r1"),
            grade("t::b", 20, runId="r2"),
            grade("t::a", 30, runId="r1"),  # shards of r1 and r2 interleaved
            grade("t::a", 40, runId="r2"),
        ],
        path,
    )
    manual = grade("t::a", 50, runId="r1").model_copy(update={"evaluator": "manual"})
    append_grades([manual], path)
    whole = read_grades(path)
    automatic = [r for r in whole if r.evaluator != "manual"]
    assert latest_run_id(automatic) == "r2"  # a hand grade after the run is not the run
    assert run_lines_file(path) == (of_run(whole, "r2"), 5)
    assert run_lines_file(path, "r1") == (of_run(whole, "r1"), 5)
    assert run_lines_file(path, "r9") == ([], 5)
    # A last line without a run id (written before lines carried one): every line.
    append_grades([grade("t::c", 60)], path)
    assert run_lines_file(path) == (read_grades(path), 6)
    assert run_lines_file(tmp_path / "nope.jsonl") == ([], 0)
