"""A production session from Langfuse, as calls and a conversation (``cleo-grade import
--from langfuse --session-id ID``): the design's session fetcher.

Through Langfuse's public API, read-only: ``GET /api/public/traces?sessionId=ID`` (every
page) and, for each trace, ``GET /api/public/observations?traceId=T`` (every page). A tool
observation (type ``TOOL``, or a span named ``execute_tool NAME``) becomes an entry through
the shared mapping, ``level = ERROR`` a failure with its status message; a ``GENERATION``
becomes a model call (its model and usage) and its input and output messages; a trace's own
input and output fill in the user's request and the final answer when no generation carries
them. Each entry keeps its trace id, so the grade's scores go back on that trace.

HTTP as the judge does it: Basic auth with the project's keys sent only to the configured
host (a redirect to another host is refused), a total deadline for the whole fetch (a
server trickling its answer cannot hold it), a size cap on every reply, and no proxy for
loopback hosts. Errors are one line naming the request, never the keys.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from pytest_cleo_grade.capture.mapping import Call, Failure, build_entry, envelope_failure
from pytest_cleo_grade.core._conversation import Conversation, Message, ModelCall, bounded
from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.core.models import AuditEntry

__all__ = ["DEADLINE", "FetchedSession", "LangfuseFetchError", "fetch_session"]

SOURCE: Final = "langfuse"
#: Seconds the whole fetch may take (every page of every trace).
DEADLINE: Final = 120.0
#: The largest reply read, in bytes.
MAX_REPLY_BYTES: Final = 50_000_000
_PAGE_LIMIT: Final = 100
#: The most pages read of one listing: a server that never runs out of pages ends here.
_MAX_PAGES: Final = 1000
_MAX_REDIRECTS: Final = 5
_LOOPBACK: Final = frozenset({"127.0.0.1", "localhost", "::1"})


class LangfuseFetchError(CleoGradeError):
    """The session could not be fetched; the message names the request (never the keys)."""


@dataclass
class FetchedSession:
    """What a Langfuse session holds: its calls (in session order) and its conversation."""

    session_id: str
    entries: list[AuditEntry] = field(default_factory=list)
    conversation: Conversation = field(default_factory=Conversation)
    traces: list[str] = field(default_factory=list)


class _Client:
    def __init__(self, base_url: str, public_key: str, secret_key: str, deadline: float) -> None:
        parts = urllib.parse.urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LangfuseFetchError(f"langfuse: {base_url!r} is not an http(s) URL")
        self.scheme, self.host = parts.scheme, parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        token = base64.b64encode(f"{public_key}:{secret_key}".encode()).decode()
        self.auth = f"Basic {token}"
        self.secrets = [s for s in (public_key, secret_key, token) if s]
        self.ends = time.monotonic() + deadline
        self.deadline = deadline

    def _mask(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def get(self, path: str, query: Mapping[str, Any]) -> Any:
        target = f"{self.prefix}{path}?{urllib.parse.urlencode(query)}"
        shown = f"GET {self.scheme}://{self.host}:{self.port}{path}"
        for _ in range(_MAX_REDIRECTS + 1):
            status, headers, body = self._once(target, shown)
            if 200 <= status < 300:
                try:
                    return json.loads(body)
                except ValueError as exc:
                    raise LangfuseFetchError(f"langfuse: {shown}: not JSON ({exc})") from None
            if status in (301, 302, 303, 307, 308):
                location = urllib.parse.urlsplit(
                    urllib.parse.urljoin(
                        f"{self.scheme}://{self.host}:{self.port}{target}",
                        headers.get("Location", ""),
                    )
                )
                port = location.port or (443 if location.scheme == "https" else 80)
                if (location.scheme, location.hostname, port) != (
                    self.scheme,
                    self.host,
                    self.port,
                ):
                    raise LangfuseFetchError(
                        f"langfuse: {shown}: redirected (HTTP {status}) to another host; the "
                        "keys are sent only to the configured host: set LANGFUSE_HOST to it"
                    )
                target = urllib.parse.urlunsplit(("", "", location.path, location.query, ""))
                continue
            detail = " ".join(self._mask(body[:300].decode("utf-8", "replace")).split())
            raise LangfuseFetchError(f"langfuse: {shown}: HTTP {status} {detail}".rstrip())
        raise LangfuseFetchError(f"langfuse: {shown}: more than {_MAX_REDIRECTS} redirects")

    def _once(self, target: str, shown: str) -> tuple[int, Mapping[str, str], bytes]:
        remaining = self.ends - time.monotonic()
        if remaining <= 0:
            raise LangfuseFetchError(f"langfuse: {shown}: past the {self.deadline:g} s deadline")
        if self.scheme == "https":
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, timeout=remaining, context=ssl.create_default_context()
            )
        else:
            connection = http.client.HTTPConnection(self.host, self.port, timeout=remaining)
        expired = threading.Event()

        def expire() -> None:
            # A socket timeout bounds each read, not the request: shut the socket at the
            # deadline so a server sending a byte at a time cannot hold the fetch.
            expired.set()
            if connection.sock is not None:
                with contextlib.suppress(OSError):
                    connection.sock.shutdown(socket.SHUT_RDWR)

        watchdog = threading.Timer(remaining, expire)
        watchdog.daemon = True
        watchdog.start()
        try:
            connection.request(
                "GET", target, headers={"Authorization": self.auth, "Accept": "application/json"}
            )
            response = connection.getresponse()
            chunks, size = [], 0
            while chunk := response.read(65536):
                size += len(chunk)
                if size > MAX_REPLY_BYTES:
                    raise LangfuseFetchError(
                        f"langfuse: {shown}: reply larger than {MAX_REPLY_BYTES} bytes"
                    )
                chunks.append(chunk)
            if expired.is_set():
                raise TimeoutError
            return response.status, dict(response.headers.items()), b"".join(chunks)
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            if expired.is_set() or isinstance(exc, TimeoutError):
                raise LangfuseFetchError(
                    f"langfuse: {shown}: timed out (the {self.deadline:g} s deadline)"
                ) from None
            raise LangfuseFetchError(f"langfuse: {shown}: {self._mask(str(exc))}") from None
        finally:
            watchdog.cancel()
            connection.close()

    def pages(self, path: str, query: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
        """Every item of a paginated listing (``data`` and ``meta.totalPages``)."""
        page = 1
        while page <= _MAX_PAGES:
            answer = self.get(path, {**query, "page": page, "limit": _PAGE_LIMIT})
            data = answer.get("data") if isinstance(answer, Mapping) else None
            if not isinstance(data, list):
                raise LangfuseFetchError(f"langfuse: GET {path}: no data list in the reply")
            yield from (item for item in data if isinstance(item, Mapping))
            meta = answer.get("meta") if isinstance(answer.get("meta"), Mapping) else {}
            total = meta.get("totalPages")
            if not data or not isinstance(total, int) or page >= total:
                return
            page += 1
        raise LangfuseFetchError(f"langfuse: GET {path}: more than {_MAX_PAGES} pages")


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp if stamp.tzinfo is not None else None


def _text(value: Any) -> str | None:
    from pytest_cleo_grade.capture._conversation import text_of

    if isinstance(value, Mapping):
        return text_of(value.get("content"))
    return text_of(value)


def _messages(value: Any, default_role: str) -> list[tuple[str, str]]:
    """(role, text) pairs of a generation's input or output: chat messages, one message, a
    ``{"messages": [...]}`` object or a plain string."""
    if isinstance(value, Mapping) and isinstance(value.get("messages"), list):
        value = value["messages"]
    if isinstance(value, str):
        return [(default_role, value)] if value else []
    items = value if isinstance(value, list) else [value] if isinstance(value, Mapping) else []
    found = []
    for item in items:
        if not isinstance(item, Mapping):
            continue
        role, text = item.get("role", default_role), _text(item)
        if isinstance(role, str) and text:
            found.append((role, text))
    return found


def _tool_name(observation: Mapping[str, Any]) -> str | None:
    name = observation.get("name")
    if not isinstance(name, str) or not name:
        return None
    if observation.get("type") == "TOOL":
        return name.removeprefix("execute_tool ").strip() or name
    if observation.get("type") == "SPAN" and name.startswith("execute_tool "):
        return name.removeprefix("execute_tool ").strip() or None
    return None


def _count(usage: Any, *keys: str) -> int | None:
    if not isinstance(usage, Mapping):
        return None
    for key in keys:
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def fetch_session(
    session_id: str,
    *,
    public_key: str,
    secret_key: str,
    base_url: str,
    deadline: float = DEADLINE,
) -> FetchedSession:
    """Fetch Langfuse session ``session_id``: its calls, conversation and trace ids."""
    client = _Client(base_url, public_key, secret_key, deadline)
    fetched = FetchedSession(session_id)
    messages: list[Message] = []
    calls: list[ModelCall] = []
    said: set[tuple[str, str]] = set()
    output: str | None = None
    traces = sorted(
        client.pages("/api/public/traces", {"sessionId": session_id}),
        key=lambda t: str(t.get("timestamp", "")),
    )
    for trace in traces:
        trace_id = str(trace.get("id", ""))
        fetched.traces.append(trace_id)
        observations = sorted(
            client.pages("/api/public/observations", {"traceId": trace_id}),
            key=lambda o: str(o.get("startTime", "")),
        )
        before = len(messages)
        for observation in observations:
            started = _time(observation.get("startTime"))
            ended = _time(observation.get("endTime"))
            if started is None:
                continue
            tool = _tool_name(observation)
            if tool is not None:
                fetched.entries.append(_entry(observation, tool, started, ended, session_id))
            elif observation.get("type") == "GENERATION":
                call_id = str(observation.get("id") or f"{trace_id}-{len(calls)}")[:200]
                usage = observation.get("usageDetails") or observation.get("usage")
                model = observation.get("model")
                calls.append(
                    ModelCall(
                        id=call_id,
                        timestamp=started,
                        model=model[:200] if isinstance(model, str) and model else None,
                        input_tokens=_count(usage, "input", "promptTokens", "input_tokens"),
                        output_tokens=_count(usage, "output", "completionTokens", "output_tokens"),
                        cached_tokens=_count(
                            usage, "cache_read_input_tokens", "input_cached_tokens"
                        ),
                        duration=max(0.0, (ended - started).total_seconds() * 1000) if ended else 0,
                    )
                )
                for role, text in _messages(observation.get("input"), "user"):
                    if (role, text) not in said:
                        said.add((role, text))
                        messages.append(_message(role, text, started, None))
                for role, text in _messages(observation.get("output"), "assistant"):
                    said.add((role, text))
                    messages.append(_message(role, text, ended or started, call_id))
        stamp = _time(trace.get("timestamp"))
        request = _text(trace.get("input"))
        if stamp is not None and request and ("user", request) not in said:
            said.add(("user", request))
            messages.insert(before, _message("user", request, stamp, None))
        answer = _text(trace.get("output"))
        if answer:
            output = answer
    fetched.entries.sort(key=lambda e: e.timestamp)
    fetched.conversation = bounded([m for m in messages if m is not None], calls, output)
    return fetched


def _message(role: str, text: str, at: datetime, call: str | None) -> Message:
    from pytest_cleo_grade.core._conversation import normalise_role

    try:
        chosen = normalise_role(role)
    except ValueError:
        chosen = "assistant" if call else "user"
    return Message(
        timestamp=at, role=chosen, text=text, model_call=call if chosen == "assistant" else None
    )


def _entry(
    observation: Mapping[str, Any],
    tool: str,
    started: datetime,
    ended: datetime | None,
    session_id: str,
) -> AuditEntry:
    arguments = observation.get("input")
    if observation.get("level") == "ERROR":
        message = observation.get("statusMessage")
        failure: Failure | None = Failure(
            tool=tool, message=message if isinstance(message, str) else "error"
        )
    else:
        failure = envelope_failure(tool, observation.get("output"))
    call = Call(
        tool=tool,
        arguments=arguments,
        failure=failure,
        started=started,
        duration_ms=(ended - started).total_seconds() * 1000 if ended else None,
        source=SOURCE,
        extra={
            "traceId": str(observation.get("traceId") or ""),
            "observationId": str(observation.get("id") or ""),
            # The row id a re-import finds again (cleo-grade import keys on trace and span).
            "spanId": str(observation.get("id") or ""),
        },
    )
    try:
        return build_entry(call, session_id=session_id)
    except CleoGradeError as exc:
        raise LangfuseFetchError(f"langfuse: observation {observation.get('id')}: {exc}") from None
