"""Baselines: a committed JSON file of grades per test, and the regression gate against it.

The comparison is pure (grades in, verdicts out); reading and writing the file are two small
functions at the end. Percentages everywhere: the total as a percentage of its maximum, each
dimension as a percentage of that dimension's maximum, so one tolerance language fits all.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any, Final

from pytest_cleo_grade.core._files import parse_json_strict, read_regular_bytes, write_atomically
from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.core.settings import DEFAULT_RUBRIC
from pytest_cleo_grade.grading._run_ids import run_id_of, status_of
from pytest_cleo_grade.grading._runs import (
    counted_whole,
    excluded_of,
    latest_series,
    latest_whole_series,
    short_series,
)
from pytest_cleo_grade.grading._stats import bootstrap_mean_interval

__all__ = [
    "BASELINE_FORMAT",
    "TOTAL",
    "BaselineComparison",
    "BaselineError",
    "Change",
    "Regrader",
    "TestGrades",
    "Tolerance",
    "baseline_document",
    "compare_baseline",
    "figure_text",
    "grades_from_results",
    "latest_from_history",
    "parse_baseline",
    "parse_tolerances",
    "read_baseline",
    "read_text",
    "short_in_history",
    "write_baseline",
]

BASELINE_FORMAT: Final = "cleo-grade-baseline"
_VERSION: Final = 1
#: The extra (and baseline field) holding a rubric's settings hash (rubrics/_identity.py's).
HASH_KEY: Final = "rubricHash"
#: The metric name of a test's total in tolerance expressions.
TOTAL: Final = "total"
# A metric is ``total`` or a dimension as grades name it: a combined rubric's are dotted
# (``cleo.sessionDiscipline``), a rule file's may hold other characters; not ``:`` or ``,``.
_TERM = re.compile(r"^\s*([^\s:,](?:[^:,]*[^\s:,])?)\s*:\s*([0-9]+(?:\.[0-9]+)?)\s*(%?)\s*$")


class BaselineError(CleoGradeError):
    """A baseline file or expression that cannot be used (the message names where)."""


@dataclass(frozen=True, slots=True)
class Tolerance:
    """How far a metric may drop: percentage points, or (relative) a share of the baseline."""

    amount: float
    relative: bool = False

    def allowed(self, baseline: float) -> float:
        return baseline * self.amount / 100 if self.relative else self.amount

    def text(self) -> str:
        return f"{self.amount:g}%" if self.relative else f"{self.amount:g} points"


def parse_tolerances(expression: str) -> dict[str, Tolerance]:
    """``total:5`` / ``total:5%,sessionDiscipline:10``; ValueError names the bad term."""
    tolerances: dict[str, Tolerance] = {}
    for term in expression.split(","):
        match = _TERM.match(term)
        if match is None:
            raise ValueError(
                f"invalid regression tolerance {term.strip()!r} in {expression!r}: expected "
                "METRIC:POINTS or METRIC:PERCENT%, e.g. total:5 or sessionDiscipline:10%"
            )
        name, amount, percent = match.groups()
        if name in tolerances:
            raise ValueError(f"regression tolerance for {name!r} given twice in {expression!r}")
        tolerances[name] = Tolerance(float(amount), relative=bool(percent))
    return tolerances


@dataclass(frozen=True, slots=True)
class TestGrades:
    """One test's grades: a percentage per run, and per dimension a percentage per run."""

    test_id: str
    totals: tuple[float, ...]
    dimensions: Mapping[str, tuple[float, ...]]
    #: The rubric that graded it (None: a baseline saved before baselines said so).
    rubric: str | None = None
    #: The rest of the rubric's identity: its version (``rubricVersion``) and the judge model
    #: where one graded (None: not recorded, so not compared).
    rubric_version: str | None = None
    judge_model: str | None = None
    #: The hash of the rubric's settings (``rubricHash``: a rule file's rules), None when
    #: not recorded: a file edited without a new version is another rubric all the same.
    rubric_hash: str | None = None
    #: The graded sessions, one per run (empty: not recorded): what a changed rubric
    #: re-grades from the audit store.
    sessions: tuple[str, ...] = ()

    def identity(self, *, hashed: bool = False) -> str:
        """The rubric as a message names it: ``cleo``, ``rules 1.1.0``, ``weighted 1 (judge m)``,
        with the hash's first 12 digits when ``hashed`` (``rules 1.0.0 (settings 3f2a...)``)."""
        text = self.rubric or DEFAULT_RUBRIC
        if self.rubric_version:
            text += f" {self.rubric_version}"
        if self.judge_model:
            text += f" (judge {self.judge_model})"
        if hashed and self.rubric_hash:
            text += f" (settings {self.rubric_hash[:12]})"
        return text

    __test__ = False  # not a pytest test class, whatever its name

    def values(self, metric: str) -> tuple[float, ...]:
        return self.totals if metric == TOTAL else self.dimensions.get(metric, ())


