"""Grades as Langfuse scores, the way the Enhanced Scoring System Design stores its judge's
scores: score configs made from the rubric (once, idempotently), then one score per dimension
and the overall score per graded session.

It uses the Langfuse SDK's REST client (``langfuse.api.LangfuseAPI``), synchronously: a
rejected score is reported, not lost in a background thread, and nothing outlives the call.
Score ids are derived from the session, the grade's time and the score's name, so exporting
the same history twice writes each score once.

The whole export has a deadline (:data:`DEADLINE`): it runs at the end of every pytest run,
and a server that trickles its answer a byte at a time, or asks to be retried a minute later,
must not hold a finished run (a CI job killed by its own timeout is a failed run). httpx's
timeouts are per read, so they cannot give that bound: the requests are made on a worker
thread the call waits for at most the deadline; past it no further request leaves (an httpx
request hook refuses it) and the call raises :class:`ExportDeadlineError`, saying what was sent.

A config is found by name but reused only when its type and range (or categories) are the
ones the scores need: two rubrics of one kind (two rule files) can give a dimension or
``rules_total`` another range, and Langfuse refuses a score outside its config's range. Such a
config gets the name suffixed with its range, ``rules_total (0-50)``.
"""

from __future__ import annotations

import copy
import hashlib
import math
import re
import threading
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from pytest_cleo_grade.core._scale import LETTER_CUTOFFS
from pytest_cleo_grade.core.models import GradeResult, format_timestamp
from pytest_cleo_grade.judges._redact import basic_token, mask, redact_url, url_secrets
from pytest_cleo_grade.rubrics.weighted.rubric import DIMENSIONS_KEY
from pytest_cleo_grade.rubrics.weighted.spec import DEFAULT_SPEC, CategoricalDimension

__all__ = [
    "DEADLINE",
    "ConfigSpec",
    "ExportDeadlineError",
    "ExportSummary",
    "ScoreSpec",
    "export_grades",
    "keys_from",
    "plan",
    "require_langfuse",
]

#: Seconds the whole export may take (every request, every retry the SDK makes).
DEADLINE: Final = 60.0

#: Langfuse allows letters, digits, ``_``, `` ``, ``.``, ``(``, ``)``, ``-`` in a config name.
_NAME_LIMIT: Final = 35
_BAD_NAME_CHARS: Final = re.compile(r"[^A-Za-z0-9_ .()\-]")
#: Scores per request (the scores endpoint takes a list).
_BATCH: Final = 100
#: The most rejected scores whose reasons are shown, one warning line each (the rest counted),
#: and the longest reason shown.
_REASONS: Final = 5
_REASON_LENGTH: Final = 300

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

    def matches(self, config: Any) -> bool:
        """Whether an existing Langfuse config takes this config's scores: not archived, the
        same data type, and the same range (numeric) or categories (categorical)."""
        if getattr(config, "is_archived", False):
            return False
        data_type = getattr(config, "data_type", None)
        if getattr(data_type, "value", data_type) != self.data_type:
            return False
        if self.data_type == "NUMERIC":
            return (config.min_value, config.max_value) == (self.min_value, self.max_value)
        theirs = {(c.label, float(c.value)) for c in config.categories or ()}
        return theirs == {(label, float(value)) for label, value in self.categories}

    def candidate_names(self) -> list[str]:
        """The names this config may take, in order: its own, then suffixed with its range
        (or, for categories, a digest of them), then with a digest of the whole config."""
        digest = hashlib.sha256(repr(self).encode()).hexdigest()
        if self.data_type == "NUMERIC" and None not in (self.min_value, self.max_value):
            shown = f"{self.min_value:g}-{self.max_value:g}"
        else:
            shown = hashlib.sha256(repr(self.categories).encode()).hexdigest()[:6]
        return [self.name, _name(self.name, f" ({shown})"), _name(self.name, f" ({digest[:8]})")]


@dataclass(frozen=True, slots=True)
class ScoreSpec:
    """One score of one graded session (a categorical score's value is its label)."""

    config: ConfigSpec
    value: float | str
    session_id: str
    score_id: str
    comment: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: The trace the score goes on (the design stores scores on the trace); None: the session.
    trace_id: str | None = None


@dataclass(slots=True)
class ExportSummary:
    """What one export did."""

    configs_created: list[str] = field(default_factory=list)
    #: Existing configs the scores were sent with.
    configs_existing: int = 0
    scores_sent: int = 0
    #: The server's reason for each rejected score, as it wrote it.
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


