"""The judge cache in the audit store's SQLite file: hits, misses, modes and invalidation."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.core.errors import CleoGradeWarning, JudgeError
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.judges._cache import JudgeCache
from pytest_cleo_grade.judges.connect import DefaultConnector
from pytest_cleo_grade.judges.protocol import CallableJudge, cache_key
from pytest_cleo_grade.rubrics.protocol import CacheMode, RubricConfig
from pytest_cleo_grade.rubrics.weighted.rubric import DEFAULT_SPEC, WeightedJudgeRubric
from tests.entries import NOW, entry
from tests.fake_judge import FakeJudgeServer, Reply, serve, verdict_json

ENTRIES = [
    entry("session", "list", at=0),
    entry("tasks", "find", at=1),
    entry("session", "end", at=2),
]


@pytest.fixture
def server() -> Iterator[FakeJudgeServer]:
    yield from serve()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """An audit store that already holds someone else's table."""
    path = tmp_path / ".cleo" / "audit.db"
    path.parent.mkdir()
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("CREATE TABLE audit_log (id TEXT PRIMARY KEY, domain TEXT)")
        db.execute("INSERT INTO audit_log VALUES ('e1', 'tasks')")
    return path


def rubric_file(tmp_path: Path, server: FakeJudgeServer, *, model: str = "m1") -> Path:
    text = DEFAULT_SPEC.model_dump_json(exclude={"judge"})
    path = tmp_path / "rubric.json"
    path.write_text(
        text[:-1] + f', "judge": {{"base_url": "{server.base_url}", "model": "{model}"}}}}'
    )
    return path


def grade(
    server: FakeJudgeServer,
    store: Path,
    rubric: Path,
    mode: CacheMode = "on",
    **overrides: Any,
) -> GradeResult:
    config = RubricConfig(
        rubric_file=rubric,
        cache_path=store,
        cache_mode=mode,
        judge_overrides=overrides,
        connector=DefaultConnector(),
    )
    return WeightedJudgeRubric().configure(config).grade(ENTRIES, session_id="s1", now=NOW)


def usage(result: GradeResult) -> dict[str, Any]:
    assert result.model_extra is not None
    value: dict[str, Any] = result.model_extra["judgeUsage"]
    return value


def cached_rows(store: Path) -> int:
    with closing(sqlite3.connect(store)) as db:
        (count,) = db.execute("SELECT count(*) FROM judge_cache").fetchone()
    return int(count)


