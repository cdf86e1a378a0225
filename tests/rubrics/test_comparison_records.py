"""Score sheets, judges, comparison grades in the history, pairing runs, and the reports."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.core.errors import JudgeError
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.judges.protocol import JudgeReplyError
from pytest_cleo_grade.rubrics.comparison import (
    ComparisonError,
    ComparisonRecord,
    SubstantiveScores,
    compare_grades,
    compare_records,
    comparison_grade,
    judge_prompt,
    load_score_sheet,
    parse_judge_answer,
    records_from_grades,
    render_markdown,
    render_text,
    scores_from_judge,
)
from pytest_cleo_grade.rubrics.comparison.render import comparison_properties
from pytest_cleo_grade.rubrics.comparison.scores import Mode
from pytest_cleo_grade.store.history import append_grade, read_grades
from tests.entries import NOW, entry
from tests.rubrics.test_comparison_structural import MEDIUM_OUTPUT

FOURS = {"Q-01": 4, "Q-02": 4, "Q-03": 4, "Q-04": 4, "Q-05": 4, "Q-06": 4}


def row(variant: str, query: str, mode: str = "medium", **scores: int) -> dict[str, Any]:
    substantive = dict(FOURS)
    substantive.update({key.replace("q", "Q-0"): value for key, value in scores.items()})
    return {"variant": variant, "query": query, "mode": mode, "substantive": substantive}


def record(variant: str, query: str, mode: Mode, total: int) -> ComparisonRecord:
    """A record whose six scores sum to ``total`` (spread as evenly as possible)."""
    base, extra = divmod(total, 6)
    scores = [base + 1] * extra + [base] * (6 - extra)
    return ComparisonRecord(
        variant=variant, query=query, mode=mode, substantive=SubstantiveScores.of(*scores)
    )


# --- score sheets -------------------------------------------------------------------------------

TOML_SHEET = """\
[[scores]]
variant = "sonnet"
query = "TQ-1"
mode = "quick"
substantive = { Q-01 = 4, Q-02 = 4, Q-03 = 3, Q-04 = 4, Q-05 = 4, Q-06 = 5 }
operational = { OP-01 = 12.5, OP-05 = "no dispatch needed" }

