"""The trajectory rubric: the calls an agent made against the calls a test expected.

Modes (DESIGN section 8): ``exact`` (the same calls in the same order), ``in_order`` (the
expected calls in this order; calls of other kinds may come between), ``any_order`` (the
same calls, any order), ``subset`` (only expected calls, some may be left out), ``superset``
(every expected call, others allowed). Ordered modes align the two lists by their longest
common subsequence, unordered ones by a maximum matching; the score is the F1 of precision
(matched / actual calls that count) and recall (matched / expected), where ``subset`` takes
recall and ``superset`` precision as 1. It is 100 exactly when the mode's condition holds.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any, Final, Protocol

from pytest_cleo_grade.core._scale import hundredths_half_up
from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.core.expectations import (
    Call,
    Expected,
    OneOf,
    OptionalStep,
    Repeat,
    TrajectoryMode,
    Unordered,
    is_plain,
    parse_expectations,
    parse_trajectory_mode,
)
from pytest_cleo_grade.core.models import (
    AuditEntry,
    DimensionScore,
    GradeResult,
    coerce_entries,
    order_entries,
)
from pytest_cleo_grade.rubrics._document import read_document
from pytest_cleo_grade.rubrics._identity import HASH_KEY, settings_hash
from pytest_cleo_grade.rubrics._patterns import PatternAlignment, align_patterns
from pytest_cleo_grade.rubrics._points import point
from pytest_cleo_grade.rubrics.protocol import GradeContext, RubricConfig

__all__ = [
    "DEFAULT_MODE",
    "TRAJECTORY_RUBRIC",
    "TrajectoryRubric",
    "align",
    "check_trajectory_file",
    "grade_trajectory",
    "is_trajectory_document",
    "load_trajectory_document",
]

TRAJECTORY_RUBRIC: Final = "trajectory"
DIMENSION: Final = "trajectory"
DEFAULT_MODE: Final[TrajectoryMode] = "in_order"
#: The most (expected x actual) pairs an ordered alignment may compare: its table takes
#: 4 bytes a pair, so 10 million pairs is 40 MB (1,000 expected calls against 10,000).
MAX_PAIRS: Final = 10_000_000
#: The most steps (candidate pairs looked at) the unordered modes' matching may take: each
#: expected call looks for a free actual call, or for one to free, among its candidates.
MAX_MATCH_STEPS: Final = 20_000_000
#: The most diff lines a result keeps (a history line carries them).
MAX_DIFF_LINES: Final = 200
EMPTY_FLAG: Final = "No audit entries found for session"

_Actual = tuple[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class Alignment:
    """How the actual calls line up with the expected ones.

    ``rows``: ``(op, expected index, actual index)`` in reading order, op ``=`` (matched),
    ``-`` (expected, missing), ``+`` (actual, unexpected), ``~`` (an expected call made out
    of order: both indices), ``.`` (an actual call the mode ignores).
    """

    rows: list[tuple[str, int | None, int | None]]
    matched: int
    recall_of: int
    precision_of: int

    @property
    def f1(self) -> Fraction:
        both = self.recall_of + self.precision_of
        return Fraction(2 * self.matched, both) if both else Fraction(1)


def _match_rows(expected: Sequence[Call], actual: Sequence[_Actual]) -> list[bytearray]:
    """Row i: 1 where actual call j is expected call i (each predicate run once per pair)."""
    rows = []
    by_name: dict[str, list[int]] = {}
    for j, (name, _) in enumerate(actual):
        by_name.setdefault(name, []).append(j)
    for i, call in enumerate(expected):
        row = bytearray(len(actual))
        for j in by_name.get(call.name, ()):
            if _matches(call, i, j, actual[j]):
                row[j] = 1
        rows.append(row)
    return rows


def _matches(call: Call, i: int, j: int, made: _Actual) -> bool:
    """``call.matches``, a failing ``where`` predicate named in one line (not a traceback)."""
    try:
        return call.matches(*made)
    except Exception as exc:  # the test author's predicate: any error is theirs to see
        raise RubricError(
            f"expect[{i}]: the predicate of expected call {call.name} raised "
            f"{type(exc).__name__}: {exc} (on entry #{j})"
        ) from None


def _check_pairs(m: int, n: int) -> None:
    if m * n > MAX_PAIRS:
        raise RubricError(
            f"trajectory too long to align: {m} expected x {n} actual calls is over "
            f"{MAX_PAIRS:,} pairs; expect fewer calls or use an unordered mode"
        )


def _lcs(match: list[bytearray], columns: list[int]) -> list[tuple[str, int | None, int | None]]:
    """Align expected rows with the actual ``columns`` by their longest common subsequence."""
    m, n = len(match), len(columns)
    _check_pairs(m, n)
    table = [array("I", bytes(4 * (n + 1)))]
    for i in range(m):
        prev, row, hits = table[-1], array("I", bytes(4 * (n + 1))), match[i]
        for k in range(n):
            if hits[columns[k]]:
                row[k + 1] = prev[k] + 1
            else:
                up, left = prev[k + 1], row[k]
                row[k + 1] = up if up >= left else left
        table.append(row)
    ops: list[tuple[str, int | None, int | None]] = []
    i, k = m, n
    while i or k:
        if i and k and table[i][k - 1] == table[i][k] and match[i - 1][columns[k - 1]]:
            # This call matches, and so does an earlier one as well: the earliest is the
            # match (the later repeats are the extra calls), as a reader takes it.
            ops.append(("+", None, columns[k - 1]))
            k -= 1
        elif i and k and match[i - 1][columns[k - 1]] and table[i][k] == table[i - 1][k - 1] + 1:
            ops.append(("=", i - 1, columns[k - 1]))
            i, k = i - 1, k - 1
        elif i and (not k or table[i - 1][k] >= table[i][k - 1]):
            ops.append(("-", i - 1, None))
            i -= 1
        else:
            ops.append(("+", None, columns[k - 1]))
            k -= 1
    ops.reverse()
    return ops


def _candidates(expected: Sequence[Call], actual: Sequence[_Actual]) -> list[list[int]]:
    """For each expected call, the actual calls it matches (sparse: only same-named ones are
    compared, and their number is bounded before any predicate runs)."""
    by_name: dict[str, list[int]] = {}
    for j, (name, _) in enumerate(actual):
        by_name.setdefault(name, []).append(j)
    pairs = sum(len(by_name.get(call.name, ())) for call in expected)
    if pairs > MAX_PAIRS:
        raise RubricError(
            f"trajectory too large to match: {len(expected)} expected x {len(actual)} actual "
            f"calls make {pairs:,} pairs of the same name, over {MAX_PAIRS:,}; expect fewer calls"
        )
    return [
        [j for j in by_name.get(call.name, ()) if _matches(call, i, j, actual[j])]
        for i, call in enumerate(expected)
    ]


def _matching(candidates: list[list[int]]) -> dict[int, int]:
    """A maximum matching expected -> actual (augmenting paths, iterative), its work bounded
    by MAX_MATCH_STEPS (RubricError past it)."""
    owner: dict[int, int] = {}  # actual -> expected
    steps = 0
    for start, first in enumerate(candidates):
        # Most calls find a free candidate at once: no search.
        free = next((j for j in first if j not in owner), None)
        steps += len(first)
        if free is not None:
            owner[free] = start
            continue
        seen: set[int] = set()
        # Depth-first search for an augmenting path; each frame: (expected, next candidate).
        stack: list[tuple[int, int]] = [(start, 0)]
        path: list[tuple[int, int]] = []
        while stack:
            i, k = stack.pop()
            row = candidates[i]
            while k < len(row) and row[k] in seen:
                k += 1
            steps += k + 1
            if steps > MAX_MATCH_STEPS:
                raise RubricError(
                    f"trajectory too large to match: matching {len(candidates)} expected "
                    f"calls took over {MAX_MATCH_STEPS:,} steps; expect fewer calls"
                )
            if k >= len(row):
                if path:
                    path.pop()
                continue
            j = row[k]
            seen.add(j)
            stack.append((i, k + 1))
            path.append((i, j))
            if j not in owner:
                for ei, aj in path:
                    owner[aj] = ei
                break
            stack.append((owner[j], 0))
    return {e: a for a, e in owner.items()}


def align(expected: Sequence[Call], actual: Sequence[_Actual], mode: TrajectoryMode) -> Alignment:
    """Align ``actual`` ``(name, params)`` calls with ``expected`` under ``mode``."""
    m, n = len(expected), len(actual)
    if mode in ("exact", "in_order"):
        names = {call.name for call in expected}
        counted = [j for j, (name, _) in enumerate(actual) if mode == "exact" or name in names]
        _check_pairs(m, len(counted))  # before any work: the bound is on the whole alignment
        match = _match_rows(expected, actual)
        ops = _lcs(match, counted)
        ignored = sorted(set(range(n)) - set(counted))
        rows = _out_of_order(_merge_ignored(ops, ignored), match)
        matched = sum(op == "=" for op, _, _ in rows)
        return Alignment(rows, matched, m, len(counted))
    pairs = _matching(_candidates(expected, actual))
    by_actual = {a: e for e, a in pairs.items()}
    rows = [("=", by_actual[j], j) if j in by_actual else ("+", None, j) for j in range(n)]
    rows += [("-", i, None) for i in range(m) if i not in pairs]
    matched = len(pairs)
    recall_of = matched if mode == "subset" else m
    precision_of = matched if mode == "superset" else n
    return Alignment(rows, matched, recall_of, precision_of)


def _merge_ignored(
    ops: list[tuple[str, int | None, int | None]], ignored: list[int]
) -> list[tuple[str, int | None, int | None]]:
    """Put the calls the mode ignores back in their places among the aligned rows."""
    if not ignored:
        return ops
    rows: list[tuple[str, int | None, int | None]] = []
    pending = iter(ignored)
    nxt = next(pending, None)
    for op in ops:
        j = op[2]
        while nxt is not None and j is not None and nxt < j:
            rows.append((".", None, nxt))
            nxt = next(pending, None)
        rows.append(op)
    while nxt is not None:
        rows.append((".", None, nxt))
        nxt = next(pending, None)
    return rows


def _out_of_order(
    rows: list[tuple[str, int | None, int | None]], match: list[bytearray]
) -> list[tuple[str, int | None, int | None]]:
    """Mark a missing expected call that was made, unaligned, elsewhere: ``~`` (both)."""
    spare = [j for op, _, j in rows if op == "+" and j is not None]
    used: set[int] = set()
    marked: dict[int, int] = {}
    for op, i, _ in rows:
        if op == "-" and i is not None:
            j = next((j for j in spare if j not in used and match[i][j]), None)
            if j is not None:
                used.add(j)
                marked[i] = j
    out: list[tuple[str, int | None, int | None]] = []
    for op, i, j in rows:
        if op == "-" and i in marked:
            out.append(("~", i, marked[i]))
        elif op == "+" and j in used:
            continue
        else:
            out.append((op, i, j))
    return out


def _percent(f1: Fraction) -> float:
    """100 x F1, rounded half up to two decimals (2/3 -> 66.67)."""
    return hundredths_half_up(f1 * 100)


class _Labelled(Protocol):
    def label(self) -> str: ...


def diff_lines(
    alignment: Alignment | PatternAlignment,
    expected: Sequence[_Labelled],
    actual: Sequence[_Actual],
    mode: str,
) -> list[str]:
    """The expected and actual calls side by side, one aligned row per line."""
    labels = [call.label() for call in expected]
    width = min(max((len(label) for label in labels), default=8), 48)
    lines = [f"  {'expected':<{width}}  actual ({mode})"]
    notes = {"~": "  (out of order)", ".": "  (not counted)", "?": "  (optional: not made)"}
    if mode == "subset":
        notes["-"] = "  (left out: allowed)"
    if mode == "superset":
        notes["+"] = "  (extra: allowed)"
    for op, i, j in alignment.rows:
        left = labels[i] if i is not None else ""
        right = f"#{j} {actual[j][0]}" if j is not None else ""
        lines.append(f"{op} {left:<{width}}  {right}{notes.get(op, '')}".rstrip())
    if len(lines) > MAX_DIFF_LINES:
        more = len(lines) - MAX_DIFF_LINES
        lines = [*lines[:MAX_DIFF_LINES], f"... {more} more lines (cleo-grade show SESSION)"]
    return lines


def _explain(
    rows: list[tuple[str, int | None, int | None]],
    expected: Sequence[tuple[str, int]],
    actual: Sequence[_Actual],
    mode: str,
) -> tuple[list[str], list[dict[str, Any]]]:
    """Flags and zero points per mismatch; ``expected``: (label, expected #) per row index."""
    flags: list[str] = []
    items: list[dict[str, Any]] = []
    for op, i, j in rows:
        if op == "-" and i is not None and mode != "subset":
            label, number = expected[i]
            text = f"Expected call {label} was not made (expected #{number})"
        elif op == "+" and j is not None and mode != "superset":
            text = f"Unexpected call {actual[j][0]} (entry #{j})"
        elif op == "~" and i is not None and j is not None:
            text = f"Expected call {expected[i][0]} was made out of order (entry #{j})"
        else:
            continue
        flags.append(text)
        items.append(
            point(DIMENSION, 0, f"trajectory.{_RULES[op]}", text, () if j is None else (j,))
        )
    return flags, items


_RULES: Final = {"-": "missing", "+": "unexpected", "~": "out_of_order"}


def grade_trajectory(
    entries: Iterable[AuditEntry | Mapping[str, Any]],
    expect: object,
    *,
    mode: str = DEFAULT_MODE,
    session_id: str,
    now: datetime | None = None,
    task_id: str | None = None,
) -> GradeResult:
    """Grade ``session_id``'s calls against ``expect`` (see :mod:`expectations`) in ``mode``."""
    try:
        expected = (
            expect
            if isinstance(expect, tuple) and all(isinstance(c, _EXPECTED) for c in expect)
            else parse_expectations(expect)
        )
        checked_mode = parse_trajectory_mode(mode)
    except ValueError as exc:
        raise RubricError(str(exc)) from None
    validated = coerce_entries(entries)
    mine = order_entries([e for e in validated if e.session_id in (None, session_id)])
    timestamp = now or datetime.now(UTC)
    if not mine:
        return GradeResult(
            session_id=session_id,
            task_id=task_id,
            total_score=0,
            max_score=100,
            dimensions={DIMENSION: DimensionScore(score=0, max=100)},
            flags=[EMPTY_FLAG],
            timestamp=timestamp,
            entry_count=0,
        )
    actual: list[_Actual] = [(f"{e.domain}.{e.operation}", e.params) for e in mine]
    alignment: Alignment | PatternAlignment
    if is_plain(expected):
        calls = [call for call in expected if isinstance(call, Call)]
        alignment = align(calls, actual, checked_mode)
        score = _percent(alignment.f1)
        matched = alignment.matched
        summary = (
            f"{matched} of {len(expected)} expected calls matched ({checked_mode}): "
            f"precision {matched}/{alignment.precision_of}, recall {matched}/{alignment.recall_of}"
        )
        labelled: Sequence[_Labelled] = calls
        numbered = [(call.label(), i + 1) for i, call in enumerate(calls)]
        precision = _ratio(matched, alignment.precision_of)
        recall = _ratio(matched, alignment.recall_of)
    else:
        alignment = align_patterns(
            expected, actual, checked_mode, limit=MAX_PAIRS, matching=_matching
        )
        score = _percent(alignment.f1)
        summary = (
            f"{alignment.satisfied} of {alignment.required} required steps matched "
            f"({checked_mode}): precision {alignment.matched}/{alignment.counted}, "
            f"recall {alignment.satisfied}/{alignment.required}"
        )
        labelled = alignment.steps
        numbered = [(step.label(), step.position + 1) for step in alignment.steps]
        precision = round(float(alignment.precision), 4)
        recall = round(float(alignment.recall), 4)
    flags, items = _explain(alignment.rows, numbered, actual, checked_mode)
    where = [j for op, _, j in alignment.rows if op == "=" and j is not None]
    points = [point(DIMENSION, score, "trajectory.f1", f"{summary}: F1 {score:g}%", where)]
    diff = diff_lines(alignment, labelled, actual, checked_mode)
    return GradeResult(
        session_id=session_id,
        task_id=task_id,
        total_score=score,
        max_score=100,
        dimensions={DIMENSION: DimensionScore(score=score, max=100, evidence=[summary])},
        flags=flags,
        timestamp=timestamp,
        entry_count=len(mine),
        points=[*points, *items],
        trajectory={
            "mode": checked_mode,
            "precision": precision,
            "recall": recall,
            "diff": diff,
        },
    )


_EXPECTED: Final = (Call, OptionalStep, OneOf, Repeat, Unordered)


def _ratio(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 1.0


#: The keys of a trajectory rubric file's ``[trajectory]`` table.
FILE_KEYS: Final = ("expect", "mode")


def load_trajectory_document(
    data: object, *, where: str
) -> tuple[tuple[Expected, ...], TrajectoryMode]:
    """A rubric file's ``[trajectory]`` table: ``expect = [...]`` and ``mode`` (optional).

    File expectations are strings or ``{call, params, match}`` tables (no predicates: a file
    holds data, not code). RubricError names the file and the field.
    """
    keys = set(data) if isinstance(data, Mapping) else set()
    table = data.get("trajectory") if isinstance(data, Mapping) else None
    if not isinstance(table, Mapping) or keys != {"trajectory"}:
        raise RubricError(
            f"{where}: a trajectory rubric file has one table, [trajectory], with "
            "expect = ['domain.operation', ...] and an optional mode"
        )
    unknown = sorted(set(table) - set(FILE_KEYS))
    if unknown:
        raise RubricError(f"{where}: trajectory.{unknown[0]}: unknown key (expected expect, mode)")
    expect = table.get("expect")
    if isinstance(expect, list):
        for position, item in enumerate(expect):
            if isinstance(item, Mapping) and "where" in item:
                raise RubricError(
                    f"{where}: trajectory.expect[{position}]: where= needs Python "
                    "(use the marker's expect=)"
                )
    try:
        calls = parse_expectations(expect)
    except ValueError as exc:
        text = str(exc)  # "expect[i]: ..." names the item; else the whole list is wrong
        field = "" if text.startswith("expect[") else "expect: "
        raise RubricError(f"{where}: trajectory.{field}{text}") from None
    try:
        mode = parse_trajectory_mode(table.get("mode", DEFAULT_MODE))
    except ValueError as exc:
        raise RubricError(f"{where}: trajectory.mode: {exc}") from None
    return calls, mode


def is_trajectory_document(data: object) -> bool:
    """Whether a parsed rubric file is a trajectory file (it has a ``trajectory`` table)."""
    return isinstance(data, Mapping) and "trajectory" in data


def check_trajectory_file(path: str | Path) -> bool:
    """Validate ``path`` if it is a trajectory file (True); False for another kind of file."""
    data, _ = read_document(path)
    if not is_trajectory_document(data):
        return False
    load_trajectory_document(data, where=str(path))
    return True


class TrajectoryRubric:
    """Expected calls from the test (the marker's ``expect=``, via GradeContext.extra).

    Configured with a rubric file (``--cleo-grade-rubric-file``, ``cleo-grade grade
    --rubric-file``), the file's ``[trajectory]`` calls and mode apply where the test gives
    none: the marker's ``expect=`` and mode win.
    """

    name: Final = TRAJECTORY_RUBRIC
    version: Final = "1.0.0"
    dimensions: Final[Mapping[str, float]] = {DIMENSION: 100}

    def __init__(
        self, expect: tuple[Expected, ...] | None = None, mode: TrajectoryMode | None = None
    ) -> None:
        self.expect = expect
        self.mode = mode

    def configure(self, config: RubricConfig) -> TrajectoryRubric:
        """A copy with the rubric file's expected calls and mode (``self`` without a file)."""
        if config.rubric_file is None:
            return self
        data, _ = read_document(config.rubric_file)
        return TrajectoryRubric(*load_trajectory_document(data, where=str(config.rubric_file)))

    def grade(
        self,
        entries: Iterable[AuditEntry | Mapping[str, Any]],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        """Grade against ``context.extra["expect"]`` in ``context.extra["expectMode"]``."""
        extra = context.extra if context is not None else {}
        marked = extra.get("expect") is not None
        expect = extra["expect"] if marked else self.expect
        if expect is None:
            raise RubricError(
                "the trajectory rubric needs the expected calls: "
                "@pytest.mark.cleo_grade(expect=['domain.operation', ...]) or a rubric file "
                "with [trajectory] expect = [...]"
            )
        mode = extra.get("expectMode") or (self.mode if not marked else None) or DEFAULT_MODE
        result = grade_trajectory(
            entries,
            expect,
            mode=mode,
            session_id=session_id,
            now=now,
            task_id=context.task_id if context is not None else None,
        )
        # The expected calls are this rubric's settings, the marker's or the file's: their
        # hash tells a test whose expectations changed from one graded as before.
        # (As given: parsed steps by their labels, a marker's strings and dicts as they are.)
        steps = [item.label() if hasattr(item, "label") else item for item in expect]
        digest = settings_hash({"expect": steps, "mode": mode})
        return result.model_copy(update={HASH_KEY: digest})
