"""The CLEO rubric against every row and edge case of seed 000 and every DESIGN §3 decision."""

from __future__ import annotations

import random
from typing import Any

import pytest

from pytest_cleo_grade import GradeResult, grade_entries
from pytest_cleo_grade.core.errors import EntryError
from pytest_cleo_grade.rubrics.cleo import CLEO_DIMENSIONS, EMPTY_SESSION_FLAG
from pytest_cleo_grade.rubrics.rules import cleo_rules, grade_rules
from tests.entries import NOW, entry, model, sequence


def grade(entries: list[dict[str, Any]]) -> GradeResult:
    result = grade_entries(entries, session_id="s1", now=NOW)
    check_points(result, len(entries))
    # Every case also runs through CLEO's rubric written as rules: it must be the same grade.
    ruled = grade_rules(cleo_rules(), entries, session_id="s1", now=NOW)
    check_points(ruled, len(entries))
    assert ruled.model_dump(exclude={"points"}) == result.model_dump(exclude={"points"})
    return result


def check_points(result: GradeResult, count: int) -> None:
    """Every case also checks the ``points`` invariant: each dimension's items sum to its score."""
    items = (result.model_extra or {}).get("points", [])
    for name, dimension in result.dimensions.items():
        total = sum(item["points"] for item in items if item["dimension"] == name)
        assert total == dimension.score, (name, items)
    assert {item["dimension"] for item in items} <= set(result.dimensions)
    assert all(0 <= index < count for item in items for index in item["entries"])


def dim(result: GradeResult, name: str) -> tuple[int | float, list[str]]:
    return result.dimensions[name].score, result.dimensions[name].evidence


def failed(domain: str, operation: str, **kw: Any) -> dict[str, Any]:
    return entry(domain, operation, success=False, exit_code=kw.pop("exit_code", 4), **kw)


def add(title: str | None = "Task", description: Any = "why", **params: Any) -> dict[str, Any]:
    p: dict[str, Any] = dict(params)
    if title is not None:
        p["title"] = title
    if description is not None:
        p["description"] = description
    return entry("tasks", "add", params=p, task_id=params.pop("task_id", None))


# --- S1: session discipline -------------------------------------------------------------


def test_session_list_before_first_task_op_and_end_score_twenty() -> None:
    result = grade(sequence(("session", "list"), ("tasks", "find"), ("session", "end")))
    assert dim(result, "sessionDiscipline") == (
        20,
        ["session.list called before first task op", "session.end called"],
    )
    assert not [f for f in result.flags if f.startswith("session.")]


def test_session_list_never_called_is_flagged_and_scores_nothing() -> None:
    result = grade(sequence(("tasks", "find"), ("session", "end")))
    assert dim(result, "sessionDiscipline") == (10, ["session.end called"])
    assert "session.list never called (check existing sessions before starting)" in result.flags


def test_session_list_after_task_ops_is_flagged() -> None:
    result = grade(sequence(("tasks", "find"), ("session", "list"), ("session", "end")))
    assert dim(result, "sessionDiscipline")[0] == 10
    assert "session.list called after task ops (should check sessions first)" in result.flags


def test_session_end_missing_is_flagged() -> None:
    result = grade(sequence(("session", "list"), ("tasks", "find")))
    assert dim(result, "sessionDiscipline") == (
        10,
        ["session.list called before first task op"],
    )
    assert "session.end never called (always end sessions when done)" in result.flags


def test_session_list_with_equal_timestamp_to_first_task_op_counts_as_before() -> None:
    # Recorded after the task op but at the same instant: timestamps decide, equal is before.
    entries = [entry("tasks", "find", at=5), entry("session", "list", at=5)]
    result = grade(entries)
    assert "session.list called before first task op" in dim(result, "sessionDiscipline")[1]


def test_a_failed_task_op_still_marks_the_first_task_op() -> None:
    entries = sequence(failed("tasks", "show", exit_code=1), ("session", "list"))
    result = grade(entries)
    assert "session.list called after task ops (should check sessions first)" in result.flags


