"""A local stand-in for Langfuse's public API (score configs and scores), for the export tests:
it keeps the configs it was asked to create and records every request with its JSON body.

Scores are checked against their config as Langfuse checks them (the config exists and is not
archived, same name and data type, a value within the range or among the categories); the
refused ones are answered with HTTP 207, their counts and one message each, the others kept
by id (a score sent again with its id replaces the one before)."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Request:
    method: str
    path: str
    auth: str | None
    body: Any


@dataclass
class FakeLangfuse:
    """Serves /api/public/score-configs (GET, POST) and /api/public/scores (POST)."""

    keys: tuple[str, str] = ("pk-test", "sk-test")
    page_size: int = 2  # small, so listing the configs takes several pages
    configs: list[dict[str, Any]] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    refuse_scores: bool = False
    #: Say "Unauthorized" with the Authorization header the client sent, as some servers do.
    echo_auth: bool = False
    #: Answer every page of score configs with a new config and a count of pages it never
    #: reaches.
    endless_pages: bool = False
    #: Added to every message about a refused score (a server echoing text it was sent).
    detail: str = ""
    #: Scores refused whatever their value, by name, with the reason (a project's limits).
    refuse: dict[str, str] = field(default_factory=dict)
    #: The scores accepted, by id.
    stored: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Where it listens (0: any free port).
    port: int = 0
    #: Traces (each with ``sessionId``) and observations (each with ``traceId``) served by
    #: GET /api/public/traces and /api/public/observations, ``page_size`` per page.
    traces: list[dict[str, Any]] = field(default_factory=list)
    observations: list[dict[str, Any]] = field(default_factory=list)
    #: A path answered with a redirect to this URL (another host, say), once.
    redirect: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        # A short poll interval keeps shutdown() (and so each test's teardown) quick.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def env(self) -> dict[str, str]:
        return {
            "LANGFUSE_PUBLIC_KEY": self.keys[0],
            "LANGFUSE_SECRET_KEY": self.keys[1],
            "LANGFUSE_HOST": self.base_url,
        }

    def __enter__(self) -> FakeLangfuse:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def scores(self) -> list[dict[str, Any]]:
        return [s for r in self.requests if r.path == "/api/public/scores" for s in r.body]

    def _answer(self, method: str, url: str, auth: str | None, body: Any) -> tuple[int, Any]:
        path = urlsplit(url).path
        with self._lock:
            self.requests.append(Request(method, path, auth, body))
            expected = "Basic " + base64.b64encode(":".join(self.keys).encode()).decode()
            if auth != expected:
                return 401, {
                    "message": f"Unauthorized: {auth}" if self.echo_auth else "Unauthorized"
                }
            if path == "/api/public/score-configs" and method == "GET" and self.endless_pages:
                page = int(parse_qs(urlsplit(url).query).get("page", ["1"])[0])
                config = {"id": f"cfg-{page}", "name": f"c{page}", "dataType": "NUMERIC",
                          "createdAt": "2026-11-24T00:00:00.000Z",
                          "updatedAt": "2026-11-24T00:00:00.000Z",
                          "projectId": "project-1", "isArchived": False}  # fmt: skip
                meta = {"page": page, "limit": 1, "totalItems": 10**12, "totalPages": 10**12}
                return 200, {"data": [config], "meta": meta}
            if path in self.redirect and method == "GET":
                return 302, {"Location": self.redirect.pop(path)}
            if path in ("/api/public/traces", "/api/public/observations") and method == "GET":
                query = parse_qs(urlsplit(url).query)
                key, items = (
                    ("sessionId", self.traces)
                    if path.endswith("traces")
                    else ("traceId", self.observations)
                )
                wanted = query.get(key, [""])[0]
                chosen = [item for item in items if item.get(key) == wanted]
                return 200, self._page(chosen, query)
            if path == "/api/public/score-configs" and method == "GET":
                query = parse_qs(urlsplit(url).query)
                page = int(query.get("page", ["1"])[0])
                limit = min(int(query.get("limit", ["50"])[0]), self.page_size)
                data = self.configs[(page - 1) * limit : page * limit]
                pages = max(1, -(-len(self.configs) // limit))
                meta = {"page": page, "limit": limit, "totalItems": len(self.configs),
                        "totalPages": pages}  # fmt: skip
                return 200, {"data": data, "meta": meta}
            if path == "/api/public/score-configs" and method == "POST":
                config = {
                    "id": f"cfg-{len(self.configs) + 1}",
                    "createdAt": "2026-11-24T00:00:00.000Z",
                    "updatedAt": "2026-11-24T00:00:00.000Z",
                    "projectId": "project-1",
                    "isArchived": False,
                    **{k: v for k, v in body.items() if v is not None},
                }
                self.configs.append(config)
                return 200, config
            if path == "/api/public/scores" and method == "POST":
                if self.refuse_scores:
                    return 400, {"message": "invalid request"}
                return self._scores(body)
            return 404, {"message": f"no route {method} {path}"}

    def _page(self, items: list[dict[str, Any]], query: dict[str, list[str]]) -> dict[str, Any]:
        page = int(query.get("page", ["1"])[0])
        limit = min(int(query.get("limit", ["50"])[0]), self.page_size)
        pages = max(1, -(-len(items) // limit))
        meta = {"page": page, "limit": limit, "totalItems": len(items), "totalPages": pages}
        return {"data": items[(page - 1) * limit : page * limit], "meta": meta}

    def _scores(self, body: list[dict[str, Any]]) -> tuple[int, Any]:
        errors = []
        for score in body:
            problem = self._invalid(score)
            if problem is None:
                self.stored[score["id"]] = score
            else:
                errors.append({"message": f"score {score['name']!r}: {problem}{self.detail}"})
        if not errors:
            return 202, {"message": "Accepted"}
        return 207, {"accepted": len(body) - len(errors), "rejected": len(errors), "errors": errors}

    def _invalid(self, score: dict[str, Any]) -> str | None:
        """Why Langfuse would refuse ``score``, or None."""
        if score["name"] in self.refuse:
            return self.refuse[score["name"]]
        config = next((c for c in self.configs if c["id"] == score.get("configId")), None)
        if config is None:
            return f"config {score.get('configId')} not found"
        if config.get("isArchived"):
            return f"config {config['name']!r} is archived"
        if config["name"] != score["name"]:
            return f"name does not match config {config['name']!r}"
        if config["dataType"] != score["dataType"]:
            return f"data type {score['dataType']} does not match config {config['dataType']}"
        value = score["value"]
        if config["dataType"] == "CATEGORICAL":
            labels = [category["label"] for category in config.get("categories") or []]
            return None if value in labels else f"value {value!r} is not a category {labels}"
        low, high = config.get("minValue"), config.get("maxValue")
        if low is not None and value < low:
            return f"value {value} is below the config's minimum {low}"
        if high is not None and value > high:
            return f"value {value} exceeds the config's maximum {high}"
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in two writes: with Nagle's algorithm the body waits
            # for the client's delayed ACK of the headers, 40 ms on every answer.
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                status, answer = fake._answer(
                    self.command, self.path, self.headers.get("Authorization"), body
                )
                data = json.dumps(answer).encode()
                self.send_response(status)
                if status in (301, 302, 307, 308):
                    self.send_header("Location", answer["Location"])
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _serve

        return Handler


if __name__ == "__main__":
    # `python -m tests.fake_langfuse [PORT]`: the Langfuse docs/exports.md's output was made
    # against (keys pk-test / sk-test), until Ctrl-C.
    import sys

    with FakeLangfuse(port=int(sys.argv[1]) if len(sys.argv) > 1 else 3000) as running:
        print(f"fake Langfuse at {running.base_url} (Ctrl-C stops it)", flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            threading.Event().wait()
