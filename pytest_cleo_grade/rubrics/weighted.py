"""The weighted LLM-judge rubric (seed 004): six judged dimensions, weights, chunked sessions.

A judge scores each dimension (a category or a number); each score is normalised to 0..1
(categorical: value / (number of categories - 1); numeric: its position in its range), the
overall quality is the weighted sum, and the GradeResult is in points: ``totalScore`` =
overall x 100, each dimension worth weight x 100. Points are rounded half up to 2 decimals;
the total is rounded from the exact overall, so it can differ from the sum of the rounded
dimension scores by 0.01.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from pytest_cleo_grade.errors import RubricError
from pytest_cleo_grade.models import AuditEntry, DimensionScore, GradeResult
from pytest_cleo_grade.rubrics.base import GradeContext, RubricConfig
from pytest_cleo_grade.rubrics.cleo import EMPTY_SESSION_FLAG, coerce_entries, order_entries
from pytest_cleo_grade.rubrics.judge import (
    Judge,
    JudgeReply,
    JudgeReplyError,
    JudgeSettings,
    TokenUsage,
    ask,
    build_judge,
    extract_json_text,
)
from pytest_cleo_grade.rubrics.judge_cache import JudgeCache, cache_key

__all__ = [
    "DEFAULT_SPEC",
    "WEIGHTED_RUBRIC",
    "Budget",
    "CategoricalDimension",
    "Category",
    "NumericDimension",
    "RubricSpec",
    "Verdict",
    "WeightedJudgeRubric",
    "aggregate_chunks",
    "build_prompt",
    "estimate_tokens",
    "judge_usage_totals",
    "load_rubric_file",
    "normalise",
    "parse_reply",
    "render_entry",
    "split_into_chunks",
]

WEIGHTED_RUBRIC: Final = "weighted"
WEIGHT_TOLERANCE: Final = 1e-9
_NAME_PATTERN: Final = r"^[A-Za-z_][A-Za-z0-9_]*$"
# How much of an invalid reply goes back to the judge in the re-ask.
_REASK_ECHO_CHARS: Final = 4000


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


#: Seed 004's six dimensions, types, categories and weights; descriptions in our own words.
DEFAULT_SPEC: Final = RubricSpec(
    description="Seed 004: an LLM judge scores goal, tools, process, context, errors, output.",
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
        ),
    ],
)


@dataclass(frozen=True, slots=True)
class LoadedSpec:
    """A rubric spec with the bytes it came from (they are part of the judge cache key)."""

    spec: RubricSpec
    source: bytes
    path: Path | None = None


def _default_source(spec: RubricSpec) -> bytes:
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True).encode()


def _describe_loc(loc: Sequence[int | str], data: object) -> str:
    """``dimensions[2] (tool_efficiency).weight`` from pydantic's location tuple."""
    parts: list[str] = []
    node: object = data
    skip_tag = False
    for part in loc:
        if skip_tag:
            # pydantic puts the discriminator's value after a union member's index.
            skip_tag = False
            continue
        if isinstance(part, int):
            label = f"[{part}]"
            child = node[part] if isinstance(node, list) and part < len(node) else None
            if isinstance(child, dict) and isinstance(child.get("name"), str):
                label += f" ({child['name']})"
            parts.append(label)
            skip_tag = parts[:1] == ["dimensions"] and len(parts) == 2
            node = child
        else:
            parts.append(f".{part}" if parts else part)
            node = node.get(part) if isinstance(node, dict) else None
    return "".join(parts) or "rubric"


def validate_spec(data: object, where: str) -> RubricSpec:
    """Validate a rubric mapping; RubricError names ``where`` and the first invalid field."""
    try:
        return RubricSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        more = exc.error_count() - 1
        suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
        raise RubricError(
            f"{where}: {_describe_loc(first['loc'], data)}: {message}{suffix}"
        ) from exc