def test_session_list_without_any_task_ops_counts_as_before() -> None:
    result = grade(sequence(("session", "list")))
    assert dim(result, "sessionDiscipline")[1] == ["session.list called before first task op"]


# --- S2: discovery efficiency -----------------------------------------------------------


def test_no_discovery_calls_earn_the_ten_point_benefit_of_doubt() -> None:
    result = grade(sequence(("session", "list")))
    assert dim(result, "discoveryEfficiency") == (10, ["No discovery calls needed"])


def test_find_ratio_of_exactly_eighty_percent_earns_fifteen() -> None:
    calls = [("tasks", "find")] * 4 + [("tasks", "list")]
    result = grade(sequence(*calls))
    assert dim(result, "discoveryEfficiency") == (15, ["find:list ratio 80% >= 80%"])
    assert not [f for f in result.flags if f.startswith("tasks.list used")]


def test_ratio_percentage_in_evidence_rounds_half_up() -> None:
    calls = [("tasks", "find")] * 33 + [("tasks", "list")] * 7
    result = grade(sequence(*calls))
    assert dim(result, "discoveryEfficiency")[1] == ["find:list ratio 83% >= 80%"]


@pytest.mark.parametrize(
    ("finds", "lists", "points"),
    [
        pytest.param(1, 5, 3, id="1:5 is 2.5 rounds up to 3"),
        pytest.param(1, 29, 1, id="1:29 is 0.5 rounds up to 1"),
        pytest.param(7, 3, 11, id="7:3 is 10.5 rounds up to 11"),
        pytest.param(0, 3, 0, id="lists only score 0"),
        pytest.param(3, 1, 11, id="3:1 is 11.25 rounds down to 11"),
    ],
)
def test_partial_discovery_score_is_fifteen_times_ratio_rounded_half_up(
    finds: int, lists: int, points: int
) -> None:
    calls = [("tasks", "find")] * finds + [("tasks", "list")] * lists
    result = grade(sequence(*calls))
    assert dim(result, "discoveryEfficiency") == (points, [])
    assert f"tasks.list used {lists}x (prefer tasks.find for discovery)" in result.flags


def test_tasks_show_adds_five_with_its_count() -> None:
    result = grade(sequence(("tasks", "find"), ("tasks", "show"), ("tasks", "show")))
    assert dim(result, "discoveryEfficiency") == (
        20,
        ["find:list ratio 100% >= 80%", "tasks.show used 2x for detail"],
    )


def test_show_without_discovery_calls_scores_fifteen() -> None:
    result = grade(sequence(("tasks", "show")))
    assert dim(result, "discoveryEfficiency")[0] == 15


def test_failed_discovery_calls_count() -> None:
    entries = sequence(failed("tasks", "find", exit_code=1), ("tasks", "list"))
    result = grade(entries)
    # 1:1 is 50 % -> round(7.5) = 8 (half up)
    assert dim(result, "discoveryEfficiency")[0] == 8


# --- S3: task hygiene -------------------------------------------------------------------


def test_each_add_without_description_costs_five_with_its_task_id() -> None:
    entries = sequence(
        add("A", description=None, task_id="T1"),
        add("B", description="", task_id="T2"),
        add("C", description="fine"),
    )
    result = grade(entries)
    assert dim(result, "taskHygiene") == (10, [])
    assert "tasks.add without description (taskId: T1)" in result.flags
    assert "tasks.add without description (taskId: T2)" in result.flags


def test_add_without_task_id_is_flagged_as_unknown() -> None:
    result = grade(sequence(add("A", description=None)))
    assert "tasks.add without description (taskId: unknown)" in result.flags


def test_blank_description_counts_as_missing() -> None:
    result = grade(sequence(add("A", description="   ")))
    assert dim(result, "taskHygiene")[0] == 15