class ExportDeadlineError(RuntimeError):
    """The export's deadline passed: what was sent by then is in ``summary``."""

    def __init__(self, summary: ExportSummary, scores: int, deadline: float) -> None:
        self.summary = summary
        configs = len(summary.configs_created)
        super().__init__(
            f"stopped at its {deadline:g} s deadline: {summary.scores_sent} of {scores} scores "
            f"sent ({configs} score config{'s' if configs != 1 else ''} created), the rest not "
            "sent (the server answered too slowly)"
        )


def failure_line(exc: BaseException, base_url: str, secret_key: str, public_key: str = "") -> str:
    """One line for an export that failed: where it went (without credentials), what failed,
    and the SDK's text on one line, with any credential it echoes masked (the keys also as
    the Basic authorization the SDK sends)."""
    secrets = [*url_secrets(base_url), secret_key, basic_token(public_key, secret_key)]
    where = redact_url(base_url)
    if isinstance(exc, ExportDeadlineError):
        return f"langfuse export to {where} {exc}"
    if isinstance(exc, ImportError):
        return f"langfuse export skipped: {exc}"
    text = mask(" ".join(_error_text(exc).split()), secrets)[:300]
    return f"langfuse export to {where} failed: {text}"


def _error_text(exc: BaseException) -> str:
    """What went wrong, first: a refused request (the SDK's ApiError, whose own text starts
    with every response header) is its HTTP status and the server's message."""
    status = getattr(exc, "status_code", None)
    if not isinstance(status, int):
        return f"{type(exc).__name__}: {exc}"
    body = getattr(exc, "body", None)
    if isinstance(body, Mapping):
        # Langfuse answers {"message": ..., "error": ...}; either says why.
        parts = [str(body[key]) for key in ("message", "error") if body.get(key)]
        body = " - ".join(dict.fromkeys(parts)) or body
    return f"HTTP {status}: {body}" if body not in (None, "") else f"HTTP {status}"


def keys_from(env: Mapping[str, str]) -> tuple[str, str, str] | None:
    """(public key, secret key, base URL) from the LANGFUSE_* variables, or None."""
    public, secret = env.get("LANGFUSE_PUBLIC_KEY"), env.get("LANGFUSE_SECRET_KEY")
    if not public or not secret:
        return None
    base = env.get("LANGFUSE_BASE_URL") or env.get("LANGFUSE_HOST") or "https://cloud.langfuse.com"
    return public, secret, base.rstrip("/")


def _name(text: str, suffix: str = "") -> str:
    """A config name Langfuse takes, ending in ``suffix``. A name cut to the limit ends in a
    digest of the whole: two long names sharing their start stay two names."""
    safe, suffix = _BAD_NAME_CHARS.sub("_", text), _BAD_NAME_CHARS.sub("_", suffix)
    if len(safe) + len(suffix) > _NAME_LIMIT:
        digest = hashlib.sha256(text.encode()).hexdigest()[:6]
        safe = f"{safe[: _NAME_LIMIT - len(suffix) - len(digest) - 1]}_{digest}"
    return safe + suffix


def _score_id(result: GradeResult, name: str) -> str:
    key = f"{result.session_id}\0{format_timestamp(result.timestamp)}\0{name}"
    return "cleo-" + hashlib.sha256(key.encode()).hexdigest()[:32]


def _comment(lines: Sequence[str]) -> str | None:
    text = "; ".join(lines)
    return text[:1000] or None


#: The score configs' descriptions of the Enhanced Scoring System Design, by dimension.
_DESCRIPTIONS: Final = {
    "goal_achievement": "Did the session accomplish the user's goal?",
    "tool_efficiency": "Right tool selection and usage efficiency",
    "process_adherence": "Following proper workflows (TodoWrite, Read→Edit, skills)",
    "context_efficiency": "Efficient use of context window and file reads",
    "error_handling": "How were errors and blockers handled?",
    "output_quality": "Quality of deliverables (code, docs, formatting)",
    "overall_quality": "Weighted aggregate of all dimensions",
}


def trace_of(result: GradeResult) -> str | None:
    """The trace a grade's scores go on (its ``traceId`` extra), or None."""
    value = (result.model_extra or {}).get("traceId")
    if isinstance(value, str) and re.fullmatch(r"[0-9A-Za-z][0-9A-Za-z_.:-]{0,199}", value):
        return value
    return None


