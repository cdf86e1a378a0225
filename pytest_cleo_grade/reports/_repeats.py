"""Text, Markdown and JUnit properties for repeated runs and their statistics."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_DOWN, ROUND_HALF_UP, ROUND_UP, Decimal
from typing import TYPE_CHECKING, Final

from pytest_cleo_grade.core._text import markdown_cell, markdown_code_cell
from pytest_cleo_grade.grading._verdict import describe_percent, describe_threshold, shown_percent
from pytest_cleo_grade.reports._display import SUMMARY_BYTES, _Budget, clipped

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._runs import TestRuns
    from pytest_cleo_grade.grading._stats import RepeatStats

__all__ = [
    "ESTIMATOR_NOTE",
    "REPEAT_SUMMARY_BYTES",
    "decision_line",
    "junit_repeat_properties",
    "repeat_lines",
    "repeat_markdown",
    "repeat_message",
    "repeat_statistics",
]

ESTIMATOR_NOTE = (
    "pass^k = C(c,k)/C(n,k) and pass@k = 1 - C(n-c,k)/C(n,k) are the unbiased estimators over "
    "n runs of which c passed; the mean's 95% interval is a percentile bootstrap (2000 "
    "resamples, fixed seed), the pass rate's a Wilson score interval"
)


#: The most bytes the step summary's repeats block takes. GitHub drops a step's whole summary
#: beyond 1 MiB: the grades' block takes at most half of it (display.SUMMARY_BYTES, 512 KiB),
#: this block a quarter of that, leaving the rest for the baseline's block (one row per
#: compared test, its regressions first) and other steps of the job.
REPEAT_SUMMARY_BYTES: Final = SUMMARY_BYTES // 4
#: Kept back for what is always written: the "... and N more tests" row and the note.
_REPEAT_RESERVE: Final = 2048


def _runs(count: int) -> str:
    return "1 run" if count == 1 else f"{count} runs"


def _fraction(value: float, threshold: float | None = None) -> str:
    """A rate (pass^k, pass rate) with two decimals, half up, never contradicting the
    ``threshold`` it is compared with: below it, a figure that would round up to it is cut
    (0.4667 against 0.47 shows as 0.46); reaching it, one that would round down below it is
    rounded up (0.4649 against 0.4649 shows as 0.47)."""
    exact = Decimal(repr(value))
    step = Decimal("0.01")
    text = exact.quantize(step, rounding=ROUND_HALF_UP)
    if threshold is not None:
        limit = Decimal(repr(threshold))
        if value < threshold and text >= limit:
            text = exact.quantize(step, rounding=ROUND_DOWN)
        elif value >= threshold and text < limit:
            text = exact.quantize(step, rounding=ROUND_UP)
    return f"{text:f}"


def _mean(stats: RepeatStats) -> str:
    """The mean (two decimals, half up), never rounded up to the threshold it is below: the
    run line cuts the same mean the same way (86.666 % against 86.67 % is "86.66%")."""
    assert stats.mean is not None
    return shown_percent(stats.mean, stats.threshold, exact=True)


def _pass_k_threshold(stats: RepeatStats) -> float | None:
    return stats.policy.pass_k[1] if stats.policy.pass_k is not None else None


def _interval(low: float, high: float, percent: bool) -> str:
    if percent:
        return f"{describe_percent(low)}-{describe_percent(high)}"
    return f"{low * 100:.0f}-{high * 100:.0f}%"


def rule(stats: RepeatStats) -> str:
    """What decided the test, with its figure: ``pass^2 0.54 >= 0.9``."""
    policy = stats.policy
    if policy.pass_k is not None:
        sign = ">=" if stats.decided_pass else "<"
        shown = _fraction(stats.pass_hat_k, policy.pass_k[1])
        return f"pass^{stats.k} {shown} {sign} {policy.pass_k[1]:g}"
    if policy.min_pass_rate is not None:
        sign = ">=" if stats.decided_pass else "<"
        return f"pass rate {stats.passed}/{stats.runs} {sign} {policy.min_pass_rate:g}"
    if stats.mean is None:
        return "no run could be graded"
    if stats.threshold is None:
        return f"mean {describe_percent(stats.mean)} (no threshold)"
    sign = "reaches" if stats.decided_pass else "is below"
    return f"mean {_mean(stats)} {sign} {describe_threshold(stats.threshold)}"


def repeat_statistics(stats: RepeatStats) -> str:
    """The figures on one line."""
    parts = [_runs(stats.runs)]
    if stats.mean is not None:
        mean = f"mean {_mean(stats)}"
        if stats.stdev is not None:
            mean += f" sd {stats.stdev:.1f}"
        if stats.mean_interval is not None:
            mean += f" (95% bootstrap {_interval(*stats.mean_interval, percent=True)})"
        parts.append(mean)
    low, high = stats.pass_rate_interval
    parts.append(
        f"pass rate {stats.passed}/{stats.runs} (95% Wilson {_interval(low, high, percent=False)})"
    )
    parts.append(f"pass^{stats.k} {_fraction(stats.pass_hat_k, _pass_k_threshold(stats))}")
    parts.append(f"pass@{stats.k} {_fraction(stats.pass_at_k)} (unbiased)")
    return ", ".join(parts)


def _outcome(stats: RepeatStats, mode: str) -> str:
    if stats.decided_pass:
        return "PASSED"
    # Report mode annotates only, and an xfail-marked test is expected to fail: neither
    # fails, and the text must not say it did.
    if mode == "xfail":
        return "below (expected to fail)"
    if mode == "quarantined":
        return "below (quarantined)"
    return "FAILED" if mode == "fail" else "below (report mode)"


def repeat_message(test_id: str, stats: RepeatStats, mode: str = "fail") -> str:
    """The decision over all runs, as a failure message or a report section."""
    outcome = _outcome(stats, mode).lower().replace("failed", "FAILED")
    return (
        f"cleo-grade: {test_id}: {stats.verdict}, {outcome} over {_runs(stats.runs)}: "
        f"{rule(stats)}\n{repeat_statistics(stats)}"
    )


def junit_repeat_properties(stats: RepeatStats) -> list[tuple[str, object]]:
    """JUnit properties of the test's decision, on the run that completed it."""
    properties: list[tuple[str, object]] = [
        ("cleo_runs", stats.runs),
        ("cleo_runs_passed", stats.passed),
        ("cleo_verdict", stats.verdict),
        ("cleo_decision", "pass" if stats.decided_pass else "fail"),
        ("cleo_decided_by", rule(stats)),
        ("cleo_pass_rate", _fraction(stats.pass_rate, stats.policy.min_pass_rate)),
        (f"cleo_pass_hat_{stats.k}", _fraction(stats.pass_hat_k, _pass_k_threshold(stats))),
        (f"cleo_pass_at_{stats.k}", _fraction(stats.pass_at_k)),
    ]
    if stats.mean is not None:
        properties.append(("cleo_mean_percent", _mean(stats).rstrip("%")))
    if stats.mean_interval is not None:
        low, high = stats.mean_interval
        properties.append(("cleo_mean_interval_95", _interval(low, high, percent=True)))
    return properties


