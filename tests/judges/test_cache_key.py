"""The judge cache key: what the judge needs (relative times, no session id), plus a scope."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade.judges.connect import DefaultConnector
from pytest_cleo_grade.rubrics.protocol import GradeContext, RubricConfig
from pytest_cleo_grade.rubrics.weighted.rubric import DEFAULT_SPEC, WeightedJudgeRubric
from tests.entries import NOW, entry
from tests.fake_judge import FakeJudgeServer, serve


def session(name: str, *, start: int, gaps: tuple[int, int] = (1, 1)) -> list[dict[str, Any]]:
    first, second = gaps
    return [
        entry("session", "list", at=start, session=name),
        entry("tasks", "find", at=start + first, session=name),
        entry("session", "end", at=start + first + second, session=name),
    ]


@pytest.fixture
def server() -> Iterator[FakeJudgeServer]:
    yield from serve()


@pytest.fixture
def rubric(tmp_path: Path, server: FakeJudgeServer) -> WeightedJudgeRubric:
    text = DEFAULT_SPEC.model_dump_json(exclude={"judge"})
    path = tmp_path / "rubric.json"
    path.write_text(text[:-1] + f', "judge": {{"base_url": "{server.base_url}", "model": "m"}}}}')
    config = RubricConfig(
        rubric_file=path, cache_path=tmp_path / "audit.db", connector=DefaultConnector()
    )
    return WeightedJudgeRubric().configure(config)


def test_the_same_calls_in_another_session_at_another_time_are_served_from_the_cache(
    rubric: WeightedJudgeRubric, server: FakeJudgeServer
) -> None:
    rubric.grade(session("monday", start=0), session_id="monday", now=NOW)
    # A day later, another session id: the same calls at the same relative times.
    again = rubric.grade(session("tuesday", start=86_400), session_id="tuesday", now=NOW)
    assert server.count == 1
    assert again.session_id == "tuesday"
    assert again.model_extra is not None
    assert again.model_extra["judgeUsage"]["cachedReplies"] == 1
    # The judge was still shown the real session: its id and absolute times.
    assert "Session: monday" in server.received[0].prompt


def test_other_relative_times_are_another_key(
    rubric: WeightedJudgeRubric, server: FakeJudgeServer
) -> None:
    rubric.grade(session("a", start=0), session_id="a", now=NOW)
    rubric.grade(session("b", start=0, gaps=(1, 30)), session_id="b", now=NOW)
    assert server.count == 2


def test_a_cache_scope_keeps_runs_apart_and_finds_its_own_reply_again(
    rubric: WeightedJudgeRubric, server: FakeJudgeServer
) -> None:
    def run(scope: str, start: int) -> None:
        context = GradeContext(extra={"cacheScope": scope})
        rubric.grade(
            session(f"s{start}", start=start), session_id=f"s{start}", now=NOW, context=context
        )

    run("run-1", 0)
    run("run-2", 0)
    assert server.count == 2
    run("run-1", 500)  # run 1 of the next pytest run: its own earlier reply
    assert server.count == 2
