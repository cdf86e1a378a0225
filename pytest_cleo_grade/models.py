"""Pydantic models of CLEO's audit entries and grade results, and the letter scale."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any, Final, Literal

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

__all__ = [
    "LETTER_CUTOFFS",
    "AuditEntry",
    "AuditMetadata",
    "AuditResult",
    "DimensionScore",
    "GradeResult",
    "format_timestamp",
    "format_validation_error",
    "letter_for",
    "percent_of",
    "round_half_up",
    "to_utc",
]

Letter = Literal["A", "B", "C", "D", "F"]

#: Seed 000's letter scale: the first cut-off the exact percentage reaches wins.
LETTER_CUTOFFS: Final[tuple[tuple[Letter, float], ...]] = (
    ("A", 90.0),
    ("B", 75.0),
    ("C", 60.0),
    ("D", 45.0),
    ("F", 0.0),
)


def letter_for(percent: float) -> Letter:
    """Return the letter for an exact percentage (89.99 is a B, 90 an A)."""
    if math.isnan(percent):
        raise ValueError("percent must be a number, not NaN")
    for letter, cutoff in LETTER_CUTOFFS:
        if percent >= cutoff:
            return letter
    return "F"


def round_half_up(value: float) -> int:
    """Round .5 away from zero for positive values, as JavaScript's Math.round does.

    Python's round() rounds half to even (round(82.5) == 82); CLEO's numbers come from
    JavaScript, so displayed percentages must round 82.5 up to 83.
    """
    # to_integral_value, unlike quantize, has no 28-digit limit: 1e300 rounds too.
    return int(Decimal(repr(value)).to_integral_value(rounding=ROUND_HALF_UP))


def percent_of(score: float, max_score: float) -> float:
    """The exact percentage of ``score`` out of ``max_score`` (0 when max is 0)."""
    if max_score == 0:
        return 0.0
    return score * 100.0 / max_score


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
    return f"{prefix}{field}: {first['msg']}{suffix}"


class _Input(BaseModel):
    """Base of input models: camelCase aliases, snake_case attributes, finite numbers only."""

    model_config = ConfigDict(populate_by_name=True, allow_inf_nan=False)


class AuditResult(_Input):
    """The outcome of one call: whether it succeeded, its exit code and its duration."""

    success: StrictBool = Field(description="Whether the operation succeeded.")
    exit_code: StrictInt = Field(
        0, alias="exitCode", description="Process-style exit code; 4 is CLEO's E_NOT_FOUND."
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
        default_factory=dict, description="The parameters the call was made with."
    )
    result: AuditResult = Field(description="The outcome of the call.")
    metadata: AuditMetadata = Field(
        default_factory=AuditMetadata, description="Where the call came from."
    )
    error: str | None = Field(None, description="Error message of a failed call.")

    @field_validator("timestamp")
    @classmethod
    def _to_utc(cls, value: datetime) -> datetime:
        # One shared tzinfo makes comparisons cheap: datetimes with different tzinfo objects
        # compare through utcoffset() calls, which dominated ordering a large session.
        return to_utc(value)

    @field_validator("params", mode="before")
    @classmethod
    def _null_params_are_empty(cls, value: object) -> object:
        # CLEO writes `params: null` for calls made without parameters.
        return {} if value is None else value

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
        return to_utc(value)

    @model_validator(mode="after")
    def _finite_percent(self) -> GradeResult:
        # 1e308 out of 1e-300 is no grade: its percentage overflows and no letter fits it.
        if not math.isfinite(self.percent):
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

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> GradeResult:
        """Validate a mapping (a GRADES.jsonl line) into a GradeResult."""
        return cls.model_validate(dict(data))
