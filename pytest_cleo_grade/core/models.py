"""Pydantic models of CLEO's audit entries and grade results, the letter scale, entry ordering."""

from __future__ import annotations

import gc
import math
import operator
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Final, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from pytest_cleo_grade.core._files import MAX_NESTING
from pytest_cleo_grade.core._scale import (
    LETTER_CUTOFFS,
    Letter,
    letter_for,
    percent_of,
    round_half_up,
)
from pytest_cleo_grade.core.errors import EntryError

__all__ = [
    "LETTER_CUTOFFS",
    "AuditEntry",
    "AuditMetadata",
    "AuditResult",
    "DimensionScore",
    "GradeResult",
    "Point",
    "coerce_entries",
    "collector_paused",
    "format_timestamp",
    "format_validation_error",
    "letter_for",
    "non_finite_path",
    "not_a_json_number",
    "order_entries",
    "percent_of",
    "round_half_up",
    "to_utc",
    "validate_entry_dicts",
]


def format_timestamp(value: datetime) -> str:
    """CLEO's timestamp form: UTC, milliseconds, ``Z`` (``2026-03-01T12:00:00.000Z``).

    Fixed width (the year has four digits even before 1000), so text order is time order.
    """
    return value.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def to_utc(value: datetime) -> datetime:
    """An aware datetime in UTC; ValueError (a validation error) when UTC cannot hold it.

    ``0001-01-01T00:30:00+01:00`` is a valid ISO time whose UTC form would be in year 0.
    """
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("timestamp is out of range once converted to UTC") from None


def format_validation_error(exc: ValidationError, where: str = "") -> str:
    """One line naming the place and the first invalid field of a pydantic error."""
    first = exc.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "entry"
    more = exc.error_count() - 1
    suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    prefix = f"{where}: " if where else ""
    # A validator's own ValueError already says what is wrong; pydantic's "Value error, "
    # prefix only repeats that it is one.
    message = str(first["msg"]).removeprefix("Value error, ")
    return f"{prefix}{field}: {message}{suffix}"


class _Input(BaseModel):
    """Base of input models: camelCase aliases, snake_case attributes, finite numbers only."""

    model_config = ConfigDict(populate_by_name=True, allow_inf_nan=False)


class AuditResult(_Input):
    """The outcome of one call: whether it succeeded, its exit code and its duration."""

    success: StrictBool = Field(description="Whether the operation succeeded.")
    # Bounded as SQLite's INTEGER is: a larger one could be graded but never stored.
    exit_code: StrictInt = Field(
        0,
        alias="exitCode",
        ge=-(2**63),
        le=2**63 - 1,
        description="Process-style exit code; 4 is CLEO's E_NOT_FOUND.",
    )
    duration: float = Field(0, ge=0, description="Duration of the call in milliseconds.")


class AuditMetadata(_Input):
    """Where a call came from; keys other than the known ones are kept as they are."""

    model_config = ConfigDict(extra="allow")

    source: str = Field(
        "mcp", description="Which front end made the call: mcp, cli, rpc, http, dispatch, ..."
    )
    gateway: str | None = Field(
        None,
        description="The gateway used: cleo_query/query for reads, cleo_mutate/mutate for writes.",
    )
    task_id: str | None = Field(None, alias="taskId", description="Task the call concerned.")
    user_id: str | None = Field(None, alias="userId", description="User on whose behalf it ran.")


#: Types that can never hold a NaN (exact types: a float or str subclass takes the full walk).
_FLAT_SCALARS: Final = frozenset({str, bool, type(None)})
#: Python reads no integer of more digits than this back from JSON (its int/str conversion
#: limit, 4300 by default; 0: none): such a number could be stored but never graded.
_MAX_INT_DIGITS: Final = sys.get_int_max_str_digits()
_INT_LIMIT: Final = 10**_MAX_INT_DIGITS if _MAX_INT_DIGITS else 0
#: Fewer bits than this are always fewer digits than the limit (a cheap first test).
_INT_BITS: Final = int(_MAX_INT_DIGITS * 3.3219) - 1


