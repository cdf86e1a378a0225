"""The rule rubric: each rule kind, rule-file errors, and CLEO's rules against the built-in."""

from __future__ import annotations

import json
import random
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade import GradeResult, grade_entries
from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.rubrics.protocol import RubricConfig
from pytest_cleo_grade.rubrics.registry import grade_with_rubric
from pytest_cleo_grade.rubrics.rules import cleo_rules, grade_rules, load_rule_file
from tests.entries import NOW, entry

#: A support agent's protocol, nothing like CLEO's: its tools are plain function names.
SUPPORT = """
name = "support"
version = "2"

[[dimensions]]
name = "workflow"
max = 30

[[dimensions.rules]]
id = "lookup_first"
kind = "before"
first = { calls = ["tool.lookup_customer"] }
then = { calls = ["tool.refund"] }
points = 10
evidence = "Looked the customer up before refunding"
flag = "Refunded before looking the customer up"
flag_missing = "Never looked the customer up"

[[dimensions.rules]]
id = "search_ratio"
kind = "ratio"
match = { calls = ["tool.search"] }
other = { calls = ["tool.browse"] }
threshold = 0.75
points = 10
evidence = "search used for {percent}% of lookups"
flag = "browse used {other}x of {total} ({percent}% search): {earned} of 10"

[[dimensions.rules]]
id = "replied"
kind = "called"
match = { calls = ["tool.send_email"], success = true }
points = 10
evidence = "Replied {count}x"
flag = "Never replied to the customer"

[[dimensions]]
name = "safety"
max = 20
start = 20
evidence_if_clean = "Nothing unsafe"

[[dimensions.rules]]
id = "no_delete"
kind = "forbidden"
match = { calls = ["tool.delete_user"] }
points = -15
flag = "Deleted a user ({operation})"

[[dimensions.rules]]
id = "verify_refund"
kind = "penalty"
match = { calls = ["tool.refund"] }
unless_preceded_by = { calls = ["tool.verify_identity"] }
points = -5
flag = "Refund without identity check"

[[dimensions.rules]]
id = "few_searches"
kind = "at_most"
match = { calls = ["tool.search"] }
max = 3
points = -2
flag = "{count} searches (at most {max})"

[[dimensions.rules]]
id = "retry"
kind = "recovery"
failure = { success = false }
recover = { calls = ["tool.search"] }
within = 2
points = -4
evidence = "Recovered from a failed {operation}"
flag = "No search within {within} calls after a failed {operation}"

[[dimensions.rules]]
id = "one_ticket"
kind = "duplicates"
match = { calls = ["tool.open_ticket"] }
param = "subject"
points = -3
flag = "{count} duplicate ticket(s)"
"""