def grades_from_results(results: Iterable[Any]) -> dict[str, TestGrades]:
    """Group GradeResults by test id (extra ``testId``, else the session id), a repeated
    test's runs by their run index (xdist hands them over in the order they finish: a saved
    baseline would change with the scheduling), else in the order given."""
    totals: dict[str, list[float]] = {}
    dims: dict[str, dict[str, list[float]]] = {}
    rubrics: dict[str, str] = {}
    versions: dict[str, str | None] = {}
    models: dict[str, str | None] = {}
    hashes: dict[str, str | None] = {}
    sessions: dict[str, list[str]] = {}
    for result in sorted(results, key=_run_index):
        if status_of(result) == "ungradable":
            continue  # no score to keep or compare
        extra = result.model_extra or {}
        test_id = str(extra.get("testId") or result.session_id)
        rubrics[test_id] = str(extra.get("rubric") or DEFAULT_RUBRIC)
        versions[test_id] = _text(extra.get("rubricVersion"))
        models[test_id] = _text(extra.get("judgeModel"))
        hashes[test_id] = _text(extra.get(HASH_KEY))
        sessions.setdefault(test_id, []).append(result.session_id)
        totals.setdefault(test_id, []).append(result.percent)
        per_dim = dims.setdefault(test_id, {})
        for name, score in result.dimensions.items():
            if score.max > 0:
                # As GradeResult.percent divides: 11 * 100 / 20 is 55.0, 11 / 20 * 100 is not.
                per_dim.setdefault(name, []).append(score.score * 100 / score.max)
    return {
        test_id: TestGrades(
            test_id,
            tuple(values),
            {k: tuple(v) for k, v in dims[test_id].items()},
            rubrics[test_id],
            versions[test_id],
            models[test_id],
            hashes[test_id],
            tuple(sessions[test_id]),
        )
        for test_id, values in totals.items()
    }


def _text(value: object) -> str | None:
    return (
        str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else None
    )


def _run_index(result: Any) -> int:
    run = (result.model_extra or {}).get("run")
    return run if isinstance(run, int) and not isinstance(run, bool) else 0


def latest_from_history(results: Sequence[Any], *, whole: bool = True) -> dict[str, TestGrades]:
    """Each test of the history's latest run with its most recent grade; a repeated test's
    most recent series (its last ``runs`` lines that carry a run index), its latest whole
    one when ``whole`` (a baseline: see :func:`runs.latest_whole_series`).

    The latest run is the run id of the last line that carries one (every shard's lines, once
    combined): a test deleted from the suite is in no later run, so it drops out. A history
    whose lines carry no run id (written before they did) keeps every test it holds."""
    members = _latest_run_tests(results)
    if members is not None:
        results = [r for r in results if _history_test(r) in members]
    pick = latest_whole_series if whole else latest_series
    # A line of a test that could not be graded holds no score: the test's grade before it
    # is its latest.
    results = [r for r in results if status_of(r) != "ungradable"]
    latest = pick(results, _history_test)
    # An expected failure's latest grade is left out, as the run's baseline gate leaves it
    # (a repeated test whole when any of its runs counts, as in the run).
    ordered = [r for series in latest.values() for r in reversed(series)]
    return grades_from_results(
        counted_whole(ordered, _history_test, lambda r: excluded_of(r.model_extra))
    )


