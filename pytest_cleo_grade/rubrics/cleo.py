"""CLEO's 5-dimension, 100-point rubric (the CLEO spec) as a pure function of audit entries.

Evidence and flag strings are verbatim from the CLEO Grade Specification v1.0.0. Decisions on
the spec's ambiguities are those of DESIGN.md section 3; each is commented where it is made.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import compress, islice
from typing import Any, Final

from pytest_cleo_grade.core.models import (
    AuditEntry,
    DimensionScore,
    GradedCall,
    GradeResult,
    coerce_entries,
    collector_paused,
    order_entries,
)
from pytest_cleo_grade.rubrics._cleo_calls import CallDetails, Details, EntryDetails
from pytest_cleo_grade.rubrics._points import (
    POINT_ENTRY_LIMIT,
    balance,
    per_violation,
    point,
    violation_items,
)

# coerce_entries and order_entries live in models; they stay importable from here, where
# rubric plugins written against earlier releases import them.
__all__ = [
    "CLEO_DIMENSIONS",
    "EMPTY_SESSION_FLAG",
    "coerce_entries",
    "grade_calls",
    "grade_entries",
    "grade_ordered",
    "order_entries",
    "session_order",
]

RUBRIC_VERSION: Final = "1.0.0"
DIMENSION_MAX: Final = 20

#: The dimensions in rubric order (S1..S5), each worth 20 points.
CLEO_DIMENSIONS: Final[tuple[str, ...]] = (
    "sessionDiscipline",
    "discoveryEfficiency",
    "taskHygiene",
    "errorProtocol",
    "disclosureUse",
)

EMPTY_SESSION_FLAG: Final = (
    "No audit entries found for session (use --grade flag when starting session)"
)

# CLEO renamed its MCP read gateway from cleo_query to query; both count for S5.
QUERY_GATEWAYS: Final = frozenset({"cleo_query", "query"})
HELP_CALLS: Final = frozenset(
    {
        ("admin", "help"),
        ("tools", "skill.show"),
        ("tools", "skill.list"),
        ("skills", "list"),
        ("skills", "show"),
    }
)
E_NOT_FOUND: Final = 4
RECOVERY_WINDOW: Final = 4
RECOVERY_OPS: Final = frozenset({"find", "exists"})


_Row = tuple[str, str, str | None, int, int]  # domain, operation, gateway, exit code, success

# Grading is bound by memory, not by arithmetic: a large session does not fit in the CPU
# caches and each object touched costs a cache miss. So entries are read by C-level
# attrgetter passes, and the rest of grading works on the class bytes of their rows.
_ROW_FIELDS: Final = (
    "domain",
    "operation",
    "metadata.gateway",
    "result.exit_code",
    "result.success",
)
_ROW = operator.attrgetter(*_ROW_FIELDS)
# The session id leads the row where entries may come from several sessions: whether each
# belongs to the graded one is then a fact of its row too, with no pass of its own.
_SESSION_ROW = operator.attrgetter("session_id", *_ROW_FIELDS)
_TIME = operator.attrgetter("timestamp")
_CALL_ROW = operator.itemgetter(1, 2, 3, 4, 5)

SESSION_LIST: Final = ("session", "list")
SESSION_END: Final = ("session", "end")
TASKS_FIND: Final = ("tasks", "find")
TASKS_LIST: Final = ("tasks", "list")
TASKS_SHOW: Final = ("tasks", "show")
TASKS_ADD: Final = ("tasks", "add")
TASKS_EXISTS: Final = ("tasks", "exists")


@dataclass(slots=True)
class _Facts:
    """What one pass over the ordered entries observed; every dimension is scored from it."""

    first_task_time: datetime | None = None
    first_list_time: datetime | None = None
    session_end_calls: int = 0
    find_calls: int = 0
    list_calls: int = 0
    show_calls: int = 0
    successful_adds: int = 0
    adds_without_description: list[str] = field(default_factory=list)
    subtask_adds: int = 0
    subtask_without_exists: bool = False
    titles: list[str] = field(default_factory=list)
    not_found_positions: list[int] = field(default_factory=list)
    help_calls: int = 0
    query_calls: int = 0
    # Where things happened, for the points extra (each list capped at POINT_ENTRY_LIMIT
    # except the per-violation ones, which are as long as their violations).
    first_task: int | None = None
    first_list: int | None = None
    end_positions: list[int] = field(default_factory=list)
    find_positions: list[int] = field(default_factory=list)
    list_positions: list[int] = field(default_factory=list)
    show_positions: list[int] = field(default_factory=list)
    help_positions: list[int] = field(default_factory=list)
    query_positions: list[int] = field(default_factory=list)
    missing_description_positions: list[int] = field(default_factory=list)
    unverified_subtask_positions: list[int] = field(default_factory=list)
    title_positions: list[int] = field(default_factory=list)


# What the rubric asks of a row depends only on its class: which of the calls it counts the
# row is (or none), whether it went through the query gateway, whether it succeeded and, if
# not, whether it failed with E_NOT_FOUND. A session has a few distinct rows, each classed
# once; the session becomes one byte per entry, and every count, "first" and "where"
# question is a C-level scan of those bytes (a regex search, bytes.count, compress()).
_OTHER, _OTHER_TASK, _SESSION_LIST, _SESSION_END, _FIND = range(5)
_LIST, _SHOW, _ADD, _EXISTS, _HELP = range(5, 10)
_KIND_OF_CALL: Final[dict[tuple[str, str], int]] = {
    SESSION_LIST: _SESSION_LIST,
    SESSION_END: _SESSION_END,
    TASKS_FIND: _FIND,
    TASKS_LIST: _LIST,
    TASKS_SHOW: _SHOW,
    TASKS_ADD: _ADD,
    TASKS_EXISTS: _EXISTS,
    **dict.fromkeys(HELP_CALLS, _HELP),
}
_TASK_KINDS: Final = frozenset({_OTHER_TASK, _FIND, _LIST, _SHOW, _ADD, _EXISTS})
_QUERY_BIT: Final = 4
_NOT_FOUND_BIT: Final = 2
_SUCCESS_BIT: Final = 1
_CLASSES: Final = range(80)  # kind * 8 + the three bits


def _kind(code: int) -> int:
    return code >> 3


class _Classes(dict[_Row, int]):
    """Row -> class, filled as rows are met (a dict lookup in C for every known row)."""

    def __missing__(self, row: _Row) -> int:
        domain, operation, gateway, code, success = row
        kind = _KIND_OF_CALL.get((domain, operation))
        if kind is None:
            kind = _OTHER_TASK if domain == "tasks" else _OTHER
        klass = kind << 3
        if gateway in QUERY_GATEWAYS:
            klass |= _QUERY_BIT
        if success:
            klass |= _SUCCESS_BIT
        elif code == E_NOT_FOUND:
            klass |= _NOT_FOUND_BIT
        self[row] = klass
        return klass


# Rows met by earlier grades keep their class: most sessions reuse the same few dozen.
# Dropped when it grows past the limit, so an odd session's distinct rows are not kept.
# Threads grading at once may both class a new row: they store the same value.
_KNOWN_LIMIT: Final = 4096
_known = _Classes()


def _codes(classes: Iterable[int]) -> bytes:
    """A grade's class bytes; the shared cache is dropped once they grew it past its limit."""
    global _known
    codes = bytes(classes)
    if len(_known) > _KNOWN_LIMIT:
        _known = _Classes()
    return codes


