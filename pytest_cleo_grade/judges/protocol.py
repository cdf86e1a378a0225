"""The judge interface rubrics use: the Judge protocol, replies, token usage, re-asking, the
[judge] settings and the reply cache's protocol. Pure: no HTTP, no SQLite.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pytest_cleo_grade.core.errors import JudgeError
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.core.settings import JudgeCacheMode
from pytest_cleo_grade.judges._redact import redact_url

__all__ = [
    "DEFAULT_MAX_CONSECUTIVE_FAILURES",
    "DEFAULT_MAX_REPLY_BYTES",
    "MAX_BACKOFF_S",
    "MAX_CONSECUTIVE_FAILURES",
    "MAX_REPLY_BYTES",
    "MAX_RETRIES",
    "MAX_TIMEOUT_S",
    "MIN_REPLY_BYTES",
    "REASK_ECHO_CHARS",
    "CachableJudge",
    "CallableJudge",
    "Judge",
    "JudgeConnector",
    "JudgeReply",
    "JudgeReplyError",
    "JudgeSettings",
    "ReplyCache",
    "TokenUsage",
    "UsageMeter",
    "ask",
    "ask_parsed",
    "cache_key",
    "extract_json_text",
    "load_json_reply",
]


#: Bounds of the [judge] table's request settings, checked when the rubric file loads: a
#: typo such as ``timeout = 60000`` must not hang a CI job for hours.
MAX_TIMEOUT_S: Final = 600.0
MAX_RETRIES: Final = 10
MAX_BACKOFF_S: Final = 60.0
DEFAULT_MAX_REPLY_BYTES: Final = 4 * 1024 * 1024
MIN_REPLY_BYTES: Final = 1024
MAX_REPLY_BYTES: Final = 64 * 1024 * 1024
DEFAULT_MAX_CONSECUTIVE_FAILURES: Final = 3
MAX_CONSECUTIVE_FAILURES: Final = 1000

#: An http(s) URL with a host: checked without urllib, which only the HTTP edge imports.
_HTTP_URL: Final = re.compile(r"^https?://[^/?#\s]+", re.IGNORECASE)
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,255}\Z")


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens an endpoint reports having spent on one request (its ``usage`` field)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.total_tokens + other.total_tokens,
        )


@dataclass(frozen=True, slots=True)
class JudgeReply:
    """A judge's answer: the text, and the token usage when the judge knows it."""

    text: str
    usage: TokenUsage | None = None


@runtime_checkable
class Judge(Protocol):
    """Anything that answers a prompt: ``judge(prompt)`` returns text or a JudgeReply.

    A plain function ``def judge(prompt: str) -> str`` is a judge. Raise JudgeError when the
    judge cannot answer.
    """

    def __call__(self, prompt: str, /) -> str | JudgeReply:
        """Answer ``prompt``."""
        ...


@runtime_checkable
class CachableJudge(Judge, Protocol):
    """A judge whose answers may be cached: it says what, besides the prompt, shapes them."""

    def cache_identity(self) -> Mapping[str, Any] | None:
        """Everything except the prompt that can change the answer; None to opt out."""
        ...


class JudgeReplyError(JudgeError):
    """The judge's reply was unusable even after one re-ask; ``raw`` is the last reply."""

    def __init__(self, message: str, *, raw: str) -> None:
        super().__init__(message)
        self.raw = raw


class CallableJudge:
    """Wrap a callable as a judge; give it an ``identity`` to let its answers be cached.

    Without an identity nothing is cached, since nothing tells two versions of the callable
    apart.
    """

    def __init__(
        self, function: Callable[[str], str | JudgeReply], *, identity: str | None = None
    ) -> None:
        self._function = function
        self._identity = identity

    def __call__(self, prompt: str, /) -> str | JudgeReply:
        return self._function(prompt)

    def cache_identity(self) -> Mapping[str, Any] | None:
        """``{"callable": identity}``, or None (not cachable) without an identity."""
        return None if self._identity is None else {"callable": self._identity}


def ask(judge: Judge, prompt: str) -> JudgeReply:
    """Ask ``judge`` and normalise its answer to a JudgeReply."""
    answer = judge(prompt)
    if isinstance(answer, JudgeReply):
        return answer
    if isinstance(answer, str):
        return JudgeReply(answer)
    # Any reply object carrying its answer as ``text`` (an SDK's message, say) will do.
    text = getattr(answer, "text", None)
    if isinstance(text, str):
        return JudgeReply(text)
    raise JudgeError(
        f"judge returned {type(answer).__name__}, expected the answer text (str or JudgeReply)"
    )


