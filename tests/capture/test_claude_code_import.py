"""Claude Code transcripts: `cleo-grade import --format claude-code` and
`graded_session.ingest(path, format="claude-code")` grade a real CLEO session after the fact.

The fixture (examples/sessions/claude-code-cleo.jsonl) follows Claude Code's session files as
its documentation describes them (JSON Lines under ~/.claude/projects/<project>/, one message
per line with type, sessionId, timestamp; tool_use blocks in assistant messages answered by
tool_result blocks in the next user message): a CLEO session through the cleo MCP server.
Sources for the line shapes (the format itself is internal to Claude Code and undocumented):
the field reference at https://claude-dev.tools/docs/jsonl-format (type, uuid, parentUuid,
timestamp, sessionId, cwd, gitBranch, version; message.content as a string or blocks) and
txcript's docs/formats/claude-code.md (https://github.com/skillsynchq/txcript: summary,
system and file-history-snapshot lines next to the user/assistant conversation)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_cleo_grade import grade_entries
from pytest_cleo_grade.capture.claude_code import UNANSWERED, TranscriptError, load_transcript
from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.errors import CleoGradeWarning
from pytest_cleo_grade.grading.session import GradeSession, SessionSettings
from pytest_cleo_grade.store import AuditStore

ROOT = Path(__file__).resolve().parents[2]
TRANSCRIPT = ROOT / "examples" / "sessions" / "claude-code-cleo.jsonl"
SESSION = "7f1c2a9e-3b4d-4e5f-8a6b-1c2d3e4f5a6b"

#: The same session written by hand: (domain, operation, gateway, exit code).
BY_HAND = [
    ("session", "list", "cleo_query", 0),
    ("admin", "help", "cleo_query", 0),
    ("tasks", "find", "cleo_query", 0),
    ("tasks", "show", "cleo_query", 4),
    ("tasks", "find", "cleo_query", 0),
    ("tool", "Bash", None, 0),
    ("tasks", "add", "cleo_mutate", 0),
    ("session", "end", "cleo_mutate", 0),
]


def hand_entries() -> list[dict[str, Any]]:
    rows = []
    params = [e.params for e in load_transcript(TRANSCRIPT)]
    for index, (domain, operation, gateway, code) in enumerate(BY_HAND):
        rows.append(
            {
                "timestamp": f"2026-03-01T12:00:{1 + 3 * index:02d}Z",
                "sessionId": SESSION,
                "domain": domain,
                "operation": operation,
                "params": params[index],
                "result": {"success": code == 0, "exitCode": code},
                "metadata": {"gateway": gateway},
            }
        )
    return rows


def test_the_transcript_grades_like_the_same_calls_recorded_by_hand() -> None:
    entries = load_transcript(TRANSCRIPT)
    rows = [(e.domain, e.operation, e.metadata.gateway, e.result.exit_code) for e in entries]
    assert rows == BY_HAND
    assert {e.session_id for e in entries} == {SESSION}
    assert [e.result.duration for e in entries] == [1250.0] * 8
    assert entries[3].error == "E_NOT_FOUND: Task T9 not found"
    assert entries[6].params == {
        "title": "Fix login redirect",
        "description": "Users land on /404 after login",
    }
    meta = entries[0].metadata.model_extra or {}
    assert (entries[0].metadata.source, meta["tool"], meta["toolUseId"]) == (
        "claude-code",
        "mcp__cleo__cleo_query",
        "toolu_0100",
    )
    got = grade_entries(entries, session_id=SESSION)
    expected = grade_entries(hand_entries(), session_id=SESSION)
    assert got.model_dump(exclude={"timestamp"}) == expected.model_dump(exclude={"timestamp"})
    assert got.total_score == 100


def test_the_cli_imports_it_and_grades_it_from_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "audit.db"
    argv = ["import", "--format", "claude-code", str(TRANSCRIPT), "--db", str(db)]
    assert main(argv) == 0
    assert capsys.readouterr().out == (
        f"Imported 8 entries, 10 messages into {db} (sessions: {SESSION})\n"
    )
    assert main(["grade", SESSION, "--db", str(db), "--no-save", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totalScore"] == 100
    # A transcript imported again (it grows as the session goes on) adds only new calls:
    # every call was stored twice, and the grade flagged duplicate task creates.
    assert main(argv) == 0
    assert capsys.readouterr().out == (
        f"Imported 0 entries into {db} (sessions: {SESSION}; 8 already there)\n"
    )
    assert main(["grade", SESSION, "--db", str(db), "--no-save", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entryCount"] == 8


def test_ingest_adds_the_calls_to_a_graded_session(tmp_path: Path) -> None:
    with GradeSession(SessionSettings(db_path=tmp_path / "a.db")) as session:
        assert session.ingest(TRANSCRIPT, format="claude-code") == 8
        assert {e.session_id for e in session.entries} == {session.id}
        assert session.grade().total_score == 100


def test_session_id_replaces_the_transcripts_own() -> None:
    assert {e.session_id for e in load_transcript(TRANSCRIPT, session_id="mine")} == {"mine"}


def write(tmp_path: Path, *lines: Any) -> Path:
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
        encoding="utf-8",
    )
    return path


def use(key: str, name: str, at: str = "2026-03-01T12:00:00Z") -> dict[str, Any]:
    block = {"type": "tool_use", "id": key, "name": name, "input": {}}
    return {"type": "assistant", "sessionId": "s", "timestamp": at, "message": {"content": [block]}}


def test_a_number_no_float_holds_in_a_tools_input_is_kept_as_text(tmp_path: Path) -> None:
    # Valid JSON the agent wrote; the other adapters store what JSON cannot hold as text.
    line = json.dumps(use("t1", "mcp__tasks__tasks_add")).replace(
        '"input": {}', '"input": {"priority": 1e400, "weight": 2.5, "id": ' + "9" * 5000 + "}"
    )
    [entry] = load_transcript(write(tmp_path, line))
    assert entry.params == {"priority": "1e400", "weight": 2.5, "id": "9" * 5000}


def test_half_an_emoji_claude_code_cut_becomes_a_replacement_character(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Node's JSON.stringify writes a split surrogate pair as a lone \\ud83d escape: valid
    # JSON, and common in long texts Claude Code truncates.
    cut = "\\ud83d"
    text_line = {"type": "assistant", "sessionId": "s", "timestamp": "2026-03-01T11:59:59Z",
                 "message": {"content": [{"type": "text", "text": "done CUT"}]}}  # fmt: skip
    call = json.dumps(use("t1", "mcp__tasks__tasks_find")).replace(
        '"input": {}', '"input": {"query": "login CUT", "CUT": 1}'
    )
    path = write(tmp_path, json.dumps(text_line).replace("CUT", cut), call.replace("CUT", cut))
    [entry] = load_transcript(path)
    assert entry.params == {"query": "login \ufffd", "\ufffd": 1}
    db = tmp_path / "audit.db"
    assert main(["import", "--format", "claude-code", str(path), "--db", str(db)]) == 0
    assert "Imported 1 entries" in capsys.readouterr().out
    with AuditStore(db, read_only=True) as store:
        assert [e.params for e in store.session_entries("s")] == [entry.params]


def test_a_transcript_starting_with_a_bom_reads_as_without_it(tmp_path: Path) -> None:
    plain = load_transcript(write(tmp_path, use("t1", "mcp__tasks__tasks_find")))
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_transcript(path) == plain


def test_an_unanswered_call_is_a_failure_saying_so(tmp_path: Path) -> None:
    [entry] = load_transcript(write(tmp_path, use("t1", "mcp__tasks__tasks_find")))
    assert (entry.domain, entry.operation, entry.result.exit_code) == ("tasks", "find", 1)
    assert entry.error == UNANSWERED


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], "t.jsonl:1: not valid JSON"),
        (["[1, 2]"], "t.jsonl:1: not a JSON object"),
        ([{**use("t1", "Bash"), "timestamp": None}], "t.jsonl:1: no timestamp"),
        (
            [use("t1", "Bash", at="2026-03-01T12:00:00")],
            "t.jsonl:1: timestamp '2026-03-01T12:00:00' has no timezone",
        ),
        ([{"type": "summary", "summary": "x"}], "t.jsonl: no tool calls in this transcript"),
        ([use("t1", "")], "t.jsonl:1: a tool_use block needs an id and a name"),
    ],
)
def test_a_bad_transcript_is_one_error_naming_the_line_and_imports_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: list[Any], message: str
) -> None:
    path = write(tmp_path, *lines)
    with pytest.raises(TranscriptError, match=message):
        load_transcript(path)
    db = tmp_path / "audit.db"
    assert main(["import", "--format", "claude-code", str(path), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    if db.exists():
        with AuditStore(db, read_only=True) as store:
            assert store.session_entries("s") == []


def result(
    key: str, content: Any, *, error: bool = False, at: str = "2026-03-01T12:00:02.5Z"
) -> Any:
    block = {"type": "tool_result", "tool_use_id": key, "content": content, "is_error": error}
    return {"type": "user", "sessionId": "s", "timestamp": at, "message": {"content": [block]}}


def text_blocks(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


@pytest.mark.parametrize(
    ("content", "error", "code"),
    [
        ("ok", False, 0),
        (text_blocks('{"success": true, "data": []}'), False, 0),
        ("<tool_use_error>File does not exist.</tool_use_error>", True, 4),
        (text_blocks("Error: task T9 not found"), True, 4),
        ("Permission to use Bash has been denied.", True, 1),
        (
            text_blocks('{"success": false, "error": {"code": "E_VALIDATION", "exitCode": 6}}'),
            True,
            6,
        ),
        # A CLEO error envelope returned as a normal (not is_error) result still fails.
        ('{"success": false, "error": {"code": "E_NOT_FOUND", "exitCode": 4}}', False, 4),
        (text_blocks('{"success": false, "error": {"code": "E_NOT_FOUND"}}'), False, 4),
        # The envelope in one block of several (a hint after it), read as the hooks read it.
        (
            [
                *text_blocks('{"success": false, "error": {"code": "E_NOT_FOUND", "exitCode": 4}}'),
                *text_blocks("Hint: use tasks.find"),
            ],
            False,
            4,
        ),
    ],
)
def test_a_results_exit_code_follows_the_shared_rules(
    tmp_path: Path, content: Any, error: bool, code: int
) -> None:
    path = write(tmp_path, use("t1", "mcp__cleo__cleo_query"), result("t1", content, error=error))
    [entry] = load_transcript(path)
    assert (entry.result.exit_code, entry.result.success) == (code, code == 0)
    assert entry.result.duration == 2500.0


def test_other_lines_are_skipped_and_parallel_calls_pair_by_id(tmp_path: Path) -> None:
    two = use("a", "Read")
    two["message"]["content"].append({"type": "tool_use", "id": "b", "name": "Grep", "input": {}})
    path = write(
        tmp_path,
        {"type": "summary", "summary": "x", "leafUuid": "u1"},
        {"type": "system", "subtype": "local_command", "content": "/clear"},
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
        {"type": "user", "sessionId": "s", "timestamp": "bad", "message": {"content": "hello"}},
        two,
        result("b", "found nothing", at="2026-03-01T12:00:01Z"),
        two,  # the same line again: still two calls, none of them unanswered
        result("stranger", "a result for a call this file never made"),
        result("a", "text", at="2026-03-01T12:00:03Z"),
    )
    with pytest.warns(CleoGradeWarning) as said:
        entries = load_transcript(path)
    assert [(e.domain, e.operation, e.result.duration) for e in entries] == [
        ("tool", "Read", 3000.0),
        ("tool", "Grep", 1000.0),
    ]
    # Nothing skipped unsaid: the repeated line's two blocks, the stranger's result.
    assert [str(w.message) for w in said] == [
        f"{path}: 2 tool_use blocks reusing an id seen before (read as that call) skipped "
        "(lines 7, 7)",
        f"{path}: 1 tool_result block answering no tool_use waiting in the file skipped (line 8)",
    ]


def test_every_skipped_block_is_counted_in_a_warning_the_cli_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A not-found written under a reused id, and a result whose call is not in the file:
    # both out of the grade, neither unsaid.
    path = write(
        tmp_path,
        use("a", "mcp__cleo__tasks_find"),
        result("a", "[]", at="2026-03-01T12:00:01Z"),
        use("a", "mcp__cleo__tasks_show"),
        result("a", "Task T9 not found", at="2026-03-01T12:00:02Z"),
        *[result(f"gone{n}", "ok") for n in range(7)],
    )
    db = tmp_path / "audit.db"
    code = main(["import", "--format", "claude-code", "--db", str(db), str(path)])
    err = capsys.readouterr().err
    assert code == 0
    assert "1 tool_use block reusing an id seen before (read as that call) skipped (line 3)" in err
    assert (
        "8 tool_result blocks answering no tool_use waiting in the file skipped "
        "(lines 4, 5, 6, 7, 8, ...)"
    ) in err


def test_a_big_transcript_streams_in_linear_time(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("w", encoding="utf-8") as out:
        for n in range(20_000):
            out.write(json.dumps(use(f"t{n}", "mcp__cleo__cleo_query")) + "\n")
            out.write(json.dumps(result(f"t{n}", "ok")) + "\n")
    entries = load_transcript(path)
    assert len(entries) == 20_000
    assert all(e.result.success for e in entries)


def doc_block(commands: list[tuple[str, list[str]]], capsys: pytest.CaptureFixture[str]) -> str:
    """The commands run in-process, written as docs/capture.md shows them."""
    shown = []
    for line, argv in commands:
        code = main(argv)
        out, err = capsys.readouterr()
        shown.append(f"$ {line}\n{out}{err}" + (f"exit {code}\n" if code else ""))
    return re.sub(r"Graded at:  \S+", "Graded at:  ...", "".join(shown))


def test_the_capture_page_shows_the_real_import_and_grade(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples" / "sessions").mkdir(parents=True)
    lines = TRANSCRIPT.read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "examples" / "sessions" / TRANSCRIPT.name).write_text(
        "".join(lines), encoding="utf-8"
    )
    page = re.sub(
        r"Graded at:  \S+",
        "Graded at:  ...",
        (ROOT / "docs" / "capture.md").read_text(encoding="utf-8"),
    )
    where = "examples/sessions/claude-code-cleo.jsonl"
    imported = doc_block(
        [
            (
                f"cleo-grade import --format claude-code {where} --db cc.db",
                ["import", "--format", "claude-code", where, "--db", "cc.db"],
            ),
            (f"cleo-grade grade {SESSION} --db cc.db", ["grade", SESSION, "--db", "cc.db"]),
        ],
        capsys,
    )
    assert f"```\n{imported}```" in page
    # The interrupted session: the first 18 lines, then a line cut in half.
    (tmp_path / "interrupted.jsonl").write_text("".join(lines[:18]), encoding="utf-8")
    argv = ["import", "--format", "claude-code", "interrupted.jsonl"]
    assert main([*argv, "--session-id", "interrupted", "--db", "cc.db"]) == 0
    assert main(["show", "interrupted", "--db", "cc.db"]) == 0
    out = capsys.readouterr().out
    ended = "".join(line for line in out.splitlines(keepends=True) if "session.end" in line)
    assert "session.end   cleo_mutate exit 1" in ended
    with (tmp_path / "interrupted.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"type": "user",\n')
    assert main([*argv, "--db", "cc.db"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cleo-grade: error: interrupted.jsonl:19: not valid JSON")
    for shown in (ended, err):
        assert shown in page


def test_a_line_without_session_id_takes_the_files_name(tmp_path: Path) -> None:
    line = use("t1", "Bash")
    del line["sessionId"]
    path = tmp_path / "0b5e-session.jsonl"
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert [e.session_id for e in load_transcript(path)] == ["0b5e-session"]


def test_a_sessions_sub_agent_transcripts_are_imported_with_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Claude Code writes a sub-agent's conversation to <session>/subagents/agent-<id>.jsonl;
    # the session's own file holds only the Agent call.
    main_file = write(tmp_path, use("a", "Agent"), result("a", "done", at="2026-03-01T12:00:09Z"))
    session_file = main_file.rename(tmp_path / "s.jsonl")
    folder = tmp_path / "s" / "subagents"
    folder.mkdir(parents=True)
    side = {"isSidechain": True, "agentId": "a1"}
    lines = [
        {**use("s1", "mcp__cleo__cleo_query", at="2026-03-01T12:00:01Z"), **side},
        {**result("s1", "[]", at="2026-03-01T12:00:02Z"), **side},
        {**use("s2", "mcp__tasks__tasks_find", at="2026-03-01T12:00:03Z"), **side},
        {**result("s2", "T1", at="2026-03-01T12:00:04Z"), **side},
    ]
    lines[0]["message"]["content"][0]["input"] = {"domain": "session", "operation": "list"}
    (folder / "agent-a1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (folder / "notes.txt").write_text("not a transcript")
    rows = [(e.domain, e.operation, e.session_id) for e in load_transcript(session_file)]
    assert rows == [("tool", "Agent", "s"), ("session", "list", "s"), ("tasks", "find", "s")]
    db = tmp_path / "audit.db"
    assert main(["import", "--format", "claude-code", str(session_file), "--db", str(db)]) == 0
    assert "Imported 3 entries" in capsys.readouterr().out


def test_a_built_in_tools_output_holding_an_envelope_is_data_not_a_failure(
    tmp_path: Path,
) -> None:
    # `cat` of a fixture holding CLEO's not-found envelope became a failed call (exit 4),
    # where the hooks record the same call as a success.
    envelope = '{"success": false, "error": {"code": "E_NOT_FOUND", "exitCode": 4}}'
    path = write(
        tmp_path,
        use("t1", "Bash"),
        result("t1", envelope),
        use("t2", "mcp__cleo__cleo_query", at="2026-03-01T12:00:03Z"),
        result("t2", text_blocks(envelope), at="2026-03-01T12:00:04Z"),
    )
    bash, cleo = load_transcript(path)
    assert (bash.result.success, bash.result.exit_code) == (True, 0)
    assert (cleo.result.success, cleo.result.exit_code) == (False, 4)  # an MCP tool's answer


def test_a_call_to_a_tool_that_does_not_exist_is_exit_one(tmp_path: Path) -> None:
    # "No such tool available" read as a not-found (4): the agent was then asked to recover
    # a task it never looked up, where the MCP adapter records the same mistake as exit 1.
    text = "<tool_use_error>Error: No such tool available: mcp__cleo__cleo_qeury</tool_use_error>"
    path = write(tmp_path, use("t1", "mcp__cleo__cleo_qeury"), result("t1", text, error=True))
    [entry] = load_transcript(path)
    assert (entry.result.success, entry.result.exit_code) == (False, 1)