def _class_bytes(rows: Iterable[_Row]) -> bytes:
    return _codes(map(_known.__getitem__, rows))


#: The class byte of an entry tagged with another session (no class of a row reaches it).
_ELSEWHERE: Final = 255
# 1 for an entry of the graded session, 0 for another session's (a translate table).
_MINE: Final = bytes(code != _ELSEWHERE for code in range(256))


_SessionRow = tuple[str | None, str, str, str | None, int, int]  # session id, *_Row


class _SessionClasses(dict[_SessionRow, int]):
    """(session id, *row) -> the row's class, or _ELSEWHERE for another session's entry.

    One per grade: it holds the grade's few distinct rows and asks the shared cache once each.
    """

    __slots__ = ("_session_id",)

    def __init__(self, session_id: str) -> None:
        super().__init__()
        self._session_id = session_id

    def __missing__(self, key: _SessionRow) -> int:
        owner = key[0]
        mine = owner is None or owner == self._session_id
        klass = _known[key[1:]] if mine else _ELSEWHERE
        self[key] = klass
        return klass


class _Matching:
    """The classes that pass ``test``: a regex for the first, a translate table for all."""

    __slots__ = ("marks", "pattern")

    def __init__(self, test: Callable[[int], bool]) -> None:
        members = [code for code in _CLASSES if test(code)]
        self.pattern = re.compile(b"[" + b"".join(re.escape(bytes((c,))) for c in members) + b"]")
        self.marks = bytes(code in members for code in range(256))


