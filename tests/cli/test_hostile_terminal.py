"""Names that come from files the agent or a teammate wrote (test ids in a baseline, query
and variant names in a comparison history, a rule file's name) never put a control character
on the terminal: every CLI and plugin line shows them escaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from tests.cli.test_baseline import grade, history
from tests.cli.test_compare import compare, write_history

EVIL = "x\x1b[2J\x1b]0;PWN\x07\nFORGED LINE"
SHOWN = "x\\x1b[2J\\x1b]0;PWN\\x07\\nFORGED LINE"


def _clean(out: str) -> None:
    assert "\x1b" not in out and "\x07" not in out
    assert not any(line.startswith("FORGED") for line in out.splitlines())


def test_baseline_show_and_diff_escape_test_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = history(tmp_path / "old.jsonl", grade(EVIL, 80), grade("t::kept", 80))
    new = history(tmp_path / "new.jsonl", grade("t::kept", 60))
    assert main(["baseline", "show", str(old)]) == 0
    shown = capsys.readouterr().out
    _clean(shown)
    assert f"{SHOWN}: 80.0%" in shown.splitlines()
    assert main(["baseline", "diff", str(old), str(new), "--fail-on-regression=total:5"]) == 1
    diff = capsys.readouterr().out
    _clean(diff)
    assert f"missing from this run (in baseline): {SHOWN}" in diff.splitlines()


def test_compare_escapes_query_names_in_text_and_markdown(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_history(tmp_path / "GRADES.jsonl", [24, 24, 24, 24, 24])
    grades = [json.loads(line) for line in path.read_text().splitlines()]
    for line in grades[:2]:  # the first query's grades, one of each variant
        line["query"] = EVIL
    path.write_text("".join(json.dumps(line) + "\n" for line in grades))
    main(compare(path))
    text = capsys.readouterr().out
    _clean(text)
    assert "x\\x1b[2J\\x1b]0;PWN\\x07\\nFORGED LINE" in text
    main(compare(path, "--markdown"))
    _clean(capsys.readouterr().out)


def test_rubrics_check_escapes_a_rule_files_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = Path(__file__).resolve().parents[2] / "examples" / "rubrics" / "support-rules.toml"
    text = source.read_text().replace('name = "support"', 'name = "s\\u001b[31mred\\nFORGED"')
    rules = tmp_path / "rules.toml"
    rules.write_text(text)
    assert main(["rubrics", "--check", str(rules)]) == 0
    out = capsys.readouterr().out
    _clean(out)
    assert "(rules s\\x1b[31mred\\nFORGED 2)" in out


def test_a_baselines_hostile_test_id_is_escaped_in_the_pytest_summary(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makepyfile(
        test_a="def test_a(graded_session):\n    graded_session.record('session', 'list')\n"
    )
    baseline = {
        "format": "cleo-grade-baseline",
        "version": 1,
        "tests": {EVIL: {"percents": [50.0], "dimensions": {}}},
    }
    (pytester.path / "b.json").write_text(json.dumps(baseline))
    result = pytester.runpytest("--cleo-grade-baseline=b.json")
    out = "\n".join(result.outlines)
    _clean(out)
    assert f"missing from this run (in baseline): {SHOWN}" in result.outlines