#: One score of a grade: its config, value and comment.
_Part = tuple[ConfigSpec, float | str, str | None]


def _is_weighted(extra: Mapping[str, Any]) -> bool:
    """A grade of the weighted judge rubric, whatever its rubric file named it: it carries
    the judge's own scores and the overall quality (its ``rubric`` is the file's name)."""
    overall = extra.get("overallQuality")
    return isinstance(extra.get("judgeScores"), Mapping) and (
        isinstance(overall, int | float) and not isinstance(overall, bool)
    )


def _shapes(extra: Mapping[str, Any]) -> dict[str, ConfigSpec]:
    """The config each judged dimension's raw score needs, by dimension name: from the
    grade's :data:`DIMENSIONS_KEY` when it has one, else (a grade of the built-in rubric) from
    :data:`DEFAULT_SPEC`. A dimension whose shape is unknown gets none."""
    shapes: dict[str, ConfigSpec] = {}
    recorded = extra.get(DIMENSIONS_KEY)
    if isinstance(recorded, Mapping):
        for name, shape in recorded.items():
            config = _shape_config(str(name), shape, _DESCRIPTIONS.get(str(name), ""))
            if config is not None:
                shapes[str(name)] = config
        return shapes
    if extra.get("rubric") != DEFAULT_SPEC.name:
        return shapes
    for dimension in DEFAULT_SPEC.dimensions:
        described = _DESCRIPTIONS.get(dimension.name, dimension.description)
        if isinstance(dimension, CategoricalDimension):
            categories = tuple((c.label, c.value) for c in dimension.categories)
            shapes[dimension.name] = ConfigSpec(
                _name(dimension.name), "CATEGORICAL", categories=categories, description=described
            )
        else:
            low, high = float(dimension.min), float(dimension.max)
            shapes[dimension.name] = ConfigSpec(
                _name(dimension.name), "NUMERIC", low, high, description=described
            )
    return shapes


