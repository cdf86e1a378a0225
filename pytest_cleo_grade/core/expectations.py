"""Trajectory expectations: which calls a test expects its agent to make, and how to compare.

Stdlib only, so the marker's ``expect=`` and ``mode=`` are checked where every other marker
argument is (``settings``), and the trajectory rubric reads the same objects. An expected
call is ``"domain.operation"`` (any arguments), ``("domain.operation", {params})`` (those
params among the call's), ``{"call": ..., "params": ..., "match": "exact"|"subset"|"ignore"}``,
a :class:`Call`, or ``Call(name, where=predicate)`` with a callable on the call's params.

Beyond single calls (patterns): ``optional(step)``, ``one_of(step, [steps], ...)``,
``repeat(call, min, max)`` and ``unordered(call, ...)``, or their data forms for files:
``{"optional": step}``, ``{"one_of": [...]}``, ``{"repeat": call, "min": 1, "max": 3}``,
``{"unordered": [...]}``. The trajectory rubric aligns them (``rubrics/_patterns.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "MATCHES",
    "TRAJECTORY_MODES",
    "Call",
    "Expected",
    "Match",
    "OneOf",
    "OptionalStep",
    "Repeat",
    "TrajectoryMode",
    "Unordered",
    "is_plain",
    "one_of",
    "optional",
    "parse_expectations",
    "parse_trajectory_mode",
    "repeat",
    "unordered",
]

TrajectoryMode = Literal["exact", "in_order", "any_order", "subset", "superset"]
TRAJECTORY_MODES: Final[tuple[TrajectoryMode, ...]] = (
    "exact",
    "in_order",
    "any_order",
    "subset",
    "superset",
)
Match = Literal["exact", "subset", "ignore"]
MATCHES: Final[tuple[Match, ...]] = ("exact", "subset", "ignore")
#: The most calls one expectation list may hold (the marker is written by hand).
MAX_EXPECTED: Final = 1000
#: The most members of one unordered group: its alignment walks every subset (2**8 states).
MAX_UNORDERED: Final = 8
#: The largest ``max`` of a bounded repeat (each allowed repetition is a step to align).
MAX_REPEAT: Final = 100


@dataclass(frozen=True, slots=True)
class Call:
    """One expected call: its ``domain.operation`` and how its params must match.

    ``match``: ``ignore`` (any params; the default without ``params``), ``subset`` (the
    given params among the call's, equal; the default with them), ``exact`` (the same params).
    ``where``: a predicate on the call's params, checked as well.
    """

    name: str
    params: Mapping[str, Any] | None = None
    match: Match | None = None
    where: Callable[[Mapping[str, Any]], bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # The type first: Call(42) is a ValueError naming the value, not an AttributeError.
        name = self.name if isinstance(self.name, str) else ""
        domain, dot, operation = name.partition(".")
        if not dot or not domain or not operation:
            raise ValueError(f"expected call {self.name!r} is not domain.operation")
        if any(character.isspace() for character in name):
            # As a rule file's call patterns: " a.b" would never match, and score 0 unseen.
            raise ValueError(f"expected call {self.name!r} holds whitespace")
        if self.params is not None and not isinstance(self.params, Mapping):
            raise ValueError(f"params of expected call {self.name} must be a dict")
        if self.match is not None and self.match not in MATCHES:
            raise ValueError(
                f"match of expected call {self.name} must be one of {', '.join(MATCHES)}"
            )
        if self.where is not None and not callable(self.where):
            raise ValueError(f"where of expected call {self.name} must be callable")

    @property
    def how(self) -> Match:
        if self.match is not None:
            return self.match
        return "ignore" if self.params is None else "subset"

    def label(self) -> str:
        """``tasks.show`` or ``tasks.show {"taskId": "T1"}`` as the diff shows it."""
        how = self.how
        if how == "ignore" or (how == "subset" and not self.params):
            suffix = ""  # any params match
        elif not self.params:
            suffix = " (no params)"  # exact, with none: the call must have none either
        else:
            shown = ", ".join(f"{key}={value!r}" for key, value in self.params.items())
            suffix = f" ({'exactly ' if how == 'exact' else ''}{shown})"
        return self.name + suffix + (" (where ...)" if self.where is not None else "")

    def matches(self, name: str, params: Mapping[str, Any]) -> bool:
        """Whether a recorded call ``name`` with ``params`` is this expected call."""
        if name != self.name:
            return False
        wanted = self.params or {}
        if self.how == "exact" and dict(params) != dict(wanted):
            return False
        if self.how == "subset" and any(
            key not in params or params[key] != value for key, value in wanted.items()
        ):
            return False
        return self.where is None or bool(self.where(params))


@dataclass(frozen=True, slots=True)
class OptionalStep:
    """A step the agent may make or leave out: both trajectories get full marks."""

    step: Expected

    def label(self) -> str:
        return f"optional({_label(self.step)})"


@dataclass(frozen=True, slots=True)
class OneOf:
    """Alternatives: one of them is expected. An alternative is a step or a sequence."""

    alternatives: tuple[Expected | tuple[Expected, ...], ...]

    def label(self) -> str:
        return "one_of(" + " | ".join(_label(item) for item in self.alternatives) + ")"

    @property
    def single(self) -> bool:
        """Every alternative is one call (the alignment takes the group as one step)."""
        return all(isinstance(item, Call) for item in self.alternatives)


@dataclass(frozen=True, slots=True)
class Repeat:
    """One call (or a one_of of calls) made ``min`` to ``max`` times (``max`` None: no bound)."""

    step: Call | OneOf
    min: int = 1
    max: int | None = None

    def label(self) -> str:
        bound = "" if self.max is None else str(self.max)
        return f"repeat({_label(self.step)}, {self.min}..{bound})"


@dataclass(frozen=True, slots=True)
class Unordered:
    """Calls expected together in any order, at this place of the sequence."""

    members: tuple[Call | OneOf | OptionalStep, ...]

    def label(self) -> str:
        return "unordered(" + ", ".join(_label(item) for item in self.members) + ")"


#: One element of an expectation list.
Expected = Call | OptionalStep | OneOf | Repeat | Unordered


def _label(item: Expected | tuple[Expected, ...]) -> str:
    if isinstance(item, tuple):
        return "[" + ", ".join(_label(step) for step in item) + "]"
    return item.label()


def _single(item: Expected) -> bool:
    return isinstance(item, Call) or (isinstance(item, OneOf) and item.single)


def optional(step: object) -> OptionalStep:
    """``optional("tasks.show")``: the step may be made or not."""
    return OptionalStep(_step(step, "optional"))


def one_of(*alternatives: object) -> OneOf:
    """``one_of("tasks.find", ["tasks.list", "tasks.show"])``: exactly one alternative."""
    if len(alternatives) < 2:
        raise ValueError("one_of needs at least two alternatives")
    parsed: list[Expected | tuple[Expected, ...]] = []
    for number, item in enumerate(alternatives):
        where = f"one_of[{number}]"
        if isinstance(item, list):
            if not item:
                raise ValueError(f"{where}: an alternative sequence must not be empty")
            parsed.append(tuple(_step(step, f"{where}[{k}]") for k, step in enumerate(item)))
        else:
            parsed.append(_step(item, where))
    return OneOf(tuple(parsed))


def repeat(step: object, min: int = 1, max: int | None = None) -> Repeat:
    """``repeat("tasks.show", 1, 3)``: the call made 1 to 3 times (``max=None``: any number)."""
    call = _step(step, "repeat")
    if not _single(call):
        raise ValueError("repeat takes one call or a one_of of calls")
    if not isinstance(min, int) or isinstance(min, bool) or min < 0:
        raise ValueError(f"repeat min {min!r} must be a whole number >= 0")
    if max is not None and (not isinstance(max, int) or isinstance(max, bool) or max < 1):
        raise ValueError(f"repeat max {max!r} must be a whole number >= 1, or None")
    if max is not None and max < min:
        raise ValueError(f"repeat max {max} is below its min {min}")
    if (max if max is not None else min) > MAX_REPEAT:
        raise ValueError(f"repeat bounds go up to {MAX_REPEAT}")
    assert isinstance(call, Call | OneOf)  # _single
    return Repeat(call, min, max)


def unordered(*members: object) -> Unordered:
    """``unordered("tasks.find", "session.list")``: these calls here, in any order."""
    if len(members) < 2:
        raise ValueError("unordered needs at least two calls")
    if len(members) > MAX_UNORDERED:
        raise ValueError(f"unordered holds at most {MAX_UNORDERED} calls (use mode='any_order')")
    parsed: list[Call | OneOf | OptionalStep] = []
    for number, item in enumerate(members):
        step = _step(item, f"unordered[{number}]")
        inner = step.step if isinstance(step, OptionalStep) else step
        if not _single(inner):
            raise ValueError(
                f"unordered[{number}]: a group holds calls, one_of of calls or optional calls"
            )
        assert isinstance(step, Call | OneOf | OptionalStep)
        parsed.append(step)
    return Unordered(tuple(parsed))


_PATTERN_KEYS: Final = {
    "optional": {"optional"},
    "one_of": {"one_of"},
    "repeat": {"repeat", "min", "max"},
    "unordered": {"unordered"},
}


def _pattern(value: Mapping[str, Any]) -> Expected:
    """The data form of a pattern (a file's table or a marker's dict)."""
    kind = next(key for key in _PATTERN_KEYS if key in value)
    unknown = set(value) - _PATTERN_KEYS[kind]
    if unknown:
        raise ValueError(f"unknown key {sorted(unknown)[0]!r} beside {kind!r}")
    body = value[kind]
    if kind == "optional":
        return optional(body)
    if kind == "repeat":
        return repeat(body, value.get("min", 1), value.get("max"))
    if not isinstance(body, list):
        raise ValueError(f"{kind} takes a list")
    return one_of(*body) if kind == "one_of" else unordered(*body)


def _step(value: object, where: str) -> Expected:
    """One element: a call in any of its forms, or a pattern."""
    try:
        return _element(value)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _element(value: object) -> Expected:
    if isinstance(value, Call | OptionalStep | OneOf | Repeat | Unordered):
        return value
    if isinstance(value, str):
        return Call(value)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        second = value[1]
        if callable(second):
            return Call(value[0], where=second)
        return Call(value[0], params=second)
    if isinstance(value, Mapping) and isinstance(value.get("call"), str):
        unknown = set(value) - {"call", "params", "match", "where"}
        if unknown:
            raise ValueError(f"unknown key {sorted(unknown)[0]!r}")
        return Call(value["call"], value.get("params"), value.get("match"), value.get("where"))
    if isinstance(value, Mapping) and any(key in value for key in _PATTERN_KEYS):
        return _pattern(value)
    raise ValueError(
        f"{value!r} is not an expected call: write 'domain.operation', "
        "('domain.operation', {params}), {'call': ..., 'params': ..., 'match': ...}, Call(...), "
        "or optional(...), one_of(...), repeat(...), unordered(...)"
    )


def _one(value: object, position: int) -> Expected:
    try:
        return _element(value)
    except ValueError as exc:
        raise ValueError(f"expect[{position}]: {exc}") from None


def is_plain(expected: Sequence[Expected]) -> bool:
    """Whether every element is a single :class:`Call` (no pattern)."""
    return all(isinstance(item, Call) for item in expected)


def parse_expectations(value: object) -> tuple[Expected, ...]:
    """The marker's ``expect=``: a non-empty list of expected calls (ValueError naming one)."""
    if isinstance(value, str) or not isinstance(value, Sequence) or not value:
        raise ValueError(
            f"invalid expect {value!r}: expected a non-empty list of calls, "
            "e.g. expect=['session.list', 'tasks.find']"
        )
    if len(value) > MAX_EXPECTED:
        raise ValueError(f"invalid expect: {len(value)} calls, at most {MAX_EXPECTED}")
    return tuple(_one(item, position) for position, item in enumerate(value))


def parse_trajectory_mode(value: object) -> TrajectoryMode:
    for mode in TRAJECTORY_MODES:
        if value == mode:
            return mode
    raise ValueError(f"invalid trajectory mode {value!r}: expected {', '.join(TRAJECTORY_MODES)}")
