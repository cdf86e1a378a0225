"""Streamed ``cleo-grade import``: throughput and peak memory of a large JSONL file.

Runs the real command in a child process and reads its peak RSS from
``resource.getrusage(RUSAGE_CHILDREN)``. Prints, from one run:
- entries per second of a valid N-entry import (target >= 60,000/s) and its peak RSS;
- the time and peak RSS of an import whose line 1 is invalid, followed by N lines of ``{}``
  (it must stop after one line: milliseconds and a baseline RSS, whatever N).

    .venv/bin/python bench/import_stream.py            # 1,000,000 entries
    .venv/bin/python bench/import_stream.py 200000     # another size
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = "import sys; from pytest_cleo_grade.cli import main; sys.exit(main())"


def write_entries(path: Path, count: int) -> None:
    ops = [("session", "list"), ("tasks", "find"), ("tasks", "show"), ("tasks", "add")]
    with path.open("w", encoding="utf-8") as handle:
        for i in range(count):
            domain, operation = ops[i % len(ops)]
            entry = {
                "timestamp": f"2026-03-01T12:{(i // 60000) % 60:02d}:{(i // 1000) % 60:02d}."
                f"{i % 1000:03d}Z",
                "sessionId": f"session-{i // 10000}",
                "domain": domain,
                "operation": operation,
                "params": {"query": f"q{i}", "taskId": f"T{i % 97}"},
                "result": {"success": True, "exitCode": 0, "duration": 3},
                "metadata": {"source": "mcp", "gateway": "cleo_query"},
            }
            handle.write(json.dumps(entry, separators=(",", ":")) + "\n")


def run_import(source: Path, db: Path) -> tuple[int, float, float, float, str]:
    """Exit status, wall seconds, CPU seconds, peak RSS of the child in MiB, and its stderr.

    CPU time is reported beside wall time: on a machine shared with other work the wall
    figure measures the neighbours too.
    """
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu_before = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", CLI, "import", str(source), "--db", str(db)],
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if not k.startswith("CLEO_")},
    )
    elapsed = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime - cpu_before
    # ru_maxrss of children is the largest of any child so far (KiB on Linux); the error
    # import runs first, so the valid import's figure is its own unless it is smaller.
    return done.returncode, elapsed, cpu, max(usage.ru_maxrss, before) / 1024, done.stderr.strip()


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        bad = root / "bad.jsonl"
        with bad.open("w") as handle:
            handle.write("{broken\n")
            handle.write("{}\n" * count)
        status, seconds, _, peak, err = run_import(bad, root / "bad.db")
        print(
            f"error on line 1 of {count + 1:,} lines: exit {status} in {seconds:.2f}s, "
            f"peak RSS {peak:.0f} MiB ({err})"
        )
        good = root / "good.jsonl"
        write_entries(good, count)
        size = good.stat().st_size / 1024 / 1024
        status, seconds, cpu, peak, err = run_import(good, root / "good.db")
        assert status == 0, err
        print(
            f"valid import of {count:,} entries ({size:.0f} MiB): {seconds:.1f}s wall, "
            f"{count / seconds:,.0f} entries/s; {cpu:.1f}s CPU, {count / cpu:,.0f} entries per "
            f"CPU second (target >= 60,000/s); peak RSS {peak:.0f} MiB"
        )


if __name__ == "__main__":
    main()
