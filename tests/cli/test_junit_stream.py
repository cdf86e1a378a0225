"""``cleo-grade junit`` written a case at a time is byte for byte junit-xml's whole document."""

from __future__ import annotations

import os
import warnings
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path

import junit_xml
import pytest

from pytest_cleo_grade.cli.export import _testcase, latest_by_session
from pytest_cleo_grade.cli.main import main
from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.store._history_index import INDEX_VARIABLE, index_path
from pytest_cleo_grade.store.history import append_grades, read_grades

#: Text an agent may put in a session id or a flag: XML's specials, controls XML 1.0
#: cannot hold, characters junit-xml drops, a non-character, astral and bidi characters;
#: and plain text, with and without XML's specials (the cases spelled without junit-xml).
ODD = (
    *("<&>\"'", "\x01\x1b[2J", "\x85\x9f", "\ufffe\U0001fffe", "\U0001f600", "\u202e", "\t\r"),
    *("", ' a "quote" & <tag> \xe9 \u2713'),
)


def history_of(path: Path, sessions: int) -> None:
    grades = []
    for n in range(sessions):
        odd = ODD[n % len(ODD)]
        grades.append(
            GradeResult.model_validate(
                {
                    "sessionId": f"s{n}{odd}",
                    "totalScore": n % 101,
                    "maxScore": 100,
                    "dimensions": {
                        "sessionDiscipline": DimensionScore(
                            score=(n % 101) // 5, max=20, evidence=[f"seen {odd}"]
                        )
                    },
                    "flags": [f"flag {odd}", "plain"][: 1 + n % 2],
                    "timestamp": datetime(2026, 1, 1, tzinfo=UTC),
                    "entryCount": 3,
                }
            )
        )
    # Some sessions graded again, to other scores (fractional ones, one halfway between two
    # percentages, integers past a float's precision): their latest grade counts, in
    # first-graded order.
    again = [(82.5, 100), (74.995, 100), (2**62 + 1, 2**62 + 3), (2 / 3, 1), (3, 100)]
    regraded = []
    for n, grade in enumerate(grades[:40:3]):
        total, most = again[n % len(again)]
        regraded.append(grade.model_copy(update={"total_score": total, "max_score": most}))
    append_grades([*grades, *regraded], path)


@pytest.mark.parametrize("index", ["on", "off"])
@pytest.mark.parametrize("fail_under", [None, "60"])
@pytest.mark.parametrize("reports", [False, True])
def test_the_streamed_document_is_junit_xmls_document(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    index: str,
    fail_under: str | None,
    reports: bool,
) -> None:
    """Every case as junit-xml writes it from the parsed grade: through the index a passing
    case is made from its row (its line not parsed), so this also holds the row to the line."""
    monkeypatch.setenv(INDEX_VARIABLE, index)
    history = tmp_path / "GRADES.jsonl"
    history_of(history, 600)  # more cases than one batch
    threshold = None if fail_under is None else float(fail_under)
    grades = latest_by_session(read_grades(history))
    cases = [_testcase(g, threshold, report=reports) for g in grades]
    expected = junit_xml.to_xml_report_string(
        [junit_xml.TestSuite('suite "<&>"', cases)], prettyprint=True
    )
    gate = [] if fail_under is None else ["--fail-under", fail_under]
    gate += ["--reports"] if reports else []
    out = tmp_path / "out.xml"
    argv = ["junit", str(out), "--history", str(history), "--suite-name", 'suite "<&>"', *gate]
    assert main(argv) == (0 if fail_under is None else 1)
    assert out.read_bytes() == expected.encode("utf-8")
    capsys.readouterr()
    assert main([*argv[:1], "-", *argv[2:]]) == (0 if fail_under is None else 1)
    assert capsys.readouterr().out == expected
    assert index_path(history).is_file() == (index == "on")