#: How much of an unusable reply goes back to the judge in the re-ask.
REASK_ECHO_CHARS: Final = 4000

_T = TypeVar("_T")


@dataclass(slots=True)
class UsageMeter:
    """What judging one grade cost: tokens the endpoint reported, requests, cached replies.

    One meter per grade; ``ask`` counts every request made through it. ``as_extra`` is the
    ``judgeUsage`` extra every judged grade carries (the same keys for every rubric).
    """

    tokens: TokenUsage = field(default_factory=TokenUsage)
    requests: int = 0
    cached_replies: int = 0
    chunks: int = 0

    def ask(self, judge: Judge, prompt: str) -> JudgeReply:
        reply = ask(judge, prompt)
        self.requests += 1
        if reply.usage is not None:
            self.tokens = self.tokens + reply.usage
        return reply

    def as_extra(self) -> dict[str, Any]:
        return {
            "promptTokens": self.tokens.prompt_tokens,
            "completionTokens": self.tokens.completion_tokens,
            "totalTokens": self.tokens.total_tokens,
            "requests": self.requests,
            "cachedReplies": self.cached_replies,
            "cached": self.chunks > 0 and self.cached_replies == self.chunks,
        }


def ask_parsed(
    ask_once: Callable[[str], JudgeReply],
    prompt: str,
    parse: Callable[[str], _T],
    *,
    what: str,
) -> tuple[_T, JudgeReply]:
    """Ask, parse the reply, and on an unusable one ask once more saying what was wrong.

    The one re-ask rule of every judged rubric: ``parse`` raises ValueError (or JudgeError)
    for an unusable reply; a second unusable reply raises JudgeReplyError naming ``what``
    and carrying that reply as ``raw``. Returns the parsed value and the reply it came from.
    """
    reply = ask_once(prompt)
    try:
        return parse(reply.text), reply
    except (ValueError, JudgeError) as problem:
        reask = (
            f"{prompt}\n\nYour previous reply could not be used: {problem}\n"
            f"Your previous reply was:\n{reply.text[:REASK_ECHO_CHARS]}\n\n"
            "Reply again with only the JSON object described above."
        )
    reply = ask_once(reask)
    try:
        return parse(reply.text), reply
    except (ValueError, JudgeError) as exc:
        raise JudgeReplyError(f"{what} is invalid after one re-ask: {exc}", raw=reply.text) from exc


