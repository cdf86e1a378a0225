"""History readers on a generated history of years: the CLI's commands as child processes.

Each command runs as a child process (as a user runs it), alternating with floor children
that only ``json.loads`` the lines the command shows (the issue's floors): the latest run's
lines alone for ``list --latest-run``, ``baseline save`` and ``report``; the lines its trends
draw (the last 500 runs) for ``report --html``; every line for ``junit`` and ``list``, which
show one row per session or line. Peak RSS is each child's own ``ru_maxrss`` (``os.wait4``).
A history of 200 tests per run, about 2.9 KB a line as a CLEO grade with its evidence and
flags is. The first read builds the history's index (its own row); every later one, as in
CI, finds at most the lines appended since indexed.

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Row, alternate, paired_ratio, table, user_environment

_DIMENSIONS = (
    "sessionDiscipline",
    "discoveryEfficiency",
    "taskHygiene",
    "errorProtocol",
    "disclosureUse",
)

#: The floor: ``json.loads`` of the lines a command shows and nothing else. With a number
#: of runs N, the lines of the history's last N run ids, found from the end of the file
#: backwards (the latest run's lines alone, or the runs a trend draws); with 0, every line.
#: Run as a child process (``_FLOOR``), or in this one for the plugin's rows.
_FLOOR_READ = r"""
import json


def read_runs(path, runs):
    if not runs:
        for line in open(path, "rb"):
            json.loads(line)
        return
    seen = set()
    with open(path, "rb") as handle:
        end = handle.seek(0, 2)
        carry = b""
        while end > 0:
            start = max(0, end - (1 << 20))
            handle.seek(start)
            lines = (handle.read(end - start) + carry).split(b"\n")
            end = start
            carry = lines.pop(0) if start else b""
            for raw in reversed(lines):
                if raw:
                    run = json.loads(raw)["runId"]
                    if run not in seen:
                        if len(seen) == runs:
                            return
                        seen.add(run)