def _of_kinds(*kinds: int) -> _Matching:
    return _Matching(lambda code: _kind(code) in kinds)


_TASK_AT = _Matching(lambda code: _kind(code) in _TASK_KINDS)
_SESSION_LIST_AT = _of_kinds(_SESSION_LIST)
_SESSION_END_AT = _of_kinds(_SESSION_END)
_FIND_AT = _of_kinds(_FIND)
_LIST_AT = _of_kinds(_LIST)
_SHOW_AT = _of_kinds(_SHOW)
_ADDED_AT = _Matching(lambda code: _kind(code) == _ADD and bool(code & _SUCCESS_BIT))
_EXISTS_AT = _of_kinds(_EXISTS)
_HELP_AT = _of_kinds(_HELP)
_RECOVERY_AT = _of_kinds(_FIND, _EXISTS)
_QUERY_AT = _Matching(lambda code: bool(code & _QUERY_BIT))
_NOT_FOUND_AT = _Matching(lambda code: bool(code & _NOT_FOUND_BIT))


def _first(matching: _Matching, codes: bytes) -> int | None:
    found = matching.pattern.search(codes)
    return None if found is None else found.start()


def _positions(matching: _Matching, codes: bytes) -> Iterator[int]:
    # compress() picks the marked positions in C, with no match object per position.
    return compress(range(len(codes)), codes.translate(matching.marks))


def _counted(matching: _Matching, codes: bytes) -> tuple[int, list[int]]:
    """How many entries match, and the first POINT_ENTRY_LIMIT of their positions."""
    marks = codes.translate(matching.marks)
    count = marks.count(1)
    if not count:
        return 0, []
    return count, list(islice(compress(range(len(marks)), marks), POINT_ENTRY_LIMIT))


def _all(matching: _Matching, codes: bytes) -> list[int]:
    return list(_positions(matching, codes))


def _scan(details: Details, codes: bytes) -> _Facts:
    """Collect the facts from the session's classes, one byte per entry (see _Classes).

    Grading must stay close to a bare loop over the entries even for a million of them:
    Python code runs per entry only for the entries that need a closer look: successful adds.
    """
    facts = _Facts()
    # S1 compares with the first tasks.* entry of any operation, failed or not.
    first_task = _first(_TASK_AT, codes)
    first_list = _first(_SESSION_LIST_AT, codes)
    facts.first_task, facts.first_list = first_task, first_list
    facts.first_task_time = None if first_task is None else details.timestamp(first_task)
    facts.first_list_time = None if first_list is None else details.timestamp(first_list)
    facts.session_end_calls, facts.end_positions = _counted(_SESSION_END_AT, codes)
    facts.find_calls, facts.find_positions = _counted(_FIND_AT, codes)
    facts.list_calls, facts.list_positions = _counted(_LIST_AT, codes)
    facts.show_calls, facts.show_positions = _counted(_SHOW_AT, codes)
    facts.help_calls, facts.help_positions = _counted(_HELP_AT, codes)
    facts.query_calls, facts.query_positions = _counted(_QUERY_AT, codes)

    first_exists = _first(_EXISTS_AT, codes)
    _note_adds(facts, details, _all(_ADDED_AT, codes), first_exists)
    facts.not_found_positions = _all(_NOT_FOUND_AT, codes)
    return facts


