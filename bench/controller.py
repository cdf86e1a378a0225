"""The deciding process of a graded suite: its CPU per test under xdist, the speed-up xdist
gives, and the memory a serial run keeps per graded test.

The speed-up row says when two cores cannot reach its target whatever the plugin does: the
plain suite's runs measure what pytest-xdist itself adds to a test's CPU (its controller and
the workers' reports), and a graded suite that added nothing more could at best finish in half
of its serial CPU plus that. A second pair of suites whose tests each spin 1 ms of CPU first
shows the speed-up where a test does work of its own, graded against plain.

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
import math
import resource
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

#: Each test first spends 1 ms of its process's CPU (measured as CPU, so a busy machine
#: does not change how much work a test does).
_WORK = """
import time

def work():
    end = time.process_time() + 0.001
    while time.process_time() < end:
        pass
"""

GRADED_WORK = _WORK + GRADED.replace("):\n", "):\n    work()\n", 1)
PLAIN_WORK = _WORK + PLAIN.replace("    pass\n", "    work()\n")

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


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(directory: Path, *extra: str) -> dict[str, float]:
    """One pytest run of the suite in ``directory``: its wall time, the CPU of its whole
    process tree (its xdist workers are waited for, so they count), and the controller's
    loop CPU and peak RSS."""
    out = directory / "figures.json"
    shutil.rmtree(directory / ".cleo", ignore_errors=True)  # every run starts with no history
    env = {"BENCH_CONTROLLER_OUT": str(out), "PYTEST_ADDOPTS": _ADDOPTS}
    before = _children_cpu()
    wall = run_pytest(directory, *extra, env=env)
    tree = _children_cpu() - before
    figures = json.loads(out.read_text())
    return {"wall": wall, "tree": tree, "cpu": figures["cpu"], "peak": figures["peak"]}


def controller_rows(
    tmp: Path, tests: int, rounds: int, *, kept_tests: int | None = None
) -> list[Row]:
    """The rows; what a run keeps is measured on a serial run of ``kept_tests`` (the issue's
    20,000 by default, or ``tests`` when that is more), and also on ``tests``: the two apart
    give what each further graded test keeps, the one-time imports left out."""
    kept_tests = max(tests, 20_000) if kept_tests is None else kept_tests
    graded = _suite(tmp / "graded", GRADED, tests)
    plain = _suite(tmp / "plain", PLAIN, tests)
    # A suite of its own only where it is larger (else the serial runs above measure it).
    apart = kept_tests != tests
    graded_kept = _suite(tmp / "graded-kept", GRADED, kept_tests) if apart else graded
    plain_kept = _suite(tmp / "plain-kept", PLAIN, kept_tests) if apart else plain
    graded_work = _suite(tmp / "graded-work", GRADED_WORK, tests)
    plain_work = _suite(tmp / "plain-work", PLAIN_WORK, tests)
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
                variant("graded work -n 2", graded_work, "-n", "2"),
                variant("plain work -n 2", plain_work, "-n", "2"),
                variant("graded work serial", graded_work, "-p", "no:xdist"),
                variant("plain work serial", plain_work, "-p", "no:xdist"),
                *(
                    [
                        variant("graded kept", graded_kept, "-p", "no:xdist"),
                        variant("plain kept", plain_kept, "-p", "no:xdist"),
                    ]
                    if apart
                    else []
                ),
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
    graded_peaks = per_round("graded kept" if apart else "graded serial", "peak")
    plain_peaks = per_round("plain kept" if apart else "plain serial", "peak")
    kept = [(g - p) / kept_tests / 1024 for g, p in zip(graded_peaks, plain_peaks, strict=True)]
    # Each further graded test: the growth from `tests` to `kept_tests` tests, the plain
    # suite's growth taken off (what a run keeps for any test, and the imports, cancel).
    further = [
        ((gk - g) - (pk - p)) / (kept_tests - tests) / 1024
        for gk, g, pk, p in zip(
            graded_peaks,
            per_round("graded serial", "peak"),
            plain_peaks,
            per_round("plain serial", "peak"),
            strict=True,
        )
        if apart
    ]
    cpu_ratios = [g / p for g, p in zip(graded_cpu, plain_cpu, strict=True)]
    serial = per_round("graded serial", "wall")
    xdist = per_round("graded -n 2", "wall")
    # The best two cores could do if graded tests cost xdist no more than plain ones: half of
    # (the graded suite's serial CPU + what xdist added to the plain suite's CPU).
    ceilings = [
        2 * g / (g + (pn - ps))
        for g, pn, ps in zip(
            per_round("graded serial", "tree"),
            per_round("plain -n 2", "tree"),
            per_round("plain serial", "tree"),
            strict=True,
        )
    ]
    ceiling = median(ceilings)

    def speedups_of(kind: str) -> list[float]:
        return [
            s / x
            for s, x in zip(
                per_round(f"{kind} serial", "wall"), per_round(f"{kind} -n 2", "wall"), strict=True
            )
        ]

    graded_work_speedups = speedups_of("graded work")
    plain_work_speedups = speedups_of("plain work")
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
            out_of_reach=(
                f"xdist's own CPU on the plain suite caps it at {ceiling:.2f}x"
                if ceiling < 1.5
                else None
            ),
        ),
        Row(
            "  the same with 1 ms of work per test: graded -n 2 speed-up vs plain's",
            f"{min(graded_work_speedups):.2f} / {median(graded_work_speedups):.2f}x",
            f"{min(plain_work_speedups):.2f} / {median(plain_work_speedups):.2f}x",
            median([g / p for g, p in zip(graded_work_speedups, plain_work_speedups, strict=True)]),
            "",
            None,
        ),
        Row(
            f"kept per graded test, a serial run of {kept_tests:,} (peak RSS over the plain run's)",
            f"{min(kept):.1f} / {median(kept):.1f} KB",
            f"{min(plain_peaks) / 2**20:.0f} MB plain peak",
            median(kept) / 5,
            "<= 5 KB",
            median(kept) <= 5,
        ),
        *(
            [
                Row(
                    f"  each graded test past the first {tests:,} (growth to {kept_tests:,}, "
                    "plain's taken off)",
                    f"{min(further):.1f} / {median(further):.1f} KB",
                    "",
                    math.nan,
                    "",
                    None,
                )
            ]
            if apart and kept_tests > tests
            else []
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