"""
_FLOOR = _FLOOR_READ + "\nimport sys\nread_runs(sys.argv[1], int(sys.argv[2]))\n"


def write_history(path: Path, lines: int, tests: int = 200, first: int = 0) -> None:
    """``lines`` grade lines: runs of ``tests`` tests, each line its run's id and position
    (runs numbered from ``first``; appended when the file exists)."""
    evidence = [f"evidence line {n}: tasks.find before tasks.show, as it should" for n in range(6)]
    flags = [f"flag {n}: tasks.show without a tasks.find first (discovery)" for n in range(14)]
    with path.open("a", encoding="utf-8") as handle:
        for number in range(first * tests, first * tests + lines):
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


#: Starts the command from a small process: a child's peak RSS counts the memory of the
#: process it was forked from (its pages before exec), so a command forked from this bench
#: (tens of MB, the generated history's strings) would never show a peak below the bench's.
_LAUNCH = r"""
import os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{time.perf_counter() - started} {usage.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status))
"""


def child(argv: list[str], gated: bool = False) -> tuple[float, int]:
    """(seconds, peak RSS in bytes) of a child process, its output discarded (``gated``: a
    command whose gate may fail, exit status 1, as it should)."""
    with tempfile.NamedTemporaryFile("r", suffix=".figures") as figures:
        with open(os.devnull, "wb") as sink:
            process = subprocess.run(
                [sys.executable, "-S", "-c", _LAUNCH, figures.name, *argv],
                stdout=sink,
                stderr=subprocess.PIPE,
                check=False,
                env=user_environment(),  # with the bytecode cache, as run_pytest's children
            )
        if process.returncode not in ((0, 1) if gated else (0,)):
            sys.exit(
                f"{' '.join(argv)} exited {process.returncode}: {process.stderr.decode()[-400:]}"
            )
        seconds, rss = figures.read().split()
    return float(seconds), int(rss) * 1024


#: (row, the command's arguments after ``cleo-grade``, runs the floor reads (0: every line),
#: what the floor is, target ratio).
#: The issue's targets are list --latest-run, report --html, junit (and the plugin's
#: baseline=latest, _plugin_rows): baseline save and report show where they stand.
_COMMANDS: tuple[tuple[str, list[str], int, str, float | None], ...] = (
    ("list --latest-run", ["list", "--latest-run"], 1, "the latest run's lines", 2.0),
    ("baseline save", ["baseline", "save", "{tmp}/b.json"], 1, "the latest run's lines", None),
    ("report", ["report"], 1, "the latest run's lines", None),
    ("report --html", ["report", "--html", "{tmp}/r.html"], 500, "the lines shown", 2.0),
    ("junit", ["junit", "-"], 0, "the lines shown (one per session)", 2.0),
    # Every passing session's whole report too: a 700 MB document for 200,000 sessions.
    ("junit --reports", ["junit", "-", "--reports"], 0, "the lines shown (one per session)", None),
    # A gate most sessions fail (80 % of this history's): each failing case holds its report.
    (
        "junit --fail-under B",
        ["junit", "-", "--fail-under", "B"],
        0,
        "the lines shown (one per session)",
        None,
    ),
    ("list", ["list"], 0, "the lines shown (every line)", 2.0),
)


def history_rows(tmp: Path, lines: int, rounds: int) -> list[Row]:
    history = tmp / "GRADES.jsonl"
    tests = 200
    write_history(history, lines, tests)
    cli = str(Path(sys.executable).with_name("cleo-grade"))
    size = history.stat().st_size / 1024**2
    floors = {runs for *_, runs, _what, _target in _COMMANDS}

    def argv(name: str) -> list[str]:
        args = next(a for row, a, *_ in _COMMANDS if row == name)
        return [cli, *(a.format(tmp=tmp) for a in args), "--history", str(history)]

    # The first read builds the index (every line parsed once); a CI run then appends a run
    # and the next read indexes only those lines.
    built, built_rss = child(argv("report"))
    floor_all, _ = child([sys.executable, "-c", _FLOOR, str(history), "0"])
    appended = [lines // tests]

    def append_then_report() -> float:
        write_history(history, tests, tests, first=appended[0])
        appended[0] += 1
        seconds, rss = child(argv("report"))
        peaks["report after a run appended"].append(rss)
        return seconds

    peaks: dict[str, list[int]] = {name: [] for name, *_ in _COMMANDS}
    peaks["report after a run appended"] = []
    peaks.update({f"floor {runs}": [] for runs in floors})

    def run(name: str) -> float:
        seconds, rss = child(argv(name), gated="--fail-under" in name)
        peaks[name].append(rss)
        return seconds

    def floor(runs: int) -> float:
        seconds, rss = child([sys.executable, "-c", _FLOOR, str(history), str(runs)])
        peaks[f"floor {runs}"].append(rss)
        return seconds

    variants: dict[str, Callable[[], float | None]] = {
        name: (lambda n=name: run(n)) for name, *_ in _COMMANDS if not name.startswith("junit")
    }
    variants["report after a run appended"] = append_then_report
    # What a command that parses any line pays before reading one: the grade model.
    start_up = [
        sys.executable,
        "-c",
        "import pytest_cleo_grade.cli.main, pytest_cleo_grade.core.models",
    ]
    peaks["start-up"] = []

    def start() -> float:
        seconds, rss = child(start_up)
        peaks["start-up"].append(rss)
        return seconds

    variants["start-up"] = start
    variants.update({f"floor {runs}": (lambda r=runs: floor(r)) for runs in floors})
    figures = alternate(variants, rounds)
    # junit writes a case per session (every line here): minutes on a large history, so
    # fewer rounds there, each against its own floor measured beside it.
    junit_rounds = rounds if lines <= 50_000 else 1
    paired = alternate(
        {
            "junit": lambda: run("junit"),
            "junit --reports": lambda: run("junit --reports"),
            "junit --fail-under B": lambda: run("junit --fail-under B"),
            "floor 0": lambda: floor(0),
        },
        junit_rounds,
    )
    figures.update({name: paired[name] for name in paired if name.startswith("junit")})
    figures["junit floor"] = paired["floor 0"]
    rows = [
        Row(
            f"first read of a {lines:,}-line history ({size:.0f} MB): builds its index",
            f"{built:.2f} s",
            f"{floor_all:.2f} s",
            built / floor_all,
            f"(once; json.loads of every line; peak {built_rss / 1024**2:.0f} MB)",
            None,
        )
    ]
    start_ratio = paired_ratio(figures["start-up"], figures["floor 1"])
    rows.append(
        Row(
            "  start-up: cleo-grade and the grade model imported, no line read",
            f"{figures['start-up'].min:.2f} / {figures['start-up'].median:.2f} s",
            f"{figures['floor 1'].min:.2f} / {figures['floor 1'].median:.2f} s",
            start_ratio,
            "(vs the latest run's lines)",
            None,
        )
    )
    shown = [(n, a, r, w, t) for n, a, r, w, t in _COMMANDS]
    shown.insert(3, ("report after a run appended", [], 1, "the latest run's lines", None))
    for name, _args, runs, what, target in shown:
        p = figures[name]
        f = figures["junit floor" if name.startswith("junit") else f"floor {runs}"]
        ratio = paired_ratio(p, f)
        peak = max(peaks[name]) / 1024**2
        rows.append(
            Row(
                f"cleo-grade {name}, {lines:,}-line history vs json.loads of {what}",
                f"{p.min:.2f} / {p.median:.2f} s",
                f"{f.min:.2f} / {f.median:.2f} s",
                ratio,
                "(no target)" if target is None else f"<= {target:g}x",
                None if target is None else ratio <= target,
                # Only list reads no line: every other command parses with the grade model.
                None
                if target is None or name.startswith("list") or runs != 1 or start_ratio <= target
                else f"start-up alone {start_ratio:.1f}x",
            )
        )
        rows.append(
            Row(
                f"  peak RSS of cleo-grade {name} (floor: its json.loads)",
                f"{peak:.0f} MB",
                f"{max(peaks[f'floor {runs}']) / 1024**2:.0f} MB",
                max(peaks[name]) / max(peaks[f"floor {runs}"]),
                "< 300 MB",
                peak < 300,
            )
        )
    rows.extend(_plugin_rows(tmp, history, lines, rounds))
    return rows


_SUITE = """
def test_agent(graded_session):
    graded_session.record("session", "list", gateway="cleo_query")