def _note_adds(
    facts: _Facts, details: Details, positions: list[int], first_exists: int | None
) -> None:
    """Record the successful tasks.add calls at ``positions`` (S3 and S4's duplicates).

    One tight loop with locals: a session can hold a hundred thousand adds.
    """
    missing = facts.adds_without_description
    missing_at = facts.missing_description_positions
    titles = facts.titles
    titles_at = facts.title_positions
    added = subtasks = 0
    for position, seen in zip(positions, details.adds(positions), strict=True):
        if seen is None:
            continue
        described, parent, title = seen
        added += 1
        if not described:
            task_id = details.task_id(position)
            missing.append("unknown" if task_id is None else task_id)
            missing_at.append(position)
        if parent:
            subtasks += 1
            # The spec says "preceding": an exists later in the session does not verify.
            if first_exists is None or first_exists > position:
                facts.subtask_without_exists = True
                facts.unverified_subtask_positions.append(position)
        if title is not None:
            titles.append(title)
            titles_at.append(position)
    facts.successful_adds = added
    facts.subtask_adds = subtasks


def _percent_half_up(part: int, whole: int) -> int:
    """round(100 * part / whole) half up, in exact integer arithmetic (33/40 -> 83)."""
    return (200 * part + whole) // (2 * whole)


_Points = list[dict[str, Any]]


def _calls(count: int, name: str) -> str:
    return f"{count} {name} call{'' if count == 1 else 's'}"


def _discovery(total: int) -> str:
    return f"{total} discovery call{'' if total == 1 else 's'}"


def _session_discipline(facts: _Facts, flags: list[str], points: _Points) -> DimensionScore:
    dim = "sessionDiscipline"
    score = 0
    evidence: list[str] = []
    first = sorted(i for i in (facts.first_list, facts.first_task) if i is not None)
    if facts.first_list_time is None:
        flags.append("session.list never called (check existing sessions before starting)")
        points.append(point(dim, 0, "session.list_first", "session.list was never called"))
    elif facts.first_task_time is None or facts.first_list_time <= facts.first_task_time:
        # No task ops at all counts as "before"; so do equal timestamps.
        score += 10
        evidence.append("session.list called before first task op")
        points.append(
            point(dim, 10, "session.list_first", "session.list came before any task op", first)
        )
    else:
        flags.append("session.list called after task ops (should check sessions first)")
        points.append(
            point(dim, 0, "session.list_first", "session.list came after a task op", first)
        )
    if facts.session_end_calls:
        score += 10
        evidence.append("session.end called")
        text = f"session.end was called ({_calls(facts.session_end_calls, 'session.end')})"
        points.append(point(dim, 10, "session.end", text, facts.end_positions))
    else:
        flags.append("session.end never called (always end sessions when done)")
        points.append(point(dim, 0, "session.end", "session.end was never called"))
    return DimensionScore(score=score, max=DIMENSION_MAX, evidence=evidence)


