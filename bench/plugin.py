"""Benchmark: the plugin's per-test overhead on a suite, against the same suite without it.

Generates a suite of 300 tests that each record 30 audit entries through ``graded_session``
and are graded, persisted and summarised; the baseline is the same 300 tests recording
nothing, run with ``-p no:cleo_grade``. Both run in fresh pytest processes (best of a few
rounds, so start-up noise cancels out). Prints figures; asserts nothing.

    .venv/bin/python bench/plugin.py [--tests 300] [--entries 30] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

GRADED = """
import pytest

CALLS = [
    ("session", "list", "cleo_query", {{}}),
    ("admin", "help", "cleo_query", {{}}),
    ("tasks", "find", "cleo_query", {{"query": "audit"}}),
    ("tasks", "show", "cleo_query", {{"taskId": "T001"}}),
    ("tasks", "add", "cleo_mutate", {{"title": "t", "description": "d"}}),
    ("tasks", "list", "cleo_query", {{}}),
]

@pytest.mark.parametrize("n", range({tests}))
def test_agent(graded_session, n):
    for i in range({entries}):
        domain, operation, gateway, params = CALLS[i % len(CALLS)]
        graded_session.record(domain, operation, params, gateway=gateway)
"""

PLAIN = """
import pytest

@pytest.mark.parametrize("n", range({tests}))
def test_agent(n):
    pass
"""


def run_suite(directory: Path, extra: list[str]) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CLEO_"))}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *extra]
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=directory, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - started
    if completed.returncode != 0:
        sys.exit(f"bench suite failed in {directory}:\n{completed.stdout}\n{completed.stderr}")
    return elapsed


def import_cost(rounds: int) -> float:
    """Seconds the grading stack (pydantic, SQLite, rubric) takes to load on first use."""

    def timed(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - started

    base = "import pytest, pytest_cleo_grade.plugin"
    full = base + ", pytest_cleo_grade.grading.session, pytest_cleo_grade.reports._display"
    return min(timed(full) for _ in range(rounds)) - min(timed(base) for _ in range(rounds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=300)
    parser.add_argument("--entries", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cleo-grade-bench-") as tmp:
        suites = {
            "graded": GRADED.format(tests=args.tests, entries=args.entries),
            # The same graded tests recording nothing: the plugin's own machinery alone.
            "empty": GRADED.format(tests=args.tests, entries=0),
            "plain": PLAIN.format(tests=args.tests),
        }
        times: dict[str, list[float]] = {name: [] for name in suites}
        for name, source in suites.items():
            directory = Path(tmp) / name
            directory.mkdir()
            (directory / "pytest.ini").write_text("[pytest]\n")
            (directory / "test_suite.py").write_text(textwrap.dedent(source))
        for round_ in range(args.rounds):
            for name in ("graded", "empty"):
                # A fresh store each round, so every round does the same work.
                store = Path(tmp) / "store" / f"{name}-{round_}"
                extra = [f"--cleo-grade-db={store}.db", f"--cleo-grade-history={store}.jsonl"]
                times[name].append(run_suite(Path(tmp) / name, extra))
            times["plain"].append(run_suite(Path(tmp) / "plain", ["-p", "no:cleo_grade"]))
    graded, empty, plain = (min(times[name]) for name in ("graded", "empty", "plain"))
    loading = import_cost(args.rounds)
    per_test_ms = (graded - plain) * 1000 / args.tests
    machinery_ms = (empty - plain) * 1000 / args.tests
    print(
        f"suite: {args.tests} tests x {args.entries} entries, best of {args.rounds} rounds "
        "(fresh pytest processes)"
    )
    rows = [
        ("with the plugin grading", f"{graded:.3f} s"),
        ("same tests recording 0 entries", f"{empty:.3f} s"),
        ("-p no:cleo_grade, no recording", f"{plain:.3f} s"),
        ("overhead per graded test", f"{per_test_ms:.3f} ms (target <= 3 ms)"),
        (f"  recording+grading {args.entries} entries", f"{per_test_ms - machinery_ms:.3f} ms"),
        ("  the plugin itself (0 entries)", f"{machinery_ms:.3f} ms"),
        (
            "    loading pydantic/SQLite once",
            f"{loading * 1000 / args.tests:.3f} ms ({loading:.3f} s per grading run)",
        ),
        ("ratio graded / plain", f"{graded / plain:.2f}x"),
    ]
    for label, value in rows:
        print(f"{label + ':':<40} {value}")


if __name__ == "__main__":
    main()