def test_the_same_grade_again_is_answered_from_the_cache_without_a_request(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    path = rubric_file(tmp_path, server)
    first = grade(server, store, path)
    second = grade(server, store, path)
    assert server.count == 1
    assert second.dimensions == first.dimensions
    assert second.total_score == first.total_score == 67.17
    assert usage(first) == {
        "promptTokens": 100,
        "completionTokens": 20,
        "totalTokens": 120,
        "requests": 1,
        "cachedReplies": 0,
        "cached": False,
    }
    assert usage(second) == {
        "promptTokens": 0,
        "completionTokens": 0,
        "totalTokens": 0,
        "requests": 0,
        "cachedReplies": 1,
        "cached": True,
    }


def test_the_cache_table_joins_the_audit_store_leaving_its_tables_alone(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    grade(server, store, rubric_file(tmp_path, server))
    with closing(sqlite3.connect(store)) as db:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert db.execute("SELECT * FROM audit_log").fetchall() == [("e1", "tasks")]
        row = db.execute("SELECT endpoint, model, total_tokens FROM judge_cache").fetchone()
    assert tables == {"audit_log", "judge_cache"}
    assert row == (f"{server.base_url}/v1/chat/completions", "m1", 120)


def test_a_missing_store_file_and_directory_are_created(
    tmp_path: Path, server: FakeJudgeServer
) -> None:
    store = tmp_path / "new" / "dir" / "audit.db"
    grade(server, store, rubric_file(tmp_path, server))
    assert cached_rows(store) == 1


def test_editing_the_rubric_file_misses_the_cache_even_with_the_same_prompt(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    path = rubric_file(tmp_path, server)
    grade(server, store, path)
    # Whitespace only: the prompt is unchanged, the file is not.
    path.write_text(path.read_text() + "\n")
    grade(server, store, path)
    assert server.count == 2
    assert server.received[0].prompt == server.received[1].prompt


def test_another_model_or_sampling_setting_misses_the_cache(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    path = rubric_file(tmp_path, server)
    grade(server, store, path)
    grade(server, store, path, model="m2")
    grade(server, store, path, temperature=0.7)
    grade(server, store, path, model="m2")
    assert server.count == 3
    assert cached_rows(store) == 3


def test_other_entries_make_another_prompt_and_miss_the_cache(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    path = rubric_file(tmp_path, server)
    rubric = WeightedJudgeRubric().configure(
        RubricConfig(rubric_file=path, cache_path=store, connector=DefaultConnector())
    )
    rubric.grade(ENTRIES, session_id="s1", now=NOW)
    rubric.grade(ENTRIES[:2], session_id="s1", now=NOW)
    assert server.count == 2


def test_refresh_asks_again_and_replaces_the_stored_reply(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    path = rubric_file(tmp_path, server)
    grade(server, store, path)
    server.push(Reply(verdict_json(output_quality=0.0)))
    refreshed = grade(server, store, path, mode="refresh")
    again = grade(server, store, path)
    assert server.count == 2
    assert refreshed.dimensions["output_quality"].score == 0.0
    assert again.dimensions["output_quality"].score == 0.0
    assert usage(again)["cached"] is True


def test_off_neither_reads_nor_writes_the_cache(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    path = rubric_file(tmp_path, server)
    grade(server, store, path)
    grade(server, store, path, mode="off")
    grade(server, store, path, mode="off")
    assert server.count == 3
    assert cached_rows(store) == 1


def test_an_invalid_reply_is_never_cached(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    path = rubric_file(tmp_path, server)
    server.push(Reply("nonsense"), Reply("still nonsense"))
    with pytest.raises(JudgeError):
        grade(server, store, path)
    assert cached_rows(store) == 0
    grade(server, store, path)
    assert server.count == 3


def test_the_reply_to_a_reask_is_cached_under_the_original_prompt(
    tmp_path: Path, server: FakeJudgeServer, store: Path
) -> None:
    path = rubric_file(tmp_path, server)
    server.push(Reply("```json\n{oops\n```"))
    grade(server, store, path)
    assert usage(grade(server, store, path))["cached"] is True
    assert server.count == 2


def test_a_callable_judge_is_cached_only_when_it_names_its_identity(store: Path) -> None:
    calls: list[str] = []

    def answer(prompt: str) -> str:
        calls.append(prompt)
        return verdict_json()

    for judge in (answer, CallableJudge(answer)):
        rubric = WeightedJudgeRubric(judge=judge, cache=JudgeCache(store))
        rubric.grade(ENTRIES, session_id="s1", now=NOW)
        rubric.grade(ENTRIES, session_id="s1", now=NOW)
    assert len(calls) == 4
    named = WeightedJudgeRubric(judge=CallableJudge(answer, identity="v1"), cache=JudgeCache(store))
    named.grade(ENTRIES, session_id="s1", now=NOW)
    named.grade(ENTRIES, session_id="s1", now=NOW)
    assert len(calls) == 5


def test_an_unusable_cache_file_is_a_warning_and_the_judge_is_asked(
    tmp_path: Path, server: FakeJudgeServer
) -> None:
    not_a_database = tmp_path / "audit.db"
    not_a_database.write_text("this is not SQLite " * 100)
    with pytest.warns(CleoGradeWarning) as warned:
        result = grade(server, not_a_database, rubric_file(tmp_path, server))
    assert [str(w.message).split(": ")[1] for w in warned] == [
        "judge cache not read",
        "judge reply not cached",
    ]
    assert result.total_score == 67.17
    assert server.count == 1


def test_the_key_covers_judge_identity_prompt_rubric_bytes_and_version() -> None:
    base: dict[str, Any] = {
        "identity": {"endpoint": "http://h/v1/chat/completions", "model": "m"},
        "prompt": "p",
        "rubric_source": b"rubric",
        "rubric_version": "1",
    }
    key = cache_key(**base)
    assert len(key) == 64
    assert cache_key(**base) == key
    for change in (
        {"identity": {"endpoint": "http://h/v1/chat/completions", "model": "m2"}},
        {"identity": {**base["identity"], "sampling": {"temperature": 0.5}}},
        {"prompt": "p2"},
        {"rubric_source": b"rubric "},
        {"rubric_version": "2"},
    ):
        assert cache_key(**{**base, **change}) != key


def test_the_cli_says_a_cache_warning_in_one_line(
    tmp_path: Path,
    server: FakeJudgeServer,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A warning from deep in the rubric reached stderr as Python's two lines (a source file
    # and line, then the line's code) where every other is one `cleo-grade: warning:` line.
    import json
    import warnings

    from pytest_cleo_grade.cli import main

    db = tmp_path / "audit.db"
    entries = tmp_path / "e.jsonl"
    entries.write_text("\n".join(json.dumps(e) for e in ENTRIES) + "\n")
    assert main(["import", str(entries), "--db", str(db)]) == 0
    with closing(sqlite3.connect(db)) as connection, connection:
        connection.execute("CREATE TABLE judge_cache (unrelated TEXT)")  # someone else's
    session = str(ENTRIES[0]["sessionId"])
    argv = ["grade", session, "--db", str(db), "--no-save", "--rubric", "weighted"]
    argv += ["--rubric-file", str(rubric_file(tmp_path, server))]
    monkeypatch.setenv("NO_COLOR", "1")
    capsys.readouterr()
    # The command in this process, with the warning filters of a process of its own (not
    # this project's filterwarnings = error).
    with warnings.catch_warnings():
        warnings.resetwarnings()
        warnings.simplefilter("default")
        status = main(argv)
    err = capsys.readouterr().err
    assert status == 0, err
    lines = err.splitlines()
    assert [line.split(": ")[:2] for line in lines] == [
        ["cleo-grade", "warning"],
        ["cleo-grade", "warning"],
    ]
    assert "judge cache not read" in lines[0] and "judge reply not cached" in lines[1]
