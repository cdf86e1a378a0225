"""``cleo-grade compare``: the comparison verdict table and go/no-go decision over stored grades."""

from __future__ import annotations

import argparse
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

from pytest_cleo_grade.cli.common import (
    CommandError,
    add_history_option,
    history_path,
    print_json,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._files import iter_lines, open_regular
from pytest_cleo_grade.core._text import terminal_lines
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.rubrics.comparison import (
    ComparisonError,
    ComparisonRecord,
    compare_records,
    decision_exit_status,
    load_score_sheet,
    records_from_grades,
    render_markdown,
    render_text,
)
from pytest_cleo_grade.rubrics.comparison.decision import COMPARISON_KEYS, BadComparisonGrade
from pytest_cleo_grade.rubrics.comparison.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    MIN_RESAMPLES,
)
from pytest_cleo_grade.store.history import read_grades

__all__ = ["register"]

_EPILOG = (
    "exit status: 0 GO (also with the monitoring note), 1 NO-GO, 3 CONDITIONAL (not final: "
    'score 3 follow-up queries, sheet round = "follow-up" or marker follow_up=True), '
    "2 usage or input error"
)


def _resamples(value: str) -> int:
    # Fewer resamples give percentile bounds resting on a few draws: an interval that says
    # nothing, yet decides stability and --decide-on worst.
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < MIN_RESAMPLES:
        raise argparse.ArgumentTypeError(
            f"expected an integer of at least {MIN_RESAMPLES}, got {value!r}"
        )
    return number


def _gap(value: str) -> Fraction:
    try:
        gap = Fraction(value)
    except (ValueError, ZeroDivisionError):
        gap = Fraction(0)
    if gap <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of points, got {value!r}")
    return gap


def _seed(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {value!r}") from None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="compare two variants (the model-comparison rubric verdicts and go/no-go)",
        description=(
            "Compare a candidate variant with a baseline over the comparison grades in the "
            "history (and hand-entered score sheets): per-query verdicts and the go/no-go "
            "decision."
        ),
        epilog=_EPILOG,
    )
    parser.add_argument("--baseline", required=True, metavar="VARIANT", help="reference variant")
    parser.add_argument("--candidate", required=True, metavar="VARIANT", help="variant to judge")
    add_history_option(parser)
    parser.add_argument(
        "--sheet",
        action="append",
        default=[],
        metavar="PATH",
        help="a hand-entered score sheet (JSON or .toml); repeatable. With --sheet the history "
        "is read only when --history is given",
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print the comparison as JSON")
    output.add_argument("--markdown", action="store_true", help="print the report as Markdown")
    parser.add_argument(
        "--random-state",
        "--seed",
        dest="seed",
        metavar="N",
        type=_seed,
        default=DEFAULT_SEED,
        help=f"random state of the bootstrap for repeated runs (default {DEFAULT_SEED})",
    )
    parser.add_argument(
        "--resamples",
        type=_resamples,
        default=DEFAULT_RESAMPLES,
        metavar="N",
        help=f"bootstrap resamples (default {DEFAULT_RESAMPLES}, at least {MIN_RESAMPLES})",
    )
    parser.add_argument(
        "--decide-on",
        choices=("mean", "worst"),
        default="mean",
        help="mean: decide on the mean verdicts (default); worst: treat every unstable verdict "
        "as the worst within its interval",
    )
    parser.add_argument(
        "--meaningful-gap",
        nargs="?",
        const="2",
        default=None,
        type=_gap,
        metavar="POINTS",
        help="show per-metric differences, marking those under POINTS (default 2, the "
        "rubric's '2+ point differences for meaningful gaps') as not meaningful; the "
        "decision does not change",
    )
    parser.set_defaults(handler=run_compare)


def _records(args: argparse.Namespace) -> list[ComparisonRecord]:
    records: list[ComparisonRecord] = []
    if args.history or not args.sheet:
        path = history_path(args)
        with warnings_to_stderr():
            grades = read_grades(path)
        try:
            # Only the compared variants' grades: another variant's broken grade is not ours.
            records.extend(records_from_grades(grades, (args.baseline, args.candidate)))
        except BadComparisonGrade as exc:
            line = _line_of(path, exc.grade)
            raise ComparisonError(f"{path}{'' if line is None else f':{line}'}: {exc}") from None
        except ComparisonError as exc:
            raise ComparisonError(f"{path}: {exc}") from None
    for sheet in args.sheet:
        records.extend(load_score_sheet(sheet))
    return records


def _line_of(path: Path, grade: GradeResult) -> int | None:
    """The number of the first history line holding ``grade``'s session and comparison keys
    (the reader keeps no line numbers; a line of the same content fails the same way), or
    None when none does."""
    wanted = grade.model_extra or {}
    try:
        with open_regular(path) as handle:
            for number, raw in iter_lines(handle, str(path), on_long=lambda _: None):
                try:
                    data = json.loads(raw)
                except (ValueError, RecursionError):
                    continue  # a corrupt line, already warned about
                if (
                    isinstance(data, dict)
                    and data.get("sessionId") == grade.session_id
                    and all(data.get(key) == wanted.get(key) for key in COMPARISON_KEYS)
                ):
                    return number
    except OSError:
        return None
    return None


def run_compare(args: argparse.Namespace) -> int:
    if args.baseline == args.candidate:
        raise CommandError("cleo-grade compare: --baseline and --candidate must differ")
    comparison = compare_records(
        _records(args),
        args.baseline,
        args.candidate,
        seed=args.seed,
        resamples=args.resamples,
        decide_on=args.decide_on,
        meaningful_gap=args.meaningful_gap,
    )
    if args.json:
        print_json(comparison.to_json_dict())
    elif args.markdown:
        print(terminal_lines(render_markdown(comparison)), end="")
    else:
        print(terminal_lines(render_text(comparison)))
    return decision_exit_status(comparison.decision)
