"""The trajectory rubric: each mode's F1 on hand-computed cases, matchers, diff, marker."""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.core.expectations import Call, parse_expectations
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.rubrics.protocol import GradeContext, RubricConfig
from pytest_cleo_grade.rubrics.trajectory import (
    TrajectoryRubric,
    align,
    check_trajectory_file,
    grade_trajectory,
)
from tests.entries import NOW, entry

#: session.list, admin.help, tasks.list, tasks.find, tasks.show(T2)
ACTUAL = [
    entry("session", "list", at=0),
    entry("admin", "help", at=1),
    entry("tasks", "list", at=2),
    entry("tasks", "find", at=3),
    entry("tasks", "show", at=4, params={"taskId": "T2", "verbose": True}),
]
EXPECT = ["session.list", "tasks.find", ("tasks.show", {"taskId": "T1"}), "session.end"]


def grade(expect: Any, mode: str, entries: list[dict[str, Any]] = ACTUAL) -> GradeResult:
    result = grade_trajectory(entries, expect, mode=mode, session_id="s1", now=NOW)
    assert sum(p.points for p in result.points) == result.total_score  # every point explained
    return result


@pytest.mark.parametrize(
    ("mode", "score", "precision", "recall"),
    [
        # 2 matched of 4 expected and 5 actual: F1 = 2*2/(4+5).
        ("exact", 44.44, 0.4, 0.5),
        # Only calls of expected kinds count: session.list, tasks.find, tasks.show (3).
        ("in_order", 57.14, 0.6667, 0.5),
        ("any_order", 44.44, 0.4, 0.5),
        # Recall is 1 by definition: F1 = 2*2/(2+5).
        ("subset", 57.14, 0.4, 1.0),
        # Precision is 1 by definition: F1 = 2*2/(4+2).
        ("superset", 66.67, 1.0, 0.5),
    ],
)
def test_each_mode_scores_the_f1_of_its_precision_and_recall(
    mode: str, score: float, precision: float, recall: float
) -> None:
    result = grade(EXPECT, mode)
    assert result.total_score == score
    trajectory = (result.model_extra or {})["trajectory"]
    assert (trajectory["precision"], trajectory["recall"]) == (precision, recall)


@pytest.mark.parametrize(
    ("mode", "actual"),
    [
        ("exact", ["a.x", "b.y"]),
        ("in_order", ["a.x", "c.z", "b.y"]),
        ("any_order", ["b.y", "a.x"]),
        ("subset", ["b.y"]),
        ("superset", ["c.z", "b.y", "a.x", "d.w"]),
    ],
)
def test_full_marks_exactly_when_the_modes_condition_holds(mode: str, actual: list[str]) -> None:
    entries = [entry(*name.split("."), at=i) for i, name in enumerate(actual)]
    result = grade(["a.x", "b.y"], mode, entries)
    assert (result.total_score, result.flags) == (100, [])


@pytest.mark.parametrize("mode", ["exact", "in_order"])
def test_ordered_modes_see_a_swap_as_out_of_order(mode: str) -> None:
    entries = [entry("b", "y", at=0), entry("a", "x", at=1)]
    result = grade(["a.x", "b.y"], mode, entries)
    assert result.total_score == 50  # one of two in order: F1 = 2*1/(2+2)
    assert result.flags == ["Expected call b.y was made out of order (entry #0)"]
    assert grade(["a.x", "b.y"], "any_order", entries).total_score == 100


def test_argument_matchers_exact_subset_ignore_and_callable() -> None:
    show = [entry("tasks", "show", params={"taskId": "T2", "verbose": True})]
    assert grade([("tasks.show", {"taskId": "T2"})], "exact", show).total_score == 100
    exact = {"call": "tasks.show", "params": {"taskId": "T2"}, "match": "exact"}
    assert grade([exact], "exact", show).total_score == 0
    ignore = {"call": "tasks.show", "params": {"taskId": "T9"}, "match": "ignore"}
    assert grade([ignore], "exact", show).total_score == 100
    assert (
        grade([("tasks.show", lambda p: p["taskId"].startswith("T"))], "exact", show).total_score
        == 100
    )
    where = Call("tasks.show", {"verbose": True}, where=lambda p: p["taskId"] == "T1")
    assert grade([where], "exact", show).total_score == 0