def _readable_int(value: int) -> bool:
    return not _INT_LIMIT or value.bit_length() < _INT_BITS or abs(value) < _INT_LIMIT


def not_a_json_number(where: str) -> str:
    """What is wrong at ``where``, a place :func:`non_finite_path` found."""
    return (
        f"{where.removeprefix('.')} is not a finite number JSON can carry (NaN, infinities "
        f"and integers of more than {_MAX_INT_DIGITS} digits are invalid)"
    )


def non_finite_path(value: object) -> str | None:
    """Where ``value`` holds a NaN or infinity, or an integer too long to be read back from
    JSON (``.c``, ``[2].x``), or None if nowhere.

    One pass over nested dicts, lists and tuples; scalars other than numbers cost one check.
    ValueError when containers nest deeper than MAX_NESTING: such a value could be held but
    never stored and read back (the store and the entry files refuse it alike).
    """
    if type(value) is dict and all(
        type(v) in _FLAT_SCALARS or (type(v) is int and v.bit_length() < _INT_BITS)
        for v in value.values()
    ):
        return None  # the common flat params: strings, ints, booleans, nulls
    stack: list[tuple[str, object, int]] = [("", value, 1)]
    seen: set[int] = set()  # a container met twice (a cycle) is walked once
    while stack:
        path, item, depth = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                return path
        elif isinstance(item, int):
            if not _readable_int(item):
                return path
        elif isinstance(item, dict | list | tuple):
            if id(item) in seen:
                continue
            if depth > MAX_NESTING:
                where = path.removeprefix(".")
                where = where if len(where) <= 60 else where[:57] + "..."
                raise ValueError(f"{where}: nested too deeply (more than {MAX_NESTING} levels)")
            seen.add(id(item))
            if isinstance(item, dict):
                stack.extend((f"{path}.{key}", child, depth + 1) for key, child in item.items())
            else:
                stack.extend(
                    (f"{path}[{index}]", child, depth + 1) for index, child in enumerate(item)
                )
    return None


def _null_params_in_schema(schema: dict[str, Any]) -> None:
    """The published entry schema accepts ``params: null``, as the model does (CLEO writes
    it; ``AuditEntry._null_params_are_empty``): a before-validator is invisible to pydantic's
    schema."""
    schema.pop("type", None)
    schema.pop("additionalProperties", None)
    schema["anyOf"] = [{"type": "object", "additionalProperties": True}, {"type": "null"}]


class AuditEntry(_Input):
    """One domain.operation call made by the agent, as CLEO's audit middleware logs it."""

    timestamp: AwareDatetime = Field(
        description="When the call happened; must carry a timezone (serialised as UTC, ms, Z)."
    )
    session_id: str | None = Field(
        None, alias="sessionId", description="The session the call belongs to."
    )
    domain: str = Field(min_length=1, description="CLEO domain, e.g. tasks, session, admin.")
    operation: str = Field(
        min_length=1, description="Operation within the domain; may be dotted (skill.show)."
    )
    params: dict[str, Any] = Field(
        default_factory=dict,
        description="The parameters the call was made with (null: none).",
        json_schema_extra=_null_params_in_schema,
    )
    result: AuditResult = Field(description="The outcome of the call.")
    metadata: AuditMetadata = Field(
        default_factory=AuditMetadata, description="Where the call came from."
    )
    error: str | None = Field(None, description="Error message of a failed call.")

    @field_validator("timestamp", mode="before")
    @classmethod
    def _not_a_number(cls, value: object) -> object:
        # pydantic reads a number (or a string of one) as Unix time, guessing seconds or
        # milliseconds from its size: an audit log's time must say what it means. An ISO
        # time always has a colon; a datetime passes as it is.
        if isinstance(value, int | float) or (isinstance(value, str) and ":" not in value):
            raise ValueError(
                "must be an ISO 8601 date and time with a timezone (2026-03-01T12:00:00Z), "
                f"not {value!r:.40}"
            )
        return value

    @field_validator("timestamp")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        # One shared tzinfo makes comparisons cheap: datetimes with different tzinfo objects
        # compare through utcoffset() calls, which dominated ordering a large session.
        value = to_utc(value)
        # Kept to the millisecond, as the store and every file keep it: an order decided by
        # finer digits would change once the entries were stored (calls within one
        # millisecond keep the order they were recorded or listed in, wherever they are read).
        sub = value.microsecond % 1000
        return value.replace(microsecond=value.microsecond - sub) if sub else value

    @field_validator("params", mode="before")
    @classmethod
    def _null_params_are_empty(cls, value: object) -> object:
        # CLEO writes `params: null` for calls made without parameters.
        return {} if value is None else value

    @field_validator("params")
    @classmethod
    def _finite_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        where = non_finite_path(value)
        if where is not None:
            # JSON has no NaN or Infinity: such a value could be stored but never read back,
            # and a session that cannot be read can never be graded.
            raise ValueError(not_a_json_number(where))
        return value

    @field_serializer("timestamp")
    def _serialize_timestamp(self, value: datetime) -> str:
        return format_timestamp(value)

    def to_json_dict(self) -> dict[str, Any]:
        """The entry as CLEO's camelCase JSON object."""
        return self.model_dump(mode="json", by_alias=True)