_FENCE: Final = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?```$", re.DOTALL)
#: Every fenced block of a reply, its tag (``json``, or none) and its text.
_FENCED_BLOCK: Final = re.compile(r"```([A-Za-z0-9_-]*)[ \t]*\n(.*?)\n?```", re.DOTALL)
#: How many opening braces of a reply are tried as the start of its object: a reply with
#: thousands of braces must not be parsed thousands of times.
_STARTS_TRIED: Final = 20


def _object_of(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _find_object(text: str) -> tuple[str, dict[str, Any] | None]:
    """The JSON object in a reply, as text and parsed (each candidate is parsed once), or the
    text from its first to its last brace and None when no object parses.

    Markdown code fences and surrounding prose are dropped. Prose may hold braces of its own
    (``Evaluation of {session}:``, a reasoning model's ``<think>`` text, a note after the
    object): the object is the whole reply, else a fenced block (``json`` ones first), else
    the first brace where a JSON object parses.
    """
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    if stripped.startswith("{") and (whole := _object_of(stripped)) is not None:
        return stripped, whole
    blocks: list[tuple[str, str]] = _FENCED_BLOCK.findall(text)
    blocks.sort(key=lambda block: block[0].lower() != "json")
    for _, body in blocks:
        if (inside := _object_of(body.strip())) is not None:
            return body.strip(), inside
    decoder = json.JSONDecoder()
    start = stripped.find("{")
    for _ in range(_STARTS_TRIED):
        if start < 0:
            break
        try:
            value, end = decoder.raw_decode(stripped, start)
        except (ValueError, RecursionError):
            value = None
        if isinstance(value, dict):
            return stripped[start:end], value
        start = stripped.find("{", start + 1)
    if not stripped.startswith("{"):
        start, end = stripped.find("{"), stripped.rfind("}")
        if 0 <= start < end:
            stripped = stripped[start : end + 1]
    return stripped, None


def extract_json_text(text: str) -> str:
    """The JSON object in a reply as text (see :func:`load_json_reply`)."""
    return _find_object(text)[0]


def load_json_reply(text: str) -> Any:
    """The JSON object in a reply, parsed: code fences and prose around it (braces in it
    included) are dropped. When no object parses, the parser's ValueError (JSONDecodeError)
    or RecursionError for the likeliest text, for the caller to say why."""
    found, value = _find_object(text)
    return value if value is not None else json.loads(found)


class JudgeSettings(BaseModel):
    """The ``[judge]`` table of a rubric file: which OpenAI-compatible endpoint to ask, and how."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)

    base_url: str | None = Field(
        None,
        description="Server root (http://host:port) or its /v1 prefix; /v1/chat/completions "
        "is appended as needed.",
    )
    model: str | None = Field(None, min_length=1, description="Model name sent to the endpoint.")
    api_key_env: str | None = Field(
        None,
        min_length=1,
        description="Environment variable holding the API key (no Authorization header if unset).",
    )
    timeout: float = Field(
        60.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Total seconds one HTTP request may take, connecting and reading included.",
    )
    retries: int = Field(
        2,
        ge=0,
        le=MAX_RETRIES,
        description="Extra attempts on connection errors, timeouts, 429 and 5xx.",
    )
    backoff: float = Field(
        1.0,
        ge=0,
        le=MAX_BACKOFF_S,
        description="Seconds before the first retry; doubled for each further one, and never "
        f"more than {MAX_BACKOFF_S:g} s (also when the server asks for longer in Retry-After).",
    )
    max_reply_bytes: int = Field(
        DEFAULT_MAX_REPLY_BYTES,
        ge=MIN_REPLY_BYTES,
        le=MAX_REPLY_BYTES,
        description="Largest response body read from the endpoint; a longer one is an error.",
    )
    max_consecutive_failures: int = Field(
        DEFAULT_MAX_CONSECUTIVE_FAILURES,
        ge=1,
        le=MAX_CONSECUTIVE_FAILURES,
        description="Failed requests in a row (retries exhausted) after which this endpoint "
        "and model are not asked again in this process: the remaining judged tests fail at "
        "once with the last failure.",
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Upper bound on the reply's tokens.")
    seed: int | None = Field(None, description="Sampling seed, for endpoints that honour one.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if not _HTTP_URL.match(value.strip()):
            raise ValueError(f"expected an http:// or https:// URL, got {redact_url(value)!r}")
        return value.strip()

    @field_validator("api_key_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        # A key pasted here instead of its variable's name would be printed in every
        # "is not set" failure, JUnit included: refused without repeating the value.
        if value is not None and not _ENV_NAME.match(value):
            raise ValueError(
                "must name an environment variable (letters, digits and _), not hold the key itself"
            )
        return value


# Bump when the key's recipe changes, so old rows can never be mistaken for new ones.
_KEY_VERSION: Final = 1


def cache_key(
    *,
    identity: Mapping[str, Any],
    prompt: str,
    rubric_source: bytes,
    rubric_version: str,
) -> str:
    """sha256 over everything that can change a reply.

    ``identity`` is the judge's endpoint, model and sampling parameters; ``rubric_source``
    the rubric file's bytes (so editing the file invalidates its cached replies even when the
    prompt would not change).
    """
    material = json.dumps(
        {
            "v": _KEY_VERSION,
            "judge": identity,
            "prompt": prompt,
            "rubric": hashlib.sha256(rubric_source).hexdigest(),
            "rubricVersion": rubric_version,
        },
        sort_keys=True,
        separators=(",", ":"),
        default=str,
    )
    return hashlib.sha256(material.encode()).hexdigest()


class ReplyCache(Protocol):
    """Stored judge replies keyed by :func:`cache_key` (``judges.cache.JudgeCache``)."""

    @property
    def mode(self) -> JudgeCacheMode:
        """``on`` reads and writes, ``refresh`` only writes, ``off`` does neither."""
        ...

    def get(self, key: str) -> JudgeReply | None:
        """The stored reply, or None (also when the cache cannot be read)."""
        ...

    def put(self, key: str, reply: JudgeReply, *, endpoint: str = "", model: str = "") -> None:
        """Store a reply; a cache that cannot be written only warns."""
        ...


class JudgeConnector(Protocol):
    """Builds the I/O a judged rubric needs from its settings: the judge and the reply cache.

    The rubrics are pure; the layers above them (grading one test, the CLI) pass
    ``pytest_cleo_grade.judges.connect.DefaultConnector()``, which talks HTTP and SQLite.
    """

    def judge(self, settings: JudgeSettings) -> Judge:
        """The judge the ``[judge]`` settings describe; RubricError when they are incomplete."""
        ...

    def cache(self, path: Path, mode: JudgeCacheMode) -> ReplyCache:
        """The reply cache kept in the SQLite file ``path``."""
        ...


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
