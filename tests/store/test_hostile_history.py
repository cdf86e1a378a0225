"""One corrupt history line or grades row never hides the rest, and deep nesting is an input
error, not a RecursionError (issue 10, items 7, 8 and 10)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.errors import CleoGradeWarning, EntryError, StoreError
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.history import append_grade, read_grades
from pytest_cleo_grade.store.sources import load_entries_file, read_cleo_db
from tests.entries import NOW, sequence
from tests.processes import NO_UNRELATED_PLUGINS
from tests.store.test_import import SESSION, build_cleo_db

GOOD = {
    "sessionId": "good-1",
    "totalScore": 85,
    "maxScore": 100,
    "dimensions": {},
    "flags": [],
    "timestamp": "2026-03-01T12:00:00.000Z",
    "entryCount": 3,
    "evaluator": "auto",
}

#: Lines a hostile agent or a torn write can leave in GRADES.jsonl, by name.
CORRUPT_LINES = {
    "deep-nesting": "[" * 100_000 + "]" * 100_000,
    "400-digit-score": json.dumps({**GOOD, "totalScore": int("9" * 400)}),
    "lone-surrogate": json.dumps({**GOOD, "sessionId": "x"}).replace('"x"', '"\\ud800"'),
    "garbage": "\x00\x01garbage{{{",
    "not-utf8": "\udcff",  # written as the raw byte 0xff below
    "deep-object-in-a-grade": json.dumps({**GOOD, "flags": [{"a": 1}]}).replace(
        '{"a": 1}', "[" * 500 + "]" * 500
    ),
    "dimension-above-its-max": json.dumps(
        {**GOOD, "dimensions": {"taskHygiene": {"score": 40, "max": 20, "evidence": []}}}
    ),
    "negative-dimension": json.dumps(
        {**GOOD, "dimensions": {"taskHygiene": {"score": -5, "max": 20, "evidence": []}}}
    ),
    "negative-total": json.dumps({**GOOD, "totalScore": -10}),
}


def test_a_dimension_out_of_its_range_is_skipped_and_a_baseline_from_the_rest_reads_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = {
        **GOOD,
        "testId": "t::a",
        "dimensions": {"taskHygiene": {"score": 20, "max": 20, "evidence": []}},
    }
    bad = {**line, "dimensions": {"taskHygiene": {"score": 400, "max": 20, "evidence": []}}}
    history = tmp_path / "GRADES.jsonl"
    history.write_text("".join(json.dumps(item) + "\n" for item in (line, bad)))
    baseline = tmp_path / "baseline.json"
    assert main(["baseline", "save", str(baseline), "--history", str(history)]) == 0
    err = capsys.readouterr().err
    assert (
        f"{history}:2: skipped corrupt grade line: not a usable grade: dimension 'taskHygiene' "
        "scores 400 out of 20 (a score is 0 to its max)"
    ) in err
    assert main(["baseline", "show", str(baseline)]) == 0


def write_history(path: Path, bad: str) -> None:
    data = (
        json.dumps(GOOD).encode()
        + b"\n"
        + bad.encode("utf-8", "surrogateescape")
        + b"\n"
        + json.dumps({**GOOD, "sessionId": "good-2"}).encode()
        + b"\n"
    )
    path.write_bytes(data)


@pytest.fixture(autouse=True)
def in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    return tmp_path


@pytest.mark.parametrize("bad", list(CORRUPT_LINES.values()), ids=list(CORRUPT_LINES))
def test_read_grades_skips_a_corrupt_line_with_a_warning_naming_it(
    tmp_path: Path, bad: str
) -> None:
    path = tmp_path / "GRADES.jsonl"
    write_history(path, bad)
    with pytest.warns(CleoGradeWarning, match=r"GRADES\.jsonl:2: skipped corrupt grade line"):
        grades = read_grades(path)
    assert [g.session_id for g in grades] == ["good-1", "good-2"]


@pytest.mark.parametrize(
    "argv",
    [
        ["list"],
        ["list", "--json"],
        ["junit", "out.xml"],
        ["query", "admin", "grade.list"],
    ],
    ids=["list", "list-json", "junit", "query-grade-list"],
)
@pytest.mark.parametrize("bad", list(CORRUPT_LINES.values()), ids=list(CORRUPT_LINES))
def test_every_history_command_shows_the_rest_and_warns_about_the_bad_line(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, argv: list[str], bad: str
) -> None:
    write_history(in_tmp / "GRADES.jsonl", bad)
    status = main([*argv, "--history", "GRADES.jsonl"])
    out, err = capsys.readouterr()
    assert status == 0
    assert err.startswith("cleo-grade: warning: GRADES.jsonl:2: skipped corrupt grade line")
    assert len(err.splitlines()) == 1
    shown = out + ((in_tmp / "out.xml").read_text() if argv[0] == "junit" else "")
    assert "good-1" in shown and "good-2" in shown


def test_list_db_skips_a_grades_row_with_a_huge_score_and_names_the_row(
    capsys: pytest.CaptureFixture[str], in_tmp: Path
) -> None:
    result = grade_entries(sequence(("session", "list")), session_id="s1", now=NOW)
    with AuditStore(in_tmp / "audit.db") as store:
        store.add_grade(result)
    conn = sqlite3.connect(in_tmp / "audit.db")
    with conn:
        huge = json.dumps({**GOOD, "sessionId": "huge", "totalScore": int("9" * 400)})
        conn.execute(
            "INSERT INTO grades (session_id, timestamp, total_score, max_score, letter, "
            "entry_count, flag_count, result_json) VALUES ('huge', 't', 1e308, 100, 'A', 0, 0, ?)",
            (huge,),
        )
    conn.close()
    with AuditStore(in_tmp / "audit.db") as store:
        store.add_grade(result.model_copy(update={"session_id": "s2"}))
    status = main(["list", "--db", "audit.db"])
    out, err = capsys.readouterr()
    assert status == 0
    assert err.startswith("cleo-grade: warning: audit.db: grades row 2: skipped corrupt grade")
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["s1", "s2"]


def test_a_grade_appended_after_a_corrupt_line_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "GRADES.jsonl"
    write_history(path, CORRUPT_LINES["deep-nesting"])
    append_grade(grade_entries([], session_id="later", now=NOW), path)
    with pytest.warns(CleoGradeWarning):
        assert [g.session_id for g in read_grades(path)][-1] == "later"


# -- item 8: deep nesting in CLEO details_json and entry files ------------------------------


@pytest.mark.parametrize("depth", [500, 990, 1500, 100_000])
def test_deeply_nested_cleo_details_json_is_one_line_naming_the_row(
    capsys: pytest.CaptureFixture[str], in_tmp: Path, depth: int
) -> None:
    cleo = build_cleo_db(in_tmp / "proj" / ".cleo" / "cleo.db", idempotency_key=False)
    conn = sqlite3.connect(cleo)
    with conn:
        nested = '{"a":' + "[" * depth + "]" * depth + "}"
        conn.execute("UPDATE audit_log SET details_json = ? WHERE id = 'r2'", (nested,))
    conn.close()
    for argv in (["grade", SESSION, "--cleo-db", "proj", "--no-save"], ["import", "proj"]):
        status = main(argv)
        out, err = capsys.readouterr()
        assert (status, out) == (2, ""), argv
        assert len(err.splitlines()) == 1
        assert "audit_log row r2" in err
        assert "nest" in err
    assert not (in_tmp / ".cleo").exists()


def test_reading_a_deep_cleo_row_raises_a_store_error_not_recursion_error(in_tmp: Path) -> None:
    cleo = build_cleo_db(in_tmp / "cleo.db", idempotency_key=True)
    conn = sqlite3.connect(cleo)
    with conn:
        conn.execute(
            "UPDATE audit_log SET details_json = ? WHERE id = 'r1'", ("[" * 995 + "]" * 995,)
        )
    conn.close()
    with pytest.raises(StoreError, match=r"audit_log row r1: details_json .* nested too deeply"):
        read_cleo_db(cleo)


@pytest.mark.parametrize("depth", [120, 500, 100_000])
@pytest.mark.parametrize("form", ["jsonl", "array"])
def test_deep_params_in_an_entry_file_are_one_entry_error(
    tmp_path: Path, depth: int, form: str
) -> None:
    entry = sequence(("tasks", "find"))[0]
    text = json.dumps({**entry, "params": {"x": "NEST"}})
    text = text.replace('"NEST"', "[" * depth + "]" * depth)
    path = tmp_path / f"e.{form}"
    path.write_text(text + "\n" if form == "jsonl" else "[\n" + text + "\n]\n")
    with pytest.raises(EntryError, match=r"e\.\w+:\d+.*nested too deeply"):
        load_entries_file(path)


def test_params_nested_within_the_limit_import_and_grade(tmp_path: Path) -> None:
    entry = sequence(("tasks", "find"))[0]
    text = json.dumps({**entry, "params": {"x": "NEST"}}).replace('"NEST"', "[" * 90 + "]" * 90)
    path = tmp_path / "e.jsonl"
    path.write_text(text + "\n")
    with AuditStore(tmp_path / "audit.db") as store:
        store.append_many(load_entries_file(path))
        assert len(store.session_entries("s1")) == 1


# -- item 10: only \n and \r\n end a JSONL line ---------------------------------------------


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\x1c", "\x1d", "\x1e"], ids=repr)
def test_unicode_line_separators_inside_a_string_are_data(tmp_path: Path, char: str) -> None:
    entries = sequence(("session", "list"), ("tasks", "find"))
    entries[1]["params"] = {"query": f"a{char}b"}
    path = tmp_path / "e.jsonl"
    path.write_text("\r\n".join(json.dumps(e, ensure_ascii=False) for e in entries) + "\r\n")
    loaded = load_entries_file(path)
    assert len(loaded) == 2
    assert loaded[1].params == {"query": f"a{char}b"}


@pytest.mark.parametrize("char", ["\x0b", "\x0c"], ids=["VT", "FF"])
def test_vertical_tab_and_form_feed_do_not_split_a_line(tmp_path: Path, char: str) -> None:
    first, second = (json.dumps(e) for e in sequence(("session", "list"), ("tasks", "find")))
    path = tmp_path / "e.jsonl"
    # Two objects joined by VT/FF are one malformed line, not two entries.
    path.write_text(first + char + second + "\n")
    with pytest.raises(EntryError, match=r"e\.jsonl:1: invalid JSON"):
        load_entries_file(path)


def test_a_history_line_holding_a_line_separator_reads_whole(tmp_path: Path) -> None:
    path = tmp_path / "GRADES.jsonl"
    flagged = {**GOOD, "flags": ["one\u2028two\u0085three"]}
    path.write_text(json.dumps(flagged, ensure_ascii=False) + "\n", encoding="utf-8")
    (grade,) = read_grades(path)
    assert grade.flags == ["one\u2028two\u0085three"]


@pytest.mark.parametrize("suffix", [".json", ".toml"])
def test_a_deeply_nested_rubric_file_or_score_sheet_is_one_line_not_recursion_error(
    tmp_path: Path, suffix: str
) -> None:
    from pytest_cleo_grade.core.errors import RubricError
    from pytest_cleo_grade.rubrics.comparison.scores import ComparisonError
    from pytest_cleo_grade.rubrics.comparison.sheets import load_score_sheet
    from pytest_cleo_grade.rubrics.weighted.spec import load_rubric_file

    path = tmp_path / f"deep{suffix}"
    nested = "[" * 100_000 + "]" * 100_000
    path.write_text(nested if suffix == ".json" else f"a = {nested}\n")
    with pytest.raises(RubricError, match=r"deep\.\w+: .*nested"):
        load_rubric_file(path)
    with pytest.raises(ComparisonError, match=r"deep\.\w+: nested too deeply"):
        load_score_sheet(path)


def test_over_long_history_lines_are_skipped_and_numbering_goes_on(tmp_path: Path) -> None:
    # One line ends just past the limit in the chunk after it fills 64 MiB; the other is
    # so long that it is read through and never held whole. Both are line-numbered warnings.
    limit = 64 * 1024 * 1024
    history = tmp_path / "GRADES.jsonl"
    good = [json.dumps({**GOOD, "sessionId": f"good-{i}"}).encode() for i in range(3)]
    with history.open("wb") as handle:
        handle.write(good[0] + b"\n")
        handle.write(b'"' + b"x" * (limit + 8) + b'"\n')
        handle.write(good[1] + b"\n")
        handle.write(b"[" * (limit + 5 * 1024 * 1024) + b"\n")
        handle.write(b"garbage\r\n")
        handle.write(good[2] + b"\r\n")
    with pytest.warns(CleoGradeWarning) as caught:
        results = read_grades(history)
    assert [r.session_id for r in results] == ["good-0", "good-1", "good-2"]
    assert [str(w.message).removeprefix(f"{history}:") for w in caught] == [
        "2: skipped corrupt grade line: line too long",
        "4: skipped corrupt grade line: line too long",
        "5: skipped corrupt grade line: invalid JSON (Expecting value: line 1 column 1 (char 0))",
    ]


SURROGATE_SUITE = """
import os