@pytest.mark.parametrize(
    ("description", "described"),
    [
        ("\ufeff", False),  # JavaScript's trim() removes a BOM; Python's strip() keeps it
        ("\u3000\u2028 ", False),
        ("\x1c", True),  # strip() removes U+001C-U+001F and U+0085; trim() keeps them
        ("\x85", True),
    ],
    ids=["bom", "ideographic-space-line-separator", "file-separator", "next-line"],
)
def test_a_blank_description_is_what_cleos_trim_finds_blank(
    description: str, described: bool
) -> None:
    result = grade(sequence(add("A", description=description), add(" B\ufeff", description="d"),
                            add("\ufeffb", description="d")))  # fmt: skip
    assert dim(result, "taskHygiene")[0] == (20 if described else 15)
    # Titles trim alike: " B\ufeff" and "\ufeffb" are one title (grade() checks the rules too).
    assert "1 potentially duplicate task create(s) detected" in result.flags


def test_failed_add_without_description_is_not_penalised() -> None:
    bad = failed("tasks", "add", exit_code=1, params={"title": "x"})
    result = grade(sequence(bad))
    assert dim(result, "taskHygiene") == (20, [])


def test_all_adds_with_descriptions_are_reported_with_their_count() -> None:
    result = grade(sequence(add("A"), add("B")))
    assert dim(result, "taskHygiene") == (20, ["All 2 tasks.add calls had descriptions"])


@pytest.mark.parametrize(
    "description",
    [pytest.param(42, id="number"), pytest.param({"text": "x"}, id="object"), ["a"]],
)
def test_non_string_description_counts_as_present_and_never_crashes(description: Any) -> None:
    result = grade(sequence(add("A", description=description)))
    assert dim(result, "taskHygiene") == (20, ["All 1 tasks.add calls had descriptions"])


def test_non_string_titles_never_crash_duplicate_detection() -> None:
    result = grade(sequence(add(7), add({"t": 1}), add(["x"]), add(7)))  # type: ignore[arg-type]
    assert "1 potentially duplicate task create(s) detected" in result.flags


def test_subtasks_without_preceding_exists_cost_three_points_once() -> None:
    entries = sequence(add("A", parent="T1"), add("B", parent="T1"), ("tasks", "exists"))
    result = grade(entries)
    message = "Subtasks created without tasks.exists parent check"
    # The penalty is a flag; every add still had its description.
    assert dim(result, "taskHygiene") == (17, ["All 2 tasks.add calls had descriptions"])
    assert result.flags.count(message) == 1


def test_exists_before_every_subtask_is_reported_as_verified() -> None:
    entries = sequence(("tasks", "exists"), add("A", parent="T1"))
    result = grade(entries)
    assert dim(result, "taskHygiene") == (
        20,
        [
            "Parent existence verified before subtask creation",
            "All 1 tasks.add calls had descriptions",
        ],
    )


def test_a_later_subtask_is_verified_by_an_exists_between_them() -> None:
    entries = sequence(add("A", parent="T1"), ("tasks", "exists"), add("B", parent="T1"))
    result = grade(entries)
    assert dim(result, "taskHygiene")[0] == 17  # the first subtask still lacked a check


def test_falsy_parent_is_not_a_subtask() -> None:
    result = grade(sequence(add("A", parent=""), add("B", parent=None)))
    assert dim(result, "taskHygiene")[0] == 20


def test_task_hygiene_floors_at_zero() -> None:
    result = grade(sequence(*[add(f"t{i}", description=None) for i in range(6)]))
    assert dim(result, "taskHygiene")[0] == 0


# --- S4: error protocol -----------------------------------------------------------------


def test_no_errors_and_no_duplicates_is_reported_clean() -> None:
    result = grade(sequence(("tasks", "find")))
    assert dim(result, "errorProtocol") == (20, ["No error protocol violations"])


@pytest.mark.parametrize("recovery", ["find", "exists"])
def test_not_found_followed_by_recovery_within_four_entries_is_fine(recovery: str) -> None:
    entries = sequence(
        failed("tasks", "show"),
        ("session", "list"),
        ("admin", "help"),
        ("tasks", "show"),
        ("tasks", recovery),
    )
    result = grade(entries)
    # Recovered, so no penalty; but an E_NOT_FOUND happened, so not "no violations" (CLEO).
    assert dim(result, "errorProtocol") == (20, ["E_NOT_FOUND followed by recovery lookup"])


