"""A graded session's conversation: added, held, stored with the calls, read back merged."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pytest_cleo_grade.capture._conversation import message, model_call, record_conversation
from pytest_cleo_grade.core.errors import EntryError
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from pytest_cleo_grade.store import AuditStore

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[GradeSession]:
    with GradeSession(SessionSettings(db_path=tmp_path / "audit.db")) as started:
        yield started


def test_messages_model_calls_and_the_output_are_held_then_stored_together(
    session: GradeSession,
) -> None:
    session.add_message("user", "Add a task for the login bug", timestamp=T0)
    call = session.add_model_call(
        "gpt-x", input_tokens=30, output_tokens=8, timestamp=T0 + timedelta(seconds=1)
    )
    session.add_message(
        "assistant", "Added T1", timestamp=T0 + timedelta(seconds=2), model_call=call.id
    )
    session.set_output("T1 added")
    held = session.conversation
    assert held.goal == "Add a task for the login bug"
    assert held.output == "T1 added"
    assert held.tokens()["total"] == 38
    session.flush()
    with AuditStore(session.db_path, read_only=True) as store:
        stored = store.session_conversation(session.id)
    assert stored == held
    # Read again after the flush: the stored part, not twice.
    assert session.conversation == held


def test_bad_arguments_are_one_clear_error(session: GradeSession) -> None:
    with pytest.raises(EntryError, match=r"add_message\(\): role: role 'bot' is not one of"):
        session.add_message("bot", "hi")
    with pytest.raises(EntryError, match="add_message\\(\\) takes the text, not int"):
        session.add_message("user", 3)  # type: ignore[arg-type]
    with pytest.raises(EntryError, match=r"add_model_call\(\): input_tokens"):
        session.add_model_call("m", input_tokens=-5)


def test_an_adapter_in_this_process_hands_its_items_to_the_session(
    session: GradeSession,
) -> None:
    assert record_conversation(
        [message("user", "hello", timestamp=T0)],
        [model_call("m", input_tokens=3, output_tokens=1, timestamp=T0)],
        output="hi there",
    )
    talk = session.conversation
    assert [m.text for m in talk.messages] == ["hello"]
    assert talk.output == "hi there"
    # set_output's text wins over what an adapter saw.
    session.set_output("explicit")
    assert session.conversation.output == "explicit"


def test_outside_a_graded_session_nothing_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CLEO_AUDIT_DB", "CLEO_SESSION_GRADE", "CLEO_SESSION_GRADE_ID", "CLEO_SESSION_ID"):
        monkeypatch.delenv(name, raising=False)
    assert not record_conversation([message("user", "hello")])


@pytest.mark.e2e
def test_a_child_process_stores_its_conversation_and_the_session_reads_it(
    session: GradeSession,
) -> None:
    code = (
        "from pytest_cleo_grade.capture._conversation import message, record_conversation\n"
        "assert record_conversation([message('user', 'from the child')], output='child out')\n"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, **session.subprocess_env()},
        check=True,
        timeout=120,
    )
    talk = session.conversation
    assert [m.text for m in talk.messages] == ["from the child"]
    assert talk.output == "child out"


def test_the_cap_counts_what_one_session_could_not_keep(
    session: GradeSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_cleo_grade.grading.session as module

    monkeypatch.setattr(module, "MAX_ITEMS", 2)
    for index in range(5):
        session.add_message("user", f"m{index}", timestamp=T0 + timedelta(seconds=index))
    talk = session.conversation
    assert [m.text for m in talk.messages] == ["m0", "m1"]
    assert talk.dropped == 3


def test_the_trace_is_the_tests_own_else_the_one_the_calls_spans_name(
    session: GradeSession, tmp_path: Path
) -> None:
    import json

    from tests.capture.test_otlp import json_span, request

    path = tmp_path / "trace.json"
    trace = "5b8efff798038103d269b633813fc60c"
    path.write_text(json.dumps(request([json_span("tasks_find", 0, trace=trace)])))
    session.ingest(path, format="otlp")
    assert session.graded_trace() == trace
    session.trace_id = "my-trace"
    assert session.graded_trace() == "my-trace"


def test_without_spans_or_a_current_trace_there_is_none(session: GradeSession) -> None:
    session.record("tasks", "find")
    assert session.graded_trace() is None
