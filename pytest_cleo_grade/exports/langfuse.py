"""Grades as Langfuse scores, the way the Enhanced Scoring System Design stores its judge's
scores: score configs made from the rubric (once, idempotently), then one score per dimension
and the overall score per graded session.

It uses the Langfuse SDK's REST client (``langfuse.api.LangfuseAPI``), synchronously: a
rejected score is reported, not lost in a background thread, and nothing outlives the call.
Score ids are derived from the session, the grade's time and the score's name, so exporting
the same history twice writes each score once.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pytest_cleo_grade.judges.redact import basic_token, mask, redact_url, url_secrets
from pytest_cleo_grade.models import GradeResult, format_timestamp
from pytest_cleo_grade.rubrics.weighted.spec import DEFAULT_SPEC, CategoricalDimension
from pytest_cleo_grade.scale import LETTER_CUTOFFS

__all__ = ["ConfigSpec", "ExportSummary", "ScoreSpec", "export_grades", "keys_from", "plan"]

#: Langfuse allows letters, digits, ``_``, `` ``, ``.``, ``(``, ``)``, ``-`` in a config name.
_NAME_LIMIT: Final = 35
_BAD_NAME_CHARS: Final = re.compile(r"[^A-Za-z0-9_ .()\-]")
#: Scores per request (the scores endpoint takes a list).
_BATCH: Final = 100

DataType = Literal["NUMERIC", "CATEGORICAL"]


@dataclass(frozen=True, slots=True)
class ConfigSpec:
    """A score config to exist in Langfuse (by name)."""

    name: str
    data_type: DataType
    min_value: float | None = None
    max_value: float | None = None
    categories: tuple[tuple[str, int], ...] = ()
    description: str = ""


@dataclass(frozen=True, slots=True)
class ScoreSpec:
    """One score of one graded session (a categorical score's value is its label)."""

    config: ConfigSpec
    value: float | str
    session_id: str
    score_id: str
    comment: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class ExportSummary:
    """What one export did."""

    configs_created: list[str] = field(default_factory=list)
    configs_existing: int = 0
    scores_sent: int = 0
    rejected: list[str] = field(default_factory=list)

    def line(self, sessions: int, where: str) -> str:
        rejected = f", {len(self.rejected)} rejected" if self.rejected else ""
        # A host written with its credentials (https://user:key@host) is shown without them.
        return (
            f"langfuse: {self.scores_sent} scores for {sessions} "
            f"session{'s' if sessions != 1 else ''} sent to {redact_url(where)}{rejected} "
            f"({len(self.configs_created)} score configs created, "
            f"{self.configs_existing} existed)"
        )


def failure_line(exc: BaseException, base_url: str, secret_key: str, public_key: str = "") -> str:
    """One line for an export that failed: where it went (without credentials), what failed,
    and the SDK's text on one line, with any credential it echoes masked (the keys also as
    the Basic authorization the SDK sends)."""
    secrets = [*url_secrets(base_url), secret_key, basic_token(public_key, secret_key)]
    text = mask(" ".join(str(exc).split()), secrets)[:300]
    return f"langfuse export to {redact_url(base_url)} failed: {type(exc).__name__}: {text}"


def keys_from(env: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(public key, secret key, base URL) from the LANGFUSE_* variables, or None."""
    public, secret = env.get("LANGFUSE_PUBLIC_KEY"), env.get("LANGFUSE_SECRET_KEY")
    if not public or not secret:
        return None
    base = env.get("LANGFUSE_BASE_URL") or env.get("LANGFUSE_HOST") or "https://cloud.langfuse.com"
    return public, secret, base.rstrip("/")


def _name(text: str) -> str:
    return _BAD_NAME_CHARS.sub("_", text)[:_NAME_LIMIT]


def _score_id(result: GradeResult, name: str) -> str:
    key = f"{result.session_id}\0{format_timestamp(result.timestamp)}\0{name}"
    return "cleo-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _comment(lines: Sequence[str]) -> str | None:
    text = "; ".join(lines)
    return text[:1000] or None


def _weighted(result: GradeResult) -> list[tuple[ConfigSpec, float | str, str | None]]:
    """The design's seven scores: each judged dimension as the judge scored it, and
    ``overall_quality`` (0..1)."""
    extra = result.model_extra or {}
    raw: Mapping[str, Any] = extra.get("judgeScores") or {}
    known = {d.name: d for d in DEFAULT_SPEC.dimensions}
    scores: list[tuple[ConfigSpec, float | str, str | None]] = []
    for name, dimension in result.dimensions.items():
        value = raw.get(name)
        spec = known.get(name)
        comment = _comment(dimension.evidence)
        if isinstance(spec, CategoricalDimension) and isinstance(value, str):
            categories = tuple((c.label, c.value) for c in spec.categories)
            config = ConfigSpec(_name(name), "CATEGORICAL", categories=categories)
            scores.append((config, value, comment))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            low, high = (getattr(spec, "min", 0.0), getattr(spec, "max", 1.0))
            config = ConfigSpec(_name(name), "NUMERIC", float(low), float(high))
            scores.append((config, float(value), comment))
    overall = extra.get("overallQuality")
    if isinstance(overall, int | float):
        config = ConfigSpec(
            "overall_quality", "NUMERIC", 0.0, 1.0, description="Weighted aggregate"
        )
        scores.append((config, float(overall), None))
    return scores


def _points(result: GradeResult) -> list[tuple[ConfigSpec, float | str, str | None]]:
    """Any other rubric: each dimension (0..max), the total (0..maxScore) and the letter."""
    rubric = str((result.model_extra or {}).get("rubric", "cleo"))
    scores: list[tuple[ConfigSpec, float | str, str | None]] = [
        (
            ConfigSpec(_name(name), "NUMERIC", 0.0, float(dimension.max)),
            float(dimension.score),
            _comment(dimension.evidence),
        )
        for name, dimension in result.dimensions.items()
    ]
    total = ConfigSpec(_name(f"{rubric}_total"), "NUMERIC", 0.0, float(result.max_score))
    scores.append((total, float(result.total_score), _comment(result.flags)))
    # A..F with F the worst (0), as categories rank from the worst.
    names = [letter for letter, _ in LETTER_CUTOFFS]
    letters = tuple((letter, len(names) - 1 - i) for i, letter in enumerate(names))
    grade = ConfigSpec(_name(f"{rubric}_grade"), "CATEGORICAL", categories=letters)
    scores.append((grade, result.letter, f"{result.display_percent}%"))
    return scores


def plan(result: GradeResult) -> list[ScoreSpec]:
    """The scores one grade becomes, each with the config it needs."""
    extra = result.model_extra or {}
    parts = _weighted(result) if extra.get("rubric") == "weighted" else _points(result)
    metadata = {key: extra[key] for key in ("testId", "rubric") if isinstance(extra.get(key), str)}
    return [
        ScoreSpec(
            config, value, result.session_id, _score_id(result, config.name), comment, metadata
        )
        for config, value, comment in parts
    ]


#: Pages of score configs read at most (100 each): a server that says it has more, or never
#: runs out, would otherwise keep the export (and the pytest run) waiting for ever.
_MAX_CONFIG_PAGES: Final = 100


def _existing(api: Any) -> dict[str, str]:
    names: dict[str, str] = {}
    page, pages = 1, 1
    while page <= pages:
        if page > _MAX_CONFIG_PAGES:
            raise RuntimeError(
                f"the server lists more than {_MAX_CONFIG_PAGES} pages of score configs"
            )
        listing = api.score_configs.get(page=page, limit=100)
        if not listing.data:
            break
        names.update({config.name: config.id for config in listing.data})
        pages = listing.meta.total_pages
        page += 1
    return names


def export_grades(
    results: Iterable[GradeResult],
    *,
    public_key: str,
    secret_key: str,
    base_url: str,
    timeout: float = 10.0,
) -> ExportSummary:
    """Create the missing score configs, then send every grade's scores."""
    import httpx
    from langfuse.api import LangfuseAPI

    # Our own HTTP client, closed when done: nothing of the export outlives the call.
    with httpx.Client(timeout=timeout) as http:
        api = LangfuseAPI(
            base_url=base_url,
            username=public_key,
            password=secret_key,
            x_langfuse_public_key=public_key,
            httpx_client=http,
        )
        return _send(api, [score for result in results for score in plan(result)])


def _send(api: Any, scores: list[ScoreSpec]) -> ExportSummary:
    from langfuse.api.commons.types.config_category import ConfigCategory
    from langfuse.api.scores.types.create_score_request import CreateScoreRequest

    summary = ExportSummary()
    ids = _existing(api)
    summary.configs_existing = len(ids)
    for config in {score.config.name: score.config for score in scores}.values():
        if config.name in ids:
            continue
        made = api.score_configs.create(
            name=config.name,
            data_type=config.data_type,
            categories=[
                ConfigCategory(label=label, value=value) for label, value in config.categories
            ]
            or None,
            min_value=config.min_value,
            max_value=config.max_value,
            description=config.description or None,
        )
        ids[config.name] = made.id
        summary.configs_created.append(config.name)
    requests = [
        CreateScoreRequest(
            id=score.score_id,
            session_id=score.session_id,
            name=score.config.name,
            value=score.value,
            data_type=score.config.data_type,
            config_id=ids[score.config.name],
            comment=score.comment,
            metadata=dict(score.metadata) or None,
        )
        for score in scores
    ]
    for start in range(0, len(requests), _BATCH):
        batch = requests[start : start + _BATCH]
        answer = api.scores.create(request=batch)
        summary.scores_sent += len(batch) - int(getattr(answer, "rejected", 0) or 0)
        summary.rejected += [str(error) for error in getattr(answer, "errors", None) or []]
    return summary
