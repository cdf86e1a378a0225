"""Combined rubrics: ``cleo:0.7,rules:0.3`` grades with both and weighs their percentages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.rubrics.protocol import RubricConfig
from pytest_cleo_grade.rubrics.registry import get_rubric, grade_with_rubric
from tests.entries import NOW, entry

#: One dimension: 10 points for any reply, so a session without one scores 0 %.
REPLY_RULES = """
name = "reply"
[[dimensions]]
name = "reply"
max = 10
[[dimensions.rules]]
id = "replied"
kind = "called"
match = { calls = ["tool.reply"] }
points = 10
flag = "Never replied"
"""

# CLEO: session.list before work (10) + find (15) + query gateway (10) + 40 = 75 %.
SESSION = [entry("session", "list", at=0), entry("tasks", "find", at=1)]


@pytest.fixture
def rules(tmp_path: Path) -> Path:
    path = tmp_path / "reply.toml"
    path.write_text(REPLY_RULES, encoding="utf-8")
    return path


def test_the_total_is_the_weighted_mean_of_the_parts_percentages(rules: Path) -> None:
    result = grade_with_rubric(
        "cleo:0.7,rules:0.3",
        SESSION,
        session_id="s1",
        now=NOW,
        config=RubricConfig(rubric_file=rules),
    )
    assert (result.total_score, result.max_score) == (52.5, 100)  # 0.7 x 75 + 0.3 x 0
    assert list(result.dimensions)[:2] == ["cleo.sessionDiscipline", "cleo.discoveryEfficiency"]
    assert result.dimensions["rules.reply"].score == 0
    assert result.dimensions["cleo.taskHygiene"].max == 20  # each part keeps its own scale
    assert result.flags[-1] == "rules: Never replied"
    assert result.flags[0] == "cleo: session.end never called (always end sessions when done)"
    extra = result.model_extra or {}
    assert extra["rubric"] == "cleo:0.7,rules:0.3"
    assert extra["rubricVersion"] == "cleo 1.0.0 + rules 1"
    assert extra["parts"]["cleo"]["weight"] == 0.7
    assert extra["parts"]["cleo"]["result"]["totalScore"] == 75
    assert extra["parts"]["rules"]["result"]["rubric"] == "rules"
    for name, dimension in result.dimensions.items():
        assert sum(p.points for p in result.points if p.dimension == name) == dimension.score


def test_weights_are_relative_and_named_canonically() -> None:
    rubric = get_rubric("cleo:7, rules:3")
    assert rubric.name == "cleo:0.7,rules:0.3"
    assert sum(rubric.dimensions.values()) == 200  # two 100-point rubrics, each at its scale


def test_weights_too_large_to_add_up_are_still_relative() -> None:
    rubric = get_rubric("cleo:1e308,rules:1e308")
    assert rubric.name == "cleo:0.5,rules:0.5"
    result = grade_with_rubric("cleo:1e308,rules:1e308", SESSION, session_id="s1", now=NOW)
    assert result.total_score == 75


def test_a_combination_that_sums_to_a_clean_percentage_is_exact() -> None:
    result = grade_with_rubric("cleo:0.3,rules:0.7", SESSION, session_id="s1", now=NOW)
    assert result.total_score == 75  # both parts are CLEO's rubric here: 75 %


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("cleo:x", "invalid rubric 'cleo:x': the weight of cleo is not a number"),
        ("cleo:0,rules:1", "the weight of cleo must be a finite number above 0"),
        ("cleo:inf,rules:1", "the weight of cleo must be a finite number above 0"),
        ("cleo:1,cleo:2", "cleo is named twice"),
        # Its share would be stored as weight 0, which no combination may have.
        ("cleo:1e200,rules:1e-200", "the weight of rules is less than a millionth of the total"),
        ("cleo:1,nope:1", "unknown rubric 'nope'; available rubrics: cleo, comparison, rules"),
        ("cleo:1,comparison:1", "rubric 'comparison' cannot be combined with others"),
        ("cleo,rules", "expected NAME or NAME:WEIGHT,NAME:WEIGHT"),
    ],
)
def test_a_bad_combination_is_one_rubric_error(spec: str, message: str) -> None:
    with pytest.raises(RubricError) as caught:
        get_rubric(spec)
    assert message in str(caught.value)


def test_the_cli_grades_with_a_combination(
    tmp_path: Path, rules: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = tmp_path / "e.jsonl"
    rows = [*SESSION, entry("tool", "reply", at=2)]
    entries.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    argv = ["grade", "--entries", str(entries), "--rubric", "cleo:0.5,rules:0.5", "--json"]
    assert main([*argv, "--rubric-file", str(rules), "--history", str(tmp_path / "G")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["totalScore"], data["grade"]) == (87.5, "B")  # (75 + 100) / 2


def test_the_marker_combines_rubrics_and_the_threshold_uses_the_combined_percentage(
    pytester: pytest.Pytester, rules: Path
) -> None:
    pytester.makepyfile(
        """
        import pytest

        def agent(s):
            s.record("session", "list", gateway="cleo_query")
            s.record("tasks", "find", gateway="cleo_query")

        @pytest.mark.cleo_grade(rubric={"cleo": 0.7, "rules": 0.3}, fail_under=50)
        def test_passes(graded_session):
            agent(graded_session)

        @pytest.mark.cleo_grade(rubric={"cleo": 0.3, "rules": 0.7}, fail_under=50)
        def test_fails(graded_session):
            agent(graded_session)
        """
    )
    result = pytester.runpytest(f"--cleo-grade-rubric-file={rules}", "--junitxml=out.xml")
    result.assert_outcomes(passed=1, failed=1)
    # 0.3 x 75 + 0.7 x 0 = 22.5 %, below 50 %.
    result.stdout.fnmatch_lines(["*22.5/100*is below the threshold 50%*"])
    junit = (pytester.path / "out.xml").read_text()
    assert 'name="cleo_rubric" value="cleo:0.7,rules:0.3"' in junit
    assert 'name="cleo_dim_rules.reply" value="0/10"' in junit


def test_a_bad_weight_in_the_marker_is_a_usage_error_naming_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(rubric={"cleo": "heavy"})
        def test_bad(graded_session):
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            "*test_bad: @pytest.mark.cleo_grade(rubric=...): invalid rubric {'cleo': 'heavy'}: "
            "the weight of cleo is not a number"
        ]
    )
