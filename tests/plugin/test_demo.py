"""The demo suite behind ``make demo`` passes and grades each scenario as documented."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_demo_suite_passes_with_good_agents_graded_a_and_anti_patterns_below_b(
    tmp_path: Path,
) -> None:
    junit = tmp_path / "junit.xml"
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            f"--junitxml={junit}",
            f"--cleo-grade-db={tmp_path / 'audit.db'}",
            f"--cleo-grade-history={tmp_path / 'GRADES.jsonl'}",
        ],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    assert "10 passed" in completed.stdout
    assert "gate passed: mean 81.7% reaches 60% (C)" in completed.stdout
    letters = {
        case.attrib["name"]: {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}[
            "cleo_grade"
        ]
        for case in ET.parse(junit).getroot().iter("testcase")
    }
    assert letters == {
        "test_protocol_following_agent[fresh_discovery]": "A",
        "test_protocol_following_agent[task_hygiene]": "A",
        "test_protocol_following_agent[error_recovery]": "A",
        "test_protocol_following_agent[full_lifecycle]": "A",
        "test_protocol_following_agent[multi_domain]": "A",
        "test_anti_pattern_agent[fresh_discovery]": "D",
        "test_anti_pattern_agent[task_hygiene]": "C",
        "test_anti_pattern_agent[error_recovery]": "C",
        "test_anti_pattern_agent[full_lifecycle]": "C",
        "test_anti_pattern_agent[multi_domain]": "C",
    }
    assert len((tmp_path / "GRADES.jsonl").read_text().splitlines()) == 10
