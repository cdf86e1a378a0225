"""The deciding process of a graded suite: its CPU per test under xdist, the speed-up xdist
gives, and the memory a serial run keeps per graded test.

Each variant is a fresh pytest process over a generated suite of N tests (each graded test
records three calls; each plain test does nothing), alternating with the others in every
round. A conftest in each suite reports the deciding process's own figures, never a
worker's: its CPU (user + sys) spent in the test loop, and its peak RSS (``VmHWM``).

    .venv/bin/python bench/controller.py                # 6,000 tests
    .venv/bin/python bench/controller.py --tests 20000  # the issue's larger suite
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import Row, alternate, run_pytest, table

GRADED = """
import pytest

@pytest.mark.parametrize("i", range({tests}))
def test_graded(graded_session, i):
    graded_session.record("session", "list", gateway="cleo_query")
    graded_session.record("tasks", "find", gateway="cleo_query")
    graded_session.record("tasks", "show", params={{"taskId": "T1"}}, gateway="cleo_query")
"""

PLAIN = """
import pytest

@pytest.mark.parametrize("i", range({tests}))
def test_plain(i):
    pass
"""

#: The deciding process's figures, written once it is done (workers write nothing).
CONFTEST = """
import json, os, resource

import pytest

def _cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

@pytest.hookimpl(wrapper=True)
def pytest_runtestloop(session):
    started = _cpu()
    try:
        return (yield)
    finally:
        session.config.stash[CPU] = _cpu() - started

CPU = pytest.StashKey()

def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        return
    with open("/proc/self/status", encoding="ascii") as status:
        peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    with open(os.environ["BENCH_CONTROLLER_OUT"], "w", encoding="utf-8") as out:
        json.dump({"cpu": config.stash.get(CPU, 0.0), "peak": peak}, out)
"""

#: Plugins the suites never use, left out of every variant alike (langsmith's alone takes
#: about 2 s to import where the langchain extra is installed).
_ADDOPTS = "-p no:langsmith_plugin -p no:cacheprovider"


def _suite(directory: Path, source: str, tests: int) -> Path:
    directory.mkdir(parents=True)
    (directory / "test_suite.py").write_text(source.format(tests=tests))
    (directory / "conftest.py").write_text(CONFTEST)
    return directory


def _run(directory: Path, *extra: str) -> dict[str, float]:
    """One pytest run of the suite in ``directory``: its wall time and the controller's
    loop CPU and peak RSS."""
    out = directory / "figures.json"
    shutil.rmtree(directory / ".cleo", ignore_errors=True)  # every run starts with no history
    env = {"BENCH_CONTROLLER_OUT": str(out), "PYTEST_ADDOPTS": _ADDOPTS}
    wall = run_pytest(directory, *extra, env=env)
    figures = json.loads(out.read_text())
    return {"wall": wall, "cpu": figures["cpu"], "peak": figures["peak"]}


def controller_rows(tmp: Path, tests: int, rounds: int) -> list[Row]:
    graded = _suite(tmp / "graded", GRADED, tests)
    plain = _suite(tmp / "plain", PLAIN, tests)
    seen: dict[str, list[dict[str, float]]] = {}

    def variant(name: str, directory: Path, *extra: str) -> tuple[str, Callable[[], float]]:
        def action() -> float:
            figures = _run(directory, *extra)
            seen.setdefault(name, []).append(figures)
            return figures["wall"]

        return name, action

    alternate(
        dict(
            [
                variant("graded -n 2", graded, "-n", "2"),
                variant("plain -n 2", plain, "-n", "2"),
                variant("graded serial", graded, "-p", "no:xdist"),
                variant("plain serial", plain, "-p", "no:xdist"),
            ]
        ),
        rounds,
    )

    def per_round(name: str, key: str) -> list[float]:
        return [figures[key] for figures in seen[name]]

    def median(values: list[float]) -> float:
        return sorted(values)[len(values) // 2]

    graded_cpu = [c / tests * 1000 for c in per_round("graded -n 2", "cpu")]
    plain_cpu = [c / tests * 1000 for c in per_round("plain -n 2", "cpu")]
    speedups = [
        s / x
        for s, x in zip(
            per_round("graded serial", "wall"), per_round("graded -n 2", "wall"), strict=True
        )
    ]
    kept = [
        (g - p) / tests / 1024
        for g, p in zip(
            per_round("graded serial", "peak"), per_round("plain serial", "peak"), strict=True
        )
    ]
    cpu_ratios = [g / p for g, p in zip(graded_cpu, plain_cpu, strict=True)]
    serial = per_round("graded serial", "wall")
    xdist = per_round("graded -n 2", "wall")
    return [
        Row(
            f"xdist controller CPU per graded test ({tests:,} tests, -n 2) vs a plain test",
            f"{min(graded_cpu):.2f} / {median(graded_cpu):.2f} ms",
            f"{min(plain_cpu):.2f} / {median(plain_cpu):.2f} ms",
            median(cpu_ratios),
            "<= 0.5 ms",
            median(graded_cpu) <= 0.5,
        ),
        Row(
            f"-n 2 speed-up of {tests:,} graded tests (serial wall / -n 2 wall)",
            f"{min(xdist):.1f} / {median(xdist):.1f} s",
            f"{min(serial):.1f} / {median(serial):.1f} s",
            median(speedups),
            ">= 1.5x",
            median(speedups) >= 1.5,
        ),
        Row(
            f"kept per graded test, a serial run of {tests:,} (peak RSS over the plain run's)",
            f"{min(kept):.1f} / {median(kept):.1f} KB",
            f"{min(per_round('plain serial', 'peak')) / 2**20:.0f} MB plain peak",
            median(kept) / 5,
            "<= 5 KB",
            median(kept) <= 5,
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", type=int, default=6_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cleo-grade-bench-") as name:
        print(table(controller_rows(Path(name), args.tests, args.rounds)))


if __name__ == "__main__":
    main()