def _ordered(tests: Sequence[TestRuns]) -> list[TestRuns]:
    # Failing decisions first, then flaky ones: what a reviewer must look at comes first.
    def rank(runs: TestRuns) -> int:
        stats = runs.stats
        if stats is None:
            return 1
        if not stats.decided_pass:
            return 0
        return 2 if stats.verdict == "flaky" else 3

    return sorted(tests, key=rank)


def _partial(runs: TestRuns) -> list[str]:
    """What a decision over fewer runs than the test asks for rests on, said plainly."""
    notes = []
    ran = len(runs.samples)
    if runs.stop is not None:
        notes.append(f"adaptive runs: {runs.stop.reason}")
    elif ran < runs.info.runs:
        notes.append(
            f"decided over {ran} of {runs.info.runs} runs: the others did not run "
            "(deselected by -k or --lf, or skipped)"
        )
    ungraded = sum(1 for sample in runs.samples.values() if sample.percent is None)
    if ungraded:
        graded = ran - ungraded
        notes.append(
            f"{ungraded} run{'s' if ungraded != 1 else ''} could not be graded (failed): "
            f"the mean is over the other {graded}"
        )
    return notes


def decision_line(runs: TestRuns) -> str:
    """A repeated test's decision as the terminal says it: ``flaky, FAILED (pass rate 2/3 <
    1)``, or ``not decided, 2 of 3 runs reported``."""
    stats = runs.stats
    if stats is None:
        seen = len(runs.samples) + len(runs.skipped)
        return f"not decided, {seen} of {runs.info.runs} runs reported"
    return f"{stats.verdict}, {_outcome(stats, runs.mode)} ({rule(stats)})"


