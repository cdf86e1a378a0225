"""``cleo-grade compare``: verdict table and decision from a real history, and exit statuses."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.rubrics.comparison import comparison_grade
from pytest_cleo_grade.rubrics.comparison.scores import METRIC_IDS, Mode
from pytest_cleo_grade.store.history import append_grade
from tests.entries import NOW, entry
from tests.rubrics.test_comparison_structural import GOOD_OUTPUT

SCHEMA = json.loads(
    (Path(__file__).resolve().parents[2] / "schemas" / "grade.schema.json").read_text()
)
ENTRIES = [entry("memory", "find", at=0), entry("tools", "Grep", at=2)]
PLAN: list[tuple[str, Mode]] = [
    ("TQ-1", "quick"),
    ("TQ-2", "medium"),
    ("TQ-3", "medium"),
    ("TQ-4", "thorough"),
    ("TQ-5", "thorough"),
]


def scores(total: int) -> list[int]:
    base, extra = divmod(total, 6)
    return [base + 1] * extra + [base] * (6 - extra)


def write_history(path: Path, candidate_totals: list[int], baseline_total: int = 24) -> Path:
    """Baseline "sonnet" scores ``baseline_total`` everywhere; "haiku" the given totals."""
    for index, ((query, mode), total) in enumerate(zip(PLAN, candidate_totals, strict=True)):
        for variant, value in (("sonnet", baseline_total), ("haiku", total)):
            result = comparison_grade(
                ENTRIES,
                GOOD_OUTPUT,
                mode,
                dict(zip(METRIC_IDS, scores(value), strict=True)),
                session_id=f"{variant}-{index}",
                variant=variant,
                query=query,
                now=NOW,
            )
            jsonschema.validate(result.to_json_dict(), SCHEMA)
            append_grade(result, path)
    return path


def compare(history: Path, *extra: str) -> list[str]:
    return [
        "compare",
        "--baseline",
        "sonnet",
        "--candidate",
        "haiku",
        "--history",
        str(history),
        *extra,
    ]


@pytest.mark.parametrize(
    ("totals", "status", "decision"),
    [
        pytest.param([24, 24, 25, 24, 27], 0, "Decision: GO [M3]", id="go"),
        pytest.param(
            [24, 24, 24, 24, 17], 0, "Decision: GO (with monitoring note) [M5]", id="go-monitor"
        ),
        pytest.param([24, 24, 24, 17, 17], 3, "Decision: CONDITIONAL [M6]", id="conditional"),
        pytest.param([17, 24, 24, 24, 24], 1, "Decision: NO-GO [M1]", id="no-go-quick"),
        pytest.param([24, 17, 17, 24, 24], 1, "Decision: NO-GO [M2]", id="no-go-medium"),
    ],
)
def test_the_exit_status_follows_the_decision(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    totals: list[int],
    status: int,
    decision: str,
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", totals)
    assert main(compare(history)) == status
    out = capsys.readouterr().out
    assert decision in out.splitlines()
    assert out.splitlines()[2].split()[:4] == ["Query", "Mode", "sonnet", "haiku"]


def test_json_output_carries_verdicts_exact_averages_and_the_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [24, 21, 24, 24, 17])
    assert main(compare(history, "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert [q["verdict"] for q in data["queries"]] == [
        "Equivalent",
        "Candidate Acceptable",
        "Equivalent",
        "Equivalent",
        "Candidate Degraded",
    ]
    assert data["queries"][1]["difference"] == {"exact": "-1/2", "value": -0.5}
    assert data["decision"]["decision"] == "GO (with monitoring note)"
    assert data["decision"]["reason"] == "4/5 OK, 1 Degraded: TQ-5 (thorough)"


def test_markdown_output_is_the_step_summary_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [17, 24, 24, 24, 24])
    assert main(compare(history, "--markdown")) == 1
    out = capsys.readouterr().out
    assert out.startswith("### Model comparison: haiku vs sonnet\n")
    assert "| TQ-1 | quick | 4.00 | 2.83 | -1.17 | Candidate Degraded |" in out
    assert "**Decision: NO-GO** (M1): 4/5 OK, 1 Degraded; Degraded in quick mode: TQ-1" in out


def test_repeated_runs_in_the_history_show_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [24, 24, 24, 24, 24])
    write_history(history, [21, 24, 24, 24, 24])
    write_history(history, [27, 24, 24, 24, 24])
    assert main(compare(history, "--seed", "0", "--resamples", "2000")) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].split()[-4:] == ["3/3", "[-0.50,", "+0.50]", "UNSTABLE"]
    assert lines[4].split()[-1] == "yes"
    reason = next(line for line in lines if line.startswith("Reason:"))
    assert reason.endswith("unstable over repeated runs: TQ-1 (quick)")
    assert lines[-1] == (
        "Note:     with unstable verdicts at their worst: GO (with monitoring note) [M4]; "
        "run more repetitions or decide with --decide-on worst"
    )


def test_a_hand_entered_sheet_can_stand_alone_or_join_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sheet = tmp_path / "scores.toml"
    sheet.write_text(
        "".join(
            f'[[scores]]\nvariant = "{variant}"\nquery = "TQ-1"\nmode = "quick"\n'
            f"substantive = {{ Q-01 = {q}, Q-02 = 4, Q-03 = 4, Q-04 = 4, Q-05 = 4, Q-06 = 4 }}\n"
            for variant, q in (("sonnet", 4), ("haiku", 1))
        )
    )
    assert (
        main(["compare", "--baseline", "sonnet", "--candidate", "haiku", "--sheet", str(sheet)])
        == 0
    )
    assert "Decision: GO (with monitoring note) [M4]" in capsys.readouterr().out
    history = write_history(tmp_path / "GRADES.jsonl", [24, 24, 24, 24, 24])
    assert main(compare(history, "--sheet", str(sheet))) == 0
    first_row = capsys.readouterr().out.splitlines()[3].split()
    assert first_row[:2] + first_row[-4:] == [
        "TQ-1",
        "quick",
        "2/2",
        "[-0.50,",
        "0.00]",
        "UNSTABLE",
    ]
    assert main(compare(history, "--sheet", str(sheet), "--json")) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["queries"][0]["baseline"]["runs"] == 2


def test_the_history_defaults_to_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    write_history(tmp_path / ".cleo" / "metrics" / "GRADES.jsonl", [24] * 5)
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "--baseline", "sonnet", "--candidate", "haiku"]) == 0
    assert "Decision: GO [M3]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["compare", "--baseline", "sonnet"],
            "cleo-grade compare: the following arguments are required: --candidate",
            id="missing-candidate",
        ),
        pytest.param(
            ["compare", "--baseline", "a", "--candidate", "a"],
            "cleo-grade compare: --baseline and --candidate must differ",
            id="same-variant",
        ),
        pytest.param(
            ["compare", "--baseline", "a", "--candidate", "b", "--json", "--markdown"],
            "cleo-grade compare: argument --markdown: not allowed with argument --json",
            id="json-and-markdown",
        ),
        pytest.param(
            ["compare", "--baseline", "a", "--candidate", "b", "--resamples", "0"],
            "cleo-grade compare: argument --resamples: expected an integer of at least 1000, "
            "got '0'",
            id="zero-resamples",
        ),
        pytest.param(
            ["compare", "--baseline", "a", "--candidate", "b", "--resamples", "999"],
            "cleo-grade compare: argument --resamples: expected an integer of at least 1000, "
            "got '999'",
            id="too-few-resamples",
        ),
    ],
)
def test_usage_errors_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(args) == 2
    assert capsys.readouterr().err == message + "\n"


def test_input_errors_exit_2_with_one_line_naming_the_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [24] * 5)
    assert (
        main(["compare", "--baseline", "sonnet", "--candidate", "opus", "--history", str(history)])
        == 2
    )
    assert capsys.readouterr().err == (
        "cleo-grade: error: no scored runs of candidate variant 'opus' "
        "(variants found: haiku, sonnet)\n"
    )
    assert main(compare(tmp_path / "missing.jsonl")) == 2
    assert "variants found: none" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text('[{"variant": "haiku"}]')
    assert main(compare(history, "--sheet", str(bad))) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade: error: {bad}: scores[0]: query: Field required (and 2 more errors)\n"
    )


def test_a_comparison_grade_missing_its_fields_is_an_error_naming_the_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = tmp_path / "GRADES.jsonl"
    line = {
        "sessionId": "s7",
        "totalScore": 50,
        "maxScore": 100,
        "dimensions": {},
        "timestamp": "2026-01-01T00:00:00Z",
        "entryCount": 1,
        "variant": "haiku",
    }
    history.write_text(json.dumps(line) + "\n")
    assert main(compare(history)) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade: error: {history}:1: grade of session s7: query: Field required "
        "(and 2 more errors)\n"
    )


def test_a_corrupt_history_line_is_a_warning_not_a_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [24] * 5)
    with history.open("a") as handle:
        handle.write("{not json\n")
    assert main(compare(history)) == 0
    captured = capsys.readouterr()
    assert "Decision: GO [M3]" in captured.out
    assert captured.err.startswith(f"cleo-grade: warning: {history}:11: skipped corrupt grade line")


def test_a_no_go_is_exit_status_one_and_a_bad_sheet_one_line_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [24, 17, 17, 24, 24])
    assert main(compare(history)) == 1
    done = capsys.readouterr()
    assert "Decision: NO-GO [M2]" in done.out
    assert done.err == ""
    assert main(compare(history, "--sheet", str(tmp_path / "none.toml"))) == 2
    broken = capsys.readouterr()
    assert len(broken.err.splitlines()) == 1
    assert "Traceback" not in broken.err


def test_decide_on_worst_turns_an_unstable_quick_verdict_into_no_go(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [23, 24, 24, 24, 24])
    write_history(history, [18, 24, 24, 24, 24])
    write_history(history, [16, 24, 24, 24, 24])
    assert main(compare(history)) == 0
    assert "Note:     with unstable verdicts at their worst: NO-GO [M1]" in capsys.readouterr().out
    assert main(compare(history, "--decide-on", "worst")) == 1
    assert "Decision: NO-GO [M1]" in capsys.readouterr().out


def test_a_broken_grade_of_another_variant_does_not_stop_the_comparison(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [24] * 5)
    opus = comparison_grade(
        ENTRIES,
        GOOD_OUTPUT,
        "quick",
        dict.fromkeys(METRIC_IDS, 4),
        session_id="s-opus",
        variant="opus",
        query="TQ-1",
        now=NOW,
    )
    append_grade(opus.model_copy(update={"query": " "}), history)
    assert main(compare(history)) == 0
    assert "Decision: GO [M3]" in capsys.readouterr().out
    args = ["compare", "--baseline", "sonnet", "--candidate", "opus", "--history", str(history)]
    assert main(args) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade: error: {history}:11: grade of session s-opus: query: must not be blank\n"
    )


def test_a_bad_comparison_grade_is_named_by_its_history_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = write_history(tmp_path / "GRADES.jsonl", [24] * 5)
    lines = history.read_text().splitlines()
    # Line 4 (haiku's TQ-2) gets a mode the reader refuses; line 2 has the same session id
    # pattern but other content, and a corrupt line before it shifts nothing.
    bad = json.loads(lines[3])
    bad["mode"] = "fast"
    lines[3] = json.dumps(bad)
    history.write_text("\n".join(["{torn", *lines]) + "\n")
    assert main(compare(history)) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"cleo-grade: error: {history}:5: grade of session haiku-1: mode: Input should be "
        "'quick', 'medium' or 'thorough'"
    )


def test_a_hostile_query_id_cannot_forge_a_line_of_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query = "TQ-1\nDecision: GO [M3]\x1b[2K\x1b[32m|<b>x</b>"
    rows = [
        {
            "variant": variant,
            "query": query,
            "mode": "quick",
            "substantive": dict.fromkeys(METRIC_IDS, value),
        }
        for variant, value in (("sonnet", 4), ("haiku", 2))
    ]
    sheet = tmp_path / "h.json"
    sheet.write_text(json.dumps(rows))
    args = ["compare", "--baseline", "sonnet", "--candidate", "haiku", "--sheet", str(sheet)]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert [line for line in out.splitlines() if line.startswith("Decision:")] == [
        "Decision: NO-GO [M1]"
    ]
    assert (
        "Reason:   0/1 OK, 1 Degraded; Degraded in quick mode: "
        "TQ-1\\nDecision: GO [M3]\\x1b[2K\\x1b[32m|<b>x</b> (quick)"
    ) in out.splitlines()