def _number(value: object) -> float | None:
    """A finite number (not a bool) as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)  # an int past a float's range (a history line is input)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _shape_config(name: str, shape: object, known: str = "") -> ConfigSpec | None:
    """One recorded shape as a config, or None when it is not one (a history line is
    input: a shape that makes no sense is ignored, and the dimension exported as points).
    Its description: ``known`` (the design's, for its dimensions), else the shape's own."""
    if not isinstance(shape, Mapping):
        return None
    own = shape.get("description")
    described = known or (own[:500] if isinstance(own, str) else "")
    if shape.get("type") == "categorical" and isinstance(shape.get("categories"), Mapping):
        categories = tuple(
            (str(label), int(value))
            for label, value in shape["categories"].items()
            if isinstance(value, int) and not isinstance(value, bool)
        )
        if not categories:
            return None
        return ConfigSpec(_name(name), "CATEGORICAL", categories=categories, description=described)
    low, high = _number(shape.get("min")), _number(shape.get("max"))
    if shape.get("type") == "numeric" and low is not None and high is not None and low < high:
        return ConfigSpec(_name(name), "NUMERIC", low, high, description=described)
    return None


def _fits(config: ConfigSpec, value: object) -> bool:
    """Whether Langfuse takes ``value`` under ``config``: a label among its categories, or a
    number within its range."""
    if config.data_type == "CATEGORICAL":
        return isinstance(value, str) and value in {label for label, _ in config.categories}
    number = _number(value)
    low, high = config.min_value, config.max_value
    return number is not None and low is not None and high is not None and low <= number <= high


def _weighted(result: GradeResult) -> list[_Part]:
    """The design's scores: each judged dimension as the judge scored it (its categories or
    range, as its rubric defines them), and ``overall_quality`` (0..1). A dimension whose
    shape the grade does not say, or whose raw score does not fit it, is sent as its points
    (0..its weight's share of 100): never dropped, never outside its config."""
    extra = result.model_extra or {}
    raw: Mapping[str, Any] = extra.get("judgeScores") or {}
    shapes = _shapes(extra)
    scores: list[_Part] = []
    for name, dimension in result.dimensions.items():
        value = raw.get(name)
        config = shapes.get(name)
        comment = _comment(dimension.evidence)
        if config is not None and _fits(config, value):
            shown = value if isinstance(value, str) else _number(value)
            assert shown is not None  # _fits took it: a label or a number
            scores.append((config, shown, comment))
        else:
            points = ConfigSpec(_name(name), "NUMERIC", 0.0, float(dimension.max))
            scores.append((points, float(dimension.score), comment))
    overall = float(extra["overallQuality"])
    config = ConfigSpec(
        "overall_quality", "NUMERIC", 0.0, 1.0, description=_DESCRIPTIONS["overall_quality"]
    )
    scores.append((config, overall, None))
    return scores


def _points(result: GradeResult) -> list[_Part]:
    """Any other rubric: each dimension (0..max), the total (0..maxScore) and the letter."""
    rubric = str((result.model_extra or {}).get("rubric", "cleo"))
    scores: list[_Part] = [
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
    parts = _weighted(result) if _is_weighted(extra) else _points(result)
    # The rubric is named whatever graded: a grade of CLEO's rubric carries no ``rubric``
    # extra, and the metadata says ``cleo`` as its configs do (``cleo_total``).
    metadata = {"testId": extra["testId"]} if isinstance(extra.get("testId"), str) else {}
    metadata["rubric"] = str(extra.get("rubric", "cleo"))
    # The id takes the config's own name, never the suffix it may get in Langfuse: the score
    # keeps its id whichever config name the export finds free.
    trace = trace_of(result)
    if trace is not None:
        metadata["sessionId"] = result.session_id
    return [
        ScoreSpec(
            config,
            value,
            result.session_id,
            _score_id(result, config.name),
            comment,
            metadata,
            trace,
        )
        for config, value, comment in parts
    ]


#: Pages of score configs read at most (100 each): a server that says it has more, or never
#: runs out, would otherwise keep the export (and the pytest run) waiting for ever.
_MAX_CONFIG_PAGES: Final = 100
#: The longest reply read (a page of 100 score configs is a few tens of KB).
MAX_REPLY_BYTES: Final = 4 * 1024 * 1024


def _existing(api: Any) -> dict[str, Any]:
    """The project's score configs by name."""
    names: dict[str, Any] = {}
    page, pages = 1, 1
    while page <= pages:
        if page > _MAX_CONFIG_PAGES:
            raise RuntimeError(
                f"the server lists more than {_MAX_CONFIG_PAGES} pages of score configs"
            )
        listing = api.score_configs.get(page=page, limit=100)
        if not listing.data:
            break
        names.update({config.name: config for config in listing.data})
        pages = listing.meta.total_pages
        page += 1
    return names


def require_langfuse() -> None:
    """MissingExtraError (one line with the install command) unless the langfuse extra's
    modules import: said before any request, not as the worker thread's ``No module named``."""
    from pytest_cleo_grade.core.errors import missing_extra

    try:
        import httpx  # noqa: F401
        import langfuse.api  # noqa: F401
    except ImportError as exc:
        raise missing_extra("the Langfuse export", "the Langfuse SDK", "langfuse", exc) from None


def export_grades(
    results: Iterable[GradeResult],
    *,
    public_key: str,
    secret_key: str,
    base_url: str,
    timeout: float = 10.0,
    deadline: float = DEADLINE,
) -> ExportSummary:
    """Create the missing score configs, then send every grade's scores, all within
    ``deadline`` seconds (else ExportDeadlineError); ``timeout`` bounds each read."""
    require_langfuse()
    scores = [score for result in results for score in plan(result)]
    summary = ExportSummary()
    stopped = threading.Event()
    failures: list[Exception] = []

    def run() -> None:
        try:
            _export(scores, summary, stopped, (public_key, secret_key, base_url), timeout)
        except Exception as exc:  # raised on the caller's thread
            failures.append(exc)

    worker = threading.Thread(target=run, name="cleo-grade langfuse export", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        # The worker is stuck in a read or in the SDK's wait before a retry: it may finish
        # that read, but sends nothing more. What it had sent is what the caller is told.
        stopped.set()
        raise ExportDeadlineError(copy.deepcopy(summary), len(scores), deadline)
    if failures:
        raise failures[0]
    _warn_rejected(summary.rejected, [secret_key, basic_token(public_key, secret_key)])
    return summary


def _export(
    scores: list[ScoreSpec],
    summary: ExportSummary,
    stopped: threading.Event,
    keys: tuple[str, str, str],
    timeout: float,
) -> None:
    """The export's requests (on the worker thread), recorded in ``summary`` as they go."""
    import httpx
    from langfuse.api import LangfuseAPI

    def refuse_when_stopped(request: httpx.Request) -> None:
        if stopped.is_set():
            raise httpx.RequestError("the export's deadline passed", request=request)

    public_key, secret_key, base_url = keys
    # Our own HTTP client, closed when done; no request leaves it once the deadline passed,
    # and no reply is read past MAX_REPLY_BYTES.
    from pytest_cleo_grade.reports._capped_httpx import CappedTransport

    with httpx.Client(
        timeout=timeout,
        event_hooks={"request": [refuse_when_stopped]},
        transport=CappedTransport(MAX_REPLY_BYTES),
    ) as http:
        api = LangfuseAPI(
            base_url=base_url,
            username=public_key,
            password=secret_key,
            x_langfuse_public_key=public_key,
            httpx_client=http,
        )
        _send(api, scores, summary)


def _warn_rejected(reasons: Sequence[str], secrets: Sequence[str]) -> None:
    """The first rejected scores' reasons, one CleoGradeWarning line each, the rest counted:
    shown (in pytest, in its warnings summary) but never raised, as an export never fails a
    run. The server's text is shown as terminal-safe text, credentials it echoes masked."""
    from pytest_cleo_grade.core._text import terminal_text
    from pytest_cleo_grade.core.errors import CleoGradeWarning, warnings_shown_not_raised

    lines = [
        "cleo-grade: langfuse rejected a score: "
        + terminal_text(mask(" ".join(reason.split()), secrets)[:_REASON_LENGTH])
        for reason in reasons[:_REASONS]
    ]
    if len(reasons) > _REASONS:
        lines.append(f"cleo-grade: langfuse rejected {len(reasons) - _REASONS} more scores")
    with warnings_shown_not_raised():
        for line in lines:
            warnings.warn(CleoGradeWarning(line), stacklevel=3)


def _resolve(config: ConfigSpec, existing: Mapping[str, Any]) -> tuple[str, Any | None]:
    """The name ``config`` takes and the existing config of that name to reuse (None: create
    it). An existing config is reused only when it takes these scores; a name taken by
    another config moves to the next candidate."""
    names = config.candidate_names()
    for name in names:
        if name in existing and config.matches(existing[name]):
            return name, existing[name]
    free = [name for name in names if name not in existing]
    # Every candidate taken by another config: send with the last, the server says why not.
    return (free[0], None) if free else (names[-1], existing[names[-1]])


def _send(api: Any, scores: list[ScoreSpec], summary: ExportSummary) -> None:
    """Create the configs the scores need, then send the scores; ``summary`` says, at any
    moment, what was done so far."""
    from langfuse.api.commons.types.config_category import ConfigCategory
    from langfuse.api.scores.types.create_score_request import CreateScoreRequest

    existing = _existing(api)
    chosen: dict[ConfigSpec, tuple[str, str]] = {}  # config: (name, id)
    for config in dict.fromkeys(score.config for score in scores):
        name, found = _resolve(config, existing)
        if found is not None:
            summary.configs_existing += 1
        else:
            found = api.score_configs.create(
                name=name,
                data_type=config.data_type,
                categories=[
                    ConfigCategory(label=label, value=value) for label, value in config.categories
                ]
                or None,
                min_value=config.min_value,
                max_value=config.max_value,
                description=config.description or None,
            )
            existing[name] = found  # a later config wanting this name sees it taken
            summary.configs_created.append(name)
        chosen[config] = (name, found.id)
    requests = [
        CreateScoreRequest(
            id=score.score_id,
            # On the trace when the grade knows it (the design's "7 scores on trace"), else on
            # the session.
            trace_id=score.trace_id,
            session_id=None if score.trace_id else score.session_id,
            name=chosen[score.config][0],
            value=score.value,
            data_type=score.config.data_type,
            config_id=chosen[score.config][1],
            comment=score.comment,
            metadata=dict(score.metadata) or None,
        )
        for score in scores
    ]
    for start in range(0, len(requests), _BATCH):
        batch = requests[start : start + _BATCH]
        answer = api.scores.create(request=batch)
        summary.scores_sent += len(batch) - int(getattr(answer, "rejected", 0) or 0)
        errors = getattr(answer, "errors", None) or []
        summary.rejected += [str(getattr(error, "message", error)) for error in errors]
