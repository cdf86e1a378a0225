"""Grading throughput: CLEO rubric over synthetic sessions of 1k, 100k and 1M entries.

Prints entries/s for grading validated entries and for validating raw dicts, the ratio of
grading time to a bare loop that only reads each entry's domain and operation, and how the
per-entry cost grows from 1k to 1M (linear growth means a ratio near 1).

    .venv/bin/python bench/grade.py            # 1k, 100k, 1M
    .venv/bin/python bench/grade.py 1000 50000 # other sizes
"""

from __future__ import annotations

import gc
import random
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from pytest_cleo_grade import grade_entries
from pytest_cleo_grade.core.models import AuditEntry, validate_entry_dicts

START = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# (weight, domain, operation, success, exit code, params) — about 30 % tasks.find.
MIX: list[tuple[int, str, str, bool, int, dict[str, Any]]] = [
    (30, "tasks", "find", True, 0, {"query": "login bug"}),
    (8, "tasks", "list", True, 0, {"parent": "T1"}),
    (12, "tasks", "show", True, 0, {"taskId": "T12"}),
    (6, "tasks", "show", False, 4, {"taskId": "T404"}),  # E_NOT_FOUND
    (8, "tasks", "add", True, 0, {"title": "Fix login", "description": "Users cannot log in"}),
    (3, "tasks", "add", True, 0, {"title": "No description"}),
    (3, "tasks", "add", True, 0, {"title": "Subtask", "description": "d", "parent": "T1"}),
    (6, "tasks", "exists", True, 0, {"taskId": "T1"}),
    (8, "tasks", "update", True, 0, {"taskId": "T12", "status": "active"}),
    (6, "session", "list", True, 0, {}),
    (4, "admin", "help", True, 0, {}),
    (3, "tools", "skill.show", True, 0, {"name": "ct-cleo"}),
    (3, "memory", "find", True, 0, {"query": "auth"}),
]


def synthetic(count: int, seed: int = 7) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    weights = [m[0] for m in MIX]
    picks = rng.choices(MIX, weights=weights, k=count)
    rows = []
    for i, (_, domain, op, ok, code, params) in enumerate(picks):
        stamp = START + timedelta(milliseconds=10 * i)
        rows.append(
            {
                "timestamp": stamp.isoformat().replace("+00:00", "Z"),
                "sessionId": "bench",
                "domain": domain,
                "operation": op,
                "params": dict(params, title=f"{params['title']} {i % 997}")
                if "title" in params
                else params,
                "result": {"success": ok, "exitCode": code, "duration": 12},
                "metadata": {
                    "source": "mcp",
                    "gateway": "cleo_query" if op in {"find", "show", "list"} else "cleo_mutate",
                },
                "error": None if ok else "E_NOT_FOUND",
            }
        )
    return rows


def best_of(runs: int, action: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def bare_loop(entries: list[AuditEntry]) -> int:
    seen = 0
    for entry in entries:
        if entry.domain and entry.operation:
            seen += 1
    return seen


def main(sizes: list[int]) -> None:
    print(f"python {sys.version.split()[0]}; best of 3 runs each")
    header = (
        f"{'entries':>9}  {'grade/s':>12}  {'grade s':>8}  {'validate/s':>11}  "
        f"{'bare loop s':>11}  {'grade/bare':>10}  score"
    )
    print(header)
    per_entry: dict[int, float] = {}
    for size in sizes:
        raw = synthetic(size)
        started = time.perf_counter()
        entries = validate_entry_dicts(raw)
        validate = time.perf_counter() - started
        del raw
        grade_time = best_of(3, partial(grade_entries, entries, session_id="bench"))
        bare = best_of(3, partial(bare_loop, entries))
        result = grade_entries(entries, session_id="bench")
        per_entry[size] = grade_time / size
        print(
            f"{size:>9,}  {size / grade_time:>12,.0f}  {grade_time:>8.3f}  "
            f"{size / validate:>11,.0f}  {bare:>11.4f}  {grade_time / bare:>10.1f}  "
            f"{result.total_score}/100 {result.letter}"
        )
        del entries
    if len(sizes) > 1:
        small, large = min(sizes), max(sizes)
        growth = per_entry[large] / per_entry[small]
        print(
            f"per-entry grading cost {large:,} vs {small:,}: {growth:.2f}x "
            f"({'linear' if growth <= 1.5 else 'NOT linear'}; target <= 1.5x)"
        )
        if large >= 1_000_000:
            verdict = "met" if per_entry[large] * large < 1.0 else "MISSED"
            print(
                f"1M-entry session graded in {per_entry[large] * large:.3f} s "
                f"(target < 1 s: {verdict})"
            )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1_000, 100_000, 1_000_000])
