"""History readers on a generated history of years: the CLI's commands as child processes.

Each command runs as a child process (as a user runs it), alternating with a floor child
that only ``json.loads`` every line of the same file; its peak RSS is the child's own
``ru_maxrss`` (``os.wait4``). A history of ``tests`` tests per run, about 2.9 KB a line as a
CLEO grade with its evidence and flags is.

    .venv/bin/python bench/history.py                 # 200,000 lines
    .venv/bin/python bench/history.py --lines 20000   # smaller, quicker
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Row, alternate, paired_ratio, table

_DIMENSIONS = (
    "sessionDiscipline",
    "discoveryEfficiency",
    "taskHygiene",
    "errorProtocol",
    "disclosureUse",
)

_FLOOR = "import json, sys\nfor line in open(sys.argv[1], 'rb'):\n    json.loads(line)\n"


def write_history(path: Path, lines: int, tests: int = 200) -> None:
    """``lines`` grade lines: runs of ``tests`` tests, each line its run's id and position."""
    evidence = [f"evidence line {n}: tasks.find before tasks.show, as it should" for n in range(6)]
    flags = [f"flag {n}: tasks.show without a tasks.find first (discovery)" for n in range(14)]
    with path.open("w", encoding="utf-8") as handle:
        for number in range(lines):
            run, test = divmod(number, tests)
            score = (number * 7) % 21
            line = {
                "sessionId": f"session-{run}-{test}",
                "totalScore": score * 5,
                "maxScore": 100,
                "dimensions": {
                    name: {"score": score, "max": 20, "evidence": evidence} for name in _DIMENSIONS
                },
                "flags": flags,
                "timestamp": f"2026-03-{1 + run % 28:02d}T12:00:00.000Z",
                "entryCount": 40,
                "evaluator": "auto",
                "points": [],
                "testId": f"tests/test_agent.py::test_agent[{test}]",
                "runId": f"run-{run:05d}",
                "position": test,
                "cleoStatus": "passed" if score * 5 >= 50 else "below",
                "cleoThreshold": 50.0,
            }
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")


def child(argv: list[str]) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of a child process, its output discarded."""
    import time

    started = time.perf_counter()
    with open(os.devnull, "wb") as sink:
        process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.PIPE)
        assert process.stderr is not None
        errors = process.stderr.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.perf_counter() - started
    if process.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {process.returncode}: {errors.decode()[-400:]}")
    return elapsed, usage.ru_maxrss * 1024


def history_rows(tmp: Path, lines: int, rounds: int) -> list[Row]:
    history = tmp / "GRADES.jsonl"
    write_history(history, lines)
    cli = [str(Path(sys.executable).with_name("cleo-grade"))]
    commands = {
        "list": [*cli, "list", "--history", str(history)],
        "baseline save": [*cli, "baseline", "save", str(tmp / "b.json"), "--history", str(history)],
        "report": [*cli, "report", "--history", str(history)],
        "floor": [sys.executable, "-c", _FLOOR, str(history)],
    }
    peaks: dict[str, list[int]] = {name: [] for name in commands}

    def run(name: str) -> float:
        seconds, rss = child(commands[name])
        peaks[name].append(rss)
        return seconds

    figures = alternate({name: (lambda n=name: run(n)) for name in commands}, rounds)
    f = figures["floor"]
    size = history.stat().st_size / 1024**2
    rows = []
    for name in ("list", "baseline save", "report"):
        p = figures[name]
        peak = max(peaks[name]) / 1024**2
        rows.append(
            Row(
                f"cleo-grade {name}, {lines:,}-line history ({size:.0f} MB) vs json.loads per line",
                f"{p.min:.2f} / {p.median:.2f} s",
                f"{f.min:.2f} / {f.median:.2f} s",
                paired_ratio(p, f),
                "(every line validated)",
                None,
            )
        )
        rows.append(
            Row(
                f"  peak RSS of cleo-grade {name} (floor: json.loads alone)",
                f"{peak:.0f} MB",
                f"{max(peaks['floor']) / 1024**2:.0f} MB",
                max(peaks[name]) / max(peaks["floor"]),
                "< 300 MB",
                peak < 300,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cleo-grade-bench-") as name:
        print(table(history_rows(Path(name), args.lines, args.rounds)))


if __name__ == "__main__":
    main()
