"""``cleo-grade flaky``: tests whose verdict flipped in their last runs; the quarantine file."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.cli.common import (
    CommandError,
    add_history_option,
    existing_history,
    parse_threshold,
    print_json,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._flaky import FlakyLine

__all__ = ["register"]


def _positive(value: str) -> int:
    if value.strip().isdigit() and int(value) >= 1:
        return int(value)
    raise argparse.ArgumentTypeError(f"invalid count {value!r}: expected a whole number >= 1")


def register(subparsers: Any) -> None:
    flaky = subparsers.add_parser(
        "flaky",
        help="list tests whose verdict flipped in their last runs; write the quarantine file",
        description="List the tests whose verdict flipped between consecutive runs in their "
        "last K pytest runs of the grade history (flip rate, last flip, mean and spread), and "
        "with --write-quarantine write the quarantine file that makes them report-only "
        "(pytest --cleo-grade-quarantine=PATH) until they are stable for M runs.",
    )
    add_history_option(flaky)
    flaky.add_argument(
        "--runs",
        type=_positive,
        default=None,
        metavar="K",
        help="the last K pytest runs of each test (default 10)",
    )
    flaky.add_argument(
        "--fail-under",
        dest="fail_under",
        type=parse_threshold,
        metavar="GRADE",
        help="the threshold for history lines that carry neither a status nor their own",
    )
    flaky.add_argument(
        "--write-quarantine",
        nargs="?",
        const=".cleo/quarantine.json",
        default=None,
        metavar="PATH",
        help="write the quarantine file (default .cleo/quarantine.json): flipped tests in, "
        "tests stable for M runs out",
    )
    flaky.add_argument(
        "--stable-runs",
        type=_positive,
        default=None,
        metavar="M",
        help="runs with one verdict that release a quarantined test (default: the file's, else 5)",
    )
    flaky.add_argument("--json", action="store_true", help="print JSON")
    flaky.set_defaults(handler=run_flaky)


def run_flaky(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.grading._flaky import DEFAULT_WINDOW, NoThreshold, flip_table

    where = "cleo-grade flaky"
    history = existing_history(args, where=where)
    with warnings_to_stderr():
        results = _flip_lines(history)
    window = args.runs or DEFAULT_WINDOW
    try:
        table = flip_table(results, runs=window, threshold=args.fail_under)
    except NoThreshold as exc:
        raise CommandError(f"{where}: {exc}") from None
    flipped = [test for test in table if test.flips]
    flipped.sort(key=lambda test: (-test.flip_rate, test.test_id))
    quarantine_note = None
    if args.write_quarantine is not None:
        quarantine_note = _write(args, table)
    if args.json:
        print_json(
            {
                "window": window,
                "tests": len(table),
                "flaky": [_row(test) for test in flipped],
                **({"quarantine": quarantine_note} if quarantine_note else {}),
            }
        )
        return 0
    print(
        f"{len(flipped)} of {len(table)} tests flipped in their last {window} runs "
        f"({terminal_text(history)})"
    )
    if flipped:
        width = min(max(len(test.test_id) for test in flipped), 70)
        print(f"  {'test':<{width}}  runs  passed  flips  flip rate  mean     spread  last flip")
        for test in flipped:
            last = f"run {test.last_flip_at} of {test.runs}, {test.last_flip}"
            print(
                f"  {terminal_text(test.test_id):<{width}}  {test.runs:>4}  {test.passed:>6}  "
                f"{test.flips:>5}  {test.flip_rate:>9.0%}  {test.mean:>6.2f}%  "
                f"{test.spread:>6.2f}  {last}"
            )
    if quarantine_note:
        print(quarantine_note["text"])
    return 0


def _row(test: Any) -> dict[str, Any]:
    return {
        "testId": test.test_id,
        "runs": test.runs,
        "passed": test.passed,
        "flips": test.flips,
        "flipRate": round(test.flip_rate, 4),
        "lastFlip": test.last_flip,
        "lastFlipRun": test.last_flip_at,
        "mean": round(test.mean, 2),
        "spread": round(test.spread, 2),
    }


def _write(args: argparse.Namespace, table: list[Any]) -> dict[str, Any]:
    """Merge the file at the path with this table: flipped in, stable for M runs out."""
    from pytest_cleo_grade.core.errors import HistoryError
    from pytest_cleo_grade.store._quarantine import (
        DEFAULT_STABLE_RUNS,
        Quarantine,
        QuarantinedTest,
        read_quarantine,
        write_quarantine,
    )

    where = "cleo-grade flaky"
    path = Path(args.write_quarantine)
    old = Quarantine(DEFAULT_STABLE_RUNS, ())
    if path.exists():
        try:
            old = read_quarantine(path)
        except HistoryError as exc:
            raise CommandError(f"{where}: {exc}") from None
    stable_runs = args.stable_runs or old.stable_runs
    by_id = {test.test_id: test for test in table}
    now = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    kept: list[QuarantinedTest] = []
    released: list[str] = []
    for entry in old.tests:
        test = by_id.get(entry.test_id)
        if test is not None and test.stable_for() >= stable_runs:
            released.append(entry.test_id)
        else:
            kept.append(entry)
    held = {entry.test_id for entry in kept}
    added: list[str] = []
    for test in table:
        # A test just released is out until it flips within its M stable runs again.
        if test.flips and test.test_id not in held and test.test_id not in released:
            if test.stable_for() >= stable_runs:
                continue  # flipped long ago, stable since
            reason = f"{test.flips} flips in {test.runs} runs ({test.flip_rate:.0%})"
            kept.append(QuarantinedTest(test.test_id, now, reason))
            added.append(test.test_id)
    try:
        write_quarantine(path, Quarantine(stable_runs, tuple(kept)))
    except OSError as exc:
        raise CommandError(f"{where}: {path}: {exc.strerror or exc}") from None
    text = (
        f"quarantine {terminal_text(path)}: {len(kept)} test{'' if len(kept) == 1 else 's'} "
        f"({len(added)} added, {len(released)} released after {stable_runs} stable runs)"
    )
    return {
        "path": str(path),
        "tests": [entry.test_id for entry in kept],
        "added": added,
        "released": released,
        "stableRuns": stable_runs,
        "text": text,
    }


def _flip_lines(history: Path) -> Sequence[FlakyLine]:
    """Every line as a flip reads it: through the history's index its rows (no line parsed,
    a few fields each), else every grade."""
    from pytest_cleo_grade.store._history_index import open_index
    from pytest_cleo_grade.store.history import read_grades

    index = open_index(history)
    if index is None:
        return read_grades(history)
    with index:
        index.warn_skipped()
        return list(index.points())
