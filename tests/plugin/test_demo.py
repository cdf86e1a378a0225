"""The demo suite behind ``make demo`` passes and grades each scenario as documented."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_demo_suite_passes_with_good_agents_graded_a_and_anti_patterns_below_b(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    junit = tmp_path / "junit.xml"
    monkeypatch.chdir(EXAMPLES)  # an in-process run of the suite, with its own pytest.ini
    result = pytester.runpytest(
        f"--junitxml={junit}",
        f"--cleo-grade-db={tmp_path / 'audit.db'}",
        f"--cleo-grade-history={tmp_path / 'GRADES.jsonl'}",
    )
    out = result.stdout.str()
    assert result.ret == 0, out + result.stderr.str()
    assert "10 passed" in out
    assert "gate passed: mean 81.7% reaches 60% (C)" in out
    letters = {
        case.attrib["name"]: {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}[
            "cleo_grade"
        ]
        for case in ET.parse(junit).getroot().iter("testcase")
    }
    assert letters == {
        "test_good[discovery]": "A",
        "test_good[hygiene]": "A",
        "test_good[recovery]": "A",
        "test_good[lifecycle]": "A",
        "test_good[domains]": "A",
        "test_hasty[discovery]": "D",
        "test_hasty[hygiene]": "C",
        "test_hasty[recovery]": "C",
        "test_hasty[lifecycle]": "C",
        "test_hasty[domains]": "C",
    }
    assert len((tmp_path / "GRADES.jsonl").read_text().splitlines()) == 10
    # The grade table fits a terminal of 100 columns, and each report-mode row below its
    # threshold (every hasty run) says where its points were lost.
    lines = result.outlines
    table = lines[lines.index(next(line for line in lines if "- cleo-grade -" in line)) + 1 :]
    table = table[: next(i for i, line in enumerate(table) if line.startswith("run grade"))]
    assert table and all(len(line) <= 100 for line in table), max(table, key=len)
    reasons = [line for line in table if line.startswith("  test_demo.py::test_hasty[")]
    assert len(reasons) == 5
    assert all(re.search(r": \w+ \d+/20", line) for line in reasons)