def test_the_diff_aligns_expected_and_actual_calls() -> None:
    diff = (grade(EXPECT, "in_order").model_extra or {})["trajectory"]["diff"]
    assert diff == [
        "  expected                  actual (in_order)",
        "= session.list              #0 session.list",
        ".                           #1 admin.help  (not counted)",
        ".                           #2 tasks.list  (not counted)",
        "= tasks.find                #3 tasks.find",
        "+                           #4 tasks.show",
        "- tasks.show (taskId='T1')",
        "- session.end",
    ]


@pytest.mark.parametrize("mode", ["in_order", "exact"])
def test_of_identical_calls_the_first_is_the_match_and_the_repeats_the_extras(mode: str) -> None:
    # The last of the three finds was matched: the agent's first, right, call was "unexpected".
    entries = [entry("tasks", "find", at=i) for i in range(3)] + [entry("session", "end", at=3)]
    diff = (grade(["tasks.find", "session.end"], mode, entries).model_extra or {})["trajectory"]
    assert [line.split()[:3] for line in diff["diff"][1:]] == [
        ["=", "tasks.find", "#0"],
        ["+", "#1", "tasks.find"],
        ["+", "#2", "tasks.find"],
        ["=", "session.end", "#3"],
    ]


def test_the_matching_is_maximal_when_matchers_overlap() -> None:
    # A greedy matcher gives the first show to the broad expectation and loses the narrow one.
    entries = [
        entry("tasks", "show", at=0, params={"taskId": "T1"}),
        entry("tasks", "show", at=1, params={"taskId": "T2"}),
    ]
    result = grade(["tasks.show", ("tasks.show", {"taskId": "T1"})], "any_order", entries)
    assert result.total_score == 100


