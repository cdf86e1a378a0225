"""A scripted HTTP server on 127.0.0.1 for the judge's transport tests: each request is
answered by a function of the test's choosing, and every request is recorded."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Seen:
    """One request the server saw."""

    method: str
    path: str
    headers: dict[str, str]


Answer = Callable[[BaseHTTPRequestHandler], None]


class ScriptedServer:
    """Answers request n with ``answers[n]`` (the last one repeats)."""

    def __init__(self, *answers: Answer) -> None:
        self.answers = list(answers)
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _answer_for(self, handler: BaseHTTPRequestHandler) -> Answer:
        with self._lock:
            self.seen.append(Seen(handler.command, handler.path, dict(handler.headers)))
            index = min(len(self.seen), len(self.answers)) - 1
            return self.answers[index]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # An answer's headers and body leave in separate writes: with Nagle's algorithm
            # the body could wait for the client's delayed ACK (40 ms) of the headers.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def handle_one_request(self) -> None:
                # The client may give up mid-answer (deadline and size-cap tests).
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    super().handle_one_request()

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                self.rfile.read(length)
                self.close_connection = True
                server._answer_for(self)(self)

            do_GET = do_POST = do_PUT = _any

        return Handler


def send(
    handler: BaseHTTPRequestHandler,
    status: int,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
) -> None:
    """A complete response with a Content-Length."""
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def wait_for_hang_up(handler: BaseHTTPRequestHandler, timeout: float = 60.0) -> bool:
    """Wait, having answered nothing more, until the client closes its end (True) or for
    ``timeout`` seconds (False): a server that makes its client give up, however long the
    client takes to (a deadline reached on a loaded machine), and no longer."""
    handler.connection.settimeout(timeout)
    try:
        while handler.rfile.read1(65536):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True  # reset: gone all the same
    return True


def completion(text: str = "{}") -> Answer:
    """A 200 chat completion answering ``text``."""
    body = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]})
    return lambda handler: send(handler, 200, body.encode(), {"Content-Type": "application/json"})


def status(code: int, body: str = "", headers: dict[str, str] | None = None) -> Answer:
    return lambda handler: send(handler, code, body.encode(), headers)


def redirect(code: int, location: str) -> Answer:
    return lambda handler: send(handler, code, b"", {"Location": location})


def echo(code: int) -> Answer:
    """An error whose body echoes the request's path and headers (as some gateways do)."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        auth = handler.headers.get("Authorization", "")
        body = json.dumps({"error": f"invalid credentials {auth!r} for {handler.path}"})
        send(handler, code, body.encode())

    return answer


def served(*answers: Answer) -> Iterator[ScriptedServer]:
    """Generator for a pytest fixture."""
    with ScriptedServer(*answers) as server:
        yield server
