"""Trajectory patterns: optional steps, one_of, repeat bounds, unordered groups (hand-computed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.core.expectations import (
    one_of,
    optional,
    parse_expectations,
    repeat,
    unordered,
)
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.rubrics.protocol import RubricConfig
from pytest_cleo_grade.rubrics.trajectory import TrajectoryRubric, grade_trajectory
from tests.entries import NOW, entry


def calls(*names: str) -> list[dict[str, Any]]:
    made = []
    for at, name in enumerate(names):
        domain, _, operation = name.partition(".")
        made.append(entry(domain, operation, at=at))
    return made


def grade(expect: Any, names: tuple[str, ...], mode: str = "exact") -> GradeResult:
    result = grade_trajectory(calls(*names), expect, mode=mode, session_id="s1", now=NOW)
    assert sum(p.points for p in result.points) == result.total_score  # every point explained
    return result


def diff(result: GradeResult) -> list[str]:
    return list((result.model_extra or {})["trajectory"]["diff"])


@pytest.mark.parametrize("mode", ["exact", "in_order", "any_order"])
def test_an_optional_step_accepts_both_trajectories(mode: str) -> None:
    expect = ["a.start", optional("b.check"), "c.end"]
    assert grade(expect, ("a.start", "b.check", "c.end"), mode).total_score == 100
    left_out = grade(expect, ("a.start", "c.end"), mode)
    assert left_out.total_score == 100
    assert left_out.flags == []
    assert "? optional(b.check)" in "\n".join(diff(left_out))


def test_an_optional_step_is_no_licence_for_other_calls() -> None:
    # exact: a.start, x.other, c.end against [a.start, optional(b.check), c.end]:
    # precision 2/3, recall 2/2, F1 = 2*(2/3)*1/(2/3+1) = 0.8.
    result = grade(["a.start", optional("b.check"), "c.end"], ("a.start", "x.other", "c.end"))
    assert result.total_score == 80
    assert result.flags == ["Unexpected call x.other (entry #1)"]


def test_one_of_takes_either_alternative_and_names_the_missing_call_of_the_closer() -> None:
    expect = ["a.start", one_of("b.quick", ["b.slow", "b.confirm"]), "c.end"]
    assert grade(expect, ("a.start", "b.quick", "c.end")).total_score == 100
    assert grade(expect, ("a.start", "b.slow", "b.confirm", "c.end")).total_score == 100
    # The sequence half done: precision 3/3, recall 3/4 (the branch taken has 4 steps):
    # F1 = 2*1*(3/4)/(1+3/4) = 6/7 = 85.71.
    half = grade(expect, ("a.start", "b.slow", "c.end"))
    assert half.total_score == 85.71
    assert half.flags == ["Expected call b.confirm was not made (expected #2)"]
    # Both alternatives made: the second is an unexpected call.
    both = grade(expect, ("a.start", "b.quick", "b.slow", "b.confirm", "c.end"))
    assert both.total_score < 100


def test_one_of_single_calls_is_one_step_named_whole_when_missing() -> None:
    result = grade(["a.start", one_of("b.x", "b.y")], ("a.start",))
    # precision 1/1, recall 1/2: F1 = 2/3.
    assert result.total_score == 66.67
    assert result.flags == ["Expected call one_of(b.x | b.y) was not made (expected #2)"]


@pytest.mark.parametrize(
    ("made", "score", "flag"),
    [
        (("a.go", "b.poll", "c.end"), 100, None),
        (("a.go", "b.poll", "b.poll", "b.poll", "c.end"), 100, None),
        # 4 polls against at most 3: precision 5/6, recall 5/5: F1 = 10/11 = 90.91.
        (("a.go", "b.poll", "b.poll", "b.poll", "b.poll", "c.end"), 90.91, "Unexpected call"),
        # none: precision 2/2, recall 2/3: F1 = 0.8.
        (("a.go", "c.end"), 80, "Expected call b.poll (repeat 1..3, call 1) was not made"),
    ],
)
def test_repeat_bounds_count_calls_between_min_and_max(
    made: tuple[str, ...], score: float, flag: str | None
) -> None:
    result = grade(["a.go", repeat("b.poll", 1, 3), "c.end"], made)
    assert result.total_score == score
    if flag is None:
        assert result.flags == []
    else:
        assert len(result.flags) == 1
        assert result.flags[0].startswith(flag)


def test_repeat_without_a_max_takes_any_number_over_its_min() -> None:
    expect = ["a.go", repeat("b.poll", 2), "c.end"]
    many = ("a.go", *["b.poll"] * 7, "c.end")
    assert grade(expect, many).total_score == 100
    # One poll of at least two: precision 3/3, recall 3/4: F1 = 6/7.
    assert grade(expect, ("a.go", "b.poll", "c.end")).total_score == 85.71


def test_an_unordered_group_takes_its_calls_in_any_order_at_its_place() -> None:
    expect = ["a.start", unordered("b.x", "b.y", optional("b.z")), "c.end"]
    assert grade(expect, ("a.start", "b.y", "b.x", "c.end")).total_score == 100
    assert grade(expect, ("a.start", "b.z", "b.y", "b.x", "c.end")).total_score == 100
    # b.x after c.end is outside the group's place: out of order, not matched.
    late = grade(expect, ("a.start", "b.y", "c.end", "b.x"))
    assert late.total_score == 75  # precision 3/4, recall 3/4
    assert late.flags == [
        "Expected call b.x (unordered) was made out of order (entry #3)",
    ]
    assert any(line.startswith("~ b.x (unordered)") for line in diff(late))


def test_the_aligned_diff_names_each_mismatch() -> None:
    expect = ["a.start", optional("b.check"), repeat("c.poll", 1, 2), "d.end"]
    result = grade(expect, ("a.start", "c.poll", "c.poll", "c.poll", "x.odd"))
    lines = diff(result)
    assert lines[0].split() == ["expected", "actual", "(exact)"]
    ops = [line[0] for line in lines[1:]]
    assert ops == ["=", "?", "=", "=", "-", "+", "+"]
    assert lines[5] == "- d.end"
    assert result.flags == [
        "Expected call d.end was not made (expected #4)",
        "Unexpected call c.poll (entry #3)",
        "Unexpected call x.odd (entry #4)",
    ]


def test_in_order_counts_only_calls_of_kinds_the_patterns_name() -> None:
    expect = ["a.start", one_of("b.x", "b.y"), optional("c.z")]
    assert (
        grade(expect, ("a.start", "noise.one", "b.y", "noise.two"), "in_order").total_score == 100
    )


def test_unordered_modes_match_required_steps_before_optional_ones() -> None:
    # The optional "b.x" must not take the one b.x the required step needs.
    expect = [optional("b.x"), "b.x", repeat("c.y", 0)]
    result = grade(expect, ("c.y", "b.x", "c.y"), "any_order")
    assert result.total_score == 100
    assert grade(expect, ("c.y",), "superset").total_score == 0


def test_one_of_with_a_sequence_needs_an_ordered_mode() -> None:
    with pytest.raises(RubricError, match=r"expect\[0\]: one_of with a sequence"):
        grade([one_of("a.b", ["c.d", "e.f"])], ("a.b",), "any_order")


@pytest.mark.parametrize(
    ("expect", "message"),
    [
        ([{"optional": "a"}], "expect[0]: optional: expected call 'a' is not domain.operation"),
        ([{"one_of": ["a.b"]}], "expect[0]: one_of needs at least two alternatives"),
        ([{"one_of": "a.b"}], "expect[0]: one_of takes a list"),
        ([{"repeat": "a.b", "min": 3, "max": 2}], "expect[0]: repeat max 2 is below its min 3"),
        ([{"repeat": "a.b", "min": -1}], "expect[0]: repeat min -1 must be"),
        ([{"repeat": "a.b", "max": 1000}], "expect[0]: repeat bounds go up to 100"),
        ([{"repeat": ["a.b"]}], "expect[0]: repeat: "),
        ([{"repeat": "a.b", "times": 2}], "expect[0]: unknown key 'times' beside 'repeat'"),
        (["a.b", {"unordered": ["a.b"]}], "expect[1]: unordered needs at least two calls"),
        ([{"unordered": [f"a.b{i}" for i in range(9)]}], "unordered holds at most 8 calls"),
        (
            [{"unordered": ["a.b", {"repeat": "c.d"}]}],
            "expect[0]: unordered[1]: a group holds calls",
        ),
        ([{"one_of": ["a.b", []]}], "one_of[1]: an alternative sequence must not be empty"),
    ],
)
def test_bad_patterns_name_the_position(expect: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_expectations(expect)
    assert message in str(caught.value)


def test_the_data_forms_equal_the_helpers() -> None:
    data = [
        {"optional": "a.b"},
        {"one_of": ["c.d", ["e.f", "g.h"]]},
        {"repeat": "i.j", "min": 0, "max": 2},
        {"unordered": ["k.l", {"optional": "m.n"}]},
    ]
    helpers = [
        optional("a.b"),
        one_of("c.d", ["e.f", "g.h"]),
        repeat("i.j", 0, 2),
        unordered("k.l", optional("m.n")),
    ]
    assert parse_expectations(data) == tuple(helpers)


def test_a_trajectory_file_holds_patterns(tmp_path: Path) -> None:
    path = tmp_path / "traj.toml"
    path.write_text(
        """