def _discovery_efficiency(facts: _Facts, flags: list[str], points: _Points) -> DimensionScore:
    dim = "discoveryEfficiency"
    score = 0
    evidence: list[str] = []
    finds, lists = facts.find_calls, facts.list_calls
    total = finds + lists
    if total == 0:
        score += 10
        evidence.append("No discovery calls needed")
        points.append(point(dim, 10, "discovery.ratio", "No tasks.find or tasks.list calls"))
    elif finds * 5 >= total * 4:  # ratio >= 80 %, compared exactly
        score += 15
        evidence.append(f"find:list ratio {_percent_half_up(finds, total)}% >= 80%")
        text = f"{_calls(finds, 'tasks.find')} of {_discovery(total)} (at least 80%)"
        points.append(point(dim, 15, "discovery.ratio", text, facts.find_positions))
    else:
        # round(15 * ratio) half up, exactly: 1:5 -> 3, 1:29 -> 1, 7:3 -> 11.
        earned = (30 * finds + total) // (2 * total)
        score += earned
        flags.append(f"tasks.list used {lists}x (prefer tasks.find for discovery)")
        text = (
            f"{_calls(finds, 'tasks.find')} of {_discovery(total)} "
            f"({_percent_half_up(finds, total)}%, below 80%): {earned} of 15"
        )
        points.append(point(dim, earned, "discovery.ratio", text, facts.list_positions))
    if facts.show_calls:
        score += 5
        evidence.append(f"tasks.show used {facts.show_calls}x for detail")
        text = f"tasks.show used for detail ({_calls(facts.show_calls, 'tasks.show')})"
        points.append(point(dim, 5, "discovery.show", text, facts.show_positions))
    else:
        points.append(point(dim, 0, "discovery.show", "tasks.show was never used (5 not earned)"))
    score = min(score, DIMENSION_MAX)
    balance(points, dim, score, "discovery.cap")
    return DimensionScore(score=score, max=DIMENSION_MAX, evidence=evidence)


def _task_hygiene(facts: _Facts, flags: list[str], points: _Points) -> DimensionScore:
    dim = "taskHygiene"
    score = DIMENSION_MAX
    evidence: list[str] = []
    points.append(point(dim, DIMENSION_MAX, "hygiene.start", "Task hygiene starts at 20"))
    for task_id in facts.adds_without_description:
        score -= 5
        flags.append(f"tasks.add without description (taskId: {task_id})")
    points.extend(
        per_violation(
            dim,
            -5,
            "hygiene.description",
            [
                (f"tasks.add without a description (taskId: {task_id})", (position,))
                for task_id, position in zip(
                    facts.adds_without_description,
                    facts.missing_description_positions,
                    strict=True,
                )
            ],
        )
    )
    if facts.subtask_adds:
        if facts.subtask_without_exists:
            # A penalty is a flag; evidence lists what earned or kept points (as CLEO does).
            score -= 3
            flags.append("Subtasks created without tasks.exists parent check")
            points.append(
                point(
                    dim,
                    -3,
                    "hygiene.subtask_exists",
                    "A subtask was added with no tasks.exists before it (once per session)",
                    facts.unverified_subtask_positions,
                )
            )
        else:
            evidence.append("Parent existence verified before subtask creation")
    if facts.successful_adds and not facts.adds_without_description:
        evidence.append(f"All {facts.successful_adds} tasks.add calls had descriptions")
    score = max(score, 0)
    balance(points, dim, score, "hygiene.floor")
    return DimensionScore(score=score, max=DIMENSION_MAX, evidence=evidence)


