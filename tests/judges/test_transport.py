"""The HTTP judge against real local servers: credentials stay with the configured host, keys
never show in messages or the cache, every request has a total deadline and a size cap, and a
judge that keeps failing is stopped for the run."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main as cli_main
from pytest_cleo_grade.core.errors import JudgeError, RubricError
from pytest_cleo_grade.judges._breaker import CircuitBreakers, JudgeStopped
from pytest_cleo_grade.judges._cache import JudgeCache
from pytest_cleo_grade.judges._redact import redact_url
from pytest_cleo_grade.judges.http import OpenAICompatibleJudge, build_judge
from pytest_cleo_grade.judges.protocol import MAX_BACKOFF_S, JudgeSettings
from pytest_cleo_grade.rubrics.weighted.rubric import WeightedJudgeRubric, load_rubric_file
from tests.entries import NOW, entry
from tests.fake_judge import FakeJudgeServer, Status, verdict_json
from tests.local_http import (
    ScriptedServer,
    completion,
    echo,
    redirect,
    send,
    status,
    wait_for_hang_up,
)

KEY = "sk-live-0123456789abcdef"
ENV = {"JUDGE_KEY": KEY}


def keyed_judge(base_url: str, **options: object) -> OpenAICompatibleJudge:
    settings: dict[str, object] = {"retries": 0, "timeout": 2.0, "breakers": CircuitBreakers()}
    settings.update(options)
    return OpenAICompatibleJudge(
        base_url=base_url, model="m", api_key_env="JUDGE_KEY", environ=ENV, **settings
    )  # type: ignore[arg-type]


# --------------------------------------------------------------------------- redirects


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308], ids=str)
def test_a_redirect_to_another_port_is_refused_and_the_key_never_reaches_it(code: int) -> None:
    with ScriptedServer(completion()) as other:
        with ScriptedServer(redirect(code, f"{other.base_url}/v1/chat/completions")) as first:
            judge = keyed_judge(first.base_url)
            with pytest.raises(JudgeError) as info:
                judge("p")
        assert other.seen == []
    message = str(info.value)
    assert f"redirected (HTTP {code}) to another host, http://127.0.0.1:{other.port};" in message
    assert "sent only to the configured host" in message
    assert [seen.headers["Authorization"] for seen in first.seen] == [f"Bearer {KEY}"]


def test_a_redirect_to_another_host_name_is_refused_before_any_request() -> None:
    with ScriptedServer(completion()) as first:
        first.answers.insert(0, redirect(302, f"http://localhost:{first.port}/v1/x"))
        with pytest.raises(JudgeError, match="to another host, http://localhost:"):
            keyed_judge(first.base_url)("p")
        assert len(first.seen) == 1


def test_a_redirect_within_the_configured_host_is_followed_with_the_same_post() -> None:
    with ScriptedServer(redirect(307, "/v2/chat/completions"), completion("hi")) as server:
        assert keyed_judge(server.base_url)("p").text == "hi"
    assert [(s.method, s.path) for s in server.seen] == [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v2/chat/completions"),
    ]
    assert server.seen[1].headers["Authorization"] == f"Bearer {KEY}"


def test_a_redirect_loop_ends_with_an_error() -> None:
    with ScriptedServer(redirect(302, "/v1/chat/completions")) as server:
        with pytest.raises(JudgeError, match="more than 5 redirects"):
            keyed_judge(server.base_url)("p")
        assert len(server.seen) == 6


# --------------------------------------------------------------------------- redaction


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h/v1?api-key=abc123&x=1", "https://h/v1?api-key=***&x=1"),
        ("https://h/v1?key=abc123", "https://h/v1?key=***"),
        ("https://h/v1?access_token=abc123#f", "https://h/v1?access_token=***#f"),
        ("https://h/v1?api-version=2024-06-01", "https://h/v1?api-version=2024-06-01"),
        ("http://alice:pw@h:8000/v1", "http://***@h:8000/v1"),
        ("http://token@h/v1", "http://***@h/v1"),
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ],
    ids=["api-key", "key", "token-fragment", "harmless", "userinfo", "user-only", "plain"],
)
def test_urls_are_shown_with_their_credentials_redacted(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_key_in_the_query_and_an_echoing_error_body_never_reach_the_message() -> None:
    with ScriptedServer(echo(401)) as server:
        judge = keyed_judge(f"{server.base_url}/v1?api-key=query-secret-42")
        with pytest.raises(JudgeError) as info:
            judge("p")
    # The endpoint still gets what it needs to authenticate.
    assert server.seen[0].path == "/v1/chat/completions?api-key=query-secret-42"
    message = str(info.value)
    assert "HTTP 401" in message
    assert f"{server.base_url}/v1/chat/completions?api-key=***" in message
    assert "query-secret-42" not in message
    assert KEY not in message
    assert "'Bearer ***' for /v1/chat/completions?api-key=***" in message


def test_userinfo_is_sent_as_basic_credentials_and_redacted_from_errors() -> None:
    with ScriptedServer(echo(500)) as server:
        url = server.base_url.replace("http://", "http://alice:pw-secret-123@")
        judge = OpenAICompatibleJudge(base_url=url, model="m", retries=0)
        with pytest.raises(JudgeError) as info:
            judge("p")
    sent = server.seen[0].headers["Authorization"]
    assert sent.startswith("Basic ")
    message = str(info.value)
    assert "pw-secret-123" not in message
    assert sent.removeprefix("Basic ") not in message
    assert f"http://***@127.0.0.1:{server.port}/v1/chat/completions" in message


def test_a_connection_error_message_never_shows_the_key_in_the_url() -> None:
    with ScriptedServer(completion()) as closed:
        url = f"{closed.base_url}/v1?key=conn-secret-77"
    with pytest.raises(JudgeError) as info:
        keyed_judge(url, timeout=0.5)("p")
    assert "conn-secret-77" not in str(info.value)
    assert "key=***" in str(info.value)


def test_an_invalid_judge_url_is_reported_without_its_credentials(tmp_path: Path) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(
        '[judge]\nbase_url = "ftp://bob:file-secret-1@h/v1?token=file-secret-2"\n'
        '[[dimensions]]\nname = "d"\ntype = "numeric"\nweight = 1.0\n'
    )
    with pytest.raises(RubricError) as info:
        load_rubric_file(path)
    message = str(info.value)
    assert message.startswith(f"{path}: judge.base_url: expected an http:// or https:// URL")
    assert "ftp://***@h/v1?token=***" in message
    assert "file-secret" not in message


def test_rubrics_check_json_shows_the_judge_url_redacted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "rubric.toml"
    path.write_text(
        '[judge]\nbase_url = "https://judge.example/v1?api-key=json-secret-5"\n'
        '[[dimensions]]\nname = "d"\ntype = "numeric"\nweight = 1.0\n'
    )
    assert cli_main(["rubrics", "--check", str(path), "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["judge"]["base_url"] == "https://judge.example/v1?api-key=***"
    assert "json-secret-5" not in out


def test_the_judge_cache_stores_the_endpoint_without_its_key(tmp_path: Path) -> None:
    store = tmp_path / "audit.db"
    with ScriptedServer(completion(verdict_json())) as server:
        judge = keyed_judge(f"{server.base_url}/v1?api-key=cache-secret-9")
        rubric = WeightedJudgeRubric(judge=judge, cache=JudgeCache(store))
        rubric.grade([entry("tasks", "add")], session_id="s1", now=NOW)
    with closing(sqlite3.connect(store)) as db:
        [(endpoint,)] = db.execute("SELECT endpoint FROM judge_cache").fetchall()
    assert endpoint == f"{server.base_url}/v1/chat/completions?api-key=***"
    assert b"cache-secret-9" not in store.read_bytes()
    assert KEY.encode() not in store.read_bytes()


# --------------------------------------------------------------------------- deadline, size


class Dribble:
    """A server sending its reply a byte every 100 ms, for 10 s: its headers, or its body
    (closing the connection after it, HTTP/1.0's way, or not). ``ended``: it got to the end,
    its client still reading."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.ended = threading.Event()

    def __call__(self, handler: BaseHTTPRequestHandler) -> None:
        if self.part == "headers":
            handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
        else:
            handler.send_response(200)
            handler.send_header("Content-Length", "100")
            if self.part == "body-then-close":
                # http.client lets go of such a connection's socket once it read the headers.
                handler.send_header("Connection", "close")
            handler.end_headers()
        for _ in range(100):
            handler.wfile.write(b" " if self.part != "headers" else b"X")
            handler.wfile.flush()
            time.sleep(0.1)  # sleep-ok: plays a server dribbling its reply
        self.ended.set()


@pytest.mark.parametrize("part", ["body", "body-then-close", "headers"])
def test_a_server_sending_a_byte_every_100ms_fails_at_the_total_deadline(part: str) -> None:
    dribble = Dribble(part)
    with ScriptedServer(dribble) as server:
        judge = keyed_judge(server.base_url, timeout=0.5)
        started = time.monotonic()
        with pytest.raises(JudgeError, match=r"timed out after 0.5 s \(total deadline\)"):
            judge("p")
        elapsed = time.monotonic() - started
        # The old per-read timeout read on to the end (10 s): it stopped the dribble short.
        assert not dribble.ended.is_set()
    # Never before its deadline (a bound no load can break).
    assert elapsed >= 0.45


def endless_body(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.end_headers()  # no Content-Length: the body ends when the connection does
    chunk = b"x" * 65536
    for _ in range(1024):  # 64 MB at most, should a client keep reading
        handler.wfile.write(chunk)


def test_an_endless_reply_stops_at_the_size_cap() -> None:
    with ScriptedServer(endless_body) as server:
        judge = keyed_judge(server.base_url, max_reply_bytes=256 * 1024)
        with pytest.raises(JudgeError, match=r"reply larger than 262144 bytes"):
            judge("p")


def test_a_reply_announcing_more_than_the_cap_is_refused_before_reading_it() -> None:
    # Nothing follows the body's first byte: a client reading on would meet its deadline
    # (another error), never the end of the body.
    def huge(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(100 * 1024 * 1024))
        handler.end_headers()
        handler.wfile.write(b"{")
        handler.wfile.flush()
        wait_for_hang_up(handler)

    with (
        ScriptedServer(huge) as server,
        pytest.raises(JudgeError, match=r"larger than 4194304 bytes"),
    ):
        keyed_judge(server.base_url, timeout=30.0)("p")


def test_the_default_reply_cap_is_4_mb() -> None:
    assert JudgeSettings().max_reply_bytes == 4 * 1024 * 1024


# --------------------------------------------------------------------------- Retry-After


def http_date(seconds: float) -> str:
    return format_datetime(datetime.now(UTC) + timedelta(seconds=seconds), usegmt=True)


@pytest.mark.parametrize(
    ("retry_after", "low", "high"),
    [
        *[("2", 2.0, 2.0), ("3600", MAX_BACKOFF_S, MAX_BACKOFF_S), ("0", 0.25, 0.25)],
        # "²".isdigit() is True, and float("²") raised ValueError out of the judge.
        ("\u00b2", 0.25, 0.25),
    ],
    ids=["seconds", "capped", "shorter-than-backoff", "superscript-two"],
)
def test_retry_after_is_honoured_within_the_backoff_bound(
    retry_after: str, low: float, high: float
) -> None:
    sleeps: list[float] = []
    with ScriptedServer(status(429, "slow down", {"Retry-After": retry_after}), completion()) as s:
        judge = keyed_judge(s.base_url, retries=1, backoff=0.25, sleep=sleeps.append)
        judge("p")
    [slept] = sleeps
    assert low <= slept <= high


def test_retry_after_as_an_http_date_is_honoured() -> None:
    sleeps: list[float] = []
    with ScriptedServer(status(503, "", {"Retry-After": http_date(30)}), completion()) as s:
        keyed_judge(s.base_url, retries=1, backoff=0.25, sleep=sleeps.append)("p")
    [slept] = sleeps
    assert 25 <= slept <= 31


# --------------------------------------------------------------------------- circuit breaker


def failing_settings(server: FakeJudgeServer, limit: int) -> JudgeSettings:
    return JudgeSettings(
        base_url=server.base_url,
        model="m",
        retries=0,
        timeout=1,
        max_consecutive_failures=limit,
    )


def test_a_judge_failing_n_times_in_a_row_is_not_asked_again_in_this_process() -> None:
    with FakeJudgeServer(Status(503, "overloaded")) as server:
        settings = failing_settings(server, limit=2)
        for _ in range(2):
            # A judge is built per judged test: the breaker outlives it.
            with pytest.raises(JudgeError, match="HTTP 503"):
                build_judge(settings)("p")
        waited: list[float] = []
        with pytest.raises(JudgeStopped) as info:
            OpenAICompatibleJudge.from_settings(settings, sleep=waited.append)("p")
        assert waited == []  # stopped at once: no backoff, no request
        assert server.count == 2
    message = str(info.value)
    assert "failed 2 times in a row in this run" in message
    assert "judge.max_consecutive_failures = 2" in message
    assert "last failure: " in message and "HTTP 503" in message


def test_an_answer_resets_the_count_of_failures_in_a_row() -> None:
    breakers = CircuitBreakers()
    with ScriptedServer(status(500), completion(), status(500), completion()) as server:
        judge = keyed_judge(server.base_url, breakers=breakers, max_consecutive_failures=2)
        for expected in ("fail", "ok", "fail", "ok"):
            if expected == "fail":
                with pytest.raises(JudgeError, match="HTTP 500"):
                    judge("p")
            else:
                assert judge("p").text == "{}"
        assert len(server.seen) == 4


def test_another_model_on_the_same_endpoint_has_its_own_count() -> None:
    breakers = CircuitBreakers()
    with ScriptedServer(status(500)) as server:
        first = keyed_judge(server.base_url, breakers=breakers, max_consecutive_failures=1)
        with pytest.raises(JudgeError, match="HTTP 500"):
            first("p")
        with pytest.raises(JudgeStopped):
            first("p")
        other = OpenAICompatibleJudge(
            base_url=server.base_url, model="other", retries=0, breakers=breakers
        )
        with pytest.raises(JudgeError, match="HTTP 500"):
            other("p")
        assert len(server.seen) == 2


RUBRIC = """
[judge]
base_url = "{url}"
model = "m"
retries = 0
timeout = 1
max_consecutive_failures = 2

[[dimensions]]
name = "shipped"
type = "numeric"
weight = 1.0
"""


def test_in_a_pytest_run_the_tests_after_n_failures_fail_fast_with_the_reason(
    pytester: pytest.Pytester,
) -> None:
    with FakeJudgeServer(Status(503, "overloaded")) as server:
        (pytester.path / "rubric.toml").write_text(RUBRIC.format(url=server.base_url))
        pytester.makepyfile(
            test_agents="".join(
                f"def test_agent_{i}(graded_session):\n"
                '    graded_session.record("tasks", "add", {"title": "x"})\n\n'
                for i in range(4)
            )
        )
        result = pytester.runpytest(
            "-p", "no:cacheprovider",
            "--cleo-grade-rubric=weighted",
            "--cleo-grade-rubric-file=rubric.toml",
        )  # fmt: skip
        assert server.count == 2
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines(["*not asked: it failed 2 times in a row in this run*HTTP 503*"])
    assert result.stdout.str().count("not asked: it failed 2 times in a row") >= 2


def test_a_server_that_never_answers_fails_at_the_deadline() -> None:
    # A server that accepts and then says nothing at all: the deadline, not the socket. It
    # answers only a client that waited for it (a minute) instead of giving up.
    def silent(handler: BaseHTTPRequestHandler) -> None:
        if not wait_for_hang_up(handler):
            send(handler, 200, b"{}")

    with (
        ScriptedServer(silent) as server,
        pytest.raises(JudgeError, match=r"timed out after 0\.5 s"),
    ):
        keyed_judge(server.base_url, timeout=0.5)("p")


def test_an_invalid_judge_url_option_never_echoes_its_key(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    result = pytester.runpytest(
        "--cleo-grade-judge-url=ftp://user:hunter2@judge.example/?api-key=sk-live-123"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    text = result.stderr.str()
    assert "invalid judge URL 'ftp://***@judge.example/?api-key=***'" in text
    assert "hunter2" not in text and "sk-live-123" not in text


def test_the_cli_refuses_a_judge_url_it_could_not_use_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_cleo_grade.cli import main

    entries = tmp_path / "s.jsonl"
    entries.write_text("", encoding="utf-8")
    for url in ("http://[::1", "http://user:hunter2@127.0.0.1:99999"):
        args = ["grade", "--entries", str(entries), "--rubric", "weighted", "--judge-url", url]
        assert main(args) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1
        assert err.startswith("cleo-grade grade: argument --judge-url: invalid judge URL '")
        assert "hunter2" not in err