[[scores]]
variant = "haiku"
query = "TQ-1"
mode = "quick"
substantive = { Q-01 = 4, Q-02 = 3, Q-03 = 3, Q-04 = 4, Q-05 = 4, Q-06 = 4 }
structural = { S-01 = true, S-02 = false }
"""


def test_a_toml_score_sheet_loads_into_records_naming_their_rows(tmp_path: Path) -> None:
    sheet = tmp_path / "scores.toml"
    sheet.write_text(TOML_SHEET)
    first, second = load_score_sheet(sheet)
    assert (first.variant, first.query, first.mode, first.substantive.total) == (
        "sonnet",
        "TQ-1",
        "quick",
        24,
    )
    assert first.operational.note == "no dispatch needed"
    assert second.structural == {"S-01": True, "S-02": False}
    assert second.source == f"{sheet}: scores[1]"


@pytest.mark.parametrize(
    "document",
    [
        pytest.param([row("a", "TQ-1")], id="bare-list"),
        pytest.param({"scores": [row("a", "TQ-1")]}, id="scores-key"),
    ],
)
def test_a_json_score_sheet_is_a_list_of_rows(tmp_path: Path, document: object) -> None:
    sheet = tmp_path / "scores.json"
    sheet.write_text(json.dumps(document))
    assert [r.substantive.total for r in load_score_sheet(sheet)] == [24]


@pytest.mark.parametrize(
    ("document", "message"),
    [
        pytest.param(
            [row("a", "TQ-1"), row("a", "TQ-2", q3=6)],
            "scores[1]: substantive.Q-03: Input should be less than or equal to 5",
            id="score-above-5",
        ),
        pytest.param(
            [row("a", "TQ-1", q1=0)],
            "scores[0]: substantive.Q-01: Input should be greater than or equal to 1",
            id="score-below-1",
        ),
        pytest.param(
            [{**row("a", "TQ-1"), "substantive": {**FOURS, "Q-02": 3.5}}],
            "scores[0]: substantive.Q-02: Input should be a valid integer",
            id="half-point",
        ),
        pytest.param(
            [{**row("a", "TQ-1"), "substantive": {**FOURS, "Q-02": True}}],
            "scores[0]: substantive.Q-02: Input should be a valid integer",
            id="boolean",
        ),
        pytest.param(
            [{**row("a", "TQ-1"), "substantive": {k: 4 for k in list(FOURS)[:5]}}],
            "scores[0]: substantive.Q-06: Field required",
            id="missing-metric",
        ),
        pytest.param(
            [{**row("a", "TQ-1"), "substantive": {**FOURS, "Q-07": 4}}],
            "scores[0]: substantive.Q-07: Extra inputs are not permitted",
            id="unknown-metric",
        ),
        pytest.param(
            [{**row("a", "TQ-1"), "mode": "deep"}],
            "scores[0]: mode: Input should be 'quick', 'medium' or 'thorough'",
            id="unknown-mode",
        ),
        pytest.param(
            [{**row("a", "TQ-1"), "varaint": "b"}],
            "scores[0]: varaint: Extra inputs are not permitted",
            id="typo-in-a-key",
        ),
        pytest.param([], "scores: expected a non-empty list of score rows", id="empty"),
        pytest.param({"rows": []}, "unknown top-level key 'rows'", id="unknown-top-level-key"),
        pytest.param(["x"], "scores[0]: expected a table/object", id="row-not-an-object"),
        pytest.param(
            [{**row("a", "TQ-1"), "structural": {"S01": False}}],
            "scores[0]: structural.S01.[key]: Input should be 'S-01', 'S-02'",
            id="unknown-check-id",
        ),
        pytest.param(
            [{**row("a", "TQ-1"), "structural": {"S-01": "yes"}}],
            "scores[0]: structural.S-01: Input should be a valid boolean",
            id="lax-boolean",
        ),
    ],
)
def test_score_sheet_errors_name_the_file_row_and_field(
    tmp_path: Path, document: object, message: str
) -> None:
    sheet = tmp_path / "scores.json"
    sheet.write_text(json.dumps(document))
    with pytest.raises(ComparisonError) as caught:
        load_score_sheet(sheet)
    assert str(caught.value).startswith(f"{sheet}: ")
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        pytest.param("s.toml", "[[scores]\n", "invalid TOML", id="bad-toml"),
        pytest.param("s.json", '[\n{"variant": }\n]', "s.json:2: invalid JSON", id="bad-json"),
        pytest.param("s.json", "[NaN]", "NaN is not a valid score", id="nan"),
        pytest.param(
            "s.json",
            '[{"variant": "a", "substantive": {"Q-01": 4, "Q-01": 5}}]',
            "s.json: invalid JSON: duplicate key 'Q-01'",
            id="duplicate-json-key",
        ),
        pytest.param(
            "s.toml",
            "[[scores]]\nstructural = { S-01 = true, S-01 = false }\n",
            "invalid TOML",
            id="duplicate-toml-key",
        ),
        pytest.param(
            "s.json", "[" + "9" * 5000 + "]", "JSON: a number with more than 4300", id="huge-json"
        ),
        pytest.param(
            "s.toml", "n = " + "9" * 5000, "TOML: a number with more than 4300", id="huge-toml"
        ),
    ],
)
def test_unparsable_score_sheets_are_errors_naming_the_file(
    tmp_path: Path, name: str, text: str, message: str
) -> None:
    sheet = tmp_path / name
    sheet.write_text(text)
    with pytest.raises(ComparisonError, match=message):
        load_score_sheet(sheet)


def test_a_missing_score_sheet_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ComparisonError, match=r"nope\.json: cannot read"):
        load_score_sheet(tmp_path / "nope.json")


# --- judges -------------------------------------------------------------------------------------


def test_the_judge_gets_the_rubric_query_mode_and_output_and_its_json_is_validated() -> None:
    prompts: list[str] = []

    def judge(prompt: str) -> str:
        prompts.append(prompt)
        return json.dumps({"Q-01": 5, "Q-02": 4, "Q-03": 3, "Q-04": 4, "Q-05": 2, "Q-06": 5})

    scores = scores_from_judge(judge, query="TQ-2", output_text="## Memory\n", mode="thorough")
    assert scores.as_dict()["Q-05"] == 2
    assert prompts == [judge_prompt(query="TQ-2", output_text="## Memory\n", mode="thorough")]
    assert "Query: TQ-2" in prompts[0]
    assert "Thoroughness mode: thorough" in prompts[0]
    assert "\nQ-06: Evidence Density\n" in prompts[0]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            "```json\n" + json.dumps({"scores": FOURS}) + "\n```", id="fenced-under-scores"
        ),
        pytest.param(json.dumps(FOURS), id="bare-object"),
    ],
)
def test_judge_answers_may_be_fenced_or_wrapped(answer: str) -> None:
    assert parse_judge_answer(answer).total == 24


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        pytest.param("Scores: all fours", "not JSON", id="prose"),
        pytest.param("[4, 4, 4, 4, 4, 4]", "not a JSON object", id="list"),
        pytest.param(json.dumps({**FOURS, "Q-04": 9}), "judge answer: Q-04", id="out-of-range"),
    ],
)
def test_unusable_judge_answers_raise_judge_error(answer: str, message: str) -> None:
    with pytest.raises(JudgeError, match=message):
        parse_judge_answer(answer)


def test_an_unusable_judge_answer_is_asked_again_once_saying_what_was_wrong() -> None:
    prompts: list[str] = []
    answers = iter(["Scores: all fours", "Here you are: " + json.dumps(FOURS)])

    def judge(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    assert scores_from_judge(judge, query="q", output_text="", mode="quick").total == 24
    assert len(prompts) == 2
    assert prompts[1].startswith(prompts[0])
    assert "not JSON" in prompts[1]
    assert "Scores: all fours" in prompts[1]


def test_a_judge_answer_unusable_after_the_re_ask_is_an_error_carrying_the_raw_answer() -> None:
    calls: list[str] = []

    def judge(prompt: str) -> str:
        calls.append(prompt)
        return json.dumps({**FOURS, "Q-04": 9})

    with pytest.raises(JudgeReplyError, match="after one re-ask: judge answer: Q-04") as caught:
        scores_from_judge(judge, query="q", output_text="", mode="quick")
    assert caught.value.raw == json.dumps({**FOURS, "Q-04": 9})
    assert len(calls) == 2


def test_a_judge_that_returns_no_text_is_an_error() -> None:
    with pytest.raises(JudgeError, match="judge returned dict"):
        scores_from_judge(lambda _: FOURS, query="q", output_text="", mode="quick")  # type: ignore[arg-type,return-value]


# --- comparison grades --------------------------------------------------------------------------

ENTRIES = [
    entry("memory", "find", at=0),
    entry("tools", "Grep", at=4),
    entry("tools", "Read", at=9, params={"tokens": 300}),
]


def grade(variant: str, query: str, mode: Mode, scores: Any, session: str = "s1") -> GradeResult:
    return comparison_grade(
        ENTRIES,
        MEDIUM_OUTPUT,
        mode,
        scores,
        session_id=session,
        variant=variant,
        query=query,
        now=NOW,
    )


def test_a_comparison_grade_has_structural_and_substantive_dimensions_and_the_extras() -> None:
    result = grade("sonnet", "TQ-1", "medium", SubstantiveScores.of(4, 4, 3, 4, 4, 5))
    data = result.to_json_dict()
    assert (data["totalScore"], data["maxScore"], data["entryCount"]) == (30, 36, 3)
    assert list(data["dimensions"]) == ["structural", "substantive"]
    assert data["dimensions"]["structural"]["score"] == 6
    assert data["dimensions"]["substantive"]["evidence"][-1] == "average 4.00 (exactly 4)"
    assert data["flags"] == []
    assert {key: data[key] for key in ("rubric", "variant", "query", "mode")} == {
        "rubric": "comparison",
        "variant": "sonnet",
        "query": "TQ-1",
        "mode": "medium",
    }
    assert data["substantive"] == {
        "Q-01": 4,
        "Q-02": 4,
        "Q-03": 3,
        "Q-04": 4,
        "Q-05": 4,
        "Q-06": 5,
    }
    assert data["structural"] == dict.fromkeys(
        ["S-01", "S-02", "S-03", "S-04", "S-05", "S-06"], True
    )
    assert data["operational"] == {
        "OP-01": 9.0,
        "OP-02": 3,
        "OP-03": 0,
        "OP-04": 300,
        "OP-05": None,
    }


def test_failed_structural_checks_become_flags() -> None:
    result = comparison_grade(
        [entry("tools", "Write", at=0, gateway="cleo_mutate")],
        "## Memory\n- nothing cited\n",
        "quick",
        FOURS,
        session_id="s2",
        variant="haiku",
        query="TQ-1",
        now=NOW,
    )
    assert result.flags == [
        "S-01 Section completeness failed: missing sections: Codebase, Patterns, Dispatched, "
        "Gaps, Recommendation",
        "S-02 Output size compliance failed: ~6.5 tokens = 26 characters / 4; quick budget "
        "500, allowed 400-600",
        "S-03 Evidence citations failed: 1 of 1 findings cite no path:line or memory id",
        "S-04 Memory-first protocol failed: no memory tool call",
        "S-06 Read-only compliance failed: 1 mutation call: tools.Write",
    ]
    assert result.model_extra is not None
    assert result.model_extra["structural"]["S-02"] is False


def test_a_comparison_grade_can_ask_a_judge_for_the_scores() -> None:
    result = grade("haiku", "TQ-1", "medium", lambda prompt: json.dumps(FOURS))
    assert result.dimensions["substantive"].score == 24


@pytest.mark.parametrize(
    ("scores", "mode", "message"),
    [
        pytest.param({**FOURS, "Q-01": 7}, "medium", "substantive scores: Q-01", id="bad-score"),
        pytest.param(FOURS, "deep", "mode must be quick, medium or thorough", id="bad-mode"),
    ],
)
def test_comparison_grade_rejects_bad_scores_and_modes(
    scores: dict[str, int], mode: Any, message: str
) -> None:
    with pytest.raises(ComparisonError, match=message):
        grade("a", "TQ-1", mode, scores)


@pytest.mark.parametrize(
    ("variant", "query", "message"),
    [
        pytest.param(
            " ", "TQ-1", "variant must be a non-blank string, not ' '", id="blank-variant"
        ),
        pytest.param("a", "", "query must be a non-blank string, not ''", id="empty-query"),
        pytest.param("a", 7, "query must be a non-blank string, not 7", id="query-not-text"),
    ],
)
def test_comparison_grade_refuses_what_the_history_reader_would_refuse(
    variant: Any, query: Any, message: str
) -> None:
    with pytest.raises(ComparisonError, match=message):
        grade(variant, query, "quick", FOURS)


def test_a_broken_grade_of_a_variant_not_compared_never_blocks_the_comparison() -> None:
    broken = grade("opus", "TQ-1", "quick", FOURS).model_copy(update={"query": " "})
    grades = [
        grade("sonnet", "TQ-1", "quick", FOURS),
        broken,
        grade("haiku", "TQ-1", "quick", FOURS),
    ]
    assert compare_grades(grades, "sonnet", "haiku").decision.rule == "M3"
    assert [r.variant for r in records_from_grades(grades, ("sonnet", "haiku"))] == [
        "sonnet",
        "haiku",
    ]
    with pytest.raises(ComparisonError, match="grade of session s1: query: must not be blank"):
        compare_grades(grades, "sonnet", "opus")


def test_comparison_grades_round_trip_through_the_history(tmp_path: Path) -> None:
    history = tmp_path / "GRADES.jsonl"
    plain = GradeResult(
        session_id="plain", total_score=80, dimensions={}, timestamp=NOW, entry_count=1
    )
    append_grade(plain, history)
    append_grade(grade("sonnet", "TQ-1", "quick", FOURS, "s1"), history)
    append_grade(grade("haiku", "TQ-1", "quick", {**FOURS, "Q-06": 1}, "s2"), history)
    records = records_from_grades(read_grades(history))
    assert [(r.variant, r.substantive.total, r.source) for r in records] == [
        ("sonnet", 24, "session s1"),
        ("haiku", 21, "session s2"),
    ]
    comparison = compare_grades(read_grades(history), "sonnet", "haiku")
    assert comparison.queries[0].verdict.verdict == "acceptable"


def test_a_comparison_grade_with_a_bad_extra_is_an_error_naming_the_session() -> None:
    broken = GradeResult.model_validate(
        {
            "sessionId": "s9",
            "totalScore": 1,
            "dimensions": {},
            "timestamp": datetime(2026, 3, 1, tzinfo=UTC),
            "entryCount": 0,
            "variant": "haiku",
            "query": "TQ-1",
            "mode": "quick",
        }
    )
    with pytest.raises(ComparisonError, match="grade of session s9: substantive: Field required"):
        records_from_grades([broken])


# --- pairing runs -------------------------------------------------------------------------------


def seed_example() -> list[ComparisonRecord]:
    """Seed 002's shape: TQ-1 quick, TQ-2/3 medium, TQ-4/5 thorough, single runs."""
    plan = [
        ("TQ-1", "quick", 24, 23),
        ("TQ-2", "medium", 24, 21),
        ("TQ-3", "medium", 27, 28),
        ("TQ-4", "thorough", 27, 18),
        ("TQ-5", "thorough", 24, 24),
    ]
    records = []
    for query, mode, base, cand in plan:
        records.append(record("sonnet", query, mode, base))  # type: ignore[arg-type]
        records.append(record("haiku", query, mode, cand))  # type: ignore[arg-type]
    return records


