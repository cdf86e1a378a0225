"""``cleo-grade baseline save|show|diff`` over real history and baseline files."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.store.history import append_grades


def grade(test_id: str, total: int, discipline: int = 20, **extra: object) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": f"s-{test_id}-{total}",
            "totalScore": total,
            "maxScore": 100,
            "dimensions": {
                "sessionDiscipline": DimensionScore(score=discipline, max=20),
            },
            "timestamp": datetime(2026, 1, 1, tzinfo=UTC),
            "entryCount": 3,
            "testId": test_id,
            **extra,
        }
    )


def history(path: Path, *results: GradeResult) -> Path:
    append_grades(results, path)
    return path


def test_save_writes_each_tests_latest_grade_and_a_repeated_tests_latest_series(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = history(
        tmp_path / "GRADES.jsonl",
        grade("t::a", 50),
        grade("t::a", 80),
        grade("t::b", 10, run=1, runs=2),
        grade("t::b", 20, run=2, runs=2),
        grade("t::b", 60, run=1, runs=2),
        grade("t::b", 70, run=2, runs=2),
    )
    out = tmp_path / "baseline.json"
    assert main(["baseline", "save", str(out), "--history", str(source)]) == 0
    # What was saved, from where: each test's mean over the runs it holds.
    assert capsys.readouterr().out == (
        f"baseline of 2 tests written to {out} (from {source}: the tests of its latest run, "
        "each test's latest grade or latest series of runs):\n"
        "  t::a: 80.0%\n"
        "  t::b: 65.0% over 2 runs\n"
    )
    tests = json.loads(out.read_text())["tests"]
    assert tests["t::a"]["percents"] == [80.0]
    assert tests["t::b"]["percents"] == [60.0, 70.0]
    assert main(["baseline", "show", str(out)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "t::a: 80.0%",
        "    sessionDiscipline: 100.0%",
        "t::b: 65.0% over 2 runs",
        "    sessionDiscipline: 100.0%",
    ]


def test_diff_exits_1_on_a_regression_and_0_within_the_tolerance(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = history(tmp_path / "old.jsonl", grade("t::a", 80), grade("t::gone", 80))
    new = history(tmp_path / "new.jsonl", grade("t::a", 70, discipline=10), grade("t::new", 5))
    assert main(["baseline", "diff", str(old), str(new), "--fail-on-regression=total:5"]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == [
        "baseline gate FAILED: 1 regression",
        "REGRESSION t::a total: 80.0% -> 70.0% (-10.0, tolerance 5 points)",
    ]
    assert "new test (not in baseline): t::new" in lines
    assert "missing from this run (in baseline): t::gone" in lines
    assert main(["baseline", "diff", str(old), str(new), "--fail-on-regression=total:15"]) == 0
    assert (
        main(["baseline", "diff", str(old), str(new), "--fail-on-regression=sessionDiscipline:40"])
        == 1
    )
    capsys.readouterr()
    # Without an expression the changes are shown and nothing is gated; the verdict names
    # the command's own option, not pytest's.
    assert main(["baseline", "diff", str(old), str(new)]) == 0
    verdict = capsys.readouterr().out.splitlines()[0]
    assert verdict == "baseline: compared (no --fail-on-regression, nothing gated)"


def test_diff_reads_a_baseline_file_against_a_history(tmp_path: Path) -> None:
    old = history(tmp_path / "old.jsonl", grade("t::a", 80))
    baseline = tmp_path / "b.json"
    assert main(["baseline", "save", str(baseline), "--history", str(old)]) == 0
    new = history(tmp_path / "new.jsonl", grade("t::a", 60))
    assert main(["baseline", "diff", str(baseline), str(new), "--fail-on-regression=total:5"]) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("", "neither a baseline nor a grade history"),
        (
            '{"format": "cleo-grade-baseline", "version": 1, "tests": []}',
            "'tests' must be an object",
        ),
        (b"\xff{}", "input.json: not UTF-8 text (byte 0)"),
        # Cut short: the baseline's own error, not a warning about a history line.
        (
            '{"format": "cleo-grade-baseline", "version": 1,\n "tests": {',
            "input.json:2: invalid JSON",
        ),
        ("<directory>", "input.json: cannot read: not a regular file (a directory)"),
    ],
)
def test_bad_input_is_one_line_and_exit_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | bytes | None, message: str
) -> None:
    path = tmp_path / "input.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content == "<directory>":
        path.mkdir()
    elif content is not None:
        path.write_text(content)
    assert main(["baseline", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(
    "deep",
    ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000],
    ids=["arrays", "objects"],
)
def test_json_nested_past_the_parser_is_a_corrupt_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], deep: str
) -> None:
    # json.loads raised RecursionError out of `baseline show` and `baseline diff`.
    path = tmp_path / "deep.json"
    path.write_text(deep)
    assert main(["baseline", "diff", str(path), str(path)]) == 2
    warning, error = capsys.readouterr().err.splitlines()
    assert warning.endswith(
        "skipped corrupt grade line: invalid JSON (nested too deeply (more than 100 levels))"
    )
    assert error == f"cleo-grade baseline: {path}: neither a baseline nor a grade history"


def test_a_bad_expression_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = history(tmp_path / "old.jsonl", grade("t::a", 80))
    assert main(["baseline", "diff", str(old), str(old), "--fail-on-regression=total"]) == 2
    assert "invalid regression tolerance 'total'" in capsys.readouterr().err


def test_save_never_writes_through_a_planted_file_and_leaves_nothing_when_it_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = history(tmp_path / "GRADES.jsonl", grade("t::a", 80))
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    # The name a fixed temporary file would have had, and the target itself, as links.
    (tmp_path / "bl.json.tmp").symlink_to(victim)
    (tmp_path / "bl.json").symlink_to(victim)
    assert main(["baseline", "save", str(tmp_path / "bl.json"), "--history", str(source)]) == 0
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "bl.json").is_symlink()
    assert json.loads((tmp_path / "bl.json").read_text())["tests"]["t::a"]["percents"] == [80.0]
    (tmp_path / "isdir").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["baseline", "save", str(tmp_path / "isdir"), "--history", str(source)]) == 2
    err = capsys.readouterr().err
    assert err.endswith("isdir: cannot write: not a regular file (a directory)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    # A path through a file: said as such (mkdir's own words are "File exists").
    assert main(["baseline", "save", str(victim / "bl.json"), "--history", str(source)]) == 2
    assert capsys.readouterr().err.endswith(
        "bl.json: cannot write: a parent of the path is not a directory\n"
    )


def test_save_never_writes_over_the_history_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = history(tmp_path / "GRADES.jsonl", grade("t::a", 80))
    before = source.read_bytes()
    monkeypatch.chdir(tmp_path)
    assert main(["baseline", "save", "./GRADES.jsonl", "--history", str(source)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"cleo-grade baseline: GRADES.jsonl: would replace the grade history {source}: "
        "nothing written"
    )
    assert source.read_bytes() == before


def test_diff_shows_a_regression_beyond_its_tolerance_and_halves_rounded_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def baseline(name: str, **tests: list[float]) -> Path:
        path = tmp_path / name
        document = {k: {"percents": v} for k, v in tests.items()}
        path.write_text(
            json.dumps({"format": "cleo-grade-baseline", "version": 1, "tests": document})
        )
        return path

    old = baseline("old.json", **{"t::a": [81.29], "t::b": [95.0, 95.0, 95.0, 40.0]})
    new = baseline("new.json", **{"t::a": [76.25], "t::b": [95.0, 95.0, 95.0, 40.0]})
    assert main(["baseline", "diff", str(old), str(new), "--fail-on-regression=total:5"]) == 1
    out = capsys.readouterr().out
    # A 5.04-point drop was printed "-5.0" against its 5 points, and 81.25 as "81.2".
    assert "REGRESSION t::a total: 81.29% -> 76.25% (-5.04, tolerance 5 points)" in out
    assert "t::b total: 81.3% -> 81.3% (+0.0, tolerance 5 points)" in out


def test_a_history_line_that_is_not_utf8_is_skipped_not_the_whole_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `baseline save/show/diff` refused the whole history ("not UTF-8 text (byte 1913)")
    # where every other command skips the line, named with its number.
    path = history(tmp_path / "GRADES.jsonl", grade("t::a", 80))
    with path.open("ab") as out:
        out.write(b"\xff\n")
    saved = tmp_path / "b.json"
    assert main(["baseline", "save", str(saved), "--history", str(path)]) == 0
    assert "GRADES.jsonl:2:" in capsys.readouterr().err
    assert json.loads(saved.read_text())["tests"]["t::a"]["percents"] == [80.0]
    assert main(["baseline", "diff", str(path), str(path)]) == 0


def test_diff_regrades_the_old_sessions_under_the_new_rule_file_from_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_cleo_grade.store import AuditStore
    from tests.grading.test_baseline_regrade import LISTS_ONLY, entries, graded, rule_file

    rules = rule_file(tmp_path / "rules.toml")
    db = tmp_path / "audit.db"
    with AuditStore(db) as audit:
        audit.append_many(entries("old", *LISTS_ONLY))
    old = history(tmp_path / "old.jsonl", graded(rules, "old", LISTS_ONLY))
    rule_file(rules, version="1.1.0", listed=40, ended=60)
    new = history(tmp_path / "new.jsonl", graded(rules, "new", LISTS_ONLY))
    gate = ["--fail-on-regression", "total:5"]
    capsys.readouterr()
    args = ["baseline", "diff", str(old), str(new), *gate, "--rubric-file", str(rules)]
    assert main([*args, "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "baseline re-graded under the current rubric (rules 1.0.0 -> rules 1.1.0): t::a" in out
    assert "  t::a total: 40.0% -> 40.0% (+0.0, tolerance 5 points)" in out
    # No store holding the old session: said, not compared, and never a regression.
    assert main([*args, "--db", str(tmp_path / "none.db")]) == 0
    out = capsys.readouterr().out
    assert "not compared: rubric changed (rules 1.0.0 -> rules 1.1.0): t::a" in out
    assert main([*args[:-1], str(tmp_path / "gone.toml")]) == 2
    assert "--rubric-file" in capsys.readouterr().err


def test_a_history_larger_than_any_baseline_file_is_read_a_line_at_a_time(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Years of runs: more than the 64 MiB a baseline document is read whole with. Lines of
    # blanks (skipped by every reader) make the size without a year of grades to parse.
    source = history(tmp_path / "GRADES.jsonl", grade("t::a", 50))
    with source.open("ab") as handle:
        for _ in range(65):
            handle.write(b" " * (1024 * 1024) + b"\n")
    append_grades([grade("t::a", 80), grade("t::b", 40)], source)
    assert source.stat().st_size > 64 * 1024 * 1024
    out = tmp_path / "baseline.json"
    assert main(["baseline", "save", str(out), "--history", str(source)]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "baseline of 2 tests written" in captured.out
    assert json.loads(out.read_text())["tests"]["t::a"]["percents"] == [80.0]
    assert main(["baseline", "show", str(source)]) == 0
    shown = capsys.readouterr()
    assert shown.err == ""
    assert "t::a" in shown.out and "80.0%" in shown.out and "t::b" in shown.out