[trajectory]
mode = "exact"
expect = [
  "tool.lookup",
  { optional = "tool.search" },
  { one_of = ["tool.refund", ["tool.escalate", "tool.wait"]] },
  { repeat = "tool.send_email", min = 1, max = 2 },
  { unordered = ["tool.log", "tool.close"] },
]
"""
    )
    rubric = TrajectoryRubric().configure(RubricConfig(rubric_file=path))
    made = calls(
        "tool.lookup", "tool.escalate", "tool.wait", "tool.send_email", "tool.close", "tool.log"
    )
    assert rubric.grade(made, session_id="s1", now=NOW).total_score == 100
    other = calls(
        "tool.lookup",
        "tool.search",
        "tool.refund",
        "tool.send_email",
        "tool.send_email",
        "tool.log",
        "tool.close",
    )
    assert rubric.grade(other, session_id="s1", now=NOW).total_score == 100


def test_long_pattern_alignments_are_refused_before_any_work() -> None:
    expect = [unordered(*[f"a.b{i}" for i in range(8)])]
    with pytest.raises(RubricError, match="trajectory too long to align"):
        grade_trajectory(
            [entry("a", "b0", at=i) for i in range(20_000)],
            expect,
            mode="exact",
            session_id="s1",
            now=NOW,
        )


def test_a_marker_expect_with_an_optional_step_accepts_both_trajectories(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(
        """
        import pytest
        from pytest_cleo_grade.core.expectations import optional, repeat

        EXPECT = ["session.list", optional("tasks.show"), repeat("tasks.find", 1, 2)]

        @pytest.mark.cleo_grade(expect=EXPECT, mode="exact", fail_under=100)
        def test_with_the_step(graded_session):
            graded_session.record("session", "list")
            graded_session.record("tasks", "show")
            graded_session.record("tasks", "find")

        @pytest.mark.cleo_grade(expect=EXPECT, mode="exact", fail_under=100)
        def test_without_it(graded_session):
            graded_session.record("session", "list")
            graded_session.record("tasks", "find")
            graded_session.record("tasks", "find")

        @pytest.mark.cleo_grade(expect=EXPECT, mode="exact", fail_under=100)
        def test_too_many(graded_session):
            graded_session.record("session", "list")
            for _ in range(3):
                graded_session.record("tasks", "find")
        """
    )
    result = pytester.runpytest()
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "expected vs actual calls (= matched, ~ out of order, - missing, + unexpected, "
            ". not counted, ? optional not made):",
            "*? optional(tasks.show)*(optional: not made)",
            "*+ *#3 tasks.find",
        ]
    )