def test_recovery_in_the_fifth_entry_is_too_late() -> None:
    entries = sequence(
        failed("tasks", "show"),
        ("session", "list"),
        ("admin", "help"),
        ("tasks", "show"),
        ("tasks", "show"),
        ("tasks", "find"),
    )
    result = grade(entries)
    assert dim(result, "errorProtocol") == (15, [])
    assert "E_NOT_FOUND (tasks.show) not followed by recovery lookup" in result.flags


def test_each_unrecovered_not_found_costs_five() -> None:
    entries = sequence(failed("tasks", "show"), failed("tasks", "show"), failed("tasks", "show"))
    result = grade(entries)
    assert dim(result, "errorProtocol")[0] == 5
    assert result.flags.count("E_NOT_FOUND (tasks.show) not followed by recovery lookup") == 3


def test_only_failed_calls_with_exit_code_four_are_not_found_errors() -> None:
    entries = sequence(
        failed("tasks", "show", exit_code=1),
        entry("tasks", "show", exit_code=4),  # success with code 4 is not an error
    )
    result = grade(entries)
    assert dim(result, "errorProtocol") == (20, ["No error protocol violations"])


def test_error_protocol_floors_at_zero() -> None:
    result = grade(sequence(*[failed("tasks", "show") for _ in range(5)], add("x"), add("X ")))
    assert dim(result, "errorProtocol")[0] == 0


def test_duplicate_titles_compare_trimmed_and_lowercased_and_cost_five_once() -> None:
    entries = sequence(add("Fix bug"), add("  fix BUG "), add("fix bug"), add("other"))
    result = grade(entries)
    assert dim(result, "errorProtocol") == (15, [])
    assert "2 potentially duplicate task create(s) detected" in result.flags


def test_blank_titles_are_not_duplicates_of_each_other() -> None:
    result = grade(sequence(add(""), add("   "), add("")))
    assert dim(result, "errorProtocol") == (20, ["No error protocol violations"])


def test_failed_adds_do_not_count_as_duplicates() -> None:
    second = failed("tasks", "add", exit_code=1, params={"title": "A", "description": "d"})
    result = grade(sequence(add("A"), second))
    assert dim(result, "errorProtocol")[0] == 20


def test_recovery_window_follows_timestamp_order_with_ties_in_recording_order() -> None:
    # The find shares the error's timestamp but was recorded first: it precedes the error.
    entries = [entry("tasks", "find", at=3), failed("tasks", "show", at=3)]
    assert dim(grade(entries), "errorProtocol")[0] == 15
    # Recorded after it at the same instant, it follows and recovers.
    entries = [failed("tasks", "show", at=3), entry("tasks", "find", at=3)]
    assert dim(grade(entries), "errorProtocol")[0] == 20


def test_out_of_order_entries_are_graded_in_timestamp_order() -> None:
    entries = [
        entry("tasks", "find", at=5),
        failed("tasks", "show", at=1),
        entry("session", "list", at=0),
    ]
    result = grade(entries)
    assert dim(result, "errorProtocol")[1][0] == "E_NOT_FOUND followed by recovery lookup"
    assert "session.list called before first task op" in dim(result, "sessionDiscipline")[1]


# --- S5: progressive disclosure ---------------------------------------------------------


@pytest.mark.parametrize(
    ("domain", "operation"),
    [
        ("admin", "help"),
        ("tools", "skill.show"),
        ("tools", "skill.list"),
        ("skills", "list"),
        ("skills", "show"),
    ],
)
def test_each_help_or_skill_call_counts_as_progressive_disclosure(
    domain: str, operation: str
) -> None:
    result = grade([entry(domain, operation, gateway=None)])
    assert dim(result, "disclosureUse") == (10, ["Progressive disclosure used (1x)"])
    assert "No MCP query calls (prefer cleo_query over CLI for programmatic access)" in (
        result.flags
    )


def test_other_admin_or_tools_calls_are_not_disclosure() -> None:
    result = grade([entry("admin", "stats", gateway=None), entry("tools", "skill", gateway=None)])
    assert "No admin.help or skill lookup calls (load ct-cleo for guidance)" in result.flags