class DimensionScore(BaseModel):
    """The score of one rubric dimension with the evidence behind it."""

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)

    score: int | float = Field(description="Points earned in this dimension.")
    max: int | float = Field(description="Points available in this dimension.")
    evidence: list[str] = Field(
        default_factory=list, description="Observations that earned or explain the score."
    )


#: The most entry indices one point lists; a million-entry session would otherwise carry a
#: million indices in every history line. The sentence still counts them all.
POINT_ENTRY_LIMIT: Final = 100


class Point(BaseModel):
    """One award or deduction behind a dimension's score (DESIGN section 8).

    A rubric lists them in the GradeResult extra ``points``; a dimension's points sum to its
    score. ``entries`` are indices into the graded session's entries in grading order.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    dimension: str = Field(description="The dimension the points belong to.")
    points: int | float = Field(description="Signed points: an award (+) or a deduction (-).")
    rule: str = Field(description="Stable rule id, e.g. S1 or discovery.ratio.")
    text: str = Field(description="One sentence saying why.")
    entries: list[int] = Field(
        default_factory=list, description="Indices of the entries that caused it."
    )


class GradeResult(BaseModel):
    """The grade of one session: total, per-dimension scores, flags and provenance.

    Extra keys (``rubric``, ``testId``, ``variant`` ...) are kept; core keys are never renamed.
    """

    model_config = ConfigDict(
        frozen=True, populate_by_name=True, extra="allow", allow_inf_nan=False
    )

    session_id: str = Field(alias="sessionId", description="Session that was graded.")
    task_id: str | None = Field(None, alias="taskId", description="Associated task id.")
    total_score: int | float = Field(alias="totalScore", ge=0, description="Aggregate score.")
    max_score: int | float = Field(
        100, alias="maxScore", gt=0, description="Maximum possible score."
    )
    dimensions: dict[str, DimensionScore] = Field(
        description="Per-dimension score, max and evidence, in rubric order."
    )
    flags: list[str] = Field(
        default_factory=list, description="Specific violations or improvement suggestions."
    )
    timestamp: AwareDatetime = Field(description="When the grade was computed (ISO 8601).")
    entry_count: int = Field(alias="entryCount", ge=0, description="Audit entries analysed.")
    evaluator: Literal["auto", "manual"] = Field("auto", description="How the grade was computed.")

    @field_validator("timestamp")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        # Milliseconds, as written (format_timestamp): a grade in memory is the grade its
        # history line reads back, whether its run decoded it from a report or made it.
        utc = to_utc(value)
        return utc.replace(microsecond=utc.microsecond // 1000 * 1000)

    @model_validator(mode="after")
    def _finite_percent(self) -> GradeResult:
        # 1e308 out of 1e-300 is no grade: its percentage overflows and no letter fits it.
        try:
            finite = math.isfinite(self.percent)
        except OverflowError:  # a 400-digit integer does not even become a float
            finite = False
        if not finite:
            raise ValueError("totalScore out of maxScore is not a finite percentage")
        return self

    @field_serializer("timestamp")
    def _serialize_timestamp(self, value: datetime) -> str:
        return format_timestamp(value)

    @property
    def percent(self) -> float:
        """The exact percentage (compare this with cut-offs)."""
        return percent_of(self.total_score, self.max_score)

    @property
    def display_percent(self) -> int:
        """The percentage rounded half up, for display."""
        return round_half_up(self.percent)

    @property
    def letter(self) -> Letter:
        """The letter of the exact percentage."""
        return letter_for(self.percent)

    def to_json_dict(self) -> dict[str, Any]:
        """The compact CLEO form: camelCase, ``taskId`` and other empty extras omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_report_dict(self) -> dict[str, Any]:
        """The CLI's ``--json`` form: the GradeResult plus ``percent`` and ``grade``."""
        data = self.to_json_dict()
        data["percent"] = self.display_percent
        data["grade"] = self.letter
        return data

    @property
    def points(self) -> list[Point]:
        """The ``points`` extra as Point objects (empty when the rubric gave none)."""
        raw = (self.model_extra or {}).get("points") or []
        return [item if isinstance(item, Point) else Point.model_validate(item) for item in raw]

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GradeResult:
        """Validate a mapping (a GRADES.jsonl line) into a GradeResult."""
        return cls.model_validate(dict(data))