def _error_protocol(
    details: Details, codes: bytes, facts: _Facts, flags: list[str], points: _Points
) -> DimensionScore:
    dim = "errorProtocol"
    score = DIMENSION_MAX
    evidence: list[str] = []
    points.append(point(dim, DIMENSION_MAX, "errors.start", "Error protocol starts at 20"))
    # 1 where a recovery lookup is: bytes.find looks ahead in C, with no match object.
    look = codes.translate(_RECOVERY_AT.marks).find
    failures = facts.not_found_positions
    found_at = [look(1, p + 1, p + 1 + RECOVERY_WINDOW) for p in failures]
    recovered = [(p, at) for p, at in zip(failures, found_at, strict=True) if at >= 0]
    missed = [(p,) for p, at in zip(failures, found_at, strict=True) if at < 0]
    evidence.extend(["E_NOT_FOUND followed by recovery lookup"] * len(recovered))
    score -= 5 * len(missed)
    # The CLEO spec gives no text; this is CLEO's, naming the call that failed.
    failed = [details.call(p) for (p,) in missed]
    flags.extend([f"E_NOT_FOUND ({call}) not followed by recovery lookup" for call in failed])

    def recovery(i: int) -> str:
        position, at = recovered[i]
        return (
            f"E_NOT_FOUND ({details.call(position)}) recovered by {details.call(at)} (no deduction)"
        )

    def no_recovery(i: int) -> str:
        return (
            f"E_NOT_FOUND ({failed[i]}) with no tasks.find or "
            f"tasks.exists in the next {RECOVERY_WINDOW} calls"
        )

    points.extend(violation_items(dim, 0, "errors.recovered", recovered, recovery))
    points.extend(violation_items(dim, -5, "errors.not_found", missed, no_recovery))
    duplicates = len(facts.titles) - len(set(facts.titles))
    if duplicates:
        score -= 5
        flags.append(f"{duplicates} potentially duplicate task create(s) detected")
        seen: set[str] = set()
        repeated: list[int] = []
        for title, position in zip(facts.titles, facts.title_positions, strict=True):
            if title in seen:
                repeated.append(position)
            seen.add(title)
        text = f"{duplicates} tasks.add call(s) repeat an earlier title (once per session)"
        points.append(point(dim, -5, "errors.duplicates", text, repeated))
    if not facts.not_found_positions and not duplicates:
        # As CLEO reads "no violations": no E_NOT_FOUND at all, recovered or not.
        evidence.append("No error protocol violations")
    score = max(score, 0)
    balance(points, dim, score, "errors.floor")
    return DimensionScore(score=score, max=DIMENSION_MAX, evidence=evidence)


def _disclosure_use(facts: _Facts, flags: list[str], points: _Points) -> DimensionScore:
    dim = "disclosureUse"
    score = 0
    evidence: list[str] = []
    if facts.help_calls:
        score += 10
        evidence.append(f"Progressive disclosure used ({facts.help_calls}x)")
        text = f"Help or skill lookups used ({_calls(facts.help_calls, 'help')})"
        points.append(point(dim, 10, "disclosure.help", text, facts.help_positions))
    else:
        flags.append("No admin.help or skill lookup calls (load ct-cleo for guidance)")
        points.append(point(dim, 0, "disclosure.help", "No admin.help or skill lookup calls"))
    if facts.query_calls:
        score += 10
        evidence.append(f"cleo_query (MCP) used {facts.query_calls}x")
        text = f"The query gateway was used ({_calls(facts.query_calls, 'query')})"
        points.append(point(dim, 10, "disclosure.query", text, facts.query_positions))
    else:
        flags.append("No MCP query calls (prefer cleo_query over CLI for programmatic access)")
        points.append(point(dim, 0, "disclosure.query", "No calls through the query gateway"))
    return DimensionScore(score=score, max=DIMENSION_MAX, evidence=evidence)


def grade_ordered(
    ordered: Sequence[AuditEntry],
    *,
    session_id: str,
    now: datetime | None = None,
    task_id: str | None = None,
) -> GradeResult:
    """Grade entries already validated, filtered to one session and in session order."""
    with collector_paused():
        return _grade(
            EntryDetails(ordered),
            _class_bytes(map(_ROW, ordered)),
            session_id=session_id,
            now=now,
            task_id=task_id,
        )


def grade_calls(
    calls: Sequence[GradedCall],
    *,
    session_id: str,
    now: datetime | None = None,
    task_id: str | None = None,
) -> GradeResult:
    """Grade one session's graded calls, already in session order (see ``cleo_calls``).

    The same result as :func:`grade_ordered` over the entries the calls were read from.
    """
    with collector_paused():
        return _grade(
            CallDetails(calls),
            _class_bytes(map(_CALL_ROW, calls)),
            session_id=session_id,
            now=now,
            task_id=task_id,
        )


