"""The HTML drill-down shows a session's conversation beside its calls, as text only."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from pytest_cleo_grade.core._conversation import Conversation, Message, ModelCall
from pytest_cleo_grade.reports._html import write_html_report
from pytest_cleo_grade.reports._html_page import build_report, render_html
from pytest_cleo_grade.store import AuditStore
from tests.reports.test_html_render import HOSTILE, grade, parse, run_of

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def talk(text: str = "Fix the login bug") -> Conversation:
    return Conversation(
        messages=[
            Message(timestamp=T0, role="user", text=text),
            Message(timestamp=T0, role="assistant", text="Filed T1", model_call="c1"),
        ],
        model_calls=[
            ModelCall(id="c1", timestamp=T0, model="gpt-x", input_tokens=30, output_tokens=4)
        ],
        output="Filed T1 for the login bug",
    )


def test_the_drill_down_lists_the_messages_the_usage_and_the_final_output() -> None:
    result = grade("t1", 80)
    page = render_html(
        build_report(run_of(result), [result], conversations={result.session_id: talk()})
    )
    assert "Conversation (2 messages, 1 model call, 30 in / 4 out tokens)" in page
    assert "<pre>Fix the login bug</pre>" in page
    assert "gpt-x, 30 in / 4 out" in page
    assert "<h4>Final output</h4><pre>Filed T1 for the login bug</pre>" in page


def test_hostile_message_text_is_text_never_markup() -> None:
    result = grade("t1", 80)
    page = render_html(
        build_report(run_of(result), [result], conversations={result.session_id: talk(HOSTILE)})
    )
    assert parse(page).tags["script"] == 1
    assert HOSTILE in "".join(parse(page).text)


def test_the_report_reads_the_conversation_from_the_store(tmp_path: Path) -> None:
    result = grade("t1", 80)
    db = tmp_path / "audit.db"
    with AuditStore(db) as store:
        store.append_conversation(result.session_id, talk())
    out = tmp_path / "report.html"
    write_html_report(out, run_of(result), [result], db=db)
    assert "<pre>Fix the login bug</pre>" in out.read_text()