def test_seed_example_pairs_queries_into_verdicts_and_a_decision() -> None:
    comparison = compare_records(seed_example(), "sonnet", "haiku")
    assert [q.verdict.verdict for q in comparison.queries] == [
        "equivalent",
        "acceptable",
        "equivalent",
        "degraded",
        "equivalent",
    ]
    assert (comparison.decision.kind, comparison.decision.rule) == ("GO_MONITOR", "M5")
    assert all(q.stability is None for q in comparison.queries)


@pytest.mark.parametrize(
    ("records", "baseline", "candidate", "message"),
    [
        pytest.param(seed_example(), "sonnet", "sonnet", "are the same variant", id="same"),
        pytest.param(
            seed_example(),
            "sonnet",
            "opus",
            "no scored runs of candidate variant 'opus' (variants found: haiku, sonnet)",
            id="unknown-candidate",
        ),
        pytest.param(
            [*seed_example(), record("sonnet", "TQ-6", "quick", 24)],
            "sonnet",
            "haiku",
            "query 'TQ-6' has no runs of candidate variant 'haiku'",
            id="unpaired-query",
        ),
        pytest.param(
            [*seed_example(), record("haiku", "TQ-1", "thorough", 24)],
            "sonnet",
            "haiku",
            "query 'TQ-1' is scored in both quick and thorough mode",
            id="mode-mismatch",
        ),
    ],
)
def test_comparisons_that_cannot_be_paired_are_errors(
    records: list[ComparisonRecord], baseline: str, candidate: str, message: str
) -> None:
    with pytest.raises(ComparisonError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compare_records(records, baseline, candidate)


def test_other_variants_in_the_records_are_ignored() -> None:
    records = [*seed_example(), record("opus", "TQ-9", "thorough", 30)]
    comparison = compare_records(records, "sonnet", "haiku")
    assert [q.verdict.query for q in comparison.queries][-1] == "TQ-5"


def test_repeated_runs_are_summarised_and_unstable_verdicts_reach_the_reason() -> None:
    records = [
        *(record("sonnet", "TQ-1", "quick", t) for t in (24, 24, 24)),
        *(record("haiku", "TQ-1", "quick", t) for t in (21, 24, 27)),
    ]
    comparison = compare_records(records, "sonnet", "haiku", seed=0)
    (query,) = comparison.queries
    assert (query.baseline.runs, query.candidate.runs) == (3, 3)
    assert query.verdict.verdict == "equivalent"
    assert query.verdict.unstable
    assert comparison.unstable == ["TQ-1"]
    assert comparison.decision.reason.endswith("unstable over repeated runs: TQ-1 (quick)")


# --- reports ------------------------------------------------------------------------------------


def test_the_text_report_is_an_aligned_table_with_the_decision() -> None:
    assert render_text(compare_records(seed_example(), "sonnet", "haiku")) == "\n".join(
        [
            "Comparison: haiku (candidate) vs sonnet (baseline)",
            "",
            "Query  Mode      sonnet  haiku  Diff   Verdict",
            "TQ-1   quick     4.00    3.83   -0.17  Equivalent",
            "TQ-2   medium    4.00    3.50   -0.50  Candidate Acceptable",
            "TQ-3   medium    4.50    4.67   +0.17  Equivalent",
            "TQ-4   thorough  4.50    3.00   -1.50  Candidate Degraded",
            "TQ-5   thorough  4.00    4.00   0.00   Equivalent",
            "",
            "Decision: GO (with monitoring note) [M5]",
            "Reason:   4/5 OK, 1 Degraded: TQ-4 (thorough)",
            "Action:   Keep the candidate, add a monitoring note.",
        ]
    )


def test_the_markdown_report_is_a_table_with_a_bold_decision_and_escaped_pipes() -> None:
    records = [
        record("a|b", "TQ-1", "quick", 24),
        record("c", "TQ-1", "quick", 24),
    ]
    assert render_markdown(compare_records(records, "a|b", "c")) == "\n".join(
        [
            "### Model comparison: c vs a\\|b",
            "",
            "| Query | Mode | a\\|b | c | Diff | Verdict |",
            "| --- | --- | --- | --- | --- | --- |",
            "| TQ-1 | quick | 4.00 | 4.00 | 0.00 | Equivalent |",
            "",
            "**Decision: GO** (M3): 1/1 Equivalent or Superior",
            "",
            "Action: Keep the candidate as the production model.",
            "",
        ]
    )


def test_reports_of_repeated_runs_add_runs_interval_and_stability_columns() -> None:
    records = [
        *(record("sonnet", "TQ-1", "quick", t) for t in (24, 24, 24)),
        *(record("haiku", "TQ-1", "quick", t) for t in (21, 24, 27)),
        record("sonnet", "TQ-2", "medium", 24),
        record("haiku", "TQ-2", "medium", 24),
    ]
    text = render_text(compare_records(records, "sonnet", "haiku")).splitlines()
    assert " ".join(text[2].split()) == (
        "Query Mode sonnet haiku Diff Verdict Runs 95% CI of diff Stable"
    )
    assert text[3].split()[-4:] == ["3/3", "[-0.50,", "+0.50]", "UNSTABLE"]
    assert text[4].split()[-4:] == ["1/1", "-", "single", "run"]


def unstable_quick_records() -> list[ComparisonRecord]:
    """TQ-1 (quick) is Acceptable on the means, Degraded at the interval's low end."""
    return [
        *(record("sonnet", "TQ-1", "quick", 24) for _ in range(3)),
        *(record("haiku", "TQ-1", "quick", t) for t in (23, 18, 16)),
        record("sonnet", "TQ-2", "medium", 24),
        record("haiku", "TQ-2", "medium", 24),
    ]


def test_the_worst_case_decision_is_reported_beside_the_mean_decision() -> None:
    comparison = compare_records(unstable_quick_records(), "sonnet", "haiku")
    assert comparison.queries[0].verdict.verdict == "acceptable"
    assert (comparison.decision.kind, comparison.decision.rule) == ("GO_MONITOR", "M4")
    assert comparison.worst_case is not None
    assert (comparison.worst_case.kind, comparison.worst_case.rule) == ("NO_GO", "M1")
    assert render_text(comparison).splitlines()[-1] == (
        "Note:     with unstable verdicts at their worst: NO-GO [M1]; "
        "run more repetitions or decide with --decide-on worst"
    )


def test_deciding_on_the_worst_case_gates_on_unstable_verdicts_at_their_worst() -> None:
    comparison = compare_records(unstable_quick_records(), "sonnet", "haiku", decide_on="worst")
    assert (comparison.decision.kind, comparison.decision.rule) == ("NO_GO", "M1")
    data = comparison.to_json_dict()
    assert data["decideOn"] == "worst"
    assert (data["queries"][0]["interval"]["worstVerdict"], data["worstCase"]["decision"]) == (
        "Candidate Degraded",
        "NO-GO",
    )
    assert render_markdown(comparison).endswith(
        "_unstable verdicts were taken at their worst (--decide-on worst)_\n"
    )


def test_without_unstable_verdicts_there_is_no_worst_case() -> None:
    comparison = compare_records(seed_example(), "sonnet", "haiku", decide_on="worst")
    assert comparison.worst_case is None
    assert comparison.decision.rule == "M5"


def test_junit_properties_of_a_comparison_grade() -> None:
    result = grade("haiku", "TQ-1", "quick", {**FOURS, "Q-06": 5})
    properties = comparison_properties(result)
    assert properties[:4] == [
        ("cleo_variant", "haiku"),
        ("cleo_query", "TQ-1"),
        ("cleo_mode", "quick"),
        ("cleo_q_average", "4.17"),
    ]
    assert ("cleo_Q-06", "5") in properties
    assert ("cleo_S-01", "pass") in properties
    assert len(properties) == 4 + 6 + 6


def test_a_plain_grade_has_no_comparison_properties() -> None:
    plain = GradeResult(session_id="p", total_score=1, dimensions={}, timestamp=NOW, entry_count=0)
    assert comparison_properties(plain) == []


#: A query id / variant name trying every escape: a forged line, ANSI, Markdown and HTML.
HOSTILE_QUERY = "TQ-1\nDecision: GO [M3]\x1b[2K\x1b[32m|<b>x</b> **bold** [l](http://e.example)"
HOSTILE_VARIANT = "haiku\x1b[31m\nPASSED fake|<i>"


def test_hostile_query_and_variant_names_stay_escaped_in_their_place_in_the_text_report() -> None:
    records = [
        record("sonnet", HOSTILE_QUERY, "quick", 24),
        record(HOSTILE_VARIANT, HOSTILE_QUERY, "quick", 12),
    ]
    text = render_text(compare_records(records, "sonnet", HOSTILE_VARIANT))
    assert "\x1b" not in text
    lines = text.split("\n")
    # Title, blank, header, one row, blank, decision, reason, action: nothing forged.
    assert len(lines) == 8
    assert [line.split(":")[0] for line in lines[5:]] == ["Decision", "Reason", "Action"]
    assert lines[6] == (
        "Reason:   0/1 OK, 1 Degraded; Degraded in quick mode: "
        "TQ-1\\nDecision: GO [M3]\\x1b[2K\\x1b[32m|<b>x</b> **bold** [l](http://e.example) "
        "(quick)"
    )
    assert "haiku\\x1b[31m\\nPASSED fake|<i>" in lines[0]


def test_deciding_on_the_worst_case_never_gates_on_a_better_verdict_than_the_mean() -> None:
    # TQ-1 (quick) is Degraded on the means (candidate 2.92 < 3.0): NO-GO. With one resample
    # the interval misses the mean; its corner must not make the "worst case" a GO.
    records = [
        record("sonnet", "TQ-1", "quick", 24),
        record("sonnet", "TQ-1", "quick", 24),
        record("haiku", "TQ-1", "quick", 12),
        record("haiku", "TQ-1", "quick", 23),
    ]
    comparison = compare_records(records, "sonnet", "haiku", resamples=1, decide_on="worst")
    assert comparison.queries[0].verdict.verdict == "degraded"
    assert (comparison.decision.kind, comparison.decision.rule) == ("NO_GO", "M1")
    assert comparison.worst_case is not None and comparison.worst_case.kind == "NO_GO"


def scenario_grades() -> list[GradeResult]:
    """Scenarios 0..11 of unequal scores, each run by both variants scoring alike, in
    collection order; their test ids are what the history keeps."""
    grades = []
    for scenario, value in enumerate((5, 1, 4, 2, 3, 5, 2, 4, 1, 3, 5, 2)):
        for variant in ("sonnet", "haiku"):
            result = grade(variant, "TQ-1", "quick", SubstantiveScores.of(*[value] * 6))
            test_id = f"t.py::test_q[{variant}-{scenario}]"
            grades.append(result.model_copy(update={"testId": test_id}))
    return grades


def test_repeated_runs_pair_by_test_id_whatever_order_the_history_holds_them_in() -> None:
    grades = scenario_grades()
    in_order = compare_grades(grades, "sonnet", "haiku").queries[0].stability
    assert in_order is not None
    assert (in_order.difference.low, in_order.difference.high) == (0, 0)
    # Completion order under pytest-xdist: any permutation; [10] sorts after [9].
    shuffled = grades[1::2][::-1] + grades[::2][5:] + grades[::2][:5]
    assert compare_grades(shuffled, "sonnet", "haiku").queries[0].stability == in_order


def test_repeated_runs_of_one_test_pair_by_run_index() -> None:
    grades = []
    for run, value in ((1, 5), (2, 3), (3, 4)):
        for variant in ("sonnet", "haiku"):
            result = grade(variant, "TQ-1", "quick", SubstantiveScores.of(*[value] * 6))
            test_id = f"t.py::test_{variant}"
            grades.append(result.model_copy(update={"testId": test_id, "run": run}))
    haiku_last_run_first = grades[::2] + grades[1::2][::-1]
    stable = compare_grades(haiku_last_run_first, "sonnet", "haiku").queries[0].stability
    assert stable is not None and (stable.difference.low, stable.difference.high) == (0, 0)


#: Seed 002 section 2, copied word for word (headings, questions and score rows): the
#: authority the judge prompt must carry.
SEED_METRICS = """\
Score each metric independently. Use the scale definitions below.
### Q-01: Pattern Precision
How accurately does the agent identify and describe code patterns?
| 1 | Patterns described are wrong or irrelevant to the query |
| 2 | Some patterns identified but with significant inaccuracies |
| 3 | Core patterns identified correctly; minor gaps or imprecisions |
| 4 | All major patterns identified accurately with specific references |
| 5 | Comprehensive pattern identification with nuanced distinctions and cross-references |
### Q-02: File Selection Quality
How well does the agent select relevant files from the codebase?
| 1 | Selected files are irrelevant or critical files missed entirely |
| 2 | Some relevant files found but major omissions |
| 3 | Most relevant files found; 1-2 notable omissions |
| 4 | All key files found with good coverage; minor omissions only |
| 5 | Comprehensive file discovery with excellent prioritization of most relevant files |
### Q-03: Gap Detection
How well does the agent identify and communicate what it did NOT find?
| 1 | No gaps section or claims "nothing missing" when gaps clearly exist |
| 2 | Gaps section exists but is generic or misses obvious unknowns |
| 3 | Key gaps identified; some lesser unknowns missed |
| 4 | Thorough gap identification with specific descriptions of what's missing |
| 5 | Excellent gap analysis including risk assessment and suggested investigation paths |
### Q-04: Cross-Reference Quality
How well does the agent connect findings across different sources (memory, files, patterns)?
| 1 | No cross-referencing; findings presented as isolated facts |
| 2 | Minimal connections; mostly lists of unrelated findings |
| 3 | Some cross-references between files or between memory and codebase |
| 4 | Good integration across sources with explicit connections noted |
| 5 | Excellent synthesis showing how findings relate, contradict, or complement each other |
### Q-05: Recommendation Quality
How actionable and well-reasoned is the final recommendation?
| 1 | No recommendation or recommendation contradicts findings |
| 2 | Generic recommendation ("proceed") without rationale |
| 3 | Reasonable recommendation with basic rationale |
| 4 | Well-reasoned recommendation with specific next steps tied to findings |
| 5 | Excellent recommendation with prioritized actions, risk-aware reasoning, and clear rationale |
### Q-06: Evidence Density
How well-supported are the findings with concrete evidence?
| 1 | Claims without any file paths, line numbers, or memory references |
| 2 | Some evidence but many unsupported claims |
| 3 | Most findings supported; some claims lack specific evidence |
| 4 | Strong evidence throughout with consistent `path:line` and memory ID citations |
| 5 | Every finding has precise evidence; no unsupported claims; evidence quality is exemplary |
"""


def test_the_judge_prompt_carries_every_metric_question_and_all_five_levels_verbatim() -> None:
    prompt = judge_prompt(query="TQ-1", output_text="x", mode="quick")
    lines = SEED_METRICS.splitlines()
    assert lines[0] in prompt  # "Score each metric independently. Use the scale ..."
    checked = 0
    for line in lines[1:]:
        if line.startswith("### "):
            expected = line.removeprefix("### ")  # "Q-01: Pattern Precision"
        elif line.startswith("| "):
            score, text = line.strip("| ").split(" | ")
            expected = f"{score}: {text}"
        else:
            expected = line  # the metric's question
        assert f"\n{expected}\n" in prompt
        checked += 1
    assert checked == 6 * (1 + 1 + 5)
    # The agent's output still comes last, alone on its line between the fences.
    assert prompt.endswith('```json\n"x"\n```\n')


def test_judge_replies_are_cached_under_the_original_prompt_only_when_valid(
    tmp_path: Path,
) -> None:
    from pytest_cleo_grade.judges._cache import JudgeCache
    from pytest_cleo_grade.judges.protocol import CallableJudge, UsageMeter

    answers = ["not json", json.dumps(FOURS)]
    prompts: list[str] = []

    def reply(prompt: str) -> str:
        prompts.append(prompt)
        return answers.pop(0)

    judge = CallableJudge(reply, identity="judge-v1")
    cache = JudgeCache(tmp_path / "audit.db")
    kwargs: dict[str, Any] = {"query": "TQ-1", "output_text": "## Memory\n", "mode": "quick"}
    first = UsageMeter()
    assert scores_from_judge(judge, cache=cache, meter=first, **kwargs).total == 24
    assert (first.requests, first.cached_replies) == (2, 0)  # the bad reply was re-asked
    again = UsageMeter()
    assert scores_from_judge(judge, cache=cache, meter=again, **kwargs).total == 24
    assert (again.requests, again.cached_replies, len(prompts)) == (0, 1, 2)
    assert again.as_extra()["cached"] is True
    # Another run of a repeated test (its cache scope) is asked on its own.
    answers.append(json.dumps(FOURS))
    scores_from_judge(judge, cache=cache, cache_scope="run-2", **kwargs)
    assert len(prompts) == 3
    # A judge without an identity is never cached.
    plain: list[str] = []
    for _ in range(2):
        scores_from_judge(lambda p: plain.append(p) or json.dumps(FOURS), cache=cache, **kwargs)
    assert len(plain) == 2