def _latest_run_tests(results: Sequence[Any]) -> set[str] | None:
    """The tests with a line in the latest run (None: no line carries a run id)."""
    run_id = next((run_id_of(r) for r in reversed(results) if run_id_of(r)), None)
    if run_id is None:
        return None
    return {_history_test(r) for r in results if run_id_of(r) == run_id}


def short_in_history(results: Sequence[Any]) -> dict[str, str]:
    """The repeated tests whose latest series in a history is short, with "1 of 4 runs graded": the
    ``partial`` of :func:`compare_baseline` for a history compared as the candidate."""
    found = {}
    for test_id, series in latest_series(results, _history_test).items():
        short = short_series(series)
        if short is not None:
            found[test_id] = f"{short[0]} of {short[1]} runs graded"
    return found


def _history_test(result: Any) -> str:
    return str((result.model_extra or {}).get("testId") or result.session_id)


@dataclass(frozen=True, slots=True)
class Change:
    """One metric of one test against the baseline."""

    test_id: str
    metric: str
    baseline: float
    current: float
    tolerance: Tolerance | None
    #: The drop is beyond the tolerance (and, with repeats on both sides, outside the noise).
    regressed: bool
    #: Why a drop beyond the tolerance was not counted ("within noise"), or None.
    note: str | None = None

    @property
    def delta(self) -> float:
        return self.current - self.baseline


@dataclass(frozen=True, slots=True)
class BaselineComparison:
    """This run against the baseline: changes, tests new to the run, tests missing from it."""

    changes: tuple[Change, ...]
    new_tests: tuple[str, ...]
    missing_tests: tuple[str, ...]
    problems: tuple[str, ...] = ()
    #: Repeated tests of which only some runs ran (``-k``, ``--lf``), with how many: not
    #: compared (the runs re-run for being low are no measure of the test's mean).
    partial_tests: tuple[tuple[str, str], ...] = ()
    #: Tests graded under another rubric (name, version or judge model) than the baseline's,
    #: with what changed: not compared, never a regression.
    rubric_changed: tuple[tuple[str, str], ...] = ()
    #: Tests graded under another rubric whose baseline sessions were graded again under
    #: this run's rubric from the audit store, with what changed: compared like with like.
    regraded: tuple[tuple[str, str], ...] = ()

    @property
    def regressions(self) -> tuple[Change, ...]:
        return tuple(change for change in self.changes if change.regressed)

    @property
    def empty(self) -> bool:
        """Whether this run graded no test at all (every one skipped): nothing was checked."""
        return not self.changes and not self.new_tests

    @property
    def failed(self) -> bool:
        """The gate's one predicate (its printed verdict asks the same)."""
        return bool(self.regressions or self.problems)


def figure_text(value: float, places: int = 1, rounding: str = ROUND_HALF_UP) -> str:
    """``value`` with ``places`` decimals, halves rounded up as everywhere else in the product
    (81.25 is "81.3", not Python's half-even "81.2")."""
    return f"{Decimal(repr(value)).quantize(Decimal(1).scaleb(-places), rounding=rounding):f}"


def _noise_note(base: Sequence[float], current: Sequence[float]) -> str | None:
    """With two or more runs on both sides, a drop is real only when the 95 % intervals of
    the two means do not overlap; otherwise the note says why it was not counted."""
    if len(base) < 2 or len(current) < 2:
        return None
    base_low, _ = bootstrap_mean_interval(base)
    _, current_high = bootstrap_mean_interval(current)
    if current_high < base_low:
        return None
    return (
        f"within noise: 95% intervals overlap (now up to {figure_text(current_high)}%, "
        f"baseline from {figure_text(base_low)}%)"
    )


#: The decimals a baseline file keeps of each percentage: drops are compared to as many, so a
#: saved 86.6667 (26/30) against a live 66.666... (20/30) is the 20 points it is, not 20.0000333.
PLACES: Final = 4


def _beyond(drop: float, allowed: float) -> bool:
    """Whether ``drop`` exceeds ``allowed``, both to the baseline's precision."""
    return round(drop, PLACES) > round(allowed, PLACES)


#: Re-grades a baseline test's sessions under the rubric of this run's grades of it (the
#: second argument): its grades under that rubric, or None when they cannot be had.
Regrader = Callable[[TestGrades, TestGrades], "TestGrades | None"]