def test_points_name_the_entries_of_each_match_and_miss() -> None:
    result = grade(EXPECT, "exact")
    by_rule = [(p.rule, p.points, p.entries) for p in result.points]
    assert by_rule[0] == ("trajectory.f1", 44.44, [0, 3])
    assert ("trajectory.unexpected", 0, [4]) in by_rule
    assert ("trajectory.missing", 0, []) in by_rule


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ([], "invalid expect []: expected a non-empty list of calls"),
        ("tasks.find", "expected a non-empty list of calls"),
        (["tasks"], "expect[0]: expected call 'tasks' is not domain.operation"),
        ([("tasks.show", 3)], "expect[0]: params of expected call tasks.show must be a dict"),
        ([{"call": "a.b", "match": "fuzzy"}], "expect[0]: match of expected call a.b must be"),
        ([{"call": "a.b", "args": {}}], "expect[0]: unknown key 'args'"),
        ([42], "expect[0]: 42 is not an expected call"),
    ],
)
def test_bad_expectations_name_the_position(expect: Any, message: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        parse_expectations(expect)
    assert message in str(caught.value)
    with pytest.raises(RubricError):
        grade(expect, "exact")


def test_an_unknown_mode_is_a_rubric_error() -> None:
    with pytest.raises(RubricError, match="invalid trajectory mode 'strict'"):
        grade(["a.b"], "strict")


def test_a_long_trajectory_against_fifty_expected_calls_aligns_quickly() -> None:
    expected = [Call(f"tool.step{i}") for i in range(50)]
    actual = [(f"tool.step{i % 60}", {}) for i in range(10_000)]
    started = time.process_time()
    alignment = align(expected, actual, "in_order")
    spent = time.process_time() - started
    assert alignment.matched == 50
    # Not a timing test: a generous bound only catches an accidental quadratic blow-up, in
    # this process's own CPU time (well under a second), which other processes' load on the
    # machine does not add to.
    assert spent < 30


def test_an_alignment_over_the_pair_limit_is_refused() -> None:
    expected = [Call("tool.x")] * 1000
    actual = [("tool.x", {})] * 10_001
    with pytest.raises(RubricError, match="trajectory too long to align"):
        align(expected, actual, "exact")


@pytest.mark.parametrize("mode", ["any_order", "subset", "superset"])
def test_an_unordered_match_over_the_pair_limit_is_refused_before_any_work(mode: str) -> None:
    # 1,000 expected calls of one name against 20,000 made: 20 million pairs to compare.
    asked = 0

    def where(params: object) -> bool:
        nonlocal asked
        asked += 1
        return True

    expected = [Call("tool.x", where=where)] * 1000
    actual = [("tool.x", {})] * 20_000
    with pytest.raises(RubricError, match="trajectory too large to match: 1000 expected x 20000"):
        align(expected, actual, mode)  # type: ignore[arg-type]
    assert asked == 0


def test_an_unordered_match_compares_only_calls_of_the_same_name() -> None:
    # 3,000 expected calls, each of its own name, against 30,000 made: 90 million pairs if
    # every one were compared with every one, 3,000 by name.
    expected = [Call(f"tool.t{i}") for i in range(3000)]
    actual = [(f"tool.t{j % 3000}", {}) for j in range(30_000)]
    alignment = align(expected, actual, "subset")
    assert alignment.matched == 3000


def test_hostile_call_names_stay_on_their_line_in_the_failure_message(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(expect=["session.list", "tasks.find"], mode="exact", fail_under="A")
        def test_agent(graded_session):
            graded_session.record("session", "list")
            graded_session.record("tasks", "x\\x1b[31m\\nFORGED")
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "\x1b[31m" not in out
    assert not any(line.startswith("FORGED") for line in out.splitlines())
    result.stdout.fnmatch_lines(
        [
            "*50/100 (50%, grade D) is below the threshold 90% (A)*",
            "expected vs actual calls (= matched, ~ out of order, - missing, + unexpected, "
            ". not counted):",
            "    expected      actual (exact)",
            "  = session.list  #0 session.list",
            "  +               #1 tasks.x\\x1b[31m\\nFORGED",
            "  - tasks.find",
        ]
    )


def test_expectations_a_fixture_applies_grade_with_the_trajectory_rubric(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.fixture
        def expecting(request):
            request.applymarker(pytest.mark.cleo_grade(expect=["tasks.find"], fail_under=100))

        def test_before(expecting, graded_session):
            graded_session.record("tasks", "find", {"query": "login"})

        def test_after(graded_session, expecting):
            graded_session.record("tasks", "list")
        """
    )
    result = pytester.runpytest("--junitxml=out.xml")
    # Graded by the trajectory rubric whichever fixture came first (CLEO's would give 55/100).
    result.stdout.fnmatch_lines(["*test_before *100/100*", "*test_after *0/100*"])
    result.assert_outcomes(passed=1, failed=1)
    assert (pytester.path / "out.xml").read_text().count('value="trajectory"') == 2


def test_the_marker_expect_grades_with_the_trajectory_rubric(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def agent(s):
            s.record("session", "list")
            s.record("admin", "help")
            s.record("tasks", "find", {"query": "login"})

        @pytest.mark.cleo_grade(expect=["session.list", ("tasks.find", {"query": "login"})])
        def test_in_order(graded_session):
            agent(graded_session)

        @pytest.mark.cleo_grade(expect=["tasks.find", "session.list"], mode="exact", fail_under=60)
        def test_exact(graded_session):
            agent(graded_session)

        @pytest.mark.cleo_grade(
            rubric={"cleo": 0.5, "trajectory": 0.5}, expect=["session.list"], mode="superset"
        )
        def test_combined(graded_session):
            agent(graded_session)
        """
    )
    result = pytester.runpytest("--junitxml=out.xml")
    # in_order: admin.help is not counted: 100. exact: 1 of 2, F1 = 2/(2+3) = 40 %.
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(["*test_in_order *100/100*", "*test_exact *40/100*"])
    junit = (pytester.path / "out.xml").read_text()
    assert 'name="cleo_rubric" value="trajectory"' in junit
    assert 'name="cleo_dim_trajectory.trajectory" value="100/100"' in junit


def test_a_marker_expect_needs_no_rubric_file_of_the_runs(pytester: pytest.Pytester) -> None:
    # The run's rules file was handed to the trajectory rubric of a test with expect=,
    # which refused it: the test failed with "cannot grade".
    rules = Path(__file__).resolve().parents[2] / "examples" / "rubrics" / "support-rules.toml"
    pytester.makepyfile(
        """
        import pytest

        def test_by_the_runs_rubric(graded_session):
            graded_session.record("tool", "lookup_customer")

        @pytest.mark.cleo_grade(expect=["tool.lookup_customer"])
        def test_by_its_expectations(graded_session):
            graded_session.record("tool", "lookup_customer")
        """
    )
    result = pytester.runpytest("--cleo-grade-rubric=rules", f"--cleo-grade-rubric-file={rules}")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_by_its_expectations *100/100*"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        ("expect='tasks.find'", "(expect=...): invalid expect 'tasks.find'"),
        ("mode='exact'", "a trajectory mode needs expect=[...]"),
        ("rubric='cleo', expect=['a.b']", "expect= is graded by the trajectory rubric"),
    ],
)
def test_bad_trajectory_markers_are_usage_errors(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    pytester.makepyfile(
        f"""
        import pytest

        @pytest.mark.cleo_grade({marker})
        def test_agent(graded_session):
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_non_string_call_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=r"expected call 42 is not domain\.operation"):
        Call(42)  # type: ignore[arg-type]


def test_a_failing_predicate_is_a_one_line_rubric_error_naming_the_expectation() -> None:
    expect = ["a.b", ("tasks.show", lambda p: p["taskId"] == "T1")]
    entries = [entry("a", "b", at=0), entry("tasks", "show", at=1)]
    with pytest.raises(RubricError) as caught:
        grade(expect, "in_order", entries)
    assert str(caught.value) == (
        "expect[1]: the predicate of expected call tasks.show raised KeyError: 'taskId' "
        "(on entry #1)"
    )


def _oracle_lcs(expected: list[str], actual: list[str]) -> int:
    """The textbook LCS length, written independently of the rubric's alignment."""
    prev = [0] * (len(actual) + 1)
    for name in expected:
        row = [0]
        for k, made in enumerate(actual):
            row.append(prev[k] + 1 if name == made else max(prev[k + 1], row[k]))
        prev = row
    return prev[-1]


@pytest.mark.parametrize("seed", range(40))
def test_matched_counts_agree_with_an_independent_oracle(seed: int) -> None:
    # Small random trajectories over three names: the ordered modes' matched count is the
    # textbook LCS (in_order over the calls of expected kinds only); the unordered modes'
    # is the multiset overlap (names only, so a maximum matching is exactly that).
    rng = random.Random(seed)
    names = ["a.x", "b.y", "c.z"]
    expected = [rng.choice(names[:2]) for _ in range(rng.randint(1, 6))]
    actual = [rng.choice(names) for _ in range(rng.randint(0, 8))]
    calls = [Call(name) for name in expected]
    made = [(name, {}) for name in actual]
    kinds = [name for name in actual if name in set(expected)]
    overlap = sum((Counter(expected) & Counter(actual)).values())
    want = {
        "exact": (_oracle_lcs(expected, actual), len(actual), len(expected)),
        "in_order": (_oracle_lcs(expected, kinds), len(kinds), len(expected)),
        "any_order": (overlap, len(actual), len(expected)),
        "subset": (overlap, len(actual), overlap),
        "superset": (overlap, overlap, len(expected)),
    }
    for mode, (matched, precision_of, recall_of) in want.items():
        got = align(calls, made, mode)  # type: ignore[arg-type]
        assert (got.matched, got.precision_of, got.recall_of) == (
            matched,
            precision_of,
            recall_of,
        ), mode
        # Every expected call is on exactly one row, every actual call too.
        assert sorted(i for _, i, _ in got.rows if i is not None) == list(range(len(expected)))
        assert sorted(j for _, _, j in got.rows if j is not None) == list(range(len(actual)))
        full = {
            "exact": expected == actual,
            "in_order": expected == kinds,
            "any_order": Counter(expected) == Counter(actual),
            "subset": not Counter(actual) - Counter(expected),
            "superset": not Counter(expected) - Counter(actual),
        }[mode]
        assert (got.f1 == 1) == full, mode


def test_a_marked_test_whose_predicate_fails_shows_one_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(expect=[("tasks.show", lambda p: p["taskId"] == "T1")])
        def test_agent(graded_session):
            graded_session.record("tasks", "show")
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: test_a_marked_test_whose_predicate_fails_shows_one_line.py::test_agent:"
            " cannot grade with rubric trajectory: expect[0]: the predicate of expected call"
            " tasks.show raised KeyError: 'taskId' (on entry #0)"
        ]
    )
    assert "Traceback" not in result.stdout.str()


