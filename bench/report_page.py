"""The HTML report's bench row: a long grade history rendered to one page.

The floor is reading that history (every reader of it pays this); the row shows what
grouping, rendering and writing the page add on top.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from harness import Row, alternate, paired_ratio

from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.reports._html import latest_run, write_html_report
from pytest_cleo_grade.store.history import append_grades, read_grades

DIMENSIONS = (
    "sessionDiscipline",
    "discoveryEfficiency",
    "taskHygiene",
    "errorProtocol",
    "disclosureUse",
)


def grade(test: int, line: int, lines: int) -> GradeResult:
    """One history line: five dimensions, a flag, five points, a rubric version bump halfway."""
    scores = [(line * 7 + test * 3 + k) % 21 for k in range(len(DIMENSIONS))]
    return GradeResult.model_validate(
        {
            "sessionId": f"s{line}",
            "totalScore": sum(scores),
            "maxScore": 100,
            "dimensions": {
                name: DimensionScore(score=score, max=20)
                for name, score in zip(DIMENSIONS, scores, strict=True)
            },
            "flags": [f"flag of line {line}"],
            "timestamp": "2026-01-01T00:00:00Z",
            "entryCount": 5,
            "testId": f"test_agent.py::test_{test}",
            "rubric": "cleo",
            "rubricVersion": "1" if line < lines // 2 else "2",
            "points": [
                {"dimension": name, "points": score, "rule": "R1", "text": "why", "entries": [0, 1]}
                for name, score in zip(DIMENSIONS, scores, strict=True)
            ],
        }
    )


def report_row(tmp: Path, lines: int, tests: int, rounds: int) -> Row:
    history = tmp / "report-history.jsonl"
    append_grades([grade(i % tests, i, lines) for i in range(lines)], history)
    page = tmp / "report.html"

    def project() -> None:
        results = read_grades(history)
        write_html_report(page, latest_run(results, threshold=None, gate=75), results)

    def floor() -> None:
        read_grades(history)

    figures = alternate({"project": project, "floor": floor}, rounds)
    p, f = figures["project"], figures["floor"]
    ratio = paired_ratio(p, f)
    size = page.stat().st_size / 1e6
    return Row(
        f"HTML report of a {lines:,}-line history, {tests} tests ({size:.1f} MB) vs reading it",
        f"{p.min:.3f} / {p.median:.3f} s",
        f"{f.min:.3f} / {f.median:.3f} s",
        ratio,
        "<= 1.6x",
        ratio <= 1.6,
    )


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="cleo-grade-bench-") as name:
        from harness import table

        print(table([report_row(Path(name), 10_000, 200, 3)]))