def test_an_empty_history_is_junit_xmls_empty_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "GRADES.jsonl"
    history.write_text("not a grade\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CleoGradeWarning)
        assert main(["junit", "-", "--history", str(history)]) == 0
    assert capsys.readouterr().out == junit_xml.to_xml_report_string(
        [junit_xml.TestSuite("cleo-grade", [])]
    )


def _cases(document: str) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in ET.fromstring(document).iter("testcase")}


@pytest.mark.parametrize("index", ["on", "off"])
def test_a_failing_session_shows_its_report_and_a_passing_one_its_score_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    index: str,
) -> None:
    monkeypatch.setenv(INDEX_VARIABLE, index)
    history = tmp_path / "GRADES.jsonl"
    history_of(history, 100)
    argv = ["junit", "-", "--history", str(history), "--fail-under", "C"]
    assert main(argv) == 1
    cases = _cases(capsys.readouterr().out)
    passing, failing = cases["s88"], cases["s43"]  # plain ids (ODD's empty text)
    assert passing.find("failure") is None
    assert passing.findtext("system-out") == "88/100 (88%, grade B), 1 flag(s)"
    assert failing.find("failure") is not None
    report = failing.findtext("system-out") or ""
    assert report.startswith("Session:    s43\nScore:      43/100  (43%, grade F)\n")
    assert "Dimensions:\n  sessionDiscipline    8/20\n" in report
    assert main([*argv, "--reports"]) == 1
    reported = _cases(capsys.readouterr().out)["s88"].findtext("system-out") or ""
    assert reported.startswith("Session:    s88\nScore:      88/100  (88%, grade B)\n")


def test_a_passing_case_is_never_made_from_a_row_its_line_no_longer_matches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line edited in place behind the index's back (same size, its time put back, far
    from the fingerprinted ends) is read as edited: the history wins over its index."""
    monkeypatch.setenv(INDEX_VARIABLE, "on")
    history = tmp_path / "GRADES.jsonl"
    history_of(history, 400)
    assert main(["junit", "-", "--history", str(history)]) == 0
    assert _cases(capsys.readouterr().out)["s187"].findtext("system-out") == (
        "86/100 (86%, grade B), 2 flag(s)"
    )
    before = history.stat()
    data = history.read_bytes()
    line = next(raw for raw in data.splitlines() if b'"sessionId":"s187"' in raw)
    assert 8192 < data.index(line) < len(data) - 8192
    edited = line.replace(b'"totalScore":86', b'"totalScore":68')
    history.write_bytes(data.replace(line, edited))
    os.utime(history, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert main(["junit", "-", "--history", str(history)]) == 0
    assert _cases(capsys.readouterr().out)["s187"].findtext("system-out") == (
        "68/100 (68%, grade C), 2 flag(s)"
    )


def test_a_line_its_row_says_fails_is_written_as_the_line_now_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failing session's line is parsed, and the parsed grade decides its case: edited
    behind the index's back to pass, it is written as the history streamed would have it."""
    history = tmp_path / "GRADES.jsonl"
    history_of(history, 400)
    argv = ["junit", "-", "--history", str(history), "--fail-under", "C"]
    monkeypatch.setenv(INDEX_VARIABLE, "on")
    assert main(argv) == 1
    assert _cases(capsys.readouterr().out)["s52"].find("failure") is not None
    before = history.stat()
    data = history.read_bytes()
    line = next(raw for raw in data.splitlines() if b'"sessionId":"s52"' in raw)
    assert 8192 < data.index(line) < len(data) - 8192
    history.write_bytes(data.replace(line, line.replace(b'"totalScore":52', b'"totalScore":92')))
    os.utime(history, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert main(argv) == 1
    indexed = capsys.readouterr().out
    assert _cases(indexed)["s52"].findtext("system-out") == "92/100 (92%, grade A), 1 flag(s)"
    monkeypatch.setenv(INDEX_VARIABLE, "off")
    assert main(argv) == 1
    assert capsys.readouterr().out == indexed
