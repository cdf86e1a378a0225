"""Rubric files of the weighted judge rubric: the pydantic models, the default, loading.

A rubric file (TOML or JSON) names the dimensions (categorical with ranked categories, or
numeric with a range), their weights, the judge endpoint and the token budget. Validation is
strict and every error names the file and the field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)

from pytest_cleo_grade.judges.protocol import JudgeSettings
from pytest_cleo_grade.rubrics._document import MAX_NESTING, read_document, validate_document

__all__ = [
    "DEFAULT_SPEC",
    "MAX_NESTING",
    "WEIGHTED_RUBRIC",
    "WEIGHT_TOLERANCE",
    "Budget",
    "CategoricalDimension",
    "Category",
    "Dimension",
    "LoadedSpec",
    "NumericDimension",
    "RubricSpec",
    "default_source",
    "load_rubric_file",
    "validate_spec",
]

WEIGHTED_RUBRIC: Final = "weighted"
WEIGHT_TOLERANCE: Final = 1e-9
_NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"


class _SpecModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Category(_SpecModel):
    """One category of a categorical dimension; ``value`` is its rank, 0 the worst."""

    label: str = Field(min_length=1, description="The name the judge answers with.")
    value: StrictInt = Field(ge=0, description="Rank of the category: 0, 1, 2, ... in order.")
    description: str = Field("", description="When the judge should choose this category.")


class CategoricalDimension(_SpecModel):
    """A dimension judged by choosing one of ordered categories."""

    type: Literal["categorical"]
    name: str = Field(pattern=_NAME_PATTERN, description="Key in the judge's JSON and the result.")
    weight: float = Field(ge=0, le=1, description="Share of the overall score (weights sum to 1).")
    description: str = Field("", description="The question the judge answers.")
    categories: list[Category] = Field(
        min_length=2, description="Categories from worst (value 0) to best (value n-1)."
    )
    checks: list[str] = Field(
        default_factory=list, description="Concrete things the judge should check, one each."
    )

    @field_validator("categories")
    @classmethod
    def _ranked(cls, categories: list[Category]) -> list[Category]:
        values = [category.value for category in categories]
        if values != list(range(len(categories))):
            raise ValueError(
                f"category values must be 0..{len(categories) - 1} in order, got {values}"
            )
        labels = [category.label.casefold() for category in categories]
        if len(set(labels)) != len(labels):
            raise ValueError("category labels must be unique (case-insensitively)")
        return categories


class NumericDimension(_SpecModel):
    """A dimension judged as a number in a range (0.0-1.0 unless configured)."""

    type: Literal["numeric"]
    name: str = Field(pattern=_NAME_PATTERN, description="Key in the judge's JSON and the result.")
    weight: float = Field(ge=0, le=1, description="Share of the overall score (weights sum to 1).")
    description: str = Field("", description="The question the judge answers.")
    min: float = Field(0.0, description="Lowest score (normalised to 0).")
    max: float = Field(1.0, description="Highest score (normalised to 1).")
    guidance: list[str] = Field(
        default_factory=list, description="What ranges of the score mean, one line each."
    )
    checks: list[str] = Field(
        default_factory=list, description="Concrete things the judge should check, one each."
    )

    @model_validator(mode="after")
    def _range(self) -> NumericDimension:
        if self.max <= self.min:
            raise ValueError(f"max ({self.max:g}) must be greater than min ({self.min:g})")
        return self


Dimension = Annotated[CategoricalDimension | NumericDimension, Field(discriminator="type")]


class Budget(_SpecModel):
    """Token budget: sessions whose prompt is over ``max_prompt_tokens`` are judged in chunks."""

    max_prompt_tokens: int = Field(80_000, gt=0, description="Largest prompt sent in one piece.")
    chunk_tokens: int = Field(
        70_000, gt=0, description="Budget of the log part of each chunk's prompt."
    )
    chars_per_token: int = Field(4, gt=0, description="Characters per token of the estimate.")
    max_param_chars: int = Field(
        2_000, gt=0, description="Longest rendering of one entry's params before it is cut."
    )
    max_message_chars: int = Field(
        4_000, gt=0, description="Longest text of one conversation message before it is cut."
    )
    chunking: Literal["average", "summarize"] = Field(
        "average",
        description="A session over budget: judge each chunk and average (the design's "
        "aggregation), or summarize each chunk and judge the summaries in one pass.",
    )

    @model_validator(mode="after")
    def _chunks_fit(self) -> Budget:
        if self.chunk_tokens > self.max_prompt_tokens:
            raise ValueError(
                f"chunk_tokens ({self.chunk_tokens}) must not exceed "
                f"max_prompt_tokens ({self.max_prompt_tokens})"
            )
        return self


class RubricSpec(_SpecModel):
    """A weighted judge rubric: its dimensions, the judge to ask and the token budget."""

    name: str = Field(WEIGHTED_RUBRIC, min_length=1, description="Recorded as ``rubric``.")
    version: str = Field("1.0.0", min_length=1, description="Recorded as ``rubricVersion``.")
    description: str = Field("", description="What the rubric is for.")
    dimensions: list[Dimension] = Field(min_length=1, description="The dimensions, in order.")
    judge: JudgeSettings = Field(default_factory=JudgeSettings, description="The judge endpoint.")
    budget: Budget = Field(default_factory=Budget, description="Token budget and chunking.")

    @field_validator("dimensions")
    @classmethod
    def _weights(cls, dimensions: list[Dimension]) -> list[Dimension]:
        names = [dimension.name for dimension in dimensions]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValueError(f"dimension names must be unique: {', '.join(duplicates)}")
        total = math.fsum(dimension.weight for dimension in dimensions)
        if abs(total - 1.0) > WEIGHT_TOLERANCE:
            raise ValueError(f"weights must sum to 1, they sum to {total:.10g}")
        return dimensions


def _bands(*lines: str) -> list[str]:
    return list(lines)


#: The scoring design's six dimensions, types, categories and weights; descriptions our own.
DEFAULT_SPEC: Final = RubricSpec(
    description="An LLM judge scores goal, tools, process, context, errors, output.",
    dimensions=[
        CategoricalDimension(
            type="categorical",
            name="goal_achievement",
            weight=0.30,
            description="Did the agent get done what it was asked to do?",
            categories=[
                Category(label="failed", value=0, description="not done: gave up or got stuck"),
                Category(label="partial", value=1, description="real progress, left unfinished"),
                Category(label="complete", value=2, description="done, as asked"),
                Category(
                    label="exceeded",
                    value=3,
                    description="done, plus worthwhile improvements nobody asked for",
                ),
            ],
            checks=[
                "the user's first message states the goal: does the final "
                "output, or the final state the calls leave, deliver it?",
                "explicit signs of completion: the user's thanks, "
                "a commit made, tests run and passing",
                "deliverables created: files written, tasks added or completed as asked",
            ],
        ),
        NumericDimension(
            type="numeric",
            name="tool_efficiency",
            weight=0.20,
            description="Did the agent choose the right tools and use them without waste?",
            guidance=_bands(
                "0.0-0.3: unsuitable tools, the same failing call retried again and again",
                "0.4-0.6: some poor choices or needless repeats",
                "0.7-0.8: mostly the right tool, few retries",
                "0.9-1.0: the best tool every time, independent calls batched",
            ),
            checks=[
                "dedicated tools over shell commands: Read rather than cat, Edit rather than "
                "sed, Grep rather than grep",
                "the same call retried after it failed, with nothing changed",
                "independent calls made in parallel rather than one after another",
                "the Task tool (a sub-agent) for broad exploration rather than many raw Bash calls",
            ],
        ),
        NumericDimension(
            type="numeric",
            name="process_adherence",
            weight=0.20,
            description=(
                "Did the agent work methodically: plan multi-step work, inspect before it "
                "changes things, follow the project's prescribed procedures?"
            ),
            guidance=_bands(
                "0.0-0.3: no plan, procedures ignored, haphazard",
                "0.4-0.6: some method, with clear lapses",
                "0.7-0.8: sound method, small slips",
                "0.9-1.0: a model workflow throughout",
            ),
            checks=[
                "TodoWrite (or another plan) for work of several steps",
                "a file read (Read) before it is edited (Edit), an item looked up before it "
                "is changed",
                "skills loaded the prescribed way, not through Bash",
                "the project's own workflow steps followed in order",
            ],
        ),
        NumericDimension(
            type="numeric",
            name="context_efficiency",
            weight=0.15,
            description="Did the agent fetch only the information it needed, once?",
            guidance=_bands(
                "0.0-0.3: loads far more than it uses, fetches the same things repeatedly",
                "0.4-0.6: noticeable redundant lookups",
                "0.7-0.8: mostly targeted lookups, a little waste",
                "0.9-1.0: lean, targeted lookups only",
            ),
            checks=[
                "the same file or item read again and again (re-reads)",
                "whole files read where a targeted read (offset/limit, a search) would do",
                "files read but never used for the task",
                "the Task tool used for exploration instead of loading everything into the "
                "main context",
            ],
        ),
        CategoricalDimension(
            type="categorical",
            name="error_handling",
            weight=0.10,
            description="How did the agent deal with errors and obstacles?",
            categories=[
                Category(
                    label="poor", value=0, description="ignored errors or repeated failing calls"
                ),
                Category(
                    label="struggled", value=1, description="got past them after many attempts"
                ),
                Category(label="recovered", value=2, description="changed course quickly"),
                Category(
                    label="prevented",
                    value=3,
                    description="checked before acting, so errors never happened",
                ),
            ],
            checks=[
                "after a failed call: a changed approach, or the same failing call repeated",
                "checks before acting that prevent errors (an exists or find before a change)",
                "asking the user when genuinely blocked",
            ],
        ),
        NumericDimension(
            type="numeric",
            name="output_quality",
            weight=0.05,
            description="How good is what the agent produced?",
            guidance=_bands(
                "0.0-0.3: broken or invalid results",
                "0.4-0.6: usable but rough",
                "0.7-0.8: clean and correct",
                "0.9-1.0: polished",
            ),
            checks=[
                "the final output: correct, complete, concise, well formatted",
                "code that compiles and runs; tests passing where they were changed",
                "no needless emojis or filler",
            ],
        ),
    ],
)


@dataclass(frozen=True, slots=True)
class LoadedSpec:
    """A rubric spec with the bytes it came from (they are part of the judge cache key)."""

    spec: RubricSpec
    source: bytes
    path: Path | None = None


def default_source(spec: RubricSpec) -> bytes:
    """Canonical bytes of a spec that came from no file (its part of the judge cache key)."""
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()


def validate_spec(data: object, where: str) -> RubricSpec:
    """Validate a rubric mapping; RubricError names ``where`` and the first invalid field.

    Strictly, the ``[judge]`` table included: ``temperature = true`` or ``weight = "0.5"``
    is an error, never a number (an integer is still taken where a float is asked).
    """
    # Strict at validation time rather than in the models' config: only that reaches the
    # nested [judge] table too (JudgeSettings is the judge client's own model).
    return validate_document(RubricSpec, data, where, strict=True)


def load_rubric_file(path: str | Path) -> LoadedSpec:
    """Read and validate a TOML (``.toml``) or JSON (``.json``) rubric file."""
    path = Path(path)
    data, source = read_document(path)
    return LoadedSpec(validate_spec(data, str(path)), source, path)
