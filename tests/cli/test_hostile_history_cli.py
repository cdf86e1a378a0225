"""One corrupt history line or grades row never hides the rest: hostile lines are skipped with
a warning naming the place, through every reader (library, list, list --db, junit, query)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import append_grade, read_grades


def grade(session: str, score: int = 80) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": session,
            "totalScore": score,
            "maxScore": 100,
            "dimensions": {"d": DimensionScore(score=score, max=100, evidence=[])},
            "flags": [],
            "timestamp": "2026-01-01T00:00:00.000Z",
            "entryCount": 3,
        }
    )


def good_line(session: str) -> str:
    return json.dumps(grade(session).to_json_dict(), separators=(",", ":"))


HOSTILE = {
    "deep nesting": "[" * 100_000 + "]" * 100_000,
    "a 400-digit score": good_line("big").replace('"totalScore":80', '"totalScore":' + "9" * 400),
    "a lone surrogate": good_line("x").replace('"sessionId":"x"', '"sessionId":"\\ud800"'),
    "not an object": "[1, 2]",
    "garbage": "{not json",
}


@pytest.fixture
def history(tmp_path: Path) -> Path:
    path = tmp_path / "GRADES.jsonl"
    lines = [good_line("first"), *HOSTILE.values(), good_line("last")]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_the_library_skips_each_hostile_line_naming_it(history: Path) -> None:
    with pytest.warns(CleoGradeWarning) as caught:
        results = read_grades(history)
    assert [r.session_id for r in results] == ["first", "last"]
    messages = [str(w.message) for w in caught]
    assert [m.split(": skipped")[0] for m in messages] == [f"{history}:{n}" for n in range(2, 7)]
    assert "nested too deeply" in messages[0]
    assert "not a finite percentage" in messages[1]
    assert "lone surrogate" in messages[2]


@pytest.mark.parametrize(
    "command",
    [
        ["list"],
        ["list", "--json"],
        ["query", "admin", "grade.list"],
    ],
    ids=["list", "list --json", "query grade.list"],
)
def test_the_cli_shows_the_good_lines_and_warns_about_the_bad(
    history: Path, command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    status = main([*command, "--history", str(history)])
    out, err = capsys.readouterr()
    assert status == 0
    assert "first" in out and "last" in out
    warned = [line for line in err.splitlines() if line.startswith("cleo-grade: warning: ")]
    assert len(warned) == len(HOSTILE)


def test_junit_writes_the_good_sessions(
    history: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out.xml"
    assert main(["junit", str(out), "--history", str(history)]) == 0
    assert capsys.readouterr().err.count("cleo-grade: warning: ") == len(HOSTILE)
    text = out.read_text()
    assert 'name="first"' in text and 'name="last"' in text


def test_a_corrupt_grades_row_is_skipped_by_list_db(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "audit.db"
    with AuditStore(db) as store:
        store.add_grades([grade("first"), grade("big"), grade("last")])
    conn = sqlite3.connect(db)
    conn.execute(
        "UPDATE grades SET result_json = replace(result_json, '\"totalScore\":80', ?) "
        "WHERE session_id = 'big'",
        ('"totalScore":' + "9" * 400,),
    )
    conn.commit()
    conn.close()
    assert main(["list", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    assert "first" in out and "last" in out and "big" not in out
    assert "grades row 2: skipped corrupt grade" in err


def test_appending_still_works_after_a_torn_hostile_tail(history: Path) -> None:
    append_grade(grade("after"), history)
    with pytest.warns(CleoGradeWarning):
        assert [r.session_id for r in read_grades(history)] == ["first", "last", "after"]


def test_a_history_line_scoring_above_its_maximum_is_skipped_with_its_line_number(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1e30/100 was read as a grade of 1e30 %, listed and ranked (and its mean once went
    # through Decimal.quantize(), whose default 28 digits raised out of `cleo-grade report`);
    # 870/100, a hand edit, ranked first. No rubric scores past its maximum.
    history = tmp_path / "GRADES.jsonl"
    line = {
        "sessionId": "s",
        "testId": "t::a",
        "totalScore": 87,
        "maxScore": 100,
        "dimensions": {},
        "flags": [],
        "timestamp": "2026-01-01T00:00:00Z",
        "entryCount": 1,
    }
    lines = [line, {**line, "totalScore": 1e30}, {**line, "totalScore": 870}]
    history.write_text("".join(json.dumps(item) + "\n" for item in lines))
    # A store named with --db must be there (it need not hold the session).
    AuditStore(tmp_path / "a.db").close()
    page = tmp_path / "r.html"
    args = [
        "report",
        "--html",
        str(page),
        "--history",
        str(history),
        "--db",
        str(tmp_path / "a.db"),
    ]
    assert main(args) == 0
    out, err = capsys.readouterr()
    # The page, then the run as pytest prints it: the skipped line is in neither.
    assert out.startswith(f"cleo-grade: wrote {page} (1 grade)\ntest ")
    assert out.endswith("run grade B: mean 87% over 1 graded test\n")
    assert [warning.split(": ")[2] for warning in err.splitlines()] == [
        f"{history}:2",
        f"{history}:3",
    ]
    assert all("totalScore is above maxScore" in warning for warning in err.splitlines())
