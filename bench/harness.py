"""Alternating A/B measurement: every variant runs once per round, in turn, for several rounds.

Back-to-back rounds of one variant let the machine's state (CPU frequency, page cache, other
load) drift between variants; alternating spreads that drift over all of them. A row's ratio
pairs the variants round by round (the median of their per-round ratios): two measurements
taken seconds apart share the machine's speed of that moment, which cancels in their ratio.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Figure:
    """One variant's measurements (seconds, bytes or a rate; whatever the action returns)."""

    values: tuple[float, ...]

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)


def paired_ratio(project: Figure, floor: Figure) -> float:
    """The median over rounds of project / floor, each measured in the same round.

    A ratio of the two medians can pair a fast round of one with a slow round of the other:
    on a machine whose speed moves by half between minutes, that flipped verdicts.
    """
    ratios = [
        p / f if f > 0 else math.inf for p, f in zip(project.values, floor.values, strict=True)
    ]
    return statistics.median(ratios)


def alternate(variants: Mapping[str, Callable[[], float | None]], rounds: int) -> dict[str, Figure]:
    """Run each variant once per round, in turn; an action returning None is timed."""
    seen: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(rounds):
        # Reverse the order every other round so neither variant always runs first.
        order = list(variants) if round_ % 2 == 0 else list(variants)[::-1]
        for name in order:
            gc.collect()
            started = time.perf_counter()
            value = variants[name]()
            elapsed = time.perf_counter() - started
            seen[name].append(elapsed if value is None else value)
    return {name: Figure(tuple(values)) for name, values in seen.items()}


@dataclass(frozen=True)
class Row:
    """A line of the table: the project's figure, the floor's, their ratio and the target."""

    label: str
    project: str
    floor: str
    ratio: float
    target: str
    #: None for a row that only shows where the time goes (no target of its own).
    met: bool | None
    #: For a missed target: the measurement of the same run that puts it out of reach of
    #: any implementation the contract allows (a limit row's ratio already beyond it).
    out_of_reach: str | None = None

    def cells(self) -> tuple[str, ...]:
        verdict = "" if self.met is None else "met" if self.met else "MISSED"
        if self.met is False and self.out_of_reach:
            verdict += f" (out of reach: {self.out_of_reach})"
        return (
            self.label,
            self.project,
            self.floor,
            f"{self.ratio:.2f}x" if math.isfinite(self.ratio) else "n/a",
            self.target,
            verdict,
        )


def table(rows: list[Row]) -> str:
    header = ("figure", "project (min / median)", "floor (min / median)", "ratio", "target", "")
    lines = [header, *(row.cells() for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip() for line in lines
    )


#: What a bench's child never inherits: the suite-wide settings (``PYTEST_*``, ``CLEO_*``)
#: and PYTHONDONTWRITEBYTECODE (see run_pytest).
_DROPPED = ("PYTEST_", "CLEO_", "PYTHONDONTWRITEBYTECODE")


def user_environment() -> dict[str, str]:
    """This environment as a user's shell would have it for a child (see run_pytest)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(_DROPPED)}


def run_pytest(directory: Path, *extra: str, env: Mapping[str, str] | None = None) -> float:
    """The wall time of a fresh ``pytest -q`` in ``directory``; a failing run stops the bench.

    The run gets this environment without the suite-wide settings a bench must not inherit
    (``PYTEST_*``, ``CLEO_*``) and with Python's default bytecode cache, as on a user's
    machine: with PYTHONDONTWRITEBYTECODE set (this development machine sets it) every run
    compiled each module it imports. ``env`` is added on top.
    """
    child = user_environment()
    child.update(env or {})
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *extra],
        cwd=directory,
        env=child,
        capture_output=True,
        text=True,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"bench suite failed in {directory}:\n{done.stdout[-2000:]}\n{done.stderr}")
    return elapsed
