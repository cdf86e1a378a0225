"""Rule files of the rule rubric (``rules``): the pydantic models and their checks.

A rule file describes a protocol without Python: dimensions with a maximum and a starting
score, each holding rules of a few kinds (called, before, ratio, penalty, recovery,
duplicates, forbidden, at_most, budget). Every rule has a stable id, its points, and the evidence
and flag sentences it adds; ``{placeholders}`` in a sentence are checked when the file is
loaded, so a typo is an error naming the rule, never a crash while grading.
"""

from __future__ import annotations

import re
import string
from typing import Annotated, Any, ClassVar, Final, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

__all__ = [
    "AtMost",
    "Before",
    "Budget",
    "CallPattern",
    "Called",
    "Dimension",
    "Duplicates",
    "Forbidden",
    "Penalty",
    "Price",
    "Ratio",
    "Recovery",
    "Rule",
    "RuleSpec",
]

_NAME: Final = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
_MAX_TEXT: Final = 500
#: The most points a dimension may hold. A grade's percentage divides by the sum of the
#: dimensions' maxima as a float: a max of 10**400 (a typo, or a hostile file) made every
#: grade fail with "not a finite percentage" instead of the file being refused.
MAX_DIMENSION_POINTS: Final = 1_000_000


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


def _integral(value: object) -> object:
    # JSON has one number type: a JSON rule file's 5.0 is the 5 a TOML file writes. A float
    # with a fraction (or inf, nan) is left to the strict int check, which refuses it.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


#: A whole number of a rule file (points, a dimension's max, a count): an integer, also when
#: a JSON file writes it as 5.0.
Whole = Annotated[StrictInt, BeforeValidator(_integral)]
Points = Whole


class CallPattern(_Model):
    """Which audit entries a rule looks at; every condition given must hold (empty: all).

    ``calls`` lists ``domain.operation`` names (the operation may itself hold dots:
    ``tools.skill.show``); ``params_blank`` holds when a parameter is missing, blank or
    falsy (CLEO's ``!value || !value.trim()``); ``params_set`` when it is present and not;
    ``params_truthy`` when it is present and not falsy, a blank string included (CLEO's
    ``if (params.parent)``).
    """

    calls: list[Annotated[str, Field(pattern=r"^[^.\s]+\.\S+$")]] = []
    domains: list[str] = []
    gateways: list[str] = []
    success: StrictBool | None = None
    exit_code: Whole | None = None
    params_blank: list[str] = []
    params_set: list[str] = []
    params_truthy: list[str] = []

    @field_validator("calls", "domains", "gateways")
    @classmethod
    def _not_empty(cls, names: list[str]) -> list[str]:
        # Left out, a condition holds for every call; written as [], it read the same way,
        # so `calls = []` meant "any call" where its author meant "none".
        if not names:
            raise ValueError("an empty list would match every call: leave the key out for that")
        return names


Text = Annotated[str, Field(max_length=_MAX_TEXT)]


class _Rule(_Model):
    """What every rule has. ``points`` is an award (>= 0) or a penalty (<= 0) by kind."""

    #: Placeholders the kind fills in its sentences.
    fields: ClassVar[frozenset[str]] = frozenset()
    #: Those it fills in its ``evidence``, when fewer (None: the same).
    evidence_fields: ClassVar[frozenset[str] | None] = None
    #: Whether the kind's points are awards (>= 0) or penalties (<= 0).
    award: ClassVar[bool] = True

    id: Annotated[str, Field(pattern=_NAME, max_length=100)]
    points: Points
    evidence: Text | None = None
    flag: Text | None = None
    #: Evidence lines of a dimension are listed by this key, then by rule order.
    evidence_order: Whole = 0

    @field_validator("points")
    @classmethod
    def _signed(cls, points: int) -> int:
        name = re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()  # AtMost: at_most
        if cls.award and points < 0:
            raise ValueError(f"a {name} rule awards points: points must be >= 0")
        if not cls.award and points > 0:
            raise ValueError(f"a {name} rule deducts points: points must be <= 0")
        return points

    @field_validator("evidence", "flag", "flag_missing", "none_evidence", check_fields=False)
    @classmethod
    def _template(cls, text: str | None, info: ValidationInfo) -> str | None:
        if text is not None:
            fewer = cls.evidence_fields if info.field_name == "evidence" else None
            _check_template(text, cls.fields if fewer is None else fewer)
        return text


def _check_template(text: str, allowed: frozenset[str]) -> None:
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise ValueError(f"{exc} (write {{{{ and }}}} for literal braces)") from exc
    for _, field, spec, conversion in parsed:
        if field is None:
            continue
        if field not in allowed:
            choices = ", ".join(f"{{{f}}}" for f in sorted(allowed)) or "none"
            raise ValueError(f"unknown placeholder {{{field}}}; this kind has {choices}")
        if spec or conversion:
            raise ValueError(
                f"placeholder {{{field}}} takes no conversion (!r) or format spec (:...): "
                f"write {{{field}}}"
            )


