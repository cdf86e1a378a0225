"""The adaptive repeats row: runs="auto" against fixed runs=max_runs, same agents, same verdicts.

Three agents, each graded 1..20 times by a real pytest run: one that always passes, one that
never does, and a borderline one that passes half of its runs (by run index, so both runs of
the bench see the same samples). The figure is the runs graded; the floor is fixed
``runs=20``; the verdicts (JUnit's ``cleo_decision``) must be the same.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from harness import Row

MAX_RUNS = 20

SUITE = """
import pytest

AGENTS = {{
    "passing": lambda run: True,
    "failing": lambda run: False,
    "borderline": lambda run: (run * 7) % 10 < 5,
}}

@pytest.mark.parametrize("agent", list(AGENTS))
@pytest.mark.cleo_grade(runs={runs}, {extra}expect=["a.b", "c.d"], mode="exact", fail_under=90)
def test_agent(graded_session, cleo_grade_run, agent):
    graded_session.record("a", "b")
    if AGENTS[agent](cleo_grade_run):
        graded_session.record("c", "d")
"""


def _run(directory: Path, runs: str, extra: str) -> tuple[dict[str, int], dict[str, str]]:
    directory.mkdir(parents=True)
    (directory / "test_agents.py").write_text(SUITE.format(runs=runs, extra=extra))
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml=out.xml"],
        cwd=directory,
        capture_output=True,
        check=False,
    )
    graded: dict[str, int] = {}
    for line in (directory / ".cleo/metrics/GRADES.jsonl").read_text().splitlines():
        test = json.loads(line)["testId"]
        graded[test] = graded.get(test, 0) + 1
    decisions: dict[str, str] = {}
    for case in ET.parse(directory / "out.xml").iter("testcase"):
        for prop in case.iter("property"):
            if prop.get("name") == "cleo_decision":
                name = case.get("name", "").split("[")[1].split("-")[0]
                decisions[name] = str(prop.get("value"))
    return graded, decisions


def adaptive_rows(tmp: Path) -> list[Row]:
    auto, auto_verdicts = _run(tmp / "adaptive-auto", '"auto"', f"max_runs={MAX_RUNS}, ")
    fixed, fixed_verdicts = _run(tmp / "adaptive-fixed", str(MAX_RUNS), "")
    rows = []
    for agent in ("passing", "failing", "borderline"):
        test = f"test_agents.py::test_agent[{agent}]"
        used, floor = auto.get(test, 0), fixed.get(test, 0)
        same = auto_verdicts.get(agent) == fixed_verdicts.get(agent) is not None
        rows.append(
            Row(
                f"runs=auto vs runs={MAX_RUNS}: {agent} agent (runs graded)",
                f"{used} runs, {auto_verdicts.get(agent)}",
                f"{floor} runs, {fixed_verdicts.get(agent)}",
                used / floor if floor else float("inf"),
                "same verdict, <= 1x" + (", << 1x" if agent != "borderline" else ""),
                same and used <= floor and (agent == "borderline" or used * 2 <= floor),
            )
        )
    return rows


if __name__ == "__main__":
    import tempfile

    from harness import table

    with tempfile.TemporaryDirectory(prefix="cleo-grade-bench-") as name:
        print(table(adaptive_rows(Path(name))))
