"""The OpenAI-compatible HTTP judge against a local fake server: requests, retries, timeouts."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from pytest_cleo_grade.core.errors import JudgeError, RubricError
from pytest_cleo_grade.judges.http import OpenAICompatibleJudge, build_judge, chat_completions_url
from pytest_cleo_grade.judges.protocol import (
    CallableJudge,
    JudgeReply,
    JudgeSettings,
    TokenUsage,
    ask,
    extract_json_text,
)
from tests.fake_judge import (
    Drop,
    FakeJudgeServer,
    Raw,
    Reply,
    Slow,
    Status,
    Truncated,
    serve,
)


@pytest.fixture
def server() -> Iterator[FakeJudgeServer]:
    yield from serve()


def make_judge(
    server: FakeJudgeServer, **options: object
) -> tuple[OpenAICompatibleJudge, list[float]]:
    sleeps: list[float] = []
    settings = {"model": "judge-model", "retries": 2, "backoff": 0.25, "timeout": 5.0, **options}
    judge = OpenAICompatibleJudge(base_url=server.base_url, sleep=sleeps.append, **settings)  # type: ignore[arg-type]
    return judge, sleeps


def test_judge_posts_one_user_message_with_model_and_sampling_to_v1_chat_completions(
    server: FakeJudgeServer,
) -> None:
    judge, _ = make_judge(server, temperature=0.0, max_tokens=500, seed=7)
    reply = judge("grade this")
    assert reply.text.startswith("{")
    [request] = server.received
    assert request.path == "/v1/chat/completions"
    assert request.body == {
        "model": "judge-model",
        "messages": [{"role": "user", "content": "grade this"}],
        "temperature": 0.0,
        "max_tokens": 500,
        "seed": 7,
    }
    assert "Authorization" not in request.headers


def test_api_key_is_read_from_the_named_environment_variable_at_request_time(
    server: FakeJudgeServer,
) -> None:
    environ = {"MY_JUDGE_KEY": "sk-test-123"}
    judge = OpenAICompatibleJudge(
        base_url=server.base_url, model="m", api_key_env="MY_JUDGE_KEY", environ=environ
    )
    judge("hello")
    assert server.received[0].headers["Authorization"] == "Bearer sk-test-123"


def test_missing_api_key_variable_fails_before_any_request(server: FakeJudgeServer) -> None:
    judge = OpenAICompatibleJudge(
        base_url=server.base_url, model="m", api_key_env="UNSET_JUDGE_KEY", environ={}
    )
    with pytest.raises(JudgeError, match=r"UNSET_JUDGE_KEY .*is not set"):
        judge("hello")
    assert server.count == 0


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        ("http://h:8000", "http://h:8000/v1/chat/completions"),
        ("http://h:8000/", "http://h:8000/v1/chat/completions"),
        ("https://api.example.com/v1", "https://api.example.com/v1/chat/completions"),
        ("https://api.example.com/v1/", "https://api.example.com/v1/chat/completions"),
        ("http://h/openai/v1/chat/completions", "http://h/openai/v1/chat/completions"),
    ],
    ids=["root", "root-slash", "v1", "v1-slash", "full-endpoint"],
)
def test_base_url_gets_v1_chat_completions_appended_once(base_url: str, expected: str) -> None:
    assert chat_completions_url(base_url) == expected


def test_usage_is_taken_from_the_response_usage_field(server: FakeJudgeServer) -> None:
    server.push(Reply("{}", prompt_tokens=1234, completion_tokens=56))
    judge, _ = make_judge(server)
    assert judge("p").usage == TokenUsage(1234, 56, 1290)


@pytest.mark.parametrize(
    "count", [10**12 + 1, -500, int("9" * 4300)], ids=["absurd", "negative", "4300-digits"]
)
def test_a_token_count_out_of_bounds_is_not_counted(server: FakeJudgeServer, count: int) -> None:
    # A 4300-digit count made the run's sum unwritable (an INTERNALERROR of the pytest run).
    usage = f'{{"prompt_tokens": 7, "completion_tokens": {count}}}'
    body = '{"choices": [{"message": {"content": "{}"}}], "usage": ' + usage + "}"
    server.push(Raw(body.encode()))
    judge, _ = make_judge(server)
    assert judge("p").usage == TokenUsage(7, 0, 7)


def test_a_reply_echoing_the_api_key_reaches_no_one_with_it(
    server: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUDGE_KEY", "sk-TOPSECRET-123")
    server.push(Reply('{"rationale": "your key was sk-TOPSECRET-123"}'))
    judge, _ = make_judge(server, api_key_env="JUDGE_KEY")
    assert judge("p").text == '{"rationale": "your key was ***"}'


@pytest.mark.parametrize("status", [500, 502, 503, 429], ids=str)
def test_server_errors_and_rate_limits_are_retried_with_exponential_backoff(
    server: FakeJudgeServer, status: int
) -> None:
    server.push(Status(status), Status(status))
    judge, sleeps = make_judge(server, retries=2, backoff=0.25)
    assert judge("p").text.startswith("{")
    assert server.count == 3
    assert sleeps == [0.25, 0.5]


@pytest.mark.parametrize("status", [400, 401, 404, 422], ids=str)
def test_client_errors_fail_at_once_without_retry(server: FakeJudgeServer, status: int) -> None:
    server.push(Status(status, '{"error": "bad model"}'))
    judge, sleeps = make_judge(server, retries=3)
    with pytest.raises(JudgeError, match=rf"HTTP {status} .*bad model") as info:
        judge("p")
    assert server.count == 1
    assert sleeps == []
    assert "/v1/chat/completions" in str(info.value)


def test_exhausted_retries_name_the_url_the_attempts_and_the_last_problem(
    server: FakeJudgeServer,
) -> None:
    server.default = Status(503, "overloaded")
    judge, sleeps = make_judge(server, retries=2, backoff=0.1)
    with pytest.raises(JudgeError) as info:
        judge("p")
    message = str(info.value)
    assert f"{server.base_url}/v1/chat/completions failed after 3 attempts" in message
    assert "HTTP 503" in message
    assert "\n" not in message
    assert sleeps == [0.1, 0.2]


def test_a_slow_reply_times_out_and_is_reported(server: FakeJudgeServer) -> None:
    server.push(Slow(5.0))
    judge, _ = make_judge(server, timeout=0.2, retries=0)
    with pytest.raises(JudgeError, match=r"failed after 1 attempt: timed out after 0.2 s"):
        judge("p")


def test_a_timeout_is_retried_like_a_connection_error(server: FakeJudgeServer) -> None:
    server.push(Slow(5.0))
    # Long enough for the retry's own round trip on a loaded machine.
    judge, sleeps = make_judge(server, timeout=1.0, retries=1, backoff=0.0)
    assert judge("p").text.startswith("{")
    assert server.count == 2
    assert sleeps == [0.0]


def test_a_dropped_connection_is_retried(server: FakeJudgeServer) -> None:
    server.push(Drop())
    judge, _ = make_judge(server, retries=1, backoff=0.0)
    assert judge("p").text.startswith("{")
    assert server.count == 2


@pytest.mark.parametrize("status", [503, 200], ids=str)
def test_a_reply_cut_off_mid_body_is_retried(server: FakeJudgeServer, status: int) -> None:
    server.push(Truncated(status))
    judge, sleeps = make_judge(server)
    assert json.loads(judge("x").text)["goal_achievement"]["score"] == "complete"
    assert server.count == 2
    assert sleeps == [0.25]


def test_connection_refused_is_a_judge_error_after_the_retries() -> None:
    with FakeJudgeServer() as closed:
        url = closed.base_url  # the port is free again once the server is closed
    sleeps: list[float] = []
    judge = OpenAICompatibleJudge(
        base_url=url, model="m", retries=1, backoff=0.0, timeout=0.5, sleep=sleeps.append
    )
    with pytest.raises(JudgeError, match=r"failed after 2 attempts: .*(Connection|refused)"):
        judge("p")
    assert sleeps == [0.0]


@pytest.mark.parametrize(
    "body",
    [b"<html>gateway</html>", b'{"choices": []}', b'{"choices": [{"message": {"content": 3}}]}'],
    ids=["not-json", "no-choices", "content-not-text"],
)
def test_a_response_that_is_not_a_chat_completion_is_a_judge_error(
    server: FakeJudgeServer, body: bytes
) -> None:
    server.push(Raw(body))
    judge, _ = make_judge(server)
    with pytest.raises(JudgeError, match=r"chat-completions response|not text"):
        judge("p")
    assert server.count == 1


def test_judge_settings_without_base_url_or_model_cannot_build_a_judge() -> None:
    with pytest.raises(RubricError, match=r"judge\.base_url is not set"):
        build_judge(JudgeSettings(model="m"))
    with pytest.raises(RubricError, match=r"judge\.model is not set"):
        build_judge(JudgeSettings(base_url="http://127.0.0.1:1"))


def test_plain_functions_and_callable_judges_answer_through_ask() -> None:
    assert ask(lambda prompt: prompt.upper(), "hi") == JudgeReply("HI")
    wrapped = CallableJudge(lambda prompt: JudgeReply("x", TokenUsage(1, 2, 3)), identity="v1")
    assert ask(wrapped, "hi").usage == TokenUsage(1, 2, 3)
    assert wrapped.cache_identity() == {"callable": "v1"}
    assert CallableJudge(str).cache_identity() is None


def test_a_judge_answering_something_else_than_text_is_a_judge_error() -> None:
    with pytest.raises(JudgeError, match="returned int"):
        ask(lambda prompt: 42, "hi")  # type: ignore[arg-type,return-value]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1}', '{"a": 1}'),
        ('```json\n{"a": 1}\n```', '{"a": 1}'),
        ('```\n{"a": 1}\n```', '{"a": 1}'),
        ('  ```JSON\n{"a": 1}```  ', '{"a": 1}'),
        ('Here you go:\n{"a": {"b": 2}}\nHope it helps.', '{"a": {"b": 2}}'),
        # Braces in the prose: the text from the first to the last brace was no JSON at all.
        ('Evaluation of {session}:\n```json\n{"a": 1}\n```', '{"a": 1}'),
        ('<think>The agent did {x}.</think>\n{"a": 1}', '{"a": 1}'),
        ('{"a": 1}\n\nNote: {see above}', '{"a": 1}'),
        ('```\nexample: {}\n```\n```json\n{"a": 1}\n```', '{"a": 1}'),
        ("no object here {at all}", "{at all}"),  # left for the caller to say why
    ],
    ids=[
        "bare",
        "json-fence",
        "plain-fence",
        "fence-no-newline",
        "prose-around",
        "braces-before-a-fence",
        "reasoning-text",
        "note-after",
        "example-fence-first",
        "none",
    ],
)
def test_json_is_extracted_from_fences_and_surrounding_prose(text: str, expected: str) -> None:
    assert extract_json_text(text) == expected


def test_a_local_judge_is_never_sent_through_a_proxy(
    server: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeJudgeServer() as closed:
        dead_proxy = closed.base_url  # nothing listens there any more
    for variable in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY"):
        monkeypatch.setenv(variable, dead_proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    judge, _ = make_judge(server, retries=0)
    assert judge("p").text.startswith("{")
    assert server.count == 1


@pytest.mark.e2e
def test_the_docs_fake_judge_runs_on_its_own() -> None:
    # docs/judges.md's output was made against it: `python -m tests.fake_judge PORT` serves
    # its default reply, which the weighted rubric grades.
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_judge", str(port)],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        url = f"http://127.0.0.1:{port}"
        assert server.stdout.readline() == f"fake judge at {url} (Ctrl-C stops it)\n"
        judge = OpenAICompatibleJudge(base_url=url, model="m", timeout=10.0)
        assert "goal_achievement" in judge("p").text
    finally:
        server.terminate()
        server.communicate(timeout=30)  # closes its stdout too