# -- many entries at once ---------------------------------------------------------------

_ENTRY_LIST: Final = TypeAdapter(list[AuditEntry])
_TIMESTAMP: Final = operator.attrgetter("timestamp")


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a block that builds many objects at once.

    Validating, reading or grading a large session allocates millions of small objects, none
    of which form cycles; the allocations trigger full collections that traverse every live
    object again and again. Measured on a 50k-entry session, reading it from the store took
    1.7x as long with the collector running. The previous state is restored on exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def coerce_entries(entries: Iterable[AuditEntry | Mapping[str, Any]]) -> list[AuditEntry]:
    """Validate CLEO-shaped dicts into AuditEntry objects; AuditEntry objects pass through.

    Raises EntryError naming the index and field of the first invalid entry.
    """
    items = list(entries)
    # One C-level pass over the types instead of an isinstance call per entry.
    if all(issubclass(kind, AuditEntry) for kind in set(map(type, items))):
        return items  # type: ignore[return-value]
    result: list[AuditEntry] = []
    for index, item in enumerate(items):
        if isinstance(item, AuditEntry):
            result.append(item)
            continue
        try:
            result.append(AuditEntry.model_validate(item))
        except ValidationError as exc:
            raise EntryError(format_validation_error(exc, f"entries[{index}]")) from exc
    return result


def validate_entry_dicts(raw: Sequence[Mapping[str, Any]]) -> list[AuditEntry]:
    """Validate many raw dicts at once (faster than one at a time); errors name the index."""
    try:
        return _ENTRY_LIST.validate_python(raw)
    except ValidationError as exc:
        raise EntryError(format_validation_error(exc, "entries")) from exc


def order_entries(entries: Sequence[AuditEntry]) -> list[AuditEntry]:
    """Session order: by timestamp, ties in recording order (a stable sort).

    Entries usually arrive ordered already; checking that first keeps the common case linear.
    """
    times = list(map(_TIMESTAMP, entries))
    if any(map(operator.gt, times, times[1:])):
        return sorted(entries, key=_TIMESTAMP)
    return list(entries)


#: A successful tasks.add: (described, has a parent, trimmed lowercased title or None when
#: blank or absent).
AddFacts = tuple[bool, bool, str | None]


#: (timestamp, domain, operation, gateway, exit code, success, add, metadata taskId).
#: The timestamp is a datetime, or text in the store's fixed-width form
#: (``2026-03-01T12:00:00.000Z``), whose text order is time order. Success is a bool, or 0/1
#: as SQLite returns it. ``add`` is None except for a successful tasks.add: its AddFacts, or
#: its parameters as JSON object text, read only if the rubric asks (the store's form).
GradedCall = tuple[
    datetime | str, str, str, str | None, int, int, AddFacts | str | None, str | None
]
