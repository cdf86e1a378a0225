"""LLM judges: the Judge protocol, a callable judge and an OpenAI-compatible HTTP judge."""

from __future__ import annotations

import http.client
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pytest_cleo_grade.errors import JudgeError, RubricError

__all__ = [
    "CachableJudge",
    "CallableJudge",
    "Judge",
    "JudgeReply",
    "JudgeReplyError",
    "JudgeSettings",
    "OpenAICompatibleJudge",
    "TokenUsage",
    "ask",
    "build_judge",
    "chat_completions_url",
    "extract_json_text",
]

#: HTTP statuses worth another attempt: rate limiting and server-side failures.
_RETRY_STATUSES: Final = frozenset({429}) | frozenset(range(500, 600))
_ERROR_BODY_CHARS: Final = 200
_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})


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
    raise JudgeError(f"judge returned {type(answer).__name__}, expected str or JudgeReply")


_FENCE: Final = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n?(.*?)\n?```$", re.DOTALL)


def extract_json_text(text: str) -> str:
    """The JSON object in a reply: Markdown code fences and surrounding prose are dropped."""
    stripped = text.strip()
    fenced = _FENCE.match(stripped)
    if fenced:
        stripped = fenced.group(1).strip()
    if not stripped.startswith("{"):
        # Models sometimes introduce the object with a sentence; keep the outermost braces.
        start, end = stripped.find("{"), stripped.rfind("}")
        if 0 <= start < end:
            stripped = stripped[start : end + 1]
    return stripped


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
    timeout: float = Field(60.0, gt=0, description="Seconds to wait for one HTTP request.")
    retries: int = Field(
        2, ge=0, description="Extra attempts on connection errors, timeouts, 429 and 5xx."
    )
    backoff: float = Field(
        1.0, ge=0, description="Seconds before the first retry; doubled for each further one."
    )
    temperature: float = Field(0.0, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, gt=0, description="Upper bound on the reply's tokens.")
    seed: int | None = Field(None, description="Sampling seed, for endpoints that honour one.")

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urllib.parse.urlsplit(value.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value.strip()


def chat_completions_url(base_url: str) -> str:
    """The chat-completions endpoint of ``base_url``.

    ``http://h:8000`` and ``http://h:8000/`` give ``http://h:8000/v1/chat/completions``; a base
    URL already ending in ``/v1`` (OpenAI's documented form) gets ``/chat/completions``; a full
    ``.../chat/completions`` URL is used as is.
    """
    base = base_url.rstrip("/")
    if base.endswith("/chat/completions"):
        return base
    if base.endswith("/v1"):
        return f"{base}/chat/completions"
    return f"{base}/v1/chat/completions"


class OpenAICompatibleJudge:
    """A judge behind an OpenAI-compatible ``POST /v1/chat/completions`` endpoint.

    The API key is read from the environment variable ``api_key_env`` at each request (so a
    missing key is reported when it is needed, and keys never land in a cache or a log).
    Connection errors, timeouts, HTTP 429 and 5xx are retried ``retries`` times, waiting
    ``backoff``, then twice as long each time; any other 4xx fails at once.
    """

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 1.0,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
        environ: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = chat_completions_url(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.sampling: dict[str, Any] = {"temperature": temperature}
        if max_tokens is not None:
            self.sampling["max_tokens"] = max_tokens
        if seed is not None:
            self.sampling["seed"] = seed
        self._environ = os.environ if environ is None else environ
        self._sleep = sleep
        # A proxy cannot reach this machine's loopback address: never send local judges
        # (a model served on localhost, the tests' fake server) through HTTP(S)_PROXY.
        host = urllib.parse.urlsplit(self.url).hostname or ""
        handlers = [urllib.request.ProxyHandler({})] if host in _LOOPBACK_HOSTS else []
        self._opener = urllib.request.build_opener(*handlers)

    @classmethod
    def from_settings(
        cls, settings: JudgeSettings, *, sleep: Callable[[float], None] = time.sleep
    ) -> OpenAICompatibleJudge:
        """Build the judge a rubric file's ``[judge]`` table describes."""
        if not settings.base_url or not settings.model:
            missing = "judge.base_url" if not settings.base_url else "judge.model"
            raise RubricError(
                f"{missing} is not set: configure the judge endpoint in the rubric file "
                "or pass a judge"
            )
        return cls(
            base_url=settings.base_url,
            model=settings.model,
            api_key_env=settings.api_key_env,
            timeout=settings.timeout,
            retries=settings.retries,
            backoff=settings.backoff,
            temperature=settings.temperature,
            max_tokens=settings.max_tokens,
            seed=settings.seed,
            sleep=sleep,
        )

    def cache_identity(self) -> Mapping[str, Any]:
        """Endpoint, model and sampling parameters: what besides the prompt shapes a reply."""
        return {"endpoint": self.url, "model": self.model, "sampling": self.sampling}

    def __call__(self, prompt: str, /) -> JudgeReply:
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": prompt}],
                **self.sampling,
            }
        ).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key_env is not None:
            key = self._environ.get(self.api_key_env)
            if not key:
                raise JudgeError(
                    f"judge: environment variable {self.api_key_env} (judge.api_key_env) is not set"
                )
            headers["Authorization"] = f"Bearer {key}"
        payload = self._post(body, headers)
        return self._parse_response(payload)

    def _post(self, body: bytes, headers: Mapping[str, str]) -> bytes:
        attempts = self.retries + 1
        for attempt in range(attempts):
            request = urllib.request.Request(self.url, data=body, headers=dict(headers))
            try:
                with self._opener.open(request, timeout=self.timeout) as response:
                    data: bytes = response.read()
                    return data
            except urllib.error.HTTPError as exc:
                detail = _error_body(exc)
                problem = f"HTTP {exc.code} {exc.reason}: {' '.join(detail.split())}".rstrip(": ")
                if exc.code not in _RETRY_STATUSES:
                    raise JudgeError(f"judge POST {self.url}: {problem}") from exc
            except (urllib.error.URLError, TimeoutError, http.client.HTTPException, OSError) as exc:
                problem = _describe_connection_error(exc, self.timeout)
            if attempt + 1 < attempts:
                self._sleep(self.backoff * 2**attempt)
        raise JudgeError(
            f"judge POST {self.url} failed after {attempts} attempt"
            f"{'s' if attempts > 1 else ''}: {problem}"
        )

    def _parse_response(self, payload: bytes) -> JudgeReply:
        try:
            data = json.loads(payload)
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            snippet = " ".join(payload[:_ERROR_BODY_CHARS].decode("utf-8", "replace").split())
            raise JudgeError(
                f"judge POST {self.url}: not a chat-completions response: {snippet!r}"
            ) from exc
        if not isinstance(content, str):
            raise JudgeError(f"judge POST {self.url}: choices[0].message.content is not text")
        usage = data.get("usage") if isinstance(data, dict) else None
        return JudgeReply(content, _usage_from(usage))


def _error_body(exc: urllib.error.HTTPError) -> str:
    """The start of an error response's body; what was cut off mid-body is left out."""
    try:
        body = exc.read()
    except (http.client.HTTPException, OSError) as cut:
        body = getattr(cut, "partial", b"")
    return body[:_ERROR_BODY_CHARS].decode("utf-8", "replace")


def _usage_from(usage: object) -> TokenUsage | None:
    if not isinstance(usage, dict):
        return None

    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    prompt, completion = count("prompt_tokens"), count("completion_tokens")
    return TokenUsage(prompt, completion, count("total_tokens") or prompt + completion)


def _describe_connection_error(exc: BaseException, timeout: float) -> str:
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, TimeoutError):
        return f"timed out after {timeout:g} s"
    return f"{type(reason).__name__}: {reason}" if str(reason) else type(reason).__name__


def build_judge(settings: JudgeSettings) -> OpenAICompatibleJudge:
    """The HTTP judge of a ``[judge]`` table (RubricError when base_url or model is missing)."""
    return OpenAICompatibleJudge.from_settings(settings)