def test_sur(graded_session):
    task_id = os.fsdecode(b"T-\\xff")  # a task id from a file name that is not UTF-8
    graded_session.record("session", "list", gateway="cleo_query")
    graded_session.record("tasks", "add", params={"title": "x"}, metadata={"taskId": task_id})
    graded_session.record("session", "end")

def test_after():
    pass
"""


@pytest.mark.parametrize(
    "workers",
    [
        pytest.param([], id="serial"),
        # One worker carries the grade's report to the controller as two would.
        pytest.param(["-n", "1", *NO_UNRELATED_PLUGINS], id="xdist", marks=pytest.mark.e2e),
    ],
)
def test_a_task_id_that_is_not_unicode_never_breaks_the_run_and_its_grade_is_kept(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workers: list[str]
) -> None:
    pytester.makepyfile(test_sur=SURROGATE_SUITE)
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "--junitxml=j.xml", "--cleo-grade-html=r.html", "-rA", *workers
    )
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert result.ret == 0
    result.assert_outcomes(passed=2)
    # The history keeps the grade, the surrogate spelled as a JSON escape.
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    assert b"T-\\udcff" in history.read_bytes()
    (grade,) = read_grades(history)
    assert "tasks.add without description (taskId: T-\udcff)" in grade.flags
    # JUnit XML (UTF-8) carries the property spelled as the HTML report spells it.
    assert "(taskId: T-\\udcff)" in (pytester.path / "j.xml").read_text(encoding="utf-8")
    assert "T-\\udcff" in (pytester.path / "r.html").read_text(encoding="utf-8")
    assert "`test_sur.py::test_sur`" in summary.read_text(encoding="utf-8")