def compare_baseline(
    baseline: Mapping[str, TestGrades],
    current: Mapping[str, TestGrades],
    tolerances: Mapping[str, Tolerance],
    partial: Mapping[str, str] | None = None,
    regrade: Regrader | None = None,
) -> BaselineComparison:
    """Every common test's total and dimensions against the baseline; without a tolerance
    for a metric, its change is shown but never a regression. ``partial`` names repeated
    tests of which only some runs ran or were graded (with "1 of 4 runs ran"): they are
    listed, not compared. A test graded under another rubric than the baseline's is
    compared with its baseline sessions re-graded under this run's rubric when ``regrade``
    gives them, else listed as "rubric changed", never a regression."""
    partial = partial or {}
    changes: list[Change] = []
    seen_metrics = {TOTAL}
    changed: list[tuple[str, str]] = []
    regraded: list[tuple[str, str]] = []
    parts: list[tuple[str, str]] = []
    for test_id, now in current.items():
        before = baseline.get(test_id)
        if before is None:
            continue
        if test_id in partial:
            parts.append((test_id, partial[test_id]))
            continue
        if _rubric_changed(before, now):
            # Another rubric's percentages are no measure of this one's (a rule file's new
            # version, another judge model): a real drop could pass and a rubric change read
            # as a regression. The baseline's own sessions graded again under this rubric
            # are; without them (or with a judge to ask) it is said, not compared.
            again = regrade(before, now) if regrade is not None else None
            if again is None or _rubric_changed(again, now):
                changed.append((test_id, _what_changed(before, now)))
                continue
            regraded.append((test_id, _what_changed(before, now)))
            before = again
        metrics = [TOTAL, *[m for m in before.dimensions if m in now.dimensions]]
        seen_metrics.update(metrics)
        for metric in metrics:
            base_values, now_values = before.values(metric), now.values(metric)
            if not base_values or not now_values:
                continue
            base_mean = statistics.fmean(base_values)
            now_mean = statistics.fmean(now_values)
            tolerance = tolerances.get(metric)
            beyond = tolerance is not None and _beyond(
                base_mean - now_mean, tolerance.allowed(base_mean)
            )
            note = _noise_note(base_values, now_values) if beyond else None
            changes.append(
                Change(test_id, metric, base_mean, now_mean, tolerance, beyond and not note, note)
            )
    skipped = partial.keys() | {test for test, _ in changed}
    compared = bool((baseline.keys() & current.keys()) - skipped)
    problems = tuple(
        f"tolerance for {metric!r}: no test compared has this dimension"
        for metric in tolerances
        if metric not in seen_metrics and compared
    )
    if tolerances and current and not compared and not parts and not changed:
        # Renamed or moved tests must not disarm the gate: it would pass having checked nothing.
        problems += (
            "no test graded in this run is in the baseline, so nothing was compared "
            "(renamed or moved tests? save a new baseline)",
        )
    return BaselineComparison(
        changes=tuple(changes),
        new_tests=tuple(t for t in current if t not in baseline),
        missing_tests=tuple(t for t in baseline if t not in current),
        problems=problems,
        partial_tests=tuple(parts),
        rubric_changed=tuple(changed),
        regraded=tuple(regraded),
    )


def _rubric_changed(before: TestGrades, now: TestGrades) -> bool:
    """Whether the baseline's rubric identity differs from this run's, where both say it."""
    pairs = (
        (before.rubric, now.rubric),
        (before.rubric_version, now.rubric_version),
        (before.judge_model, now.judge_model),
        (before.rubric_hash, now.rubric_hash),
    )
    return any(a is not None and b is not None and a != b for a, b in pairs)


def _what_changed(before: TestGrades, now: TestGrades) -> str:
    """``rules 1.0.0 -> rules 1.1.0``; the settings' hashes when only they differ (a file
    edited without a new version)."""
    hashed = before.identity() == now.identity()
    return f"{before.identity(hashed=hashed)} -> {now.identity(hashed=hashed)}"