def calls(*names: str | dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for at, name in enumerate(names):
        if isinstance(name, str):
            out.append(entry("tool", name, at=at, gateway=None))
        else:
            out.append(entry("tool", name.pop("op"), at=at, gateway=None, **name))
    return out


@pytest.fixture
def support(tmp_path: Path) -> Path:
    path = tmp_path / "support.toml"
    path.write_text(SUPPORT, encoding="utf-8")
    return path


def grade(path: Path, entries: list[dict[str, Any]]) -> GradeResult:
    result = grade_rules(load_rule_file(path), entries, session_id="s1", now=NOW)
    for name, dimension in result.dimensions.items():
        assert sum(p.points for p in result.points if p.dimension == name) == dimension.score
    return result


def test_a_well_behaved_support_agent_scores_full_marks(support: Path) -> None:
    result = grade(
        support,
        calls("lookup_customer", "search", "verify_identity", "refund", "send_email"),
    )
    assert (result.total_score, result.max_score, result.flags) == (50, 50, [])
    assert result.dimensions["workflow"].evidence == [
        "Looked the customer up before refunding",
        "search used for 100% of lookups",
        "Replied 1x",
    ]
    assert result.dimensions["safety"].evidence == ["Nothing unsafe"]


def test_every_rule_kind_deducts_with_its_flag_and_entries(support: Path) -> None:
    result = grade(
        support,
        calls(
            "refund",  # 0: before lookup, without verification
            "lookup_customer",
            "browse",
            "search",
            {"op": "search", "success": False, "exit_code": 1},  # 4: recovered by 5
            "search",
            "search",  # 6: the fourth search
            "delete_user",  # 7
            {"op": "open_ticket", "params": {"subject": "Refund"}},
            {"op": "open_ticket", "params": {"subject": " refund "}},  # 9: a duplicate
            {"op": "send_email", "success": False, "exit_code": 1},  # 10: fails, no search after
        ),
    )
    workflow = result.dimensions["workflow"]
    # search 4 of 5 lookups = 80 % >= 75 %: full 10; before: 0; replied: failed send only: 0.
    assert workflow.score == 10
    safety = result.dimensions["safety"]
    # 20 - 15 (delete) - 5 (refund) - 2 (4 searches) - 4 (send_email unrecovered) - 3 = -9 -> 0
    assert safety.score == 0
    assert result.flags == [
        "Refunded before looking the customer up",
        "Never replied to the customer",
        "Deleted a user (delete_user)",
        "Refund without identity check",
        "4 searches (at most 3)",
        "No search within 2 calls after a failed send_email",
        "1 duplicate ticket(s)",
    ]
    assert safety.evidence == ["Recovered from a failed search"]
    by_rule = {p.rule: (p.points, p.entries) for p in result.points if p.dimension == "safety"}
    assert by_rule["no_delete"] == (-15, [7])
    assert by_rule["verify_refund"] == (-5, [0])
    assert by_rule["few_searches"] == (-2, [6])
    assert by_rule["retry"] == (-4, [10])
    assert by_rule["one_ticket"] == (-3, [9])
    assert by_rule["safety.limit"] == (9, [])  # the floor of 0 gives back what went below it


def test_the_ratio_gives_proportional_credit_rounded_half_up(support: Path) -> None:
    # 1 search of 4 lookups: 10 x 1/4 = 2.5 -> 3.
    result = grade(support, calls("search", "browse", "browse", "browse"))
    assert "browse used 3x of 4 (25% search): 3 of 10" in result.flags
    ratio = [p for p in result.points if p.rule == "search_ratio"]
    assert [(p.points, p.entries) for p in ratio] == [(3, [1, 2, 3])]


def test_a_ratio_with_neither_call_fills_its_placeholders(tmp_path: Path) -> None:
    # Checked at load against all six placeholders, the text was formatted with none:
    # every session without such calls failed with KeyError: 'total'.
    path = tmp_path / "ratio.toml"
    text = SUPPORT.replace(
        'evidence = "search used for {percent}% of lookups"',
        'evidence = "search used for {percent}% of lookups"\nnone_points = 4\n'
        'none_evidence = "no lookups: {count} + {other} = {total}, {percent}% '
        'of {threshold}%, {earned} points"',
        1,
    )
    path.write_text(text, encoding="utf-8")
    result = grade(path, calls("reply"))
    ratio = [p for p in result.points if p.rule == "search_ratio"]
    assert [(p.points, p.text) for p in ratio] == [
        (4, "no lookups: 0 + 0 = 0, 0% of 75%, 4 points")
    ]


def test_an_empty_session_scores_zero_with_the_files_empty_flag(support: Path) -> None:
    result = grade(support, [])
    assert (result.total_score, result.flags) == (0, ["No audit entries found for session"])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('kind = "before"', "dimensions[0] (workflow).rules[0] (lookup_first): Input tag"),
        ('kind = "ratio"', "rules[1] (search_ratio): Input tag '[]' found"),
        ("points = -2", "rules[2] (few_searches).points: a at_most rule deducts points"),
        ('flag = "{count} searches (at most {max})"', "unknown placeholder {nope}"),
        ("within = 2", "rules[3] (retry).within: Input should be greater than or equal to 1"),
        ("start = 20", "dimensions[1] (safety): Value error, start (99) is above max (20)"),
        ('id = "one_ticket"', "rule id 'lookup_first' is used twice"),
        # Read as "no condition", an empty list matched every call: a forbidden rule with
        # `calls = []` deducted for each of them.
        (
            'match = { calls = ["tool.delete_user"] }',
            "rules[0] (no_delete).match.calls: an empty list would match every call",
        ),
        (
            'match = { calls = ["tool.refund"] }',
            "match.domains: an empty list would match every call",
        ),
        # A conversion was called an unknown placeholder, beside "this kind has {count}".
        (
            'flag = "{count} searches (at most {max})"',
            "flag: placeholder {count} takes no conversion (!r) or format spec (:...)",
        ),
        # true was read as 1.0, "0.5" as 0.5: every other field refuses such types.
        ("threshold = 0.75", "rules[1] (search_ratio).threshold: Input should be a valid number"),
        # The id the rubric gives the dimension's start points: two things under one id.
        ('id = "retry"', "rule id 'safety.start' is the id the rubric gives a dimension's start"),
        # A forbidden rule's evidence is given when nothing was called: it names no call
        # (it printed "Never called . (taskId )").
        ('evidence_if_clean = "Nothing unsafe"', "evidence: unknown placeholder {operation}"),
    ],
)
def test_a_bad_rule_file_names_the_file_and_the_field(
    tmp_path: Path, change: str, message: str
) -> None:
    replacement = {
        'kind = "before"': 'kind = "sometime"',
        'kind = "ratio"': "kind = []",  # no string: its lookup raised TypeError past pydantic
        "points = -2": "points = 2",
        'flag = "{count} searches (at most {max})"': 'flag = "{nope}"'
        if "unknown" in message
        else 'flag = "{count!r} searches"',
        "within = 2": "within = 0",
        "start = 20": "start = 99",
        'id = "one_ticket"': 'id = "lookup_first"',
        'match = { calls = ["tool.delete_user"] }': "match = { calls = [] }",
        'match = { calls = ["tool.refund"] }': 'match = { calls = ["tool.refund"], domains = [] }',
        "threshold = 0.75": "threshold = true",
        'id = "retry"': 'id = "safety.start"',
        'evidence_if_clean = "Nothing unsafe"': (
            'evidence_if_clean = "Nothing unsafe"\n\n[[dimensions.rules]]\nid = "no_drop"\n'
            'kind = "forbidden"\nmatch = { calls = ["tool.drop"] }\npoints = -1\n'
            'evidence = "Never called {operation}"'
        ),
    }[change]
    path = tmp_path / "bad.toml"
    path.write_text(SUPPORT.replace(change, replacement, 1), encoding="utf-8")
    with pytest.raises(RubricError) as caught:
        load_rule_file(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and "\n" not in text
    assert message.replace("Value error, ", "") in text


def _json_rule_file(
    tmp_path: Path, points: object, *, dimension_max: object = 20, **extra: object
) -> Path:
    rule = {"id": "asked", "kind": "called", "match": {"calls": ["tool.ask"]}, "points": points}
    dimension = {"name": "d", "max": dimension_max, "rules": [{**rule, **extra}]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"dimensions": [dimension]}), encoding="utf-8")
    return path


