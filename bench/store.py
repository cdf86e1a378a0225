"""Audit store throughput: durable record() calls, JSONL import, reading + grading a session.

Prints, from one run:
- durable ``audit.record()`` calls per second in one process, and in total with 2 processes
  recording into the same session at once (each call is committed when it returns);
- import of a 100k-entry JSONL file (validate + one transaction) in entries per second;
- reading a 100k-entry session from the store and grading it, against a bare
  ``SELECT * ... ORDER BY timestamp, rowid`` of the same rows (the ratio; target <= 3x).

    .venv/bin/python bench/store.py                 # 3,000 records, 100k entries
    .venv/bin/python bench/store.py 1000 20000      # other sizes
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pytest_cleo_grade.capture import audit
from pytest_cleo_grade.rubrics.cleo import grade_ordered
from pytest_cleo_grade.store import AuditStore
from pytest_cleo_grade.store.sources import load_entries_file

SESSION = "session-1772366400000-be0c4a"
START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
OPS: list[tuple[str, str, dict[str, Any], str | None]] = [
    ("tasks", "find", {"query": "login bug"}, "cleo_query"),
    ("tasks", "show", {"taskId": "T12"}, "cleo_query"),
    ("tasks", "add", {"title": "Fix login", "description": "Users cannot log in"}, "cleo_mutate"),
    ("tasks", "exists", {"taskId": "T1"}, "cleo_query"),
    ("session", "list", {}, "cleo_query"),
    ("admin", "help", {}, "cleo_query"),
]

RECORDER = textwrap.dedent(
    """
    import sys, time
    from pytest_cleo_grade.capture import audit
    count = int(sys.argv[1])
    audit.record("session", "list", gateway="cleo_query")  # open the store before timing
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    started = time.perf_counter()
    for i in range(count):
        audit.record("tasks", "find", {"query": "q", "i": i}, gateway="cleo_query")
    print(time.perf_counter() - started, flush=True)
    """
)


def grade_env(db: Path) -> dict[str, str]:
    return {
        "CLEO_SESSION_GRADE": "true",
        "CLEO_SESSION_GRADE_ID": SESSION,
        "CLEO_SESSION_ID": SESSION,
        "CLEO_AUDIT_DB": str(db),
    }


def bench_record_one_process(db: Path, count: int) -> float:
    os.environ.update(grade_env(db))
    audit.record("session", "list", gateway="cleo_query")  # create and open the store
    started = time.perf_counter()
    for i in range(count):
        audit.record("tasks", "find", {"query": "q", "i": i}, gateway="cleo_query")
    return count / (time.perf_counter() - started)


def bench_record_processes(db: Path, count: int, processes: int) -> float:
    env = {**os.environ, **grade_env(db)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RECORDER, str(count)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    for proc in procs:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    started = time.perf_counter()
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    for proc in procs:
        proc.communicate()
        if proc.returncode:
            raise SystemExit(f"recorder failed with status {proc.returncode}")
    return processes * count / (time.perf_counter() - started)


def write_jsonl(path: Path, count: int) -> None:
    rng = random.Random(7)
    with path.open("w") as handle:
        for i in range(count):
            domain, op, params, gateway = rng.choice(OPS)
            stamp = (START + timedelta(milliseconds=10 * i)).isoformat(timespec="milliseconds")
            entry = {
                "timestamp": stamp.replace("+00:00", "Z"),
                "sessionId": SESSION,
                "domain": domain,
                "operation": op,
                "params": params,
                "result": {"success": True, "exitCode": 0, "duration": 3},
                "metadata": {"source": "mcp", "gateway": gateway},
            }
            handle.write(json.dumps(entry) + "\n")


def best_of(runs: int, func: Any) -> float:
    return min(_timed(func) for _ in range(runs))


def _timed(func: Any) -> float:
    started = time.perf_counter()
    func()
    return time.perf_counter() - started


def main(argv: list[str]) -> None:
    records = int(argv[0]) if argv else 3000
    entries = int(argv[1]) if len(argv) > 1 else 100_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        one = bench_record_one_process(root / "one.db", records)
        print(f"record(), 1 process:   {one:>10,.0f} durable records/s")
        two = bench_record_processes(root / "two.db", records, 2)
        print(f"record(), 2 processes: {two:>10,.0f} durable records/s in total")

        jsonl = root / "entries.jsonl"
        write_jsonl(jsonl, entries)
        with AuditStore(root / "import.db") as store:
            started = time.perf_counter()
            imported = store.append_many(load_entries_file(jsonl))
            elapsed = time.perf_counter() - started
        print(f"import {imported:,} JSONL entries: {imported / elapsed:>10,.0f} entries/s")

        with AuditStore(root / "import.db", read_only=True) as store:
            conn = store.db.conn
            sql = "SELECT * FROM audit_log WHERE session_id = ? ORDER BY timestamp, rowid"
            bare = best_of(3, lambda: conn.execute(sql, (SESSION,)).fetchall())
            read = best_of(3, lambda: store.session_entries(SESSION))
            full = best_of(
                3, lambda: grade_ordered(store.session_entries(SESSION), session_id=SESSION)
            )
        print(f"bare SELECT of {entries:,} rows:  {bare * 1000:>8.0f} ms")
        print(f"read {entries:,} entries:         {read * 1000:>8.0f} ms")
        print(f"read + grade {entries:,} entries: {full * 1000:>8.0f} ms")
        print(f"read + grade / bare SELECT: {full / bare:.2f}x (target <= 3x)")


if __name__ == "__main__":
    main(sys.argv[1:])
