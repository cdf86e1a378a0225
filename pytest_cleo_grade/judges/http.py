"""The OpenAI-compatible HTTP judge: POST /v1/chat/completions with retries and deadlines.

The only module that talks HTTP to a judge; rubrics see it through the Judge protocol. It
speaks http.client directly rather than urllib's opener so that it decides what crosses the
wire: redirects are followed only within the configured host (urllib re-sends the
Authorization header to any 302 target), each request has a total deadline (urllib's timeout
applies to each socket read), and no reply is read past its size cap.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import email.utils
import http.client
import json
import os
import socket
import ssl
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from pytest_cleo_grade.core.errors import JudgeError, RubricError
from pytest_cleo_grade.judges._breaker import RUN_BREAKERS, CircuitBreakers
from pytest_cleo_grade.judges._redact import mask, redact_url, url_secrets
from pytest_cleo_grade.judges.protocol import (
    DEFAULT_MAX_CONSECUTIVE_FAILURES,
    DEFAULT_MAX_REPLY_BYTES,
    MAX_BACKOFF_S,
    JudgeReply,
    JudgeSettings,
    TokenUsage,
)

__all__ = ["OpenAICompatibleJudge", "build_judge", "chat_completions_url", "judge_url_arg"]

#: HTTP statuses worth another attempt: rate limiting and server-side failures.
_RETRY_STATUSES: Final = frozenset({429}) | frozenset(range(500, 600))
_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS: Final = 5
_ERROR_BODY_CHARS: Final = 200
#: Error bodies are only quoted (their first characters): read no more than this of them.
_ERROR_BODY_BYTES: Final = 64 * 1024
_READ_CHUNK: Final = 64 * 1024
_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


def chat_completions_url(base_url: str) -> str:
    """The chat-completions endpoint of ``base_url``.

    ``http://h:8000`` and ``http://h:8000/`` give ``http://h:8000/v1/chat/completions``; a base
    URL already ending in ``/v1`` (OpenAI's documented form) gets ``/chat/completions``; a full
    ``.../chat/completions`` URL is used as is. A query string (``?api-version=...``) stays at
    the end.
    """
    base, sep, query = base_url.partition("?")
    base = base.rstrip("/")
    if base.endswith("/chat/completions"):
        path = base
    elif base.endswith("/v1"):
        path = f"{base}/chat/completions"
    else:
        path = f"{base}/v1/chat/completions"
    return f"{path}{sep}{query}"


@dataclass(frozen=True, slots=True)
class _Target:
    """Where one request goes: scheme, host, port and the path with its query."""

    scheme: str
    host: str
    port: int
    path: str

    @classmethod
    def parse(cls, url: str) -> _Target:
        split = urllib.parse.urlsplit(url)
        scheme = split.scheme.lower()
        if scheme not in _DEFAULT_PORTS or not split.hostname:
            raise ValueError(f"not an http(s) URL: {redact_url(url)}")
        port = split.port or _DEFAULT_PORTS[scheme]  # ValueError on a non-numeric port
        path = (split.path or "/") + (f"?{split.query}" if split.query else "")
        return cls(scheme, split.hostname.lower(), port, path)

    @property
    def origin(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == _DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def absolute(self) -> str:
        # Built from the parts, never from the configured URL: its userinfo must not become a
        # Host header on the way through a proxy.
        return f"{self.scheme}://{self.netloc}{self.path}"


class _Retryable(Exception):
    """An attempt failed in a way worth another: ``problem`` says how."""

    def __init__(self, problem: str, retry_after: float | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class _Response:
    status: int
    reason: str
    headers: http.client.HTTPMessage
    body: bytes


class OpenAICompatibleJudge:
    """A judge behind an OpenAI-compatible ``POST /v1/chat/completions`` endpoint.

    The API key is read from the environment variable ``api_key_env`` at each request (so a
    missing key is reported when it is needed, and keys never land in a cache or a log); a
    user:password in the URL is sent as Basic credentials instead when no variable is named.
    Credentials and prompts go only to the configured scheme, host and port: a redirect
    elsewhere is an error. Each attempt must finish within ``timeout`` seconds in total, and
    a reply body over ``max_reply_bytes`` is an error. Connection errors, timeouts, cut-off
    replies, HTTP 429 and 5xx are retried ``retries`` times, waiting ``backoff``, then twice as
    long each time (longer when the server's Retry-After asks for it), never more than
    ``MAX_BACKOFF_S``; any other 4xx fails at once. After ``max_consecutive_failures`` failed
    requests in a row for the same endpoint and model, the process stops asking it.
    Everything printed names the URL with its credentials redacted, and an error body that
    echoes a credential has it replaced by ``***``.
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
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        max_consecutive_failures: int = DEFAULT_MAX_CONSECUTIVE_FAILURES,
        environ: Mapping[str, str] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        breakers: CircuitBreakers = RUN_BREAKERS,
    ) -> None:
        self.url = chat_completions_url(base_url)
        #: The URL as it may be shown: userinfo and credential query values redacted.
        self.display_url = redact_url(self.url)
        try:
            self._target = _Target.parse(self.url)
        except ValueError as exc:
            raise RubricError(f"judge.base_url: {mask(str(exc), url_secrets(self.url))}") from exc
        self.model = model
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_reply_bytes = max_reply_bytes
        self.max_consecutive_failures = max_consecutive_failures
        self.sampling: dict[str, Any] = {"temperature": temperature}
        if max_tokens is not None:
            self.sampling["max_tokens"] = max_tokens
        if seed is not None:
            self.sampling["seed"] = seed
        self._environ = os.environ if environ is None else environ
        self._sleep = sleep
        self._breakers = breakers

    @classmethod
    def from_settings(
        cls, settings: JudgeSettings, *, sleep: Callable[[float], None] = time.sleep
    ) -> OpenAICompatibleJudge:
        """Build the judge a rubric file's ``[judge]`` table describes."""
        if not settings.base_url or not settings.model:
            # Said for every way in: this layer does not know whether pytest, the CLI or a
            # Python caller built the settings.
            key, option = ("base_url", "url") if not settings.base_url else ("model", "model")
            raise RubricError(
                f"judge.{key} is not set: set {key} in the rubric file's [judge] table, or "
                f"pass --judge-{option} (cleo-grade) or --cleo-grade-judge-{option} (pytest)"
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
            max_reply_bytes=settings.max_reply_bytes,
            max_consecutive_failures=settings.max_consecutive_failures,
            sleep=sleep,
        )

    def cache_identity(self) -> Mapping[str, Any]:
        """Endpoint (redacted: a key does not shape replies), model and sampling parameters."""
        return {"endpoint": self.display_url, "model": self.model, "sampling": self.sampling}

    def __call__(self, prompt: str, /) -> JudgeReply:
        body = json.dumps(
            {
                "model": self.model,
                "messages": [{"role": "user", "content": prompt}],
                **self.sampling,
            }
        ).encode()
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        secrets = url_secrets(self.url)
        if self.api_key_env is not None:
            key = self._environ.get(self.api_key_env)
            if not key:
                raise JudgeError(
                    f"judge: environment variable {self.api_key_env} (judge.api_key_env) is not set"
                )
            headers["Authorization"] = f"Bearer {key}"
            secrets.append(key)
        else:
            basic = _basic_credentials(self.url)
            if basic is not None:
                headers["Authorization"] = f"Basic {basic}"
                secrets.append(basic)
        breaker_key = (self.display_url, self.model)
        self._breakers.check(breaker_key, self.max_consecutive_failures)
        try:
            reply = self._parse_response(self._post(body, headers, secrets), secrets)
        except JudgeError as exc:
            self._breakers.failed(breaker_key, str(exc))
            raise
        self._breakers.succeeded(breaker_key)
        return reply

    # ----------------------------------------------------------------------- one request

    def _post(self, body: bytes, headers: Mapping[str, str], secrets: list[str]) -> bytes:
        attempts = self.retries + 1
        problem = ""
        for attempt in range(attempts):
            wait = self.backoff * 2**attempt
            try:
                return self._exchange(body, headers, secrets)
            except _Retryable as retry:
                problem = retry.problem
                if retry.retry_after is not None:
                    wait = max(wait, retry.retry_after)
            if attempt + 1 < attempts:
                self._sleep(min(wait, MAX_BACKOFF_S))
        raise JudgeError(
            f"judge POST {self.display_url} failed after {attempts} attempt"
            f"{'s' if attempts > 1 else ''}: {problem}"
        )

    def _exchange(self, body: bytes, headers: Mapping[str, str], secrets: list[str]) -> bytes:
        """One attempt, following redirects within the configured host."""
        target = self._target
        for _ in range(_MAX_REDIRECTS + 1):
            response = self._request(target, body, headers, secrets)
            status = response.status
            if 200 <= status < 300:
                return response.body
            if status in _REDIRECT_STATUSES:
                target = self._redirect_target(target, response)
                continue
            detail = " ".join(_quote_body(response.body, secrets).split())
            problem = f"HTTP {status} {response.reason}: {detail}".rstrip(": ")
            if status in _RETRY_STATUSES:
                raise _Retryable(problem, _retry_after(response.headers))
            raise JudgeError(f"judge POST {self.display_url}: {problem}")
        raise JudgeError(f"judge POST {self.display_url}: more than {_MAX_REDIRECTS} redirects")

    def _redirect_target(self, current: _Target, response: _Response) -> _Target:
        location = response.headers.get("Location")
        if not location:
            raise JudgeError(
                f"judge POST {self.display_url}: HTTP {response.status} without a Location"
            )
        url = urllib.parse.urljoin(current.absolute, location.strip())
        try:
            target = _Target.parse(url)
        except ValueError as exc:
            raise JudgeError(f"judge POST {self.display_url}: redirected to {exc}") from exc
        if target.origin != self._target.origin:
            # Neither the credentials nor the prompt (the agent's log) leave the configured
            # host: the user decides where they go, not the server.
            raise JudgeError(
                f"judge POST {self.display_url}: redirected (HTTP {response.status}) to "
                f"another host, {target.scheme}://{target.netloc}; the request and its "
                "credentials are sent only to the configured host: set judge.base_url to the "
                "endpoint itself"
            )
        return target

    def _request(
        self, target: _Target, body: bytes, headers: Mapping[str, str], secrets: list[str]
    ) -> _Response:
        """POST once within the total deadline; _Retryable on transport trouble."""
        connection, path, proxy_headers = self._connection(target)
        expired = threading.Event()
        # The connection's sockets, kept here: http.client lets go of its socket once a reply
        # says the connection closes after it (HTTP/1.0, Connection: close), and the reply
        # then reads from it with no connection holding it.
        opened: list[socket.socket] = []
        connect = connection.connect

        def connect_and_keep() -> None:
            connect()
            if connection.sock is not None:
                opened.append(connection.sock)

        connection.connect = connect_and_keep  # type: ignore[method-assign]

        def expire() -> None:
            # A socket timeout bounds each read, not the request: a server sending a byte at a
            # time would never trip it. Shutting the socket down ends any blocked read at once.
            expired.set()
            for sock in {id(s): s for s in (connection.sock, *opened) if s is not None}.values():
                with contextlib.suppress(OSError):  # already closed
                    sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(self.timeout, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.request("POST", path, body=body, headers={**headers, **proxy_headers})
            response = connection.getresponse()
            if 200 <= response.status < 300:
                data = self._read_reply(response, expired)
            else:
                data = _read_error_body(response, expired)
            return _Response(response.status, response.reason, response.headers, data)
        except (TimeoutError, OSError, http.client.HTTPException, ValueError) as exc:
            if expired.is_set() or isinstance(exc, TimeoutError):
                raise _Retryable(f"timed out after {self.timeout:g} s (total deadline)") from exc
            raise _Retryable(mask(_describe(exc), secrets)) from exc
        finally:
            watchdog.cancel()
            connection.close()

    def _read_reply(self, response: http.client.HTTPResponse, expired: threading.Event) -> bytes:
        declared = response.getheader("Content-Length")
        if declared and declared.strip().isdigit() and int(declared) > self.max_reply_bytes:
            raise JudgeError(self._too_large())
        chunks: list[bytes] = []
        size = 0
        while chunk := response.read(_READ_CHUNK):
            if expired.is_set():
                raise TimeoutError
            size += len(chunk)
            if size > self.max_reply_bytes:
                raise JudgeError(self._too_large())
            chunks.append(chunk)
        if expired.is_set():
            raise TimeoutError
        if declared and declared.strip().isdigit() and size < int(declared):
            # http.client ends a sized read at EOF without complaint: a cut-off reply.
            raise http.client.IncompleteRead(b"".join(chunks), int(declared) - size)
        return b"".join(chunks)

    def _too_large(self) -> str:
        return (
            f"judge POST {self.display_url}: reply larger than {self.max_reply_bytes} bytes "
            "(judge.max_reply_bytes)"
        )

    def _connection(
        self, target: _Target
    ) -> tuple[http.client.HTTPConnection, str, dict[str, str]]:
        """A connection to ``target`` (through the environment's proxy, except for loopback
        hosts, which a proxy cannot reach), the request path and any proxy headers to send."""
        proxy = None
        if target.host not in _LOOPBACK_HOSTS and not urllib.request.proxy_bypass(target.host):
            proxy = urllib.request.getproxies().get(target.scheme)
        context = ssl.create_default_context() if target.scheme == "https" else None
        if proxy is None:
            if context is not None:
                direct: http.client.HTTPConnection = http.client.HTTPSConnection(
                    target.host, target.port, timeout=self.timeout, context=context
                )
            else:
                direct = http.client.HTTPConnection(target.host, target.port, timeout=self.timeout)
            return direct, target.path, {}
        via = _Target.parse(proxy if "://" in proxy else f"http://{proxy}")
        proxy_headers = {}
        proxy_basic = _basic_credentials(proxy)
        if proxy_basic is not None:
            proxy_headers["Proxy-Authorization"] = f"Basic {proxy_basic}"
        if context is not None:
            tunnel = http.client.HTTPSConnection(
                via.host, via.port, timeout=self.timeout, context=context
            )
            tunnel.set_tunnel(target.host, target.port, headers=proxy_headers)
            return tunnel, target.path, {}
        return (
            http.client.HTTPConnection(via.host, via.port, timeout=self.timeout),
            target.absolute,
            proxy_headers,
        )

    def _parse_response(self, payload: bytes, secrets: list[str]) -> JudgeReply:
        try:
            data = json.loads(payload)
            content = data["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError, RecursionError) as exc:
            snippet = " ".join(_quote_body(payload, secrets).split())
            raise JudgeError(
                f"judge POST {self.display_url}: not a chat-completions response: {snippet!r}"
            ) from exc
        if not isinstance(content, str):
            raise JudgeError(
                f"judge POST {self.display_url}: choices[0].message.content is not text"
            )
        usage = data.get("usage") if isinstance(data, dict) else None
        # A reply that echoes the key would carry it into the history and the failure text.
        return JudgeReply(mask(content, secrets), _usage_from(usage))


def _basic_credentials(url: str) -> str | None:
    """base64 ``user:password`` of the URL's userinfo, or None without one."""
    split = urllib.parse.urlsplit(url)
    if split.username is None:
        return None
    user = urllib.parse.unquote(split.username)
    password = urllib.parse.unquote(split.password or "")
    return base64.b64encode(f"{user}:{password}".encode()).decode("ascii")


def _read_error_body(response: http.client.HTTPResponse, expired: threading.Event) -> bytes:
    """The start of an error response's body; what was cut off mid-body is left out."""
    try:
        data = response.read(_ERROR_BODY_BYTES)
    except http.client.IncompleteRead as cut:
        data = cut.partial
    except (http.client.HTTPException, OSError):
        data = b""
    if expired.is_set():
        raise TimeoutError
    return data


def _quote_body(body: bytes, secrets: list[str]) -> str:
    """The first characters of a body, with any credential it echoes masked."""
    # Mask before cutting, so that a key straddling the cut cannot leave a readable prefix.
    text = mask(body[:_ERROR_BODY_BYTES].decode("utf-8", "replace"), secrets)
    return text[:_ERROR_BODY_CHARS]


def _retry_after(headers: http.client.HTTPMessage) -> float | None:
    """Seconds the server asks to wait (Retry-After: seconds or an HTTP date), or None."""
    value = headers.get("Retry-After")
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():  # isdigit() alone takes "²", which float() refuses
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


#: More tokens than any request spends: a count above it is the endpoint's error, not counted.
_MAX_TOKENS: Final = 10**12


def _usage_from(usage: object) -> TokenUsage | None:
    if not isinstance(usage, dict):
        return None

    def count(key: str) -> int:
        # The endpoint's word, so bounded: a count of thousands of digits could not even be
        # written to the history (its sum exceeds Python's int-to-text limit).
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_TOKENS:
            return value
        return 0

    prompt, completion = count("prompt_tokens"), count("completion_tokens")
    return TokenUsage(prompt, completion, count("total_tokens") or prompt + completion)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def build_judge(settings: JudgeSettings) -> OpenAICompatibleJudge:
    """The HTTP judge of a ``[judge]`` table (RubricError when base_url or model is missing)."""
    return OpenAICompatibleJudge.from_settings(settings)


def judge_url_arg(value: str) -> str:
    """A judge URL option's value (``--cleo-grade-judge-url``, ``--judge-url``): an http or
    https URL with a host and a valid port, else ArgumentTypeError naming it, redacted (it
    may carry a key: ``?api-key=``, ``user:pass@``, never echoed into a CI log)."""
    url = value.strip()
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError when out of 0..65535
        usable = parts.scheme in ("http", "https") and bool(parts.netloc)
    except ValueError:  # "http://[::1": an unclosed IPv6 address
        usable = False
    if usable:
        return url
    raise argparse.ArgumentTypeError(
        f"invalid judge URL {redact_url(value)!r}: expected an http:// or https:// URL such as "
        "http://127.0.0.1:8000"
    )