def load_rubric_file(path: str | Path) -> LoadedSpec:
    """Read and validate a TOML (``.toml``) or JSON (``.json``) rubric file."""
    path = Path(path)
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise RubricError(f"{path}: cannot read rubric file: {exc.strerror or exc}") from exc
    suffix = path.suffix.lower()
    try:
        text = source.decode("utf-8")
        if suffix == ".toml":
            data: object = tomllib.loads(text)
        elif suffix == ".json":
            data = json.loads(text)
        else:
            raise RubricError(f"{path}: rubric files must end in .toml or .json")
    except UnicodeDecodeError as exc:
        raise RubricError(f"{path}: not UTF-8 text: {exc.reason}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RubricError(f"{path}: invalid TOML: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise RubricError(f"{path}: invalid JSON: {exc.msg} (line {exc.lineno})") from exc
    return LoadedSpec(validate_spec(data, str(path)), source, path)


# --------------------------------------------------------------------------- prompt


def estimate_tokens(text: str, chars_per_token: int = 4) -> int:
    """Seed 004's estimate: one token per ``chars_per_token`` characters, rounded up."""
    return -(-len(text) // chars_per_token)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    # Cut visibly, never silently: the judge sees how much was left out.
    return f"{text[:limit]}...(+{len(text) - limit} chars)"


def render_entry(entry: AuditEntry, position: int, *, max_param_chars: int = 2000) -> str:
    """One compact line per call: position, time, call, gateway, outcome, duration, params."""
    result = entry.result
    outcome = "ok" if result.success else f"FAILED exit={result.exit_code}"
    parts = [
        f"#{position}",
        entry.timestamp.astimezone(UTC).strftime("%H:%M:%S.%f")[:-3],
        f"{entry.domain}.{entry.operation}",
        f"via={entry.metadata.gateway or entry.metadata.source}",
        outcome,
        f"{result.duration:g}ms",
    ]
    if entry.metadata.task_id:
        parts.append(f"task={entry.metadata.task_id}")
    if entry.params:
        rendered = json.dumps(entry.params, separators=(",", ":"), ensure_ascii=False, default=str)
        parts.append(f"params={_clip(rendered, max_param_chars)}")
    if entry.error:
        parts.append(f"error={_clip(' '.join(entry.error.split()), max_param_chars)}")
    return " ".join(parts)


def _describe_dimension(index: int, dimension: Dimension) -> list[str]:
    lines = [f"{index}. {dimension.name}: {dimension.description}".rstrip(": ")]
    if isinstance(dimension, CategoricalDimension):
        lines.append("   Answer with one category (its name, or its number):")
        lines.extend(
            f"   - {c.label} ({c.value}){': ' + c.description if c.description else ''}"
            for c in dimension.categories
        )
    else:
        lines.append(f"   Answer with a number from {dimension.min:g} to {dimension.max:g}:")
        lines.extend(f"   - {band}" for band in dimension.guidance)
    return lines


def _example_answer(spec: RubricSpec) -> str:
    # A template rather than literal JSON: the placeholders say what goes where.
    rows = []
    for dimension in spec.dimensions:
        if isinstance(dimension, CategoricalDimension):
            score = '"<' + "|".join(c.label for c in dimension.categories) + '>"'
        else:
            score = f"<number {dimension.min:g}..{dimension.max:g}>"
        rows.append(
            f'  "{dimension.name}": {{"score": {score}, '
            '"evidence": ["<what you saw, citing calls like #3>"], "rationale": "<why>"}'
        )
    return "{\n" + ",\n".join(rows) + "\n}"


def build_prompt(
    spec: RubricSpec,
    *,
    session_id: str,
    task: str | None,
    log_lines: Sequence[str],
    total_entries: int,
    chunk: tuple[int, int] = (1, 1),
) -> str:
    """The judge's prompt: the task, the log (or one chunk of it), the dimensions, the format."""
    number, count = chunk
    out = [
        "You are reviewing the work of an AI agent. The only record of what it did is the log "
        "of its tool calls below. Judge the session on each dimension listed after the log, "
        "using only what the log shows.",
        "",
        f"Session: {session_id} ({total_entries} calls in all)",
    ]
    if count > 1:
        out.append(
            f"This is chunk {number} of {count} of the log; the other chunks are judged "
            "separately. Judge what this chunk shows; a final chunk also shows how the session "
            "ended."
        )
    out += [
        "",
        "The agent's task:",
        task.strip() if task and task.strip() else "(not stated: infer it from the log)",
        "",
        "Tool-call log, one call per line (number, UTC time, domain.operation, gateway, "
        "outcome, duration, task, parameters, error):",
        *log_lines,
        "",
        "Dimensions:",
    ]
    for index, dimension in enumerate(spec.dimensions, start=1):
        out += _describe_dimension(index, dimension)
    out += [
        "",
        "Reply with one JSON object and nothing else: one key per dimension, each holding "
        '"score", "evidence" (a list of short observations) and "rationale" (one or two '
        "sentences). Shape:",
        _example_answer(spec),
    ]
    return "\n".join(out)


def split_into_chunks(
    lines: Sequence[str], *, chunk_tokens: int, chars_per_token: int = 4
) -> list[list[str]]:
    """Split log lines at entry boundaries into chunks of at most ``chunk_tokens`` tokens.

    A single line over the budget forms a chunk of its own (it is never cut in two).
    """
    chunks: list[list[str]] = []
    current: list[str] = []
    used = 0
    for line in lines:
        cost = estimate_tokens(line + "\n", chars_per_token)
        if current and used + cost > chunk_tokens:
            chunks.append(current)
            current, used = [], 0
        current.append(line)
        used += cost
    if current:
        chunks.append(current)
    return chunks


# --------------------------------------------------------------------------- replies


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judge's score for one dimension: the value, its category label, and why."""

    value: float
    label: str | None = None
    evidence: tuple[str, ...] = ()
    rationale: str = ""

    @property
    def raw(self) -> str | float:
        """What the judge answered: the category label, or the number."""
        return self.label if self.label is not None else self.value


class _DimensionReply(BaseModel):
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    score: StrictInt | StrictFloat | StrictStr
    evidence: list[StrictStr] = Field(default_factory=list)
    rationale: StrictStr = ""

    @field_validator("evidence", mode="before")
    @classmethod
    def _one_observation(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value


def _categorical_value(dimension: CategoricalDimension, score: int | float | str) -> Category:
    by_label = {c.label.casefold(): c for c in dimension.categories}
    key: int | None = None
    if isinstance(score, str):
        found = by_label.get(score.strip().casefold())
        if found is not None:
            return found
        if score.strip().isdigit():
            key = int(score.strip())
    elif isinstance(score, int) or score.is_integer():
        key = int(score)
    if key is not None and 0 <= key < len(dimension.categories):
        return dimension.categories[key]
    choices = ", ".join(f"{c.label} ({c.value})" for c in dimension.categories)
    raise ValueError(f"{score!r} is not one of {choices}")


def _verdict(dimension: Dimension, reply: _DimensionReply) -> Verdict:
    evidence = tuple(reply.evidence)
    if isinstance(dimension, CategoricalDimension):
        category = _categorical_value(dimension, reply.score)
        return Verdict(float(category.value), category.label, evidence, reply.rationale)
    score = reply.score
    if isinstance(score, str):
        raise ValueError(f"expected a number from {dimension.min:g} to {dimension.max:g}")
    if not dimension.min <= score <= dimension.max:
        raise ValueError(f"{score:g} is outside {dimension.min:g}..{dimension.max:g}")
    return Verdict(float(score), None, evidence, reply.rationale)


def parse_reply(spec: RubricSpec, text: str) -> dict[str, Verdict]:
    """Parse and validate a judge's reply; ValueError says what is wrong with it."""
    try:
        data = json.loads(extract_json_text(text))
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    verdicts: dict[str, Verdict] = {}
    problems: list[str] = []
    for dimension in spec.dimensions:
        if dimension.name not in data:
            problems.append(f"{dimension.name}: missing")
            continue
        try:
            reply = _DimensionReply.model_validate(data[dimension.name])
            verdicts[dimension.name] = _verdict(dimension, reply)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(part) for part in first["loc"][:1])
            problems.append(f"{dimension.name}{'.' + loc if loc else ''}: {first['msg']}")
        except ValueError as exc:
            problems.append(f"{dimension.name}.score: {exc}")
    if problems:
        raise ValueError("; ".join(problems))
    return verdicts


# --------------------------------------------------------------------------- scoring


def normalise(dimension: Dimension, value: float) -> float:
    """0..1: a category's value / (categories - 1); a number's position in its range."""
    if isinstance(dimension, CategoricalDimension):
        return value / (len(dimension.categories) - 1)
    return (value - dimension.min) / (dimension.max - dimension.min)


def _points(value: float) -> float:
    """Half-up rounding to 2 decimals, as the displayed percentages round half up."""
    return float(Decimal(repr(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP))


def aggregate_chunks(
    spec: RubricSpec, chunks: Sequence[Mapping[str, Verdict]]
) -> dict[str, Verdict]:
    """Seed 004's rule: numeric scores are averaged over chunks, categories come from the last.

    The final chunk holds how the session ended, which is what a category (was the goal
    reached? were errors recovered?) is about. Evidence and rationales are kept per chunk.
    """
    count = len(chunks)
    if count == 1:
        return dict(chunks[0])
    result: dict[str, Verdict] = {}
    for dimension in spec.dimensions:
        verdicts = [chunk[dimension.name] for chunk in chunks]
        if isinstance(dimension, CategoricalDimension):
            last = verdicts[-1]
            result[dimension.name] = Verdict(
                last.value,
                last.label,
                tuple(f"chunk {count}/{count}: {e}" for e in last.evidence),
                f"from the final chunk ({count}/{count})"
                + (f": {last.rationale}" if last.rationale.strip() else ""),
            )
            continue
        values = [v.value for v in verdicts]
        evidence = tuple(
            f"chunk {i}/{count}: {e}" for i, v in enumerate(verdicts, start=1) for e in v.evidence
        )
        rationales = "".join(
            f"; chunk {i}/{count}: {v.rationale}"
            for i, v in enumerate(verdicts, start=1)
            if v.rationale.strip()
        )
        listed = ", ".join(f"{v:g}" for v in values)
        result[dimension.name] = Verdict(
            math.fsum(values) / count,
            None,
            evidence,
            f"mean of {count} chunks ({listed}){rationales}",
        )
    return result


@dataclass(slots=True)
class _Usage:
    tokens: TokenUsage = field(default_factory=TokenUsage)
    requests: int = 0
    cached_replies: int = 0
    chunks: int = 0

    def as_extra(self) -> dict[str, Any]:
        return {
            "promptTokens": self.tokens.prompt_tokens,
            "completionTokens": self.tokens.completion_tokens,
            "totalTokens": self.tokens.total_tokens,
            "requests": self.requests,
            "cachedReplies": self.cached_replies,
            "cached": self.chunks > 0 and self.cached_replies == self.chunks,
        }


_USAGE_KEYS: Final = (
    "promptTokens",
    "completionTokens",
    "totalTokens",
    "requests",
    "cachedReplies",
)


def judge_usage_totals(results: Iterable[GradeResult]) -> dict[str, int]:
    """Sum the ``judgeUsage`` of grades (for a run summary); ``grades`` counts judged ones.

    Grades without ``judgeUsage`` (CLEO's, other rubrics') add nothing.
    """
    totals = dict.fromkeys(("grades", *_USAGE_KEYS), 0)
    for result in results:
        usage = (result.model_extra or {}).get("judgeUsage")
        if not isinstance(usage, Mapping):
            continue
        totals["grades"] += 1
        for key in _USAGE_KEYS:
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                totals[key] += value
    return totals


class WeightedJudgeRubric:
    """Seed 004's weighted rubric (or any rubric file's): a judge scores, weights combine.

    Build it from a spec (``DEFAULT_SPEC`` or :func:`load_rubric_file`), a judge (any callable
    taking a prompt; without one, the HTTP judge of the spec's ``[judge]`` table is built when
    needed) and optionally a :class:`JudgeCache`. Registered as ``weighted``.
    """

    def __init__(
        self,
        spec: RubricSpec = DEFAULT_SPEC,
        *,
        source: bytes | None = None,
        judge: Judge | None = None,
        cache: JudgeCache | None = None,
    ) -> None:
        self.spec = spec
        self.source = _default_source(spec) if source is None else source
        self.judge = judge
        self.cache = cache

    @property
    def name(self) -> str:
        """The spec's name (``weighted`` unless the rubric file says otherwise)."""
        return self.spec.name

    @property
    def version(self) -> str:
        """The spec's version."""
        return self.spec.version

    @property
    def dimensions(self) -> Mapping[str, float]:
        """Dimension name → maximum points (weight x 100)."""
        return {d.name: _points(d.weight * 100) for d in self.spec.dimensions}

    def configure(self, config: RubricConfig) -> WeightedJudgeRubric:
        """A copy using ``config``'s rubric file, judge, judge overrides and cache."""
        if config.rubric_file is not None:
            loaded = load_rubric_file(config.rubric_file)
            spec, source = loaded.spec, loaded.source
        else:
            spec, source = self.spec, self.source
        if config.judge_overrides:
            merged = {**spec.judge.model_dump(exclude_unset=True), **config.judge_overrides}
            try:
                settings = JudgeSettings.model_validate(merged)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise RubricError(
                    f"judge.{'.'.join(map(str, first['loc']))}: {first['msg']}"
                ) from exc
            spec = spec.model_copy(update={"judge": settings})
        cache = self.cache
        if config.cache_path is not None:
            cache = JudgeCache(Path(config.cache_path), config.cache_mode)
        return WeightedJudgeRubric(
            spec, source=source, judge=config.judge or self.judge, cache=cache
        )

    def grade(
        self,
        entries: Iterable[AuditEntry | Mapping[str, Any]],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        """Judge ``session_id``'s entries (in chunks when over budget) and score them."""
        context = context or GradeContext()
        timestamp = now or datetime.now(UTC)
        validated = coerce_entries(entries)
        mine = order_entries(
            [e for e in validated if e.session_id is None or e.session_id == session_id]
        )
        usage = _Usage()
        if not mine:
            # Nothing to judge: as the CLEO rubric does, score 0 and say why.
            zero = {
                d.name: DimensionScore(score=0, max=_points(d.weight * 100))
                for d in self.spec.dimensions
            }
            return self._result(
                session_id, context, timestamp, zero, 0.0, [EMPTY_SESSION_FLAG], 0, usage, {}
            )
        budget = self.spec.budget
        lines = [
            render_entry(entry, position, max_param_chars=budget.max_param_chars)
            for position, entry in enumerate(mine, start=1)
        ]
        prompts = self._prompts(session_id, context.task, lines)
        judge = self.judge if self.judge is not None else build_judge(self.spec.judge)
        per_chunk = [
            self._judge_chunk(judge, prompt, session_id, (i, len(prompts)), usage)
            for i, prompt in enumerate(prompts, start=1)
        ]
        verdicts = aggregate_chunks(self.spec, per_chunk)
        dimensions: dict[str, DimensionScore] = {}
        overall = 0.0
        for dimension in self.spec.dimensions:
            verdict = verdicts[dimension.name]
            share = dimension.weight * normalise(dimension, verdict.value)
            overall += share
            evidence = list(verdict.evidence)
            if verdict.rationale.strip():
                evidence.append(f"rationale: {verdict.rationale.strip()}")
            dimensions[dimension.name] = DimensionScore(
                score=_points(share * 100), max=_points(dimension.weight * 100), evidence=evidence
            )
        extra: dict[str, Any] = {
            "judgeScores": {name: v.raw for name, v in verdicts.items()},
        }
        if len(per_chunk) > 1:
            extra["chunkScores"] = [
                {name: v.raw for name, v in chunk.items()} for chunk in per_chunk
            ]
        return self._result(
            session_id, context, timestamp, dimensions, overall, [], len(mine), usage, extra
        )

    def _prompts(self, session_id: str, task: str | None, lines: list[str]) -> list[str]:
        budget = self.spec.budget
        whole = build_prompt(
            self.spec, session_id=session_id, task=task, log_lines=lines, total_entries=len(lines)
        )
        if estimate_tokens(whole, budget.chars_per_token) <= budget.max_prompt_tokens:
            return [whole]
        chunks = split_into_chunks(
            lines, chunk_tokens=budget.chunk_tokens, chars_per_token=budget.chars_per_token
        )
        return [
            build_prompt(
                self.spec,
                session_id=session_id,
                task=task,
                log_lines=chunk,
                total_entries=len(lines),
                chunk=(i, len(chunks)),
            )
            for i, chunk in enumerate(chunks, start=1)
        ]

    def _judge_chunk(
        self,
        judge: Judge,
        prompt: str,
        session_id: str,
        chunk: tuple[int, int],
        usage: _Usage,
    ) -> dict[str, Verdict]:
        usage.chunks += 1
        key = self._cache_key(judge, prompt)
        if key is not None and self.cache is not None:
            stored = self.cache.get(key)
            if stored is not None:
                try:
                    verdicts = parse_reply(self.spec, stored.text)
                except ValueError:
                    pass  # a row that no longer validates is simply asked again
                else:
                    usage.cached_replies += 1
                    return verdicts
        reply = self._ask(judge, prompt, usage)
        try:
            verdicts = parse_reply(self.spec, reply.text)
        except ValueError as first_problem:
            # One re-ask, telling the judge what was wrong, before giving up.
            reask = (
                f"{prompt}\n\nYour previous reply could not be used: {first_problem}\n"
                f"Your previous reply was:\n{reply.text[:_REASK_ECHO_CHARS]}\n\n"
                "Reply again with only the JSON object described above."
            )
            reply = self._ask(judge, reask, usage)
            try:
                verdicts = parse_reply(self.spec, reply.text)
            except ValueError as problem:
                where = f"session {session_id}"
                if chunk[1] > 1:
                    where += f" chunk {chunk[0]}/{chunk[1]}"
                raise JudgeReplyError(
                    f"judge reply for {where} is invalid after one re-ask: {problem}",
                    raw=reply.text,
                ) from problem
        if key is not None and self.cache is not None:
            identity = _identity(judge) or {}
            self.cache.put(
                key,
                reply,
                endpoint=str(identity.get("endpoint", identity.get("callable", ""))),
                model=str(identity.get("model", "")),
            )
        return verdicts

    @staticmethod
    def _ask(judge: Judge, prompt: str, usage: _Usage) -> JudgeReply:
        reply = ask(judge, prompt)
        usage.requests += 1
        if reply.usage is not None:
            usage.tokens = usage.tokens + reply.usage
        return reply

    def _cache_key(self, judge: Judge, prompt: str) -> str | None:
        identity = _identity(judge)
        if identity is None or self.cache is None or self.cache.mode == "off":
            return None
        return cache_key(
            identity=identity,
            prompt=prompt,
            rubric_source=self.source,
            rubric_version=self.spec.version,
        )

    def _result(
        self,
        session_id: str,
        context: GradeContext,
        timestamp: datetime,
        dimensions: dict[str, DimensionScore],
        overall: float,
        flags: list[str],
        entry_count: int,
        usage: _Usage,
        extra: dict[str, Any],
    ) -> GradeResult:
        return GradeResult.model_validate(
            {
                "sessionId": session_id,
                "taskId": context.task_id,
                "totalScore": _points(overall * 100),
                "maxScore": 100,
                "dimensions": dimensions,
                "flags": flags,
                "timestamp": timestamp,
                "entryCount": entry_count,
                "evaluator": "auto",
                "rubric": self.name,
                "rubricVersion": self.version,
                "overallQuality": round(overall, 6),
                **extra,
                "judgeUsage": usage.as_extra(),
            }
        )


def _identity(judge: Judge) -> Mapping[str, Any] | None:
    method = getattr(judge, "cache_identity", None)
    if not callable(method):
        return None
    identity = method()
    return identity if isinstance(identity, Mapping) else None