def _plain(text: str) -> str:
    _check_template(text, frozenset())  # {{ and }} its only braces: formatted with no fields
    return text


#: A sentence that takes no placeholder (a file's empty_flag, a dimension's evidence_if_clean).
PlainText = Annotated[Text, AfterValidator(_plain)]


class Called(_Rule):
    """Awards ``points`` when ``match`` is called at least ``min`` times; else the flag."""

    fields: ClassVar[frozenset[str]] = frozenset({"count"})
    kind: Literal["called"]
    match: CallPattern
    min: Annotated[Whole, Field(ge=1)] = 1


class Before(_Rule):
    """Awards ``points`` when the first ``first`` call is no later than the first ``then``
    call, by timestamp (no ``then`` call at all counts as before); ``flag_missing`` when
    ``first`` was never called, ``flag`` when it came later."""

    kind: Literal["before"]
    first: CallPattern
    then: CallPattern
    flag_missing: Text | None = None


class Ratio(_Rule):
    """``match`` ÷ (``match`` + ``other``) calls: ``points`` at or above ``threshold``,
    below it ``points`` x ratio rounded half up (and the flag); ``none_points`` and
    ``none_evidence`` when neither was called."""

    fields: ClassVar[frozenset[str]] = frozenset(
        {"count", "other", "total", "percent", "earned", "threshold"}
    )
    kind: Literal["ratio"]
    match: CallPattern
    other: CallPattern
    threshold: Annotated[float, Field(gt=0, le=1, strict=True)]
    none_points: Annotated[Points, Field(ge=0)] = 0
    none_evidence: Text | None = None


class Penalty(_Rule):
    """``points`` (<= 0) for each ``match`` call that ``violates`` or has no earlier
    ``unless_preceded_by`` call (both given: either is a violation); ``once``: one penalty
    for any number. The evidence is given when there were calls and no violation."""

    fields: ClassVar[frozenset[str]] = frozenset({"count", "domain", "operation", "taskId"})
    award: ClassVar[bool] = False
    kind: Literal["penalty"]
    match: CallPattern
    violates: CallPattern | None = None
    unless_preceded_by: CallPattern | None = None
    once: StrictBool = False

    @model_validator(mode="after")
    def _needs_condition(self) -> Penalty:
        if self.violates is None and self.unless_preceded_by is None:
            raise ValueError("a penalty rule needs violates or unless_preceded_by (or both)")
        return self


class Recovery(_Rule):
    """``points`` (<= 0) for each ``failure`` call not followed by a ``recover`` call within
    ``within`` entries; the evidence for each one that was."""

    fields: ClassVar[frozenset[str]] = frozenset({"domain", "operation", "taskId", "within"})
    award: ClassVar[bool] = False
    kind: Literal["recovery"]
    failure: CallPattern
    recover: CallPattern
    within: Annotated[Whole, Field(ge=1)]


class Duplicates(_Rule):
    """``points`` (<= 0) once when ``match`` calls repeat a value of parameter ``param``
    (compared trimmed and lowercased; missing and blank values are not compared)."""

    fields: ClassVar[frozenset[str]] = frozenset({"count"})
    award: ClassVar[bool] = False
    kind: Literal["duplicates"]
    match: CallPattern
    param: Annotated[str, Field(min_length=1, max_length=100)]


class Forbidden(_Rule):
    """``points`` (<= 0) for each ``match`` call (``once``: one penalty for any number).
    The evidence is given when there was no such call: it names none."""

    fields: ClassVar[frozenset[str]] = frozenset({"count", "domain", "operation", "taskId"})
    evidence_fields: ClassVar[frozenset[str] | None] = frozenset({"count"})
    award: ClassVar[bool] = False
    kind: Literal["forbidden"]
    match: CallPattern
    once: StrictBool = False


class AtMost(_Rule):
    """``points`` (<= 0) once when ``match`` is called more than ``max`` times."""

    fields: ClassVar[frozenset[str]] = frozenset({"count", "max"})
    award: ClassVar[bool] = False
    kind: Literal["at_most"]
    match: CallPattern
    max: Annotated[Whole, Field(ge=0)]


class Budget(_Rule):
    """``points`` (<= 0) once when the session spends more than a limit: ``max_tokens``
    (input + output, summed over its model calls), ``max_calls`` (tool calls),
    ``max_model_calls``, ``max_seconds`` (from the first user message to the final output,
    else the first to the last call) or ``max_cost`` (from the file's ``[prices]``). The
    flag is said for each limit passed; ``{used}``, ``{limit}`` and ``{unit}`` fill it."""

    fields: ClassVar[frozenset[str]] = frozenset({"used", "limit", "unit"})
    award: ClassVar[bool] = False
    kind: Literal["budget"]
    max_tokens: Annotated[Whole, Field(ge=0)] | None = None
    max_calls: Annotated[Whole, Field(ge=0)] | None = None
    max_model_calls: Annotated[Whole, Field(ge=0)] | None = None
    max_seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    max_cost: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None

    @model_validator(mode="after")
    def _needs_a_limit(self) -> Budget:
        if self.limits() == {}:
            raise ValueError(
                "a budget rule needs a limit: max_tokens, max_calls, max_model_calls, "
                "max_seconds or max_cost"
            )
        return self

    def limits(self) -> dict[str, float]:
        """The limits set, by unit (tokens, calls, model calls, seconds, cost)."""
        named = {
            "tokens": self.max_tokens,
            "calls": self.max_calls,
            "model calls": self.max_model_calls,
            "seconds": self.max_seconds,
            "cost": self.max_cost,
        }
        return {unit: limit for unit, limit in named.items() if limit is not None}