def baseline_document(grades: Mapping[str, TestGrades], *, source: str) -> dict[str, Any]:
    """The JSON document of a baseline file (sorted, so a committed file diffs cleanly)."""
    tests = {}
    for test_id in sorted(grades):
        test = grades[test_id]
        tests[test_id] = {
            **({"rubric": test.rubric} if test.rubric is not None else {}),
            **({"rubricVersion": test.rubric_version} if test.rubric_version else {}),
            **({"judgeModel": test.judge_model} if test.judge_model else {}),
            **({HASH_KEY: test.rubric_hash} if test.rubric_hash else {}),
            **({"sessions": list(test.sessions)} if test.sessions else {}),
            "percents": [round(v, PLACES) for v in test.totals],
            "dimensions": {
                name: [round(v, PLACES) for v in values]
                for name, values in sorted(test.dimensions.items())
            },
        }
    return {
        "format": BASELINE_FORMAT,
        "version": _VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source,
        "tests": tests,
    }


def _numbers(value: object, where: str) -> tuple[float, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(
            isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 100 for v in value
        )
    ):
        raise BaselineError(f"{where}: expected a non-empty list of percentages (0 to 100)")
    return tuple(float(v) for v in value)


def parse_baseline(data: object, where: str) -> dict[str, TestGrades]:
    """Validate a baseline document; BaselineError names the file and the field."""
    if not isinstance(data, dict) or data.get("format") != BASELINE_FORMAT:
        raise BaselineError(f"{where}: not a cleo-grade baseline (format {BASELINE_FORMAT!r})")
    if data.get("version") != _VERSION:
        raise BaselineError(f"{where}: unsupported baseline version {data.get('version')!r}")
    tests = data.get("tests")
    if not isinstance(tests, dict):
        raise BaselineError(f"{where}: field 'tests' must be an object")
    grades = {}
    for test_id, entry in tests.items():
        at = f"{where}: tests[{test_id!r}]"
        if not isinstance(entry, dict):
            raise BaselineError(f"{at}: expected an object")
        dims = entry.get("dimensions", {})
        if not isinstance(dims, dict):
            raise BaselineError(f"{at}.dimensions: expected an object")
        rubric = entry.get("rubric")
        if rubric is not None and not (isinstance(rubric, str) and rubric):
            raise BaselineError(f"{at}.rubric: expected a rubric name")
        identity = {}
        for key in ("rubricVersion", "judgeModel", HASH_KEY):
            value = entry.get(key)
            if value is not None and not (isinstance(value, str) and value):
                raise BaselineError(f"{at}.{key}: expected a non-empty string")
            identity[key] = value
        sessions = entry.get("sessions", [])
        if not isinstance(sessions, list) or not all(isinstance(s, str) and s for s in sessions):
            raise BaselineError(f"{at}.sessions: expected a list of session ids")
        grades[test_id] = TestGrades(
            test_id,
            _numbers(entry.get("percents"), f"{at}.percents"),
            {str(k): _numbers(v, f"{at}.dimensions.{k}") for k, v in dims.items()},
            rubric,
            identity["rubricVersion"],
            identity["judgeModel"],
            identity[HASH_KEY],
            tuple(sessions),
        )
    return grades


def read_text(path: Path) -> str:
    """A baseline's (or a history's) text: a regular file only (a FIFO is never waited on),
    UTF-8 or a BaselineError naming the file. OSError passes through (the caller decides)."""
    data = read_regular_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BaselineError(f"{path}: not UTF-8 text (byte {exc.start})") from None


def read_baseline(path: Path) -> dict[str, TestGrades]:
    """Read a baseline file; FileNotFoundError passes through (the caller decides)."""
    text = read_text(path)
    try:
        data = parse_json_strict(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    except ValueError as exc:  # nested too deeply, NaN, a number of thousands of digits
        raise BaselineError(f"{path}: invalid JSON: {exc}") from None
    return parse_baseline(data, str(path))


def write_baseline(path: Path, grades: Mapping[str, TestGrades], *, source: str) -> None:
    """Write a baseline file whole: a new file under a random name renamed over the old one
    (a link at ``path`` is replaced, never written through; nothing is left on failure)."""
    text = json.dumps(baseline_document(grades, source=source), indent=2, ensure_ascii=False)
    write_atomically(path, (text + "\n").encode("utf-8"))
