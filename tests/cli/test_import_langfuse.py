"""`cleo-grade import --from langfuse --session-id ID`: a production session fetched through
Langfuse's public API (paginated) into calls and a conversation, then graded."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.store import AuditStore
from tests.fake_judge import FakeJudgeServer, serve
from tests.fake_langfuse import FakeLangfuse

TRACE = "0af7651916cd43dd8448eb211c80319c"


def at(second: int) -> str:
    return f"2026-03-01T12:00:{second:02d}.000Z"


def observation(index: int, kind: str, name: str, **fields: object) -> dict[str, object]:
    return {
        "id": f"obs-{index}",
        "traceId": TRACE,
        "type": kind,
        "name": name,
        "startTime": at(index * 2),
        "endTime": at(index * 2 + 1),
        **fields,
    }


OBSERVATIONS = [
    observation(
        0,
        "GENERATION",
        "chat",
        model="gpt-x",
        input=[{"role": "user", "content": "Please file the login bug"}],
        output={"role": "assistant", "content": "Looking for it first"},
        usageDetails={"input": 120, "output": 12},
    ),
    observation(1, "TOOL", "session_list", input={}),
    observation(2, "TOOL", "tasks_find", input={"query": "login"}),
    observation(
        3,
        "TOOL",
        "tasks_show",
        input={"taskId": "T9"},
        level="ERROR",
        statusMessage="task T9 not found",
    ),
    observation(
        4, "SPAN", "execute_tool tasks_add", input={"title": "login bug", "description": "x"}
    ),
    observation(5, "SPAN", "planning"),
    observation(
        6,
        "GENERATION",
        "chat",
        model="gpt-x",
        input=[
            {"role": "user", "content": "Please file the login bug"},
            {"role": "assistant", "content": "Looking for it first"},
        ],
        output="Filed as T2",
        usageDetails={"input": 300, "output": 8},
    ),
]


@pytest.fixture
def langfuse(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        server.traces = [
            {
                "id": TRACE,
                "sessionId": "prod-7",
                "timestamp": at(0),
                "input": "Please file the login bug",
                "output": "Filed as T2",
            }
        ]
        server.observations = list(OBSERVATIONS)
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        yield server


def run_import(db: Path) -> int:
    return main(["import", "--from", "langfuse", "--session-id", "prod-7", "--db", str(db)])


def test_a_session_is_fetched_page_by_page_into_calls_and_a_conversation(
    langfuse: FakeLangfuse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "audit.db"
    assert run_import(db) == 0
    assert "Imported 4 entries, 3 messages into" in capsys.readouterr().out
    pages = [r for r in langfuse.requests if r.path == "/api/public/observations"]
    assert len(pages) == 4  # seven observations, two a page
    with AuditStore(db, read_only=True) as store:
        entries = store.session_entries("prod-7")
        talk = store.session_conversation("prod-7")
    assert [f"{e.domain}.{e.operation}" for e in entries] == [
        "session.list",
        "tasks.find",
        "tasks.show",
        "tasks.add",
    ]
    assert (entries[2].result.exit_code, entries[2].error) == (4, "task T9 not found")
    assert {(e.metadata.model_extra or {})["traceId"] for e in entries} == {TRACE}
    assert [(m.role, m.text) for m in talk.messages] == [
        ("user", "Please file the login bug"),
        ("assistant", "Looking for it first"),
        ("assistant", "Filed as T2"),
    ]
    assert talk.output == "Filed as T2"
    assert talk.tokens()["total"] == 440
    # Imported again: nothing twice.
    assert run_import(db) == 0
    with AuditStore(db, read_only=True) as store:
        assert store.count("prod-7") == 4


@pytest.fixture
def judge() -> Iterator[FakeJudgeServer]:
    yield from serve()


def test_the_imported_session_is_graded_in_ci_with_its_request_and_answer(
    langfuse: FakeLangfuse, judge: FakeJudgeServer, tmp_path: Path
) -> None:
    db = tmp_path / "audit.db"
    assert run_import(db) == 0
    args = ["grade", "prod-7", "--db", str(db), "--rubric", "weighted", "--json"]
    args += ["--judge-url", judge.base_url, "--judge-model", "m", "--no-save"]
    assert main(args) == 0
    [received] = judge.received
    assert '"Please file the login bug"' in received.prompt.split("```jsonl")[0]
    assert '"Filed as T2"' in received.prompt


def test_a_redirect_to_another_host_is_refused_without_sending_the_keys_there(
    langfuse: FakeLangfuse, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    langfuse.redirect["/api/public/traces"] = "http://elsewhere.invalid/api/public/traces"
    assert run_import(tmp_path / "audit.db") == 2
    err = capsys.readouterr().err
    assert "redirected (HTTP 302) to another host" in err
    assert "sk-test" not in err
    assert not (tmp_path / "audit.db").exists()


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--session-id", "prod-7"], {"LANGFUSE_PUBLIC_KEY": ""}, "needs LANGFUSE_PUBLIC_KEY"),
        ([], {}, "--from langfuse needs --session-id ID"),
        (["--session-id", "none-such"], {}, "langfuse has no trace in session 'none-such'"),
        (["x.json", "--session-id", "prod-7"], {}, "--from langfuse takes no FILE"),
    ],
    ids=["no-keys", "no-session", "unknown-session", "a-file-too"],
)
def test_usage_errors_are_one_line_and_exit_two(
    langfuse: FakeLangfuse,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
    env: dict[str, str],
    message: str,
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code = main(["import", "--from", "langfuse", *argv, "--db", str(tmp_path / "a.db")])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_wrong_keys_are_said_without_them(
    langfuse: FakeLangfuse,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-wrong")
    assert run_import(tmp_path / "a.db") == 2
    err = capsys.readouterr().err
    assert "HTTP 401" in err
    assert "sk-wrong" not in err