@pytest.mark.parametrize("gateway", ["cleo_query", "query"])
def test_both_query_gateway_spellings_count(gateway: str) -> None:
    result = grade([entry("tasks", "find", gateway=gateway), entry("admin", "help", gateway=None)])
    assert dim(result, "disclosureUse") == (
        20,
        ["Progressive disclosure used (1x)", "cleo_query (MCP) used 1x"],
    )


@pytest.mark.parametrize("gateway", ["cleo_mutate", "mutate", None])
def test_mutate_and_cli_calls_are_not_query_gateway_calls(gateway: str | None) -> None:
    params = {"title": "a", "description": "b"}
    result = grade([entry("tasks", "add", gateway=gateway, params=params)])
    assert dim(result, "disclosureUse") == (0, [])
    assert result.flags[-2:] == [
        "No admin.help or skill lookup calls (load ct-cleo for guidance)",
        "No MCP query calls (prefer cleo_query over CLI for programmatic access)",
    ]


# --- totals, edge cases and the function's contract ---------------------------------------


def test_a_protocol_following_session_scores_one_hundred_with_no_flags() -> None:
    entries = sequence(
        ("session", "list"),
        ("admin", "help"),
        ("tasks", "find"),
        ("tasks", "show"),
        ("tasks", "exists"),
        add("Sub", parent="T1"),
        ("session", "end"),
    )
    result = grade(entries)
    assert (result.total_score, result.flags, result.letter) == (100, [], "A")
    assert list(result.dimensions) == list(CLEO_DIMENSIONS)


def test_total_is_the_sum_of_the_dimensions() -> None:
    entries = sequence(("tasks", "list"), failed("tasks", "show"), add("a", description=None))
    result = grade(entries)
    assert result.total_score == sum(d.score for d in result.dimensions.values())
    # S1 none, S2 ratio 0 + the (failed) show's 5, S3 -5, S4 -5, S5 query gateway only.
    assert result.total_score == 0 + 5 + 15 + 15 + 10


def test_an_empty_session_scores_zero_with_the_long_flag() -> None:
    result = grade([])
    assert result.total_score == 0
    assert result.entry_count == 0
    assert result.flags == [EMPTY_SESSION_FLAG]
    assert EMPTY_SESSION_FLAG == (
        "No audit entries found for session (use --grade flag when starting session)"
    )
    assert {name: (d.score, d.max, d.evidence) for name, d in result.dimensions.items()} == {
        name: (0, 20, []) for name in CLEO_DIMENSIONS
    }


def test_every_entry_is_graded_without_truncation_at_one_thousand() -> None:
    entries = [entry("tasks", "find", at=i) for i in range(1500)]
    entries.append(entry("session", "end", at=1600))
    result = grade(entries)
    assert result.entry_count == 1501
    assert "session.end called" in dim(result, "sessionDiscipline")[1]


def test_entries_of_other_sessions_are_left_out_and_untagged_ones_kept() -> None:
    entries = [
        entry("session", "list", at=0, session="other"),
        entry("session", "end", at=1, session=None),
        entry("tasks", "find", at=2),
    ]
    result = grade(entries)
    assert result.entry_count == 2
    assert "session.list never called (check existing sessions before starting)" in result.flags


@pytest.mark.parametrize("seed", range(25))
def test_mixed_sessions_out_of_order_grade_as_their_own_session_in_time_order(seed: int) -> None:
    # Other sessions' entries, untagged ones, equal times and disorder: the grade is that of
    # the session's own entries (untagged ones kept) sorted stably by time, graded in order.
    from pytest_cleo_grade.rubrics.cleo import grade_ordered

    rng = random.Random(seed)
    calls = [
        ("session", "list"),
        ("session", "end"),
        ("tasks", "find"),
        ("tasks", "list"),
        ("tasks", "exists"),
        ("admin", "help"),
        ("custom", "thing"),
    ]
    entries = []
    for _ in range(rng.randrange(1, 60)):
        owner = rng.choice(["s1", "s1", "s1", None, "other", "s10"])
        at = rng.randrange(20)  # few distinct times: many ties
        if rng.random() < 0.2:
            item = failed("tasks", "show", at=at, session=owner)
        elif rng.random() < 0.2:
            title = rng.choice(["a", "b", " A "])
            params = {"title": title, **({"description": "d"} if rng.random() < 0.5 else {})}
            item = entry("tasks", "add", at=at, session=owner, params=params)
        else:
            domain, operation = rng.choice(calls)
            gateway = rng.choice(["query", "cleo_mutate", None])
            item = entry(domain, operation, at=at, session=owner, gateway=gateway)
        entries.append(item)
    mine = [model(e) for e in entries if e["sessionId"] in ("s1", None)]
    expected = grade_ordered(
        sorted(mine, key=lambda e: e.timestamp), session_id="s1", now=NOW
    ).model_dump()
    assert grade_entries(entries, session_id="s1", now=NOW).model_dump() == expected
    assert grade(entries).model_dump() == expected