def _grade(
    details: Details,
    codes: bytes,
    *,
    session_id: str,
    now: datetime | None,
    task_id: str | None,
) -> GradeResult:
    timestamp = now or datetime.now(UTC)
    if not codes:
        empty = DimensionScore(score=0, max=DIMENSION_MAX, evidence=[])
        return GradeResult(
            session_id=session_id,
            task_id=task_id,
            total_score=0,
            max_score=100,
            dimensions=dict.fromkeys(CLEO_DIMENSIONS, empty),
            flags=[EMPTY_SESSION_FLAG],
            timestamp=timestamp,
            entry_count=0,
            points=[],  # nothing to explain: every grade carries the list
        )
    facts = _scan(details, codes)
    flags: list[str] = []
    points: _Points = []
    scores = (
        _session_discipline(facts, flags, points),
        _discovery_efficiency(facts, flags, points),
        _task_hygiene(facts, flags, points),
        _error_protocol(details, codes, facts, flags, points),
        _disclosure_use(facts, flags, points),
    )
    return GradeResult(
        session_id=session_id,
        task_id=task_id,
        total_score=sum(int(s.score) for s in scores),
        max_score=100,
        dimensions=dict(zip(CLEO_DIMENSIONS, scores, strict=True)),
        flags=flags,
        timestamp=timestamp,
        entry_count=len(codes),
        points=points,
    )


def grade_entries(
    entries: Iterable[AuditEntry | Mapping[str, Any]],
    *,
    session_id: str,
    now: datetime | None = None,
    task_id: str | None = None,
) -> GradeResult:
    """Grade a session's audit entries with CLEO's rubric.

    ``entries`` may be AuditEntry objects or CLEO-shaped dicts. Entries tagged with another
    session id are left out; entries without one are taken to belong to ``session_id``. Every
    remaining entry is graded (no truncation), in timestamp order with ties in list order.
    ``now`` fixes the result's timestamp (the only clock the function reads).
    """
    with collector_paused():
        result = _filter_order_grade(
            coerce_entries(entries), session_id=session_id, now=now, task_id=task_id
        )
    # The per-entry tuples died inside the pause, with _filter_order_grade's frame: freeing
    # them after it would leave the collector a generation full of them to traverse.
    return result


def session_order(
    sessions: list[str | None], times: list[Any], session_id: str
) -> list[int] | None:
    """Positions of the items of ``session_id`` (and of those without a session) in session
    order: by time, ties in list order. None when that is every item, in the order given.

    ``sessions`` and ``times`` are the items' session ids and timestamps, position by
    position; the common case (one session, already in order) costs two C-level passes.
    """
    keep: list[int] | None = None
    if sessions.count(session_id) + sessions.count(None) != len(sessions):
        keep = [i for i, sid in enumerate(sessions) if sid is None or sid == session_id]
        times = [times[i] for i in keep]
    order = _time_order(times)
    if order is not None:
        return order if keep is None else [keep[i] for i in order]
    return keep


def _time_order(times: list[Any]) -> list[int] | None:
    """Positions of ``times`` sorted by time, ties in list order; None when already in order
    (the common case: one C-level pass)."""
    if any(map(operator.gt, times, islice(times, 1, None))):
        return sorted(range(len(times)), key=times.__getitem__)  # stable: ties keep order
    return None


def _filter_order_grade(
    validated: list[AuditEntry], *, session_id: str, now: datetime | None, task_id: str | None
) -> GradeResult:
    # Two C-level passes over the entries: their rows (with the session, so that leaving out
    # other sessions' entries needs no pass of its own) and their times. The rows are classed
    # as they are read; filtering and ordering then move class bytes, not rows.
    codes = _codes(map(_SessionClasses(session_id).__getitem__, map(_SESSION_ROW, validated)))
    if _ELSEWHERE in codes:
        marks = codes.translate(_MINE)
        validated = list(compress(validated, marks))
        codes = codes.translate(None, bytes((_ELSEWHERE,)))
    order = _time_order(list(map(_TIME, validated)))
    if order is not None:
        validated = list(map(validated.__getitem__, order))
        codes = bytes(map(codes.__getitem__, order))
    return _grade(EntryDetails(validated), codes, session_id=session_id, now=now, task_id=task_id)