TRAJECTORY_FILE = """
[trajectory]
mode = "exact"
expect = ["session.list", {call = "tasks.find", params = {query = "login"}}, "session.end"]
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("trajectory = 3", "a trajectory rubric file has one table, [trajectory]"),
        ('[trajectory]\nexpect = ["a.b"]\n[judge]\nmodel = "m"', "has one table, [trajectory]"),
        ('[trajectory]\nexpect = ["a.b"]\nfoo = 1', "trajectory.foo: unknown key"),
        ('[trajectory]\nexpect = ["a.b"]\nmode = "strict"', "trajectory.mode: invalid trajectory"),
        ('[trajectory]\nmode = "exact"', "trajectory.expect: invalid expect None"),
        ('[trajectory]\nexpect = ["a.b", 3]', "trajectory.expect[1]: 3 is not an expected call"),
        (
            '[trajectory]\nexpect = [{call = "a.b", where = "x"}]',
            "trajectory.expect[0]: where= needs Python",
        ),
    ],
)
def test_bad_trajectory_files_name_the_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "traj.toml"
    path.write_text(text)
    with pytest.raises(RubricError) as caught:
        check_trajectory_file(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_a_trajectory_file_gives_calls_and_mode_the_marker_overrides(tmp_path: Path) -> None:
    path = tmp_path / "traj.json"
    path.write_text('{"trajectory": {"expect": ["session.list", "tasks.find"], "mode": "exact"}}')
    rubric = TrajectoryRubric().configure(RubricConfig(rubric_file=path))
    made = [entry("tasks", "find", at=0), entry("session", "list", at=1)]
    assert rubric.grade(made, session_id="s1", now=NOW).total_score == 50  # exact: F1 2/4
    marked = GradeContext(extra={"expect": ["tasks.find"], "expectMode": "superset"})
    assert rubric.grade(made, session_id="s1", now=NOW, context=marked).total_score == 100
    # The marker's expect= without a mode takes the default mode (in_order: session.list is
    # not counted, 100), not the file's (exact would be F1 2*1/(1+2) = 66.67).
    alone = GradeContext(extra={"expect": ["tasks.find"]})
    assert rubric.grade(made, session_id="s1", now=NOW, context=alone).total_score == 100
    assert check_trajectory_file(tmp_path / "traj.json") is True


def test_the_rubric_file_option_takes_a_trajectory_file(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", traj=TRAJECTORY_FILE)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.cleo_grade(rubric="trajectory", fail_under=90)
        def test_file(graded_session):
            graded_session.record("session", "list")
            graded_session.record("tasks", "find", {"query": "login"})

        @pytest.mark.cleo_grade(expect=["session.list"], mode="superset")
        def test_marker_wins(graded_session):
            graded_session.record("session", "list")
            graded_session.record("tasks", "find", {"query": "login"})
        """
    )
    result = pytester.runpytest("--cleo-grade-rubric-file=traj.toml")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: 80/100 (80%, grade B) is below the threshold 90% (A)*",
            "    expected                    actual (exact)",
            "  = session.list                #0 session.list",
            "  = tasks.find (query='login')  #1 tasks.find",
            "  - session.end",
        ]
    )
    pytester.makefile(".toml", bad='[trajectory]\nexpect = ["a.b"]\nmode = "strict"')
    bad = pytester.runpytest("--cleo-grade-rubric-file=bad.toml")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    assert "bad.toml: trajectory.mode: invalid trajectory mode 'strict'" in bad.stderr.str()