def test_models_and_dicts_grade_identically() -> None:
    raw = sequence(("session", "list"), ("tasks", "list"), failed("tasks", "show"))
    assert grade(raw) == grade_entries([model(e) for e in raw], session_id="s1", now=NOW)


def test_the_result_timestamp_is_the_injected_clock() -> None:
    result = grade(sequence(("tasks", "find")))
    assert result.to_json_dict()["timestamp"] == "2026-03-01T13:00:00.000Z"
    assert result.evaluator == "auto"


def test_an_invalid_dict_entry_is_an_error_naming_its_index_and_field() -> None:
    raw = sequence(("tasks", "find"), ("tasks", "show"))
    raw[1]["result"]["success"] = "maybe"
    with pytest.raises(EntryError, match=r"entries\[1\]: result\.success: "):
        grade(raw)


@pytest.mark.parametrize("enabled", [True, False])
def test_grading_leaves_the_garbage_collector_as_it_found_it(enabled: bool) -> None:
    import gc

    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        grade(sequence(("tasks", "find")))
        with pytest.raises(EntryError):
            grade([{"timestamp": "bad"}])
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


@pytest.mark.parametrize(
    "description",
    [pytest.param(0, id="zero"), pytest.param(False, id="false"), pytest.param({}, id="empty")],
)
def test_falsy_non_string_descriptions_count_as_missing(description: Any) -> None:
    result = grade(sequence(add("A", description=description)))
    assert dim(result, "taskHygiene")[0] == 15


def test_an_empty_task_id_is_named_as_given_and_only_none_is_unknown() -> None:
    result = grade(sequence(add("A", description=None, task_id="")))
    assert "tasks.add without description (taskId: )" in result.flags


def test_the_unrecovered_flag_names_the_failed_call() -> None:
    result = grade(sequence(failed("tasks", "exists"), failed("admin", "help")))
    assert [f for f in result.flags if f.startswith("E_NOT_FOUND")] == [
        "E_NOT_FOUND (tasks.exists) not followed by recovery lookup",
        "E_NOT_FOUND (admin.help) not followed by recovery lookup",
    ]


def test_a_session_of_many_distinct_calls_grades_alike_and_is_not_remembered() -> None:
    # Rows' classes are remembered across grades, up to a limit; a session of thousands of
    # distinct calls (here every operation differs) is graded the same and then forgotten.
    from pytest_cleo_grade.rubrics import cleo

    odd = [entry("custom", f"op{i}", gateway="query") for i in range(cleo._KNOWN_LIMIT + 10)]
    result = grade([entry("session", "list"), *odd, entry("tasks", "find")])
    # Every call went through a query gateway: 4,106 odd ones, session.list and tasks.find.
    assert dim(result, "disclosureUse")[1] == ["cleo_query (MCP) used 4108x"]
    assert len(cleo._known) <= cleo._KNOWN_LIMIT
    again = grade([entry("session", "list"), *odd, entry("tasks", "find")])
    assert again.model_dump() == result.model_dump()


def test_an_empty_session_carries_an_empty_points_list_as_every_grade_does() -> None:
    result = grade([])
    assert (result.model_extra or {}).get("points") == []
    assert '"points":[]' in result.model_dump_json(by_alias=True)
