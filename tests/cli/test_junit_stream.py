"""``cleo-grade junit`` written a case at a time is byte for byte junit-xml's whole document."""

from __future__ import annotations

import warnings
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
    # Some sessions graded again: their latest grade counts, in first-graded order.
    append_grades([*grades, *grades[:40:3]], path)


@pytest.mark.parametrize("index", ["on", "off"])
@pytest.mark.parametrize("fail_under", [None, "60"])
def test_the_streamed_document_is_junit_xmls_document(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    index: str,
    fail_under: str | None,
) -> None:
    monkeypatch.setenv(INDEX_VARIABLE, index)
    history = tmp_path / "GRADES.jsonl"
    history_of(history, 600)  # more cases than one batch
    threshold = None if fail_under is None else float(fail_under)
    cases = [_testcase(g, threshold) for g in latest_by_session(read_grades(history))]
    expected = junit_xml.to_xml_report_string(
        [junit_xml.TestSuite('suite "<&>"', cases)], prettyprint=True
    )
    gate = [] if fail_under is None else ["--fail-under", fail_under]
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