def test_cleo_grade_rubrics_check_shows_a_trajectory_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_cleo_grade.cli import main

    path = tmp_path / "traj.toml"
    path.write_text(TRAJECTORY_FILE)
    assert main(["rubrics", "--check", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: ok (trajectory, 3 expected calls, mode exact)",
        "    1 session.list",
        "    2 tasks.find (query='login')",
        "    3 session.end",
    ]
    path.write_text('[trajectory]\nexpect = ["a.b"]\nmode = "strict"')
    assert main(["rubrics", "--check", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"cleo-grade: error: {path}: trajectory.mode: invalid trajectory mode 'strict': "
        "expected exact, in_order, any_order, subset, superset"
    )


def test_an_exact_match_with_no_params_says_so_and_names_with_whitespace_are_refused() -> None:
    # match="exact" without params (the call must have none) lost its condition in the
    # labels: "Unexpected call tasks.show" beside "Expected call tasks.show was not made".
    from pytest_cleo_grade.core.expectations import Call, parse_expectations

    assert Call("tasks.show", match="exact").label() == "tasks.show (no params)"
    assert Call("tasks.find", {}, "exact").label() == "tasks.find (no params)"
    assert Call("tasks.find", {}, "subset").label() == "tasks.find"
    # " a.b" never matches a call: a typo scored 0 unseen (rule files refuse such names).
    with pytest.raises(ValueError, match=r"expect\[0\]: expected call ' a.b' holds whitespace"):
        parse_expectations([" a.b"])
