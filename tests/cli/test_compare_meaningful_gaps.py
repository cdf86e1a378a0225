"""``cleo-grade compare --meaningful-gap``: per-metric differences under 2 points are not
meaningful (the Scoring Rubric's non-determinism mitigations), shown in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from tests.cli.test_compare import compare

SHEET = """\
[[scores]]
variant = "sonnet"
query = "TQ-1"
mode = "quick"
substantive = { Q-01 = 4, Q-02 = 4, Q-03 = 4, Q-04 = 4, Q-05 = 4, Q-06 = 4 }

[[scores]]
variant = "haiku"
query = "TQ-1"
mode = "quick"
substantive = { Q-01 = 2, Q-02 = 3, Q-03 = 5, Q-04 = 4, Q-05 = 4, Q-06 = 4 }
"""


def sheet(tmp_path: Path) -> Path:
    path = tmp_path / "scores.toml"
    path.write_text(SHEET)
    return path


def run(tmp_path: Path, *extra: str) -> list[str]:
    args = compare(tmp_path / "none.jsonl", "--sheet", str(sheet(tmp_path)), *extra)
    # compare() names a history; with --sheet alone only the sheet is read.
    at = args.index("--history")
    return args[:at] + args[at + 2 :]


def test_differences_under_two_points_are_marked_not_meaningful(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run(tmp_path, "--meaningful-gap")) == 0
    lines = capsys.readouterr().out.splitlines()
    start = lines.index(
        "Per-metric differences (candidate - baseline); under 2.00 points is not meaningful, "
        "shown in parentheses:"
    )
    assert lines[start + 2].split() == ["Query", "Q-01", "Q-02", "Q-03", "Q-04", "Q-05", "Q-06"]
    assert lines[start + 3].split() == [
        "TQ-1",
        "-2.00",
        "(-1.00)",
        "(+1.00)",
        "(0.00)",
        "(0.00)",
        "(0.00)",
    ]
    assert lines[-1] == "Meaningful gaps: TQ-1 Q-01 -2.00"
    # The decision rests on the averages, as the verdict scale says: -0.33 is Equivalent.
    assert "Decision: GO [M3]" in lines


def test_without_the_option_the_report_has_no_per_metric_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run(tmp_path)) == 0
    assert "Per-metric" not in capsys.readouterr().out


def test_the_json_and_markdown_reports_carry_the_marks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(run(tmp_path, "--meaningful-gap", "1", "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["meaningfulGap"] == {"exact": "1", "value": 1.0}
    metrics = data["queries"][0]["metrics"]
    assert [metrics[m]["meaningful"] for m in sorted(metrics)] == [
        True,
        True,
        True,
        False,
        False,
        False,
    ]
    assert main(run(tmp_path, "--meaningful-gap", "--markdown")) == 0
    out = capsys.readouterr().out
    assert "| TQ-1 | -2.00 | (-1.00) | (+1.00) | (0.00) | (0.00) | (0.00) |" in out
    assert "Meaningful gaps: TQ-1 Q-01 -2.00" in out


@pytest.mark.parametrize("value", ["0", "-2", "two"])
def test_a_gap_that_is_not_a_positive_number_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert main(run(tmp_path, f"--meaningful-gap={value}")) == 2
    assert "expected a positive number of points" in capsys.readouterr().err
