"""Floors: what CPython does for the same work without the project, written by hand.

Each figure in ``make bench`` is a ratio against one of these, measured in the same run.
``tuple_grade`` must agree with ``grade_entries`` on the benchmark data (checked by run.py).
"""

from __future__ import annotations

import json
import sqlite3
from datetime import datetime
from typing import Any

from pydantic import TypeAdapter

# (timestamp, domain, operation, gateway, exit code, success, has description, title key,
#  has parent, task id): the only facts CLEO's rubric reads from an entry.
Row = tuple[datetime, str, str, Any, int, bool, bool, Any, bool, Any]

HELP = {("admin", "help"), ("tools", "skill.show"), ("tools", "skill.list")}
HELP |= {("skills", "list"), ("skills", "show")}


def to_row(data: dict[str, Any]) -> Row:
    """One JSON entry (CLEO's shape) as the tuple the floor grades."""
    params = data.get("params") or {}
    result = data["result"]
    meta = data.get("metadata") or {}
    description = params.get("description")
    title = params.get("title")
    return (
        datetime.fromisoformat(data["timestamp"].replace("Z", "+00:00")),
        data["domain"],
        data["operation"],
        meta.get("gateway"),
        result.get("exitCode", 0),
        result["success"],
        bool(description.strip()) if isinstance(description, str) else bool(description),
        None if title is None else str(title).strip().lower() or None,
        bool(params.get("parent")),
        meta.get("taskId"),
    )


def tuple_grade(rows: list[Row]) -> tuple[int, list[str]]:
    """CLEO's rubric in one pass over tuples: (total score, flags)."""
    first_task = first_list = None
    ends = finds = lists = shows = helps = queries = adds = subtasks = 0
    missing: list[str] = []
    titles: list[str] = []
    exists_seen = subtask_unverified = False
    not_found: list[int] = []
    for i, (ts, domain, op, gateway, code, ok, described, title, parent, task_id) in enumerate(
        rows
    ):
        if gateway == "cleo_query" or gateway == "query":
            queries += 1
        if domain == "tasks":
            if first_task is None:
                first_task = ts
            if op == "find":
                finds += 1
            elif op == "list":
                lists += 1
            elif op == "show":
                shows += 1
            elif op == "exists":
                exists_seen = True
            elif op == "add" and ok:
                adds += 1
                if not described:
                    missing.append("unknown" if task_id is None else task_id)
                if parent:
                    subtasks += 1
                    subtask_unverified = subtask_unverified or not exists_seen
                if title:
                    titles.append(title)
        elif domain == "session":
            if op == "list" and first_list is None:
                first_list = ts
            elif op == "end":
                ends += 1
        elif (domain, op) in HELP:
            helps += 1
        if code == 4 and not ok:
            not_found.append(i)
    flags: list[str] = []
    s1 = 0
    if first_list is None:
        flags.append("session.list never called (check existing sessions before starting)")
    elif first_task is None or first_list <= first_task:
        s1 += 10
    else:
        flags.append("session.list called after task ops (should check sessions first)")
    if ends:
        s1 += 10
    else:
        flags.append("session.end never called (always end sessions when done)")
    total = finds + lists
    if total == 0:
        s2 = 10
    elif finds * 5 >= total * 4:
        s2 = 15
    else:
        s2 = (30 * finds + total) // (2 * total)
        flags.append(f"tasks.list used {lists}x (prefer tasks.find for discovery)")
    s2 = min(s2 + (5 if shows else 0), 20)
    s3 = 20 - 5 * len(missing)
    flags += [f"tasks.add without description (taskId: {t})" for t in missing]
    if subtasks and subtask_unverified:
        s3 -= 3
        flags.append("Subtasks created without tasks.exists parent check")
    s4 = 20
    for i in not_found:
        window = rows[i + 1 : i + 5]
        if not any(r[1] == "tasks" and r[2] in ("find", "exists") for r in window):
            s4 -= 5
            flags.append(f"E_NOT_FOUND ({rows[i][1]}.{rows[i][2]}) not followed by recovery lookup")
    duplicates = len(titles) - len(set(titles))
    if duplicates:
        s4 -= 5
        flags.append(f"{duplicates} potentially duplicate task create(s) detected")
    s5 = 0
    if helps:
        s5 += 10
    else:
        flags.append("No admin.help or skill lookup calls (load ct-cleo for guidance)")
    if queries:
        s5 += 10
    else:
        flags.append("No MCP query calls (prefer cleo_query over CLI for programmatic access)")
    return s1 + s2 + max(s3, 0) + max(s4, 0) + s5, flags


def read_fields(entries: list[Any]) -> int:
    """Only read, off validated entries, the fields any grader of them must read.

    Not a grader: the limit of grading pydantic objects at all. A million entries do not fit
    in the CPU caches, so touching each one's domain, operation, gateway, exit code, session
    and time, and the description, title and parent of each successful tasks.add (S3 and S4
    read them), costs cache misses that a grader over pre-extracted tuples never pays.
    """
    seen = 0
    for entry in entries:
        entry.session_id, entry.timestamp, entry.metadata.gateway  # noqa: B018
        domain, operation, result = entry.domain, entry.operation, entry.result
        result.exit_code  # noqa: B018
        if result.success and operation == "add" and domain == "tasks":
            get = entry.params.get
            get("description"), get("title"), get("parent")
        seen += 1
    return seen


