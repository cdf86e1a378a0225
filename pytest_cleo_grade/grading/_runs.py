"""The runs of a repeated test (pure data): ids, what travels to the controller, the decision.

No pytest here: the controller glue in :mod:`pytest_cleo_grade.plugin._repeats` feeds these from
test reports, and the display and baseline modules read them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_cleo_grade.core.settings import AUTO_RUNS, parse_runs

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._sequential import Stop
    from pytest_cleo_grade.grading._stats import RepeatPolicy, RepeatStats

# The statistics load when a repeated test is first decided: the plugin imports this module
# in every pytest run, most of which repeat nothing.

__all__ = [
    "EXCLUDED_KEY",
    "QUARANTINED",
    "SERIES_KEY",
    "RepeatInfo",
    "RunSample",
    "TestRuns",
    "base_test_id",
    "counted_whole",
    "decode_repeat",
    "encode_repeat",
    "excluded_of",
    "latest_series",
    "latest_whole_series",
    "run_id",
    "run_of",
    "runs_for",
    "short_series",
]


R = TypeVar("R")

# The run id comes last (parametrize ids first): a parameter id holding "run-1" is not it.
_RUN_LAST_IN_ID = re.compile(r"[\[-]run-(\d+)\]$")
_RUN_IN_ID = re.compile(r"[\[-]run-(\d+)[\]-][^\[]*$")


#: The history key that tells one pytest run's runs of a repeated test from another's.
SERIES_KEY = "series"
#: The history key of an expected failure's grade (``xfailed`` or ``xpassed``): shown with
#: its grade, but left out of the gate's mean and of baselines (DESIGN §6), as in the run.
EXCLUDED_KEY = "excluded"
#: The mark of a grade whose test the quarantine file lists (report-only, not in the gate).
QUARANTINED = "quarantined"


def excluded_of(extra: dict[str, Any] | None) -> str | None:
    """Why the run left a grade out of its mean (its history line's extras say), or None."""
    value = (extra or {}).get(EXCLUDED_KEY)
    # A history line is input: only the run's own words count.
    return value if value in ("xfailed", "xpassed", QUARANTINED) else None


def counted_whole(
    items: Iterable[R], test_of: Callable[[R], str], excluded: Callable[[R], str | None]
) -> list[R]:
    """The grades a run's mean, gate and baselines count: not an expected failure's, and a
    repeated test's whole when any of its runs counts.

    A run of an xfail-marked repeated test that fails on its own (pytest's FAILED) makes the
    test a failure, counted by the mean of all its runs; the runs reported before it keep
    their ``xfailed`` or ``xpassed`` mark.
    """
    items = list(items)
    counted = {test_of(item) for item in items if excluded(item) is None}
    return [item for item in items if test_of(item) in counted]


def latest_series(results: Sequence[R], test_of: Callable[[R], str]) -> dict[str, list[R]]:
    """Each test's latest grade, or a repeated test's latest series of runs, newest first,
    keyed by test in the order the tests last appear (latest first).

    A series is the runs of one pytest run (its ``series`` extra): a later run that ran only
    some of a test's runs (``-k "run-2"``) is not mixed with the runs before it. History
    written before runs carried a series takes the last ``runs`` lines with a run index.
    """
    latest: dict[str, list[R]] = {}
    for result in reversed(results):
        extra = getattr(result, "model_extra", None) or {}
        key = test_of(result)
        series = latest.get(key)
        if series is None:
            latest[key] = [result]
            continue
        first = getattr(series[0], "model_extra", None) or {}
        wanted = int(first.get("runs") or 1)
        if len(series) >= wanted or extra.get("run") is None:
            continue
        if first.get(SERIES_KEY) is not None and extra.get(SERIES_KEY) != first[SERIES_KEY]:
            continue
        series.append(result)
    return latest


def short_series(series: Sequence[Any]) -> tuple[int, int] | None:
    """(runs held, runs asked) when a repeated test's series holds fewer runs than it asked
    (``-k "run-2"``, ``--lf``, a run stopped early); None for a whole one or a single run."""
    extra = (getattr(series[0], "model_extra", None) or {}) if series else {}
    if extra.get("run") is None or extra.get("adaptive") is True:
        return None  # runs="auto" stops when its decision is settled: a whole series
    asked = int(extra.get("runs") or 1)
    return (len(series), asked) if len(series) < asked else None


def latest_whole_series(results: Sequence[R], test_of: Callable[[R], str]) -> dict[str, list[R]]:
    """:func:`latest_series`, but a test whose latest series is short takes its latest whole
    one (a single grade, or a series holding every run it asked), when the history has one.

    A baseline is what a test scores: the one run ``--lf`` re-ran for being low, or the run
    ``-k`` looked at, is not (as a baseline saved by pytest is never saved from them).
    """
    latest = latest_series(results, test_of)
    short = {test for test, series in latest.items() if short_series(series) is not None}
    if not short:
        return latest
    groups: dict[tuple[str, object], list[R]] = {}
    for result in reversed(results):
        test = test_of(result)
        if test not in short:
            continue
        extra = getattr(result, "model_extra", None) or {}
        if extra.get("run") is None:  # the test graded once: whole by itself
            latest[test] = [result]
            short.discard(test)
            continue
        if extra.get(SERIES_KEY) is None:
            continue  # written before runs carried a series: runs of another run unknown
        group = groups.setdefault((test, extra[SERIES_KEY]), [])
        group.append(result)
        if len(group) >= int(extra.get("runs") or 1):
            latest[test] = group
            short.discard(test)
    return latest


def run_id(run: int) -> str:
    return f"run-{run}"


def base_test_id(nodeid: str, run: int) -> str:
    """The test's id without its run: ``t.py::test_x[a-run-3]`` -> ``t.py::test_x[a]``."""
    token = re.escape(run_id(run))
    for pattern, replacement in (
        (rf"\[{token}\]$", ""),
        (rf"-{token}\]$", "]"),
        (rf"\[{token}-", "["),
        (rf"-{token}-", "-"),
    ):
        stripped, count = re.subn(pattern, replacement, nodeid, count=1)
        if count:
            return stripped
    return nodeid


def run_of(nodeid: str) -> int | None:
    """The run index in an item id (``...[a-run-3]``), or None."""
    match = _RUN_LAST_IN_ID.search(nodeid) or _RUN_IN_ID.search(nodeid)
    return int(match.group(1)) if match else None


def runs_for(
    marker_runs: object, option_runs: int | str | None, max_runs: int | None = None
) -> int:
    """The run count of a test (its items): its marker's ``runs=`` beats the option; 1 by
    default; ``"auto"`` makes ``max_runs`` items (default 20), of which it may run fewer.

    An invalid marker value counts as 1 here; the marker check at collection reports it.
    """
    chosen = marker_runs if marker_runs is not None else option_runs
    if chosen == AUTO_RUNS:
        from pytest_cleo_grade.grading._sequential import DEFAULT_MAX_RUNS

        return max_runs or DEFAULT_MAX_RUNS
    if marker_runs is not None:
        try:
            return parse_runs(marker_runs)
        except ValueError:
            return 1
    return option_runs if isinstance(option_runs, int) else 1


def is_adaptive(marker_runs: object, option_runs: int | str | None) -> bool:
    """Whether a test runs ``runs="auto"`` (its marker's, else the option's)."""
    return (marker_runs if marker_runs is not None else option_runs) == AUTO_RUNS


@dataclass(frozen=True, slots=True)
class RepeatInfo:
    """What the controller needs about one run: its test, its index and the test's policy."""

    test_id: str
    run: int
    runs: int
    threshold: float | None
    policy: RepeatPolicy
    #: ``report`` mode annotates the decision but never fails the test.
    mode: str = "fail"
    #: Adaptive repeats (runs="auto"): the fewest runs before a stop; None for fixed runs.
    min_runs: int | None = None


def encode_repeat(info: RepeatInfo) -> str:
    return json.dumps(
        {
            "test": info.test_id,
            "run": info.run,
            "runs": info.runs,
            "threshold": info.threshold,
            "minPassRate": info.policy.min_pass_rate,
            "passK": list(info.policy.pass_k) if info.policy.pass_k is not None else None,
            "mode": info.mode,
            "minRuns": info.min_runs,
        },
        separators=(",", ":"),
    )


def decode_repeat(text: str) -> RepeatInfo:
    data: dict[str, Any] = json.loads(text)
    from pytest_cleo_grade.grading._stats import RepeatPolicy

    pass_k = data["passK"]
    return RepeatInfo(
        test_id=data["test"],
        run=int(data["run"]),
        runs=int(data["runs"]),
        threshold=data["threshold"],
        policy=RepeatPolicy(
            min_pass_rate=data["minPassRate"],
            pass_k=(int(pass_k[0]), float(pass_k[1])) if pass_k is not None else None,
        ),
        mode=str(data.get("mode", "fail")),
        min_runs=data.get("minRuns"),
    )


@dataclass(frozen=True, slots=True)
class RunSample:
    """One finished run: its percentage (None: not graded) and whether it passed on its own."""

    run: int
    percent: float | None
    passed: bool


@dataclass(slots=True)
class TestRuns:
    """The runs of one test seen so far, and the decision once all have reported."""

    info: RepeatInfo
    samples: dict[int, RunSample] = field(default_factory=dict)
    skipped: set[int] = field(default_factory=set)
    nodeids: list[str] = field(default_factory=list)
    #: How many runs this session runs (fewer than ``runs`` when -k deselected some).
    expected: int | None = None
    stats: RepeatStats | None = None
    #: An xfail-marked test: its decision is shown, never a failure.
    xfail: bool = False
    #: One of its runs raised under its xfail marker (that run's XFAIL).
    raised_as_expected: bool = False
    #: One of its runs failed on its own (pytest's FAILED, even under an xfail marker).
    failed_on_its_own: bool = False
    #: Adaptive repeats: why the test stopped (None: running on, or fixed runs).
    stop: Stop | None = None

    __test__ = False  # not a pytest test class, whatever its name

    @property
    def mode(self) -> str:
        """How the decision reads: ``fail``, ``report``, or ``xfail`` (expected to fail)."""
        return "xfail" if self.xfail else self.info.mode

    def settle(self) -> Stop | None:
        """Adaptive repeats: whether the runs so far settle the test (sets ``stop``)."""
        if self.info.min_runs is None or self.stop is not None:
            return self.stop
        from pytest_cleo_grade.grading._sequential import sequential_stop
        from pytest_cleo_grade.grading._stats import repeat_stats

        samples = list(self.samples.values())  # in the order they reported

        def rule_passes() -> bool:
            ordered = [self.samples[run] for run in sorted(self.samples)]
            stats = repeat_stats(
                [s.percent for s in ordered if s.percent is not None],
                [s.passed for s in ordered],
                threshold=self.info.threshold,
                policy=self.info.policy,
            )
            return stats.decided_pass

        wanted = self.info.runs if self.expected is None else min(self.expected, self.info.runs)
        self.stop = sequential_stop(
            [s.passed for s in samples],
            policy=self.info.policy,
            min_runs=min(self.info.min_runs, wanted),
            max_runs=max(wanted - len(self.skipped), 1),
            rule_passes=rule_passes,
        )
        return self.stop

    @property
    def complete(self) -> bool:
        if self.stop is not None:
            return True
        wanted = self.info.runs if self.expected is None else min(self.expected, self.info.runs)
        return len(self.samples) + len(self.skipped) >= wanted

    def decide(self) -> RepeatStats | None:
        """The statistics over the runs that reported (None when every run was skipped)."""
        if not self.samples:
            return None
        from pytest_cleo_grade.grading._stats import repeat_stats

        ordered = [self.samples[run] for run in sorted(self.samples)]
        self.stats = repeat_stats(
            [s.percent for s in ordered if s.percent is not None],
            [s.passed for s in ordered],
            threshold=self.info.threshold,
            policy=self.info.policy,
        )
        return self.stats