class Price(_Model):
    """A model's price per million tokens, input and output (any currency, the same one)."""

    input: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    output: Annotated[float, Field(ge=0, allow_inf_nan=False)]


Rule = Annotated[
    Called | Before | Ratio | Penalty | Recovery | Duplicates | Forbidden | AtMost | Budget,
    Field(discriminator="kind"),
]


#: Other spellings of the rule kinds, as people write them (the issue's and DESIGN's names).
KIND_ALIASES: Final = {
    "per_violation": "penalty",
    "per_violation_penalty": "penalty",
    "recovery_window": "recovery",
    "duplicate": "duplicates",
    "at_most_n": "at_most",
    "max_calls": "at_most",
    "budgets": "budget",
}


class Dimension(_Model):
    """A dimension: its maximum, the score it starts at, its rules in order.

    The score is clamped to 0..max after the rules; ``evidence_if_clean`` is added last when
    no rule of the dimension deducted and no recovery rule saw a failure (recovered or not).
    """

    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=100)]
    max: Annotated[Whole, Field(gt=0, le=MAX_DIMENSION_POINTS)]
    start: Annotated[Whole, Field(ge=0)] = 0
    evidence_if_clean: PlainText | None = None
    rules: Annotated[list[Rule], Field(min_length=1)]

    @model_validator(mode="before")
    @classmethod
    def _kind_aliases(cls, data: Any) -> Any:
        rules = data.get("rules") if isinstance(data, dict) else None
        if isinstance(rules, list):
            data = {
                **data,
                "rules": [
                    {**rule, "kind": KIND_ALIASES[rule["kind"]]}
                    # A kind that is no string (an array, a table) is left for the model's
                    # own error: looked up here, it raised TypeError past pydantic.
                    if isinstance(rule, dict)
                    and isinstance(rule.get("kind"), str)
                    and rule["kind"] in KIND_ALIASES
                    else rule
                    for rule in rules
                ],
            }
        return data

    @model_validator(mode="after")
    def _start_within_max(self) -> Dimension:
        if self.start > self.max:
            raise ValueError(f"start ({self.start}) is above max ({self.max})")
        # A rule worth more than its dimension can hold is a typo (or a hostile file):
        # the score is clamped to 0..max anyway, so such points could only mislead.
        for rule in self.rules:
            for field, points in (("points", rule.points), *_none_points(rule)):
                if abs(points) > self.max:
                    raise ValueError(
                        f"rule {rule.id!r}: {field} must be within -{self.max}..{self.max}, "
                        f"the dimension's max"
                    )
        return self


def _none_points(rule: Rule) -> tuple[tuple[str, int], ...]:
    return (("none_points", rule.none_points),) if isinstance(rule, Ratio) else ()


class RuleSpec(_Model):
    """A whole rule file."""

    name: Annotated[str, Field(min_length=1, max_length=100)] = "rules"
    version: Annotated[str, Field(min_length=1, max_length=50)] = "1"
    empty_flag: PlainText = "No audit entries found for session"
    dimensions: Annotated[list[Dimension], Field(min_length=1)]
    #: Model name -> price per million tokens, for budget rules' ``max_cost``.
    prices: dict[Annotated[str, Field(min_length=1, max_length=200)], Price] = {}

    @model_validator(mode="after")
    def _unique(self) -> RuleSpec:
        names = [d.name for d in self.dimensions]
        for name in names:
            if names.count(name) > 1:
                raise ValueError(f"dimension {name!r} is defined twice")
        for rule in (r for d in self.dimensions for r in d.rules):
            if isinstance(rule, Budget) and rule.max_cost is not None and not self.prices:
                raise ValueError(
                    f"rule {rule.id!r}: max_cost needs a [prices] table (model = "
                    "{ input = ..., output = ... } per million tokens)"
                )
        ids = [rule.id for d in self.dimensions for rule in d.rules]
        # The ids the rubric gives a dimension's start and its 0..max limit (points).
        own = {f"{name}.{part}" for name in names for part in ("start", "limit")}
        for rule_id in ids:
            if ids.count(rule_id) > 1:
                raise ValueError(f"rule id {rule_id!r} is used twice")
            if rule_id in own:
                raise ValueError(
                    f"rule id {rule_id!r} is the id the rubric gives a dimension's start or "
                    "limit points: choose another"
                )
        return self

    def maxima(self) -> dict[str, Any]:
        return {d.name: d.max for d in self.dimensions}