"""


def _plugin_rows(tmp: Path, history: Path, lines: int, rounds: int) -> list[Row]:
    """``--cleo-grade-baseline=latest``: what the plugin does with it at the session's start
    (``latest_from_history_file``, as BaselineGate.start calls it), timed in this process
    against the floor's read of the latest run's lines in this process (a pytest run's
    seconds would bury the difference in its own noise); then one pytest run with it, for
    its peak RSS (last: its grade is appended to the history)."""
    import time

    from pytest_cleo_grade.grading._history_file import latest_from_history_file

    namespace: dict[str, Any] = {}
    exec(_FLOOR_READ, namespace)  # the floor's own code, run in this process
    read_runs = namespace["read_runs"]

    def timed(action: Callable[[], object]) -> float:
        started = time.perf_counter()
        action()
        return time.perf_counter() - started

    figures = alternate(
        {
            "plugin": lambda: timed(lambda: latest_from_history_file(history)),
            "floor": lambda: timed(lambda: read_runs(history, 1)),
        },
        max(5, rounds),
    )
    suite = tmp / "suite"
    suite.mkdir()
    (suite / "test_agent.py").write_text(_SUITE)
    (suite / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    python = str(Path(sys.executable))
    argv = [python, "-m", "pytest", "-q", "-p", "no:langsmith_plugin", str(suite)]
    argv += ["--cleo-grade-baseline=latest", f"--cleo-grade-history={history}"]
    argv += [f"--cleo-grade-db={tmp / 'suite.db'}"]
    _, rss = child(argv)
    ratio = paired_ratio(figures["plugin"], figures["floor"])
    return [
        Row(
            f"pytest --cleo-grade-baseline=latest, {lines:,}-line history: the baseline read "
            "vs json.loads of the latest run's lines",
            f"{figures['plugin'].min * 1000:.0f} / {figures['plugin'].median * 1000:.0f} ms",
            f"{figures['floor'].min * 1000:.0f} / {figures['floor'].median * 1000:.0f} ms",
            ratio,
            "<= 2x",
            ratio <= 2.0,
        ),
        Row(
            "  peak RSS of that pytest run (one graded test)",
            f"{rss / 1024**2:.0f} MB",
            "",
            rss / 1024**2 / 300,
            "< 300 MB",
            rss < 300 * 1024**2,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cleo-grade-bench-") as name:
        print(table(history_rows(Path(name), args.lines, args.rounds)))


if __name__ == "__main__":
    main()
