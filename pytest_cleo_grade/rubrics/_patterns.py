"""Aligning calls with expectations that hold patterns (optional, one_of, repeat, unordered).

Ordered modes turn the expectation list into a small graph of states whose edges are steps
(one expected call, or a one_of of calls), skips (an optional step left out) or loops (a
repeat without an upper bound), and align the actual calls with the best path through it: a
dynamic programme over (state, calls consumed) that does O(edges x calls) work, the bound the
plain alignment has on (expected x actual) pairs. An unordered group of g calls is its 2**g
subsets as states (g is at most 8). Unordered modes expand the patterns into steps and match
them as plain calls are matched, required steps first.

Scoring: precision = matched / counted actual calls; recall = matched required steps /
required steps on the chosen path (a step taken inside an optional or a one_of counts once
taken; a loop's extra calls count for precision only); the score is their F1.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.core.expectations import (
    Call,
    Expected,
    OneOf,
    OptionalStep,
    Repeat,
    TrajectoryMode,
    Unordered,
)

__all__ = ["PatternAlignment", "Step", "align_patterns"]

_Actual = tuple[str, Mapping[str, Any]]
_NEG: Final = -(2**31) + 1
#: Traceback kinds.
_START, _SKIP, _MISS, _MATCH, _EXTRA, _LOOP = range(6)
_NONE: Final = bytearray()


@dataclass(frozen=True, slots=True)
class Step:
    """One expected step as the diff shows it: its calls (alternatives), label and position."""

    calls: tuple[Call, ...]
    text: str
    position: int  # the top-level element of the expectation list (0-based)
    required: bool = True

    @property
    def name(self) -> str:
        return self.calls[0].name

    def label(self) -> str:
        return self.text

    def matches(self, made: _Actual) -> bool:
        return any(_matches(call, self.position, made) for call in self.calls)


def _matches(call: Call, position: int, made: _Actual) -> bool:
    try:
        return call.matches(*made)
    except Exception as exc:  # the test author's predicate: any error is theirs to see
        raise RubricError(
            f"expect[{position}]: the predicate of expected call {call.name} raised "
            f"{type(exc).__name__}: {exc}"
        ) from None


@dataclass(frozen=True, slots=True)
class PatternAlignment:
    """Rows as :class:`trajectory.Alignment` has them (``?``: an optional step left out)."""

    rows: list[tuple[str, int | None, int | None]]
    steps: list[Step]
    matched: int  # actual calls matched
    satisfied: int  # required steps matched
    required: int  # required steps on the chosen path
    counted: int  # actual calls the mode counts for precision
    mode: TrajectoryMode

    @property
    def precision(self) -> Fraction:
        if self.mode == "superset" or not self.counted:
            return Fraction(1)
        return Fraction(self.matched, self.counted)

    @property
    def recall(self) -> Fraction:
        if self.mode == "subset" or not self.required:
            return Fraction(1)
        return Fraction(self.satisfied, self.required)

    @property
    def f1(self) -> Fraction:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else Fraction(0)


def _repeated(item: Repeat, position: int, copy: int | None) -> Step:
    """The step of one repetition: ``tasks.show (repeat 1..3, call 2)``; ``more``: the loop."""
    bounds = f"{item.min}..{'' if item.max is None else item.max}"
    which = "more" if copy is None else f"call {copy + 1}"
    return _step_of(item.step, position, f" (repeat {bounds}, {which})")


def _step_of(item: Call | OneOf, position: int, suffix: str = "") -> Step:
    if isinstance(item, Call):
        return Step((item,), item.label() + suffix, position)
    calls = tuple(call for call in item.alternatives if isinstance(call, Call))
    return Step(calls, item.label() + suffix, position)


class _Graph:
    """States 0..n-1 (edges always go to a higher state), edges (from, to, step or None)."""

    def __init__(self) -> None:
        self.states = 1
        self.edges: list[tuple[int, int, int | None, bool]] = []  # (u, v, step, shown skip)
        self.loops: dict[int, list[int]] = {}
        self.steps: list[Step] = []

    def state(self) -> int:
        self.states += 1
        return self.states - 1

    def step(self, u: int, step: Step) -> int:
        self.steps.append(step)
        v = self.state()
        self.edges.append((u, v, len(self.steps) - 1, False))
        return v

    def skip(self, u: int, v: int, shown: Step | None = None) -> None:
        index = None
        if shown is not None:
            self.steps.append(shown)
            index = len(self.steps) - 1
        self.edges.append((u, v, index, shown is not None))

    def build(self, item: Expected | tuple[Expected, ...], u: int, position: int) -> int:
        if isinstance(item, tuple):
            for element in item:
                u = self.build(element, u, position)
            return u
        if isinstance(item, Call) or (isinstance(item, OneOf) and item.single):
            return self.step(u, _step_of(item, position))
        if isinstance(item, OptionalStep):
            v = self.build(item.step, u, position)
            end = self.state()
            self.skip(v, end)
            self.skip(u, end, Step((), item.label(), position, required=False))
            return end
        if isinstance(item, OneOf):
            ends = [self.build(alt, u, position) for alt in item.alternatives]
            end = self.state()
            for e in ends:
                self.skip(e, end)
            return end
        if isinstance(item, Repeat):
            return self._repeat(item, u, position)
        return self._unordered(item, u, position)

    def _repeat(self, item: Repeat, u: int, position: int) -> int:
        for copy in range(item.min):
            u = self.step(u, _repeated(item, position, copy))
        if item.max is None:
            loop = self.state()
            self.skip(u, loop)
            self.steps.append(_repeated(item, position, None))
            self.loops.setdefault(loop, []).append(len(self.steps) - 1)
            return loop
        optional_end = []
        for copy in range(item.min, item.max):
            optional_end.append(u)
            u = self.step(u, _repeated(item, position, copy))
        end = self.state()
        self.skip(u, end)
        for start in optional_end:
            self.skip(start, end)
        return end

    def _unordered(self, item: Unordered, u: int, position: int) -> int:
        g = len(item.members)
        base = self.states
        self.states += 1 << g  # state base + S: the members in S are done
        self.skip(u, base)
        members: list[tuple[int, bool]] = []  # (step index, may be left out)
        for member in item.members:
            inner = member.step if isinstance(member, OptionalStep) else member
            assert isinstance(inner, Call | OneOf)
            self.steps.append(_step_of(inner, position, " (unordered)"))
            members.append((len(self.steps) - 1, isinstance(member, OptionalStep)))
        for subset in range(1 << g):
            for m, (index, may_skip) in enumerate(members):
                if subset & (1 << m):
                    continue
                done = base + (subset | 1 << m)
                self.edges.append((base + subset, done, index, False))
                if may_skip:
                    self.edges.append((base + subset, done, None, False))
        return base + (1 << g) - 1


def _check(work: int, n: int, limit: int) -> None:
    if work * max(n, 1) > limit:
        raise RubricError(
            f"trajectory too long to align: {work} expected steps x {n} actual calls is over "
            f"{limit:,} pairs; expect fewer calls or use an unordered mode"
        )


#: A maximum bipartite matching: rows of 0/1 per step over the actual calls -> {row: call}.
Matching = Callable[[list[list[int]]], dict[int, int]]


def align_patterns(
    expected: Sequence[Expected],
    actual: Sequence[_Actual],
    mode: TrajectoryMode,
    *,
    limit: int,
    matching: Matching,
) -> PatternAlignment:
    """Align ``actual`` with ``expected`` (which holds patterns) under ``mode``."""
    if mode in ("exact", "in_order"):
        return _ordered(expected, actual, mode, limit)
    return _unordered_mode(expected, actual, mode, limit, matching)


def _names(item: Expected | tuple[Expected, ...]) -> set[str]:
    if isinstance(item, tuple):
        return set().union(*(_names(step) for step in item))
    if isinstance(item, Call):
        return {item.name}
    if isinstance(item, OptionalStep | Repeat):
        return _names(item.step)
    if isinstance(item, OneOf):
        return set().union(*(_names(alt) for alt in item.alternatives))
    return set().union(*(_names(member) for member in item.members))


def _ordered(
    expected: Sequence[Expected], actual: Sequence[_Actual], mode: TrajectoryMode, limit: int
) -> PatternAlignment:
    names = set().union(*(_names(item) for item in expected))
    columns = [j for j, (name, _) in enumerate(actual) if mode == "exact" or name in names]
    graph = _Graph()
    u = 0
    for position, item in enumerate(expected):
        u = graph.build(item, u, position)
    end = u
    n = len(columns)
    _check(len(graph.edges) + graph.states, n, limit)
    # hits[s][k]: step s matches counted call k (each predicate runs once per pair).
    hits: dict[int, bytearray] = {}
    for index, step in enumerate(graph.steps):
        if step.calls:
            row = bytearray(n)
            for k, j in enumerate(columns):
                if actual[j][0] in {call.name for call in step.calls} and step.matches(actual[j]):
                    row[k] = 1
            hits[index] = row
    incoming: dict[int, list[tuple[int, int | None, bool]]] = {}
    for a, b, s, shown in graph.edges:
        incoming.setdefault(b, []).append((a, s, shown))
    score = [array("i", [_NEG]) * (n + 1) for _ in range(graph.states)]
    kind = [bytearray(n + 1) for _ in range(graph.states)]
    back = [array("i", [0]) * (n + 1) for _ in range(graph.states)]  # edge index / from state
    edge_of: list[tuple[int, int | None, bool]] = []
    score[0][0] = 0
    for v in range(graph.states):
        sv, kv, bv = score[v], kind[v], back[v]
        for a, s, shown in incoming.get(v, ()):
            edge_of.append((a, s, shown))
            e = len(edge_of) - 1
            sa = score[a]
            is_step = s is not None and not shown
            row = hits.get(s, _NONE) if is_step and s is not None else _NONE
            for k in range(n + 1):
                if sa[k] > _NEG:
                    value = sa[k] - 1 if is_step else sa[k]
                    if value > sv[k]:
                        sv[k], kv[k], bv[k] = value, _MISS if is_step else _SKIP, e
                if is_step and k and sa[k - 1] > _NEG and row[k - 1] and sa[k - 1] + 2 > sv[k]:
                    sv[k], kv[k], bv[k] = sa[k - 1] + 2, _MATCH, e
        loops = graph.loops.get(v, [])
        for k in range(1, n + 1):
            if sv[k - 1] > _NEG:
                for s in loops:
                    if hits[s][k - 1] and sv[k - 1] + 1 > sv[k]:
                        sv[k], kv[k], bv[k] = sv[k - 1] + 1, _LOOP, s
                if sv[k - 1] >= sv[k]:
                    sv[k], kv[k], bv[k] = sv[k - 1], _EXTRA, 0
    rows: list[tuple[str, int | None, int | None]] = []
    v, k = end, n
    while (v, k) != (0, 0):
        what = kind[v][k]
        if what == _EXTRA:
            rows.append(("+", None, columns[k - 1]))
            k -= 1
        elif what == _LOOP:
            rows.append(("=", back[v][k], columns[k - 1]))
            k -= 1
        else:
            a, s, shown = edge_of[back[v][k]]
            if what == _MATCH:
                rows.append(("=", s, columns[k - 1]))
                k -= 1
            elif what == _MISS:
                rows.append(("-", s, None))
            elif shown:
                rows.append(("?", s, None))
            v = a
    rows.reverse()
    ignored = sorted(set(range(len(actual))) - set(columns))
    rows = _out_of_order(_merge(rows, ignored), graph.steps, actual)
    return _tally(rows, graph.steps, graph.loops, n, mode)


def _merge(
    rows: list[tuple[str, int | None, int | None]], ignored: list[int]
) -> list[tuple[str, int | None, int | None]]:
    """Put the calls the mode ignores back in their places among the aligned rows."""
    out: list[tuple[str, int | None, int | None]] = []
    pending = list(reversed(ignored))
    for row in rows:
        while pending and row[2] is not None and pending[-1] < row[2]:
            out.append((".", None, pending.pop()))
        out.append(row)
    out.extend((".", None, j) for j in reversed(pending))
    return out


def _out_of_order(
    rows: list[tuple[str, int | None, int | None]], steps: list[Step], actual: Sequence[_Actual]
) -> list[tuple[str, int | None, int | None]]:
    """A missing step made, unaligned, elsewhere: ``~`` with both indices."""
    spare = [j for op, _, j in rows if op == "+" and j is not None]
    used: set[int] = set()
    marked: dict[int, int] = {}
    for number, (op, s, _) in enumerate(rows):
        if op == "-" and s is not None:
            j = next((j for j in spare if j not in used and steps[s].matches(actual[j])), None)
            if j is not None:
                used.add(j)
                marked[number] = j
    out: list[tuple[str, int | None, int | None]] = []
    for number, (op, s, j) in enumerate(rows):
        if number in marked:
            out.append(("~", s, marked[number]))
        elif not (op == "+" and j in used):
            out.append((op, s, j))
    return out


def _tally(
    rows: list[tuple[str, int | None, int | None]],
    steps: list[Step],
    loops: Mapping[int, list[int]],
    counted: int,
    mode: TrajectoryMode,
) -> PatternAlignment:
    looped = {s for ss in loops.values() for s in ss}
    matched = sum(op == "=" for op, _, _ in rows)
    satisfied = sum(op == "=" and s not in looped for op, s, _ in rows)
    required = satisfied + sum(op in "-~" for op, _, _ in rows)
    return PatternAlignment(rows, steps, matched, satisfied, required, counted, mode)


def _flatten(item: Expected, position: int, out: list[Step], loops: list[int]) -> None:
    """Unordered modes: a pattern as steps (required, optional) and loops."""
    if isinstance(item, Call) or (isinstance(item, OneOf) and item.single):
        out.append(_step_of(item, position))
    elif isinstance(item, OptionalStep):
        before = len(out)
        _flatten(item.step, position, out, loops)
        out[before:] = [_optional(step, f"optional({step.text})") for step in out[before:]]
    elif isinstance(item, Repeat):
        for copy in range(item.min):
            out.append(_repeated(item, position, copy))
        if item.max is None:
            loops.append(len(out))
            out.append(_optional(_repeated(item, position, None)))
        else:
            for copy in range(item.min, item.max):
                out.append(_optional(_repeated(item, position, copy)))
    elif isinstance(item, Unordered):
        for member in item.members:
            _flatten(member, position, out, loops)
    else:
        raise RubricError(
            f"expect[{position}]: one_of with a sequence of calls needs an ordered mode "
            "(exact or in_order)"
        )


def _optional(step: Step, text: str | None = None) -> Step:
    return Step(step.calls, step.text if text is None else text, step.position, required=False)


def _unordered_mode(
    expected: Sequence[Expected],
    actual: Sequence[_Actual],
    mode: TrajectoryMode,
    limit: int,
    matching: Matching,
) -> PatternAlignment:
    steps: list[Step] = []
    loops: list[int] = []
    for position, item in enumerate(expected):
        _flatten(item, position, steps, loops)
    n = len(actual)
    _check(len(steps), n, limit)
    # Required steps first: augmenting paths never unmatch a step, so optional steps
    # cannot take a call a required one needs.
    order = sorted(range(len(steps)), key=lambda s: not steps[s].required)
    # Each step's candidate calls (the matching's input): only calls of the step's names.
    candidates = []
    for s in order:
        names = {call.name for call in steps[s].calls}
        candidates.append(
            [j for j, made in enumerate(actual) if made[0] in names and steps[s].matches(made)]
        )
    pairs = {order[i]: j for i, j in matching(candidates).items()}
    by_actual = {j: s for s, j in pairs.items()}
    looped: dict[int, int] = {}
    for j in range(n):
        if j not in by_actual:
            loop = next((s for s in loops if steps[s].matches(actual[j])), None)
            if loop is not None:
                looped[j] = loop
    rows: list[tuple[str, int | None, int | None]] = []
    for j in range(n):
        if j in by_actual:
            rows.append(("=", by_actual[j], j))
        elif j in looped:
            rows.append(("=", looped[j], j))
        else:
            rows.append(("+", None, j))
    for s, step in enumerate(steps):
        if s not in pairs and s not in loops:
            rows.append(("-" if step.required else "?", s, None))
    matched = len(pairs) + len(looped)
    satisfied = sum(1 for s in pairs if s not in loops)
    required = sum(1 for step in steps if step.required) + sum(
        1 for s in pairs if not steps[s].required and s not in loops
    )
    return PatternAlignment(rows, steps, matched, satisfied, required, n, mode)