def json_insert(lines: list[str], db_path: str) -> int:
    """Bare json.loads of every line and one executemany into a table of the same width."""
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS audit_log (id TEXT PRIMARY KEY, timestamp TEXT, "
        "domain TEXT, operation TEXT, session_id TEXT, details_json TEXT, success INTEGER, "
        "gateway TEXT, exit_code INTEGER)"
    )
    rows = []
    for number, line in enumerate(lines):
        data = json.loads(line)
        rows.append(
            (
                str(number),
                data["timestamp"],
                data["domain"],
                data["operation"],
                data.get("sessionId"),
                json.dumps(data.get("params")),
                data["result"]["success"],
                (data.get("metadata") or {}).get("gateway"),
                data["result"].get("exitCode", 0),
            )
        )
    conn.execute("BEGIN")
    conn.executemany("INSERT INTO audit_log VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    conn.execute("COMMIT")
    conn.close()
    return len(rows)


def validate_and_insert(blobs: list[bytes], rows: list[tuple[Any, ...]], db_path: str) -> int:
    """The least an import that validates every entry does: pydantic validation of each
    batch (the entry model, one call per batch as the project makes it) and one executemany
    of the store's rows, built beforehand, into the store's own table and indexes.

    Not an importer: it converts nothing. What it costs is the limit of validating and
    storing, whatever the code between the two.
    """
    from pytest_cleo_grade.core.models import AuditEntry, collector_paused
    from pytest_cleo_grade.store import AuditStore

    adapter = TypeAdapter(list[AuditEntry])
    with collector_paused():
        for blob in blobs:
            adapter.validate_json(blob)
    with AuditStore(db_path) as store:
        return store.append_rows(rows)


#: The floor of the plugin row: a conftest fixture that keeps entries in a list and grades them
#: with grade_entries at teardown (what a user could write in 20 lines instead of the plugin).
CONFTEST_FLOOR = """
from datetime import datetime, timezone

import pytest

from pytest_cleo_grade import grade_entries


class Session:
    def __init__(self):
        self.entries = []

    def record(self, domain, operation, params=None, *, gateway=None, exit_code=0):
        self.entries.append({
            "timestamp": datetime.now(timezone.utc), "domain": domain, "operation": operation,
            "params": params or {}, "metadata": {"gateway": gateway},
            "result": {"success": exit_code == 0, "exitCode": exit_code, "duration": 0},
        })


@pytest.fixture
def graded_session():
    session = Session()
    yield session
    grade_entries(session.entries, session_id="floor")
"""

#: The plugin row's second floor: CONFTEST_FLOOR plus, at teardown, the writes the contract
#: asks of every graded test (DESIGN §5 and §6): the test's entries in one SQLite transaction
#: (a table as wide as CLEO's, with its primary key and session index), its grade in a second
#: one, and a history line appended. What no in-process design that keeps grades durable per
#: test can avoid; the plugin's cost above it is its own.
CONFTEST_DURABLE_FLOOR = (
    CONFTEST_FLOOR
    + """
import json
import os
import sqlite3
import uuid

_DB = sqlite3.connect(os.environ["BENCH_FLOOR_DB"], isolation_level=None)
_DB.execute("PRAGMA journal_mode = WAL")
_DB.execute("PRAGMA synchronous = NORMAL")
_DB.execute(
    "CREATE TABLE IF NOT EXISTS audit_log (id TEXT PRIMARY KEY NOT NULL, timestamp TEXT, "
    "action TEXT, task_id TEXT, actor TEXT, details_json TEXT, before_json TEXT, "
    "after_json TEXT, domain TEXT, operation TEXT, session_id TEXT, request_id TEXT, "
    "duration_ms INTEGER, success INTEGER, source TEXT, gateway TEXT, error_message TEXT, "
    "project_hash TEXT, idempotency_key TEXT, exit_code INTEGER, metadata_json TEXT)"
)
_DB.execute("CREATE INDEX IF NOT EXISTS s ON audit_log (session_id, timestamp)")
_DB.execute("CREATE TABLE IF NOT EXISTS grades (id INTEGER PRIMARY KEY, session_id TEXT, "
            "total_score REAL, result_json TEXT)")


@pytest.fixture
def graded_session(request):
    session = Session()
    yield session
    sid = request.node.nodeid
    rows = [
        (uuid.uuid4().hex, e["timestamp"].isoformat(), e["domain"] + "." + e["operation"],
         "system", "agent", json.dumps(e["params"]), None, None, e["domain"], e["operation"],
         sid, None, 0, 1, "mcp", e["metadata"]["gateway"], None, None, None, 0, None)
        for e in session.entries
    ]
    _DB.execute("BEGIN IMMEDIATE")
    _DB.executemany("INSERT INTO audit_log VALUES (" + ", ".join("?" * 21) + ")", rows)
    _DB.execute("COMMIT")
    result = grade_entries(session.entries, session_id=sid)
    line = result.model_dump_json()
    _DB.execute("BEGIN IMMEDIATE")
    _DB.execute("INSERT INTO grades VALUES (NULL, ?, ?, ?)", (sid, result.total_score, line))
    _DB.execute("COMMIT")
    with open(os.environ["BENCH_FLOOR_DB"] + ".jsonl", "a", encoding="utf-8") as history:
        history.write(line + "\\n")
"""
)
