"""A local fake OpenAI-compatible chat-completions server and canned judge replies."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: A valid reply for the default (seed 004) rubric; overall quality 0.671667.
SCORES: dict[str, Any] = {
    "goal_achievement": "complete",
    "tool_efficiency": 0.8,
    "process_adherence": 0.6,
    "context_efficiency": 0.5,
    "error_handling": "recovered",
    "output_quality": 1.0,
}


def verdict_json(**scores: Any) -> str:
    """A judge reply for the default rubric: SCORES with ``scores`` replacing some of them."""
    merged = {**SCORES, **scores}
    return json.dumps(
        {
            name: {
                "score": score,
                "evidence": [f"{name} observed"],
                "rationale": f"{name} because",
            }
            for name, score in merged.items()
        }
    )


@dataclass(frozen=True)
class Reply:
    """A 200 chat completion whose message content is ``content``."""

    content: str
    prompt_tokens: int = 100
    completion_tokens: int = 20


@dataclass(frozen=True)
class Status:
    """An HTTP error status with a body."""

    code: int
    body: str = '{"error": {"message": "nope"}}'


@dataclass(frozen=True)
class Slow:
    """Hold the request (up to ``seconds``, or until the server closes), then reply."""

    seconds: float
    then: Reply = field(default_factory=lambda: Reply(verdict_json()))


@dataclass(frozen=True)
class Raw:
    """A 200 response with this body, as is."""

    body: bytes


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


@dataclass(frozen=True)
class Truncated:
    """Announce a longer body than is sent with status ``code``, then close the connection."""

    code: int


Behaviour = Reply | Status | Slow | Raw | Drop | Truncated


@dataclass
class Received:
    """One request the server saw."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def prompt(self) -> str:
        content: str = self.body["messages"][-1]["content"]
        return content


class FakeJudgeServer:
    """Serves queued behaviours in order, then ``default`` for every further request."""

    def __init__(self, default: Behaviour | None = None, *, port: int = 0) -> None:
        self.default: Behaviour = default or Reply(verdict_json())
        self.queue: list[Behaviour] = []
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        # A short poll interval keeps shutdown() (and so each test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def count(self) -> int:
        with self._lock:
            return len(self.received)

    def push(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self.queue.extend(behaviours)

    def _next(self, received: Received) -> Behaviour:
        with self._lock:
            self.received.append(received)
            return self.queue.pop(0) if self.queue else self.default

    def __enter__(self) -> FakeJudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._closing.set()  # releases Slow handlers at once
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            # An answer's headers and body leave in separate writes: with Nagle's algorithm
            # the body could wait for the client's delayed ACK (40 ms) of the headers.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                behaviour = server._next(Received(self.path, dict(self.headers), body))
                if isinstance(behaviour, Slow):
                    server._closing.wait(behaviour.seconds)
                    behaviour = behaviour.then
                # The client may have given up already (a timeout test).
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    self._answer(behaviour)

            def _answer(self, behaviour: Behaviour) -> None:
                if isinstance(behaviour, Drop):
                    self.close_connection = True
                    return
                if isinstance(behaviour, Truncated):
                    self.close_connection = True
                    self.send_response(behaviour.code)
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"error": ')
                    return
                if isinstance(behaviour, Status):
                    self._send(behaviour.code, behaviour.body.encode())
                elif isinstance(behaviour, Raw):
                    self._send(200, behaviour.body)
                elif isinstance(behaviour, Reply):
                    payload = {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": behaviour.content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": behaviour.prompt_tokens,
                            "completion_tokens": behaviour.completion_tokens,
                            "total_tokens": behaviour.prompt_tokens + behaviour.completion_tokens,
                        },
                    }
                    self._send(200, json.dumps(payload).encode())

            def _send(self, code: int, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        return Handler


def serve(default: Behaviour | None = None) -> Iterator[FakeJudgeServer]:
    """Generator for a pytest fixture: a running server, closed afterwards."""
    with FakeJudgeServer(default) as server:
        yield server


if __name__ == "__main__":
    # `python -m tests.fake_judge [PORT]`: the judge docs/judges.md's output was made against,
    # serving its default reply until Ctrl-C.
    import sys

    with FakeJudgeServer(port=int(sys.argv[1]) if len(sys.argv) > 1 else 8765) as running:
        print(f"fake judge at {running.base_url} (Ctrl-C stops it)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
