"""The CLEO rubric's ``points`` extra: every point of a grade traced to its rule and entries."""

from __future__ import annotations

from typing import Any

from pytest_cleo_grade import GradeResult, grade_entries
from pytest_cleo_grade.rubrics._points import POINT_ENTRY_LIMIT, POINT_ITEM_LIMIT
from tests.entries import NOW, entry, sequence


def items(result: GradeResult, dimension: str) -> list[tuple[str, int | float, list[int]]]:
    return [(p.rule, p.points, p.entries) for p in result.points if p.dimension == dimension]


def grade(entries: list[dict[str, Any]]) -> GradeResult:
    return grade_entries(entries, session_id="s1", now=NOW)


def test_late_session_list_and_partial_discovery_name_their_entries() -> None:
    result = grade(
        sequence(("tasks", "find"), ("session", "list"), ("tasks", "list"), ("tasks", "list"))
    )
    assert items(result, "sessionDiscipline") == [
        ("session.list_first", 0, [0, 1]),
        ("session.end", 0, []),
    ]
    # One find of three discovery calls: 15 x 1/3 = 5, caused by the two lists.
    assert items(result, "discoveryEfficiency") == [
        ("discovery.ratio", 5, [2, 3]),
        ("discovery.show", 0, []),
    ]


def test_each_missing_description_is_a_deduction_on_its_own_entry() -> None:
    adds = [entry("tasks", "add", at=i, params={"title": f"T{i}"}) for i in range(3)]
    result = grade([entry("session", "list", at=-1), *adds])
    hygiene = items(result, "taskHygiene")
    assert hygiene[0] == ("hygiene.start", 20, [])
    assert hygiene[1:] == [("hygiene.description", -5, [i]) for i in (1, 2, 3)]
    assert result.dimensions["taskHygiene"].score == 5


def test_the_floor_is_an_item_so_the_dimension_still_sums_to_its_score() -> None:
    adds = [entry("tasks", "add", at=i, params={"title": f"T{i}"}) for i in range(6)]
    result = grade(adds)
    hygiene = items(result, "taskHygiene")
    assert hygiene[-1] == ("hygiene.floor", 10, [])
    assert sum(p for _, p, _ in hygiene) == result.dimensions["taskHygiene"].score == 0


def test_an_unrecovered_not_found_points_at_the_failure() -> None:
    calls = sequence(
        ("session", "list"),
        entry("tasks", "show", success=False, exit_code=4),
        ("tasks", "list"),
        ("tasks", "list"),
        ("tasks", "list"),
        ("tasks", "list"),
    )
    errors = items(grade(calls), "errorProtocol")
    assert errors == [("errors.start", 20, []), ("errors.not_found", -5, [1])]


def test_a_huge_session_keeps_every_item_and_index_list_bounded() -> None:
    count = POINT_ITEM_LIMIT + 50
    adds = [entry("tasks", "add", at=i, params={"title": f"T{i}"}) for i in range(count)]
    result = grade([entry("admin", "help", at=-1), *adds])
    hygiene = items(result, "taskHygiene")
    deductions = [item for item in hygiene if item[0] == "hygiene.description"]
    assert len(deductions) == POINT_ITEM_LIMIT + 1
    assert deductions[-1][1] == -5 * 50
    assert len(deductions[-1][2]) == 50
    query = items(result, "disclosureUse")[-1]
    assert query[0] == "disclosure.query" and len(query[2]) == POINT_ENTRY_LIMIT


def test_an_empty_session_has_no_points() -> None:
    assert grade([]).points == []


def test_recovered_errors_are_explained_within_the_item_limit() -> None:
    calls: list[dict[str, Any]] = []
    for i in range(POINT_ITEM_LIMIT + 20):
        calls.append(entry("tasks", "show", at=2 * i, success=False, exit_code=4))
        calls.append(entry("tasks", "find", at=2 * i + 1))
    recovered = [p for p in grade(calls).points if p.rule == "errors.recovered"]
    assert len(recovered) == POINT_ITEM_LIMIT + 1
    assert (recovered[0].points, recovered[0].entries) == (0, [0, 1])
    assert recovered[0].text == "E_NOT_FOUND (tasks.show) recovered by tasks.find (no deduction)"
    assert recovered[-1].text == "20 more like the above"


def test_violations_past_what_an_item_lists_still_count_and_list_the_first_indices() -> None:
    # 400 recovered and 400 unrecovered E_NOT_FOUND: the last item of each rule counts the 300
    # past the item limit and lists the first POINT_ENTRY_LIMIT of their indices.
    calls: list[dict[str, Any]] = []
    for i in range(400):
        calls.append(entry("tasks", "show", at=4 * i, success=False, exit_code=4))
        calls.append(entry("tasks", "find", at=4 * i + 1))
    start = len(calls)
    for i in range(400):
        calls.append(entry("tasks", "show", at=10_000 + i, success=False, exit_code=4))
    points = grade(calls).points
    recovered = [p for p in points if p.rule == "errors.recovered"]
    assert len(recovered) == POINT_ITEM_LIMIT + 1
    assert recovered[-1].text == "300 more like the above"
    first_rest = 2 * POINT_ITEM_LIMIT
    assert recovered[-1].entries == list(range(first_rest, first_rest + POINT_ENTRY_LIMIT))
    unrecovered = [p for p in points if p.rule == "errors.not_found"]
    assert len(unrecovered) == POINT_ITEM_LIMIT + 1
    assert (unrecovered[-1].points, unrecovered[-1].text) == (-5 * 300, "300 more like the above")
    first_rest = start + POINT_ITEM_LIMIT
    assert unrecovered[-1].entries == list(range(first_rest, first_rest + POINT_ENTRY_LIMIT))


def test_a_point_cut_at_the_entry_limit_is_never_shown_with_a_short_count() -> None:
    # 300 finds: the point lists the first 100, and `show` printed "and 95 more" and
    # "(shared by 100 calls)" as if those were all.
    from pytest_cleo_grade.core.models import AuditEntry
    from pytest_cleo_grade.reports._points import render_session

    raw = sequence(("session", "list"), *[("tasks", "find")] * 300, ("session", "end"))
    entries = [AuditEntry.model_validate(item) for item in raw]
    result = grade_entries(entries, session_id=str(raw[0]["sessionId"]), now=NOW)
    text = render_session(result, entries)
    assert "(shared by 100 or more calls)" in text
    assert " and more]" in text
    assert "(shared by 100 calls)" not in text and "and 95 more" not in text
