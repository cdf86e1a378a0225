"""Trajectory expectations: which calls a test expects its agent to make, and how to compare.

Stdlib only, so the marker's ``expect=`` and ``mode=`` are checked where every other marker
argument is (``settings``), and the trajectory rubric reads the same objects. An expected
call is ``"domain.operation"`` (any arguments), ``("domain.operation", {params})`` (those
params among the call's), ``{"call": ..., "params": ..., "match": "exact"|"subset"|"ignore"}``,
a :class:`Call`, or ``Call(name, where=predicate)`` with a callable on the call's params.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

__all__ = [
    "MATCHES",
    "TRAJECTORY_MODES",
    "Call",
    "Match",
    "TrajectoryMode",
    "parse_expectations",
    "parse_trajectory_mode",
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


def _one(value: object, position: int) -> Call:
    try:
        if isinstance(value, Call):
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
    except ValueError as exc:
        raise ValueError(f"expect[{position}]: {exc}") from None
    raise ValueError(
        f"expect[{position}]: {value!r} is not an expected call: write 'domain.operation', "
        "('domain.operation', {params}), {'call': ..., 'params': ..., 'match': ...} or Call(...)"
    )


def parse_expectations(value: object) -> tuple[Call, ...]:
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