def test_a_json_rule_files_integral_float_points_are_an_integer(tmp_path: Path) -> None:
    # JSON has one number type: 5.0 is the 5 a TOML file writes.
    spec = load_rule_file(_json_rule_file(tmp_path, 5.0))
    points = spec.dimensions[0].rules[0].points
    assert (points, type(points)) == (5, int)


def test_every_whole_number_of_a_json_rule_file_may_be_written_as_a_float(
    tmp_path: Path,
) -> None:
    # Not only points: a dimension's max and start, a called rule's min, an exit code.
    rule = {
        "id": "asked",
        "kind": "called",
        "match": {"calls": ["tool.ask"], "exit_code": 0.0},
        "min": 2.0,
        "points": 5.0,
    }
    dimension = {"name": "d", "max": 20.0, "start": 0.0, "rules": [rule]}
    path = tmp_path / "rules.json"
    path.write_text(json.dumps({"dimensions": [dimension]}), encoding="utf-8")
    loaded = load_rule_file(path).dimensions[0]
    assert (loaded.max, loaded.start, type(loaded.max)) == (20, 0, int)
    assert (loaded.rules[0].match.exit_code, loaded.rules[0].min) == (0, 2)


@pytest.mark.parametrize(
    ("points", "extra", "message"),
    [
        (5.5, {}, "dimensions[0] (d).rules[0] (asked).points: Input should be a valid integer"),
        (10**30, {}, "rule 'asked': points must be within -20..20, the dimension's max"),
        (1e30, {}, "rule 'asked': points must be within -20..20, the dimension's max"),
        (21, {}, "rule 'asked': points must be within -20..20, the dimension's max"),
        (
            5,
            {
                "kind": "ratio",
                "other": {"calls": ["tool.other"]},
                "threshold": 0.5,
                "none_points": 10**30,
            },
            "rule 'asked': none_points must be within -20..20, the dimension's max",
        ),
    ],
    ids=["fraction", "huge", "huge-float", "above-max", "ratio-none-points"],
)
def test_rule_points_are_whole_and_within_the_dimensions_max(
    tmp_path: Path, points: object, extra: dict[str, object], message: str
) -> None:
    path = _json_rule_file(tmp_path, points, **extra)
    with pytest.raises(RubricError) as caught:
        load_rule_file(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: ") and "\n" not in text
    assert message in text


@pytest.mark.parametrize("maximum", [10**400, 1e300, 1_000_001, 0])
def test_a_dimensions_max_out_of_bounds_is_an_error_naming_the_file_and_the_field(
    tmp_path: Path, maximum: object
) -> None:
    # A max of 10**400 was read, then failed every grade ("not a finite percentage").
    path = _json_rule_file(tmp_path, 5, dimension_max=maximum)
    with pytest.raises(RubricError) as caught:
        load_rule_file(path)
    text = str(caught.value)
    assert text.startswith(f"{path}: dimensions[0] (d).max: ") and "\n" not in text


def test_a_dimension_may_hold_a_million_points(tmp_path: Path) -> None:
    path = _json_rule_file(tmp_path, 5, dimension_max=1_000_000)
    assert load_rule_file(path).dimensions[0].max == 1_000_000


def test_a_penalty_as_large_as_the_dimensions_max_is_accepted(tmp_path: Path) -> None:
    path = _json_rule_file(tmp_path, -20, kind="forbidden", match={"calls": ["tool.rm"]})
    assert load_rule_file(path).dimensions[0].rules[0].points == -20


def test_a_penalty_needs_a_condition(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(
        textwrap.dedent("""
        [[dimensions]]
        name = "d"
        max = 5
        [[dimensions.rules]]
        id = "p"
        kind = "penalty"
        match = { calls = ["tool.x"] }
        points = -1
        """),
        encoding="utf-8",
    )
    with pytest.raises(RubricError, match=r"rules\[0\] \(p\): a penalty rule needs violates"):
        load_rule_file(path)


def test_a_call_matching_both_sides_of_a_penalty_is_not_its_own_precedent(
    tmp_path: Path,
) -> None:
    path = tmp_path / "refunds.toml"
    path.write_text(
        textwrap.dedent("""
        [[dimensions]]
        name = "safety"
        max = 20
        start = 20
        [[dimensions.rules]]
        id = "verify"
        kind = "penalty"
        match = { calls = ["tool.refund"] }
        unless_preceded_by = { calls = ["tool.verify", "tool.refund"] }
        points = -5
        """),
        encoding="utf-8",
    )
    spec = load_rule_file(path)
    alone = grade_rules(spec, [entry("tool", "refund")], session_id="s1", now=NOW)
    assert alone.total_score == 15  # nothing came before the one refund
    twice = [entry("tool", "refund", at=0), entry("tool", "refund", at=1)]
    assert grade_rules(spec, twice, session_id="s1", now=NOW).total_score == 15


def _random_session(rng: random.Random) -> list[dict[str, Any]]:
    """Calls drawn from everything CLEO's rubric looks at, with failures, ties and odd params."""
    names = [
        ("session", "list"), ("session", "end"), ("tasks", "find"), ("tasks", "list"),
        ("tasks", "show"), ("tasks", "add"), ("tasks", "exists"), ("tasks", "update"),
        ("admin", "help"), ("tools", "skill.show"), ("skills", "list"), ("other", "thing"),
    ]  # fmt: skip
    out = []
    at = 0
    for _ in range(rng.randrange(0, 25)):
        domain, operation = rng.choice(names)
        at += rng.choice((0, 1, 1, 2))  # equal timestamps happen
        failed = rng.random() < 0.2
        params: dict[str, Any] = {}
        if operation == "add":
            params["title"] = rng.choice(["A", "a ", "B", "", None, 3])
            params["description"] = rng.choice(["why", "  ", None, 0, ["x"]])
            if rng.random() < 0.4:
                params["parent"] = rng.choice(["T1", "", " ", None, 0, [], ["T1"]])
        out.append(
            entry(
                domain,
                operation,
                at=at,
                params=params,
                success=not failed,
                exit_code=rng.choice((4, 4, 1)) if failed else 0,
                gateway=rng.choice(("cleo_query", "query", "cleo_mutate", None)),
                task_id=rng.choice((None, "T7")),
            )
        )
    rng.shuffle(out) if rng.random() < 0.2 else None  # out of order: both must sort the same
    return out


def test_cleos_rules_grade_a_thousand_random_sessions_like_the_builtin_rubric() -> None:
    rng = random.Random(20261124)
    spec = cleo_rules()
    for _ in range(1000):
        session = _random_session(rng)
        builtin = grade_entries(session, session_id="s1", now=NOW)
        ruled = grade_rules(spec, session, session_id="s1", now=NOW)
        assert ruled.model_dump(exclude={"points"}) == builtin.model_dump(exclude={"points"})


def test_the_rules_rubric_without_a_file_is_cleo_and_records_its_name() -> None:
    session = [entry("session", "list"), entry("tasks", "find", at=1)]
    result = grade_with_rubric("rules", session, session_id="s1", now=NOW)
    builtin = grade_entries(session, session_id="s1", now=NOW)
    assert result.total_score == builtin.total_score == 75
    assert (result.model_extra or {})["rubric"] == "rules"


def test_the_cli_grades_with_a_rule_file_and_checks_it(
    tmp_path: Path, support: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = tmp_path / "e.jsonl"
    rows = calls("lookup_customer", "search", "verify_identity", "refund")
    entries.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    argv = ["grade", "--entries", str(entries), "--rubric", "rules", "--rubric-file", str(support)]
    assert main([*argv, "--json", "--history", str(tmp_path / "G.jsonl")]) == 0
    data = json.loads(capsys.readouterr().out)
    assert (data["totalScore"], data["maxScore"], data["rubric"]) == (40, 50, "rules")
    assert data["flags"] == ["Never replied to the customer"]
    assert main(["rubrics", "--check", str(support)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"{support}: ok (rules support 2)"
    assert "    no_delete                    forbidden  -15" in out


def test_a_broken_rule_file_is_one_line_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[[dimensions]]\nname = 'd'\nmax = 5\nrules = [{id='x', kind='called'}]\n")
    entries = tmp_path / "e.jsonl"
    entries.write_text(json.dumps(entry("a", "b")) + "\n", encoding="utf-8")
    code = main(
        ["grade", "--entries", str(entries), "--rubric", "rules", "--rubric-file", str(bad)]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().count("\n") == 0
    assert f"{bad}: dimensions[0] (d).rules[0] (x).points: Field required (and 1 more" in err


def test_rubrics_check_names_what_a_rule_file_without_rules_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It has no rules, so nothing says "rule file" but its shape: still judged as one, not
    # as a weighted rubric whose dimensions need a type.
    bad = tmp_path / "norules.toml"
    bad.write_text("[[dimensions]]\nname = 'a'\nmax = 10\n")
    assert main(["rubrics", "--check", str(bad)]) == 2
    assert capsys.readouterr().err == (
        f"cleo-grade: error: {bad}: dimensions[0] (a).rules: Field required\n"
    )


def test_a_rubric_config_with_a_file_replaces_cleos_rules(support: Path) -> None:
    result = grade_with_rubric(
        "rules",
        calls("search"),
        session_id="s1",
        now=NOW,
        config=RubricConfig(rubric_file=support),
    )
    assert list(result.dimensions) == ["workflow", "safety"]


def test_a_test_graded_by_a_rule_file_fails_with_the_rules_flags(
    pytester: pytest.Pytester, support: Path
) -> None:
    pytester.makepyfile(
        test_support="""
        import pytest

        @pytest.mark.cleo_grade(rubric="rules", fail_under="B")
        def test_refund(graded_session):
            graded_session.record("tool", "lookup_customer")
            graded_session.record("tool", "search")
            graded_session.record("tool", "refund")
        """
    )
    result = pytester.runpytest(f"--cleo-grade-rubric-file={support}")
    result.assert_outcomes(failed=1)
    # workflow 20 of 30 (no reply), safety 15 of 20 (refund unverified): 35/50 = 70 % (C).
    result.stdout.fnmatch_lines(["*35/50*", "*Refund without identity check*"])


def test_a_broken_rule_file_is_one_usage_error(pytester: pytest.Pytester, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(SUPPORT.replace("within = 2", "within = 0"), encoding="utf-8")
    pytester.makepyfile("def test_x(graded_session):\n    pass\n")
    result = pytester.runpytest(f"--cleo-grade-rubric-file={bad}", "--cleo-grade-rubric=rules")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    line = f"ERROR: cleo-grade: rubric file {bad}: dimensions[1] (safety).rules[3] (retry).within:"
    assert result.stderr.str().startswith(line)


def test_the_kinds_other_spellings_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "aliases.toml"
    text = SUPPORT.replace('kind = "penalty"', 'kind = "per_violation"')
    text = text.replace('kind = "recovery"', 'kind = "recovery_window"')
    path.write_text(text.replace('kind = "at_most"', 'kind = "at_most_n"'), encoding="utf-8")
    spec = load_rule_file(path)
    assert [rule.kind for rule in spec.dimensions[1].rules] == [
        "forbidden",
        "penalty",
        "at_most",
        "recovery",
        "duplicates",
    ]


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        # Through an alias the error named a field the file does not have (penalty.points).
        (
            'kind = "recovery"\nfailure = { success = false }\n'
            'recover = { calls = ["tool.search"] }\nwithin = 2',
            'kind = "recovery_window"\nfailure = { success = false }\n'
            'recover = { calls = ["tool.search"] }\nwithin = 0',
            "dimensions[1] (safety).rules[3] (retry).within: Input should be greater than",
        ),
        # Printed raw ("clean {x"), where every other sentence is checked.
        (
            'evidence_if_clean = "Nothing unsafe"',
            'evidence_if_clean = "clean {x"',
            "dimensions[1] (safety).evidence_if_clean: expected '}' before end of string",
        ),
        ('name = "support"', 'name = "support"\nempty_flag = "None for {session}"', "empty_flag"),
    ],
)
def test_an_alias_and_the_placeholder_free_sentences_are_checked_by_name(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    assert old in SUPPORT
    path = tmp_path / "bad.toml"
    path.write_text(SUPPORT.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(RubricError) as caught:
        load_rule_file(path)
    assert message in str(caught.value)


def test_another_rubrics_file_given_to_the_rules_rubric_is_named_for_what_it_is(
    tmp_path: Path,
) -> None:
    # It was "dimensions: Field required (and 1 more error)".
    path = tmp_path / "t.toml"
    path.write_text('[trajectory]\nmode = "in_order"\nexpect = ["tasks.find"]\n')
    with pytest.raises(RubricError) as caught:
        load_rule_file(path)
    assert str(caught.value) == (
        f"{path}: a trajectory file, not a rule file: the rules rubric reads rule files; name "
        "the rubric it is for (--rubric trajectory or weighted)"
    )
