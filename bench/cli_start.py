"""The CLI's bench rows: how long ``cleo-grade`` takes to start, as a user's shell runs it.

Each figure is a fresh process of the venv's ``cleo-grade`` entry point against a bare
interpreter doing the least the command must: for ``--help``, importing what any such
command imports (argparse, json, sqlite3); for ``record`` (once per call of a shell agent),
inserting one row into an existing SQLite database and committing. Python's default bytecode
cache, warmed by one untimed run of each.

    .venv/bin/python bench/cli_start.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import Row, alternate, paired_ratio, table, user_environment

from pytest_cleo_grade.store import AuditStore

CLI = Path(sys.executable).with_name("cleo-grade")

#: One call a shell agent records (what `cleo-grade record` does most).
RECORD = (
    "record",
    "tasks",
    "show",
    "--params",
    '{"taskId": "T001"}',
    "--gateway",
    "cleo_query",
    "--duration",
    "3.5",
)

#: The floor's one insert: a row as wide as the store's, committed, in WAL mode as the store.
FLOOR_INSERT = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
conn.execute(
    "INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    ("id", "2026-03-01T12:00:00.000Z", "tasks.show", "T001", '{"taskId":"T001"}', "tasks",
     "show", "bench", 3.5, 1, "cli", "cleo_query", None, 0, None),
)
conn.commit()
conn.close()
"""


def _environment(**extra: str) -> dict[str, str]:
    # As on a user's machine: the bytecode cache written (this development machine sets
    # PYTHONDONTWRITEBYTECODE), no session or pytest settings of the caller's.
    return {**user_environment(), **extra}


def _timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or done.stderr:
        sys.exit(f"bench: {argv[0]} {' '.join(argv[1:3])} failed: {done.stderr[-2000:]!r}")
    return elapsed


def _row(
    label: str, target: float, variants: dict[str, list[str]], env: dict[str, str], rounds: int
) -> Row:
    """``project`` against ``floor``, both run once per round in turn."""
    for argv in variants.values():  # fills the bytecode caches before anything is timed
        _timed(argv, env)
    actions = {name: functools.partial(_timed, argv, env) for name, argv in variants.items()}
    figures = alternate(actions, rounds)
    p, f = figures["project"], figures["floor"]
    ratio = paired_ratio(p, f)
    return Row(
        label,
        f"{p.min * 1000:.0f} / {p.median * 1000:.0f} ms",
        f"{f.min * 1000:.0f} / {f.median * 1000:.0f} ms",
        ratio,
        f"<= {target:g}x",
        ratio <= target,
    )


def cli_rows(tmp: Path, rounds: int) -> list[Row]:
    if not CLI.exists():
        sys.exit(f"bench: no {CLI} (install the package into this interpreter's venv)")
    python = sys.executable
    help_row = _row(
        "cleo-grade --help vs python -c 'import argparse, json, sqlite3'",
        2.5,
        {
            "project": [str(CLI), "--help"],
            "floor": [python, "-c", "import argparse, json, sqlite3"],
        },
        _environment(),
        rounds,
    )
    store = tmp / "cli-start" / "audit.db"
    with AuditStore(store):
        pass  # an existing, current store, as a graded session's first call leaves it
    floor_db = tmp / "cli-start" / "floor.db"
    conn = sqlite3.connect(floor_db)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"CREATE TABLE calls ({', '.join(f'c{i}' for i in range(15))})")
    conn.close()
    env = _environment(
        CLEO_SESSION_GRADE="true", CLEO_SESSION_GRADE_ID="bench", CLEO_AUDIT_DB=str(store)
    )
    record_row = _row(
        "cleo-grade record into an existing store vs one bare SQLite insert",
        3,
        {"project": [str(CLI), *RECORD], "floor": [python, "-c", FLOOR_INSERT, str(floor_db)]},
        env,
        rounds,
    )
    with AuditStore(store, read_only=True) as check:
        if check.count("bench") != rounds + 1:  # every run stored its call, once
            sys.exit(f"bench: {check.count('bench')} calls stored of {rounds + 1} recorded")
    return [help_row, record_row]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cleo-grade-bench-") as name:
        print(table(cli_rows(Path(name), args.rounds)))