def repeat_lines(tests: Sequence[TestRuns], *, quiet: bool = False) -> list[str]:
    """The terminal summary of the repeated tests; ``quiet`` (``-q``): one line per test, its
    decision, as the grade table is one line there."""
    lines = []
    for runs in _ordered(tests):
        if quiet:
            lines.append(f"cleo-grade repeats: {runs.info.test_id}: {decision_line(runs)}")
            continue
        lines.append(f"{runs.info.test_id}: {decision_line(runs)}")
        stats = runs.stats
        if stats is None:
            continue
        lines.append(f"    {repeat_statistics(stats)}")
        lines.extend(f"    {note}" for note in _partial(runs))
    if lines and not quiet:
        lines.append(ESTIMATOR_NOTE)
    return lines


def _markdown_row(runs: TestRuns) -> str:
    stats = runs.stats
    name = markdown_code_cell(clipped(runs.info.test_id))
    if stats is None:
        return f"| {name} | not decided | - | - | - | - | - |"
    mean = "-"
    if stats.mean is not None:
        mean = _mean(stats)
        if stats.mean_interval is not None:
            mean += f" ({_interval(*stats.mean_interval, percent=True)})"
    failed = "**FAIL**" if runs.mode == "fail" else _outcome(stats, runs.mode)
    decision = ("pass" if stats.decided_pass else failed) + f": {markdown_cell(rule(stats))}"
    pass_hat = _fraction(stats.pass_hat_k, _pass_k_threshold(stats))
    return (
        f"| {name} | {stats.verdict} | {decision} | {stats.passed}/{stats.runs} | {mean} | "
        f"{stats.k}: {pass_hat} | {stats.k}: {_fraction(stats.pass_at_k)} |"
    )


def repeat_markdown(tests: Sequence[TestRuns], size: int = REPEAT_SUMMARY_BYTES) -> str:
    """The step summary's table of repeated tests (failing, then flaky ones first), at most
    ``size`` bytes: the rows that do not fit are counted in a last row, and test ids are cut
    to :data:`~pytest_cleo_grade.reports._display.SUMMARY_TEXT` characters."""
    head = [
        "### Repeated tests\n",
        "| Test | Verdict | Decision | Runs passed | Mean (95% CI) | pass^k | pass@k |",
        "|---|---|---|---|---|---|---|",
    ]
    tail = f"\n{ESTIMATOR_NOTE}.\n"
    fixed = len("\n".join([*head, tail]).encode("utf-8")) + 2
    budget = _Budget(max(0, size - fixed - _REPEAT_RESERVE))
    ordered = _ordered(tests)
    rows = list(head)
    for shown, runs in enumerate(ordered):
        row = _markdown_row(runs)
        if not budget.take(row):
            rows.append(f"| ... and {len(ordered) - shown} more tests | | | | | | |")
            break
        rows.append(row)
    rows.append(tail)
    return "\n".join(rows) + "\n"
