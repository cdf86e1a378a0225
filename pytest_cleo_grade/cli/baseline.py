"""``cleo-grade baseline save|show|diff``: baseline files and the regression gate for CI jobs."""

from __future__ import annotations

import argparse
import json
import stat
import sys
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_cleo_grade.cli.common import (
    CommandError,
    add_db_option,
    add_history_option,
    db_path,
    history_path,
    warning_line,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._files import MAX_LINE_BYTES, parse_json_strict, replaced_input
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from pytest_cleo_grade.grading._baseline import TestGrades

# The baselines' models are imported where a baseline is read or written, not for --help.

__all__ = ["load_grades", "register"]

T = TypeVar("T")


def _tolerances(value: str) -> str:
    from pytest_cleo_grade.grading._baseline import parse_tolerances

    try:
        parse_tolerances(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "baseline",
        help="save, show and compare baselines (grades per test, meant to be committed)",
        description=(
            "Baselines hold each test's grades (every run of a repeated test) as JSON. 'save' "
            "writes one from a grade history, 'show' prints one, 'diff OLD NEW' compares two "
            "baselines or histories with the same tolerances and exit statuses as pytest's "
            "--cleo-grade-fail-on-regression (0 no regression, 1 regression, 2 bad input)."
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    save = actions.add_parser("save", help="write a baseline from the grade history")
    save.add_argument("output", metavar="OUT.json", help="the baseline file to write")
    add_history_option(save)
    save.set_defaults(handler=run_save)
    show = actions.add_parser("show", help="print a baseline (or a history's latest grades)")
    show.add_argument("path", metavar="PATH", help="a baseline file or a grade history")
    show.add_argument("--json", action="store_true", help="print the baseline document")
    show.set_defaults(handler=run_show)
    diff = actions.add_parser("diff", help="compare two baselines or histories")
    diff.add_argument("old", metavar="OLD", help="the baseline: a baseline file or a history")
    diff.add_argument("new", metavar="NEW", help="the candidate: a baseline file or a history")
    diff.add_argument(
        "--fail-on-regression",
        metavar="EXPR",
        type=_tolerances,
        help="exit status 1 on drops beyond total:5, total:5%%, sessionDiscipline:10, ...",
    )
    add_db_option(diff)
    diff.add_argument(
        "--rubric-file",
        metavar="FILE",
        help="the rule or trajectory file NEW was graded with: a test graded under another "
        "rubric than OLD's has OLD's sessions re-graded with it from the audit store (--db)",
    )
    diff.set_defaults(handler=run_diff)


def load_grades(path: Path) -> dict[str, TestGrades]:
    """A baseline file, or a grade history (each test's latest grade or whole series)."""
    return _load(path, candidate=False)[0]


def _load(path: Path, *, candidate: bool) -> tuple[dict[str, TestGrades], dict[str, str]]:
    """The grades of a baseline file or a history, and the tests whose series is short (only
    from a history read as the ``candidate``: its latest series, as pytest's run would be;
    read as a baseline, a history gives each test's latest whole series)."""
    from pytest_cleo_grade.grading._baseline import (
        BASELINE_FORMAT,
        BaselineError,
        parse_baseline,
        read_baseline,
        read_text,
    )

    not_utf8: BaselineError | None = None
    try:
        # A baseline document is read whole, so it is at most MAX_LINE_BYTES; a larger file
        # is a history, read a line at a time (bounds belong to its lines, not to the file).
        history = _larger_than_a_baseline(path) or _starts_as_history(path)
        text: str | None = None if history else read_text(path)
    except BaselineError as exc:
        # Not UTF-8 throughout: a history with a damaged line is read as every other command
        # reads it (that line skipped, named with its number), never refused whole.
        text, not_utf8 = None, exc
    except FileNotFoundError:
        raise CommandError(f"cleo-grade baseline: {path}: no such file") from None
    except OSError as exc:
        why = exc.strerror or exc
        raise CommandError(f"cleo-grade baseline: {path}: cannot read: {why}") from None
    data = None
    if text is not None and f'"{BASELINE_FORMAT}"' not in text[:4096] and _lines_of_json(text):
        pass  # a history: whole, its text is no one JSON document (not worth parsing as one)
    elif text is not None:
        try:
            data = parse_json_strict(text)
        except ValueError:  # not one JSON document (a history, or no JSON): a history
            if f'"{BASELINE_FORMAT}"' in text[:4096]:
                # A baseline file cut short or hand-edited: its own error, not a history's.
                _checked(lambda: read_baseline(path))
    if isinstance(data, dict) and data.get("format") == BASELINE_FORMAT:
        return _checked(lambda: parse_baseline(data, str(path))), {}
    from pytest_cleo_grade.grading._history_file import latest_from_history_file

    # Read as a baseline, a history gives each test's latest whole series; as the candidate,
    # its latest series, and the tests whose series is short.
    def read() -> tuple[dict[str, TestGrades], dict[str, str], int]:
        return latest_from_history_file(path, whole=not candidate, candidate=candidate)

    if not_utf8 is None:
        with warnings_to_stderr():
            grades, short, count = read()
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            grades, short, count = read()
        if not count:  # no history either: the file's own one-line error
            raise CommandError(f"cleo-grade baseline: {not_utf8}")
        for warning in caught:
            print(warning_line(warning.message), file=sys.stderr)
    if not count:
        raise CommandError(f"cleo-grade baseline: {path}: neither a baseline nor a grade history")
    return grades, short


def _starts_as_history(path: Path) -> bool:
    """Whether the file's first MiB holds :func:`_lines_of_json` (not read whole then)."""
    if not stat.S_ISREG(path.stat().st_mode):
        return False
    with path.open("rb") as handle:
        head = handle.read(1024 * 1024)
    first, newline, rest = head.partition(b"\n")
    try:
        text = head[: len(first) + 1 + len(rest.partition(b"\n")[0])].decode("utf-8")
    except UnicodeDecodeError:
        return False
    from pytest_cleo_grade.grading._baseline import BASELINE_FORMAT

    return (
        bool(newline)
        and f'"{BASELINE_FORMAT}"' not in head[:4096].decode("utf-8", "replace")
        and _lines_of_json(text)
    )


def _lines_of_json(text: str) -> bool:
    """Whether ``text``'s first line is a JSON object and more text follows: JSON lines,
    never one JSON document (whose strict parse of a large history took seconds)."""
    first, _, rest = text.partition("\n")
    if not rest.strip():
        return False
    try:
        return isinstance(json.loads(first), dict)
    except (ValueError, RecursionError):
        return False


def _larger_than_a_baseline(path: Path) -> bool:
    """A regular file longer than any baseline document is read (OSError passes through)."""
    info = path.stat()
    return stat.S_ISREG(info.st_mode) and info.st_size > MAX_LINE_BYTES


def _checked(read: Callable[[], T]) -> T:
    from pytest_cleo_grade.grading._baseline import BaselineError

    try:
        return read()
    except BaselineError as exc:
        raise CommandError(f"cleo-grade baseline: {exc}") from None


def run_save(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.grading._baseline import write_baseline

    source = history_path(args)
    output = Path(args.output)
    if replaced_input(output, [source]) is not None:
        raise CommandError(
            f"cleo-grade baseline: {output}: would replace the grade history {source}: "
            "nothing written"
        )
    grades = load_grades(source)
    try:
        write_baseline(output, grades, source=f"history {source.name}")
    except OSError as exc:
        why = exc.strerror or exc
        raise CommandError(f"cleo-grade baseline: {output}: cannot write: {why}") from None
    noun = "test" if len(grades) == 1 else "tests"
    print(
        terminal_text(
            f"baseline of {len(grades)} {noun} written to {output} (from {source}: the tests of "
            "its latest run, each test's latest grade or latest series of runs):"
        )
    )
    _print_means(grades, limit=SAVED_LINES, more=f"cleo-grade baseline show {output}")
    return 0


#: The most tests ``baseline save`` lists by name (``baseline show`` lists them all).
SAVED_LINES = 20


def _print_means(grades: Mapping[str, TestGrades], *, limit: int, more: str) -> None:
    """One line per test: its mean total (and how many runs it holds)."""
    from pytest_cleo_grade.grading._baseline import figure_text

    names = sorted(grades)
    for test_id in names[:limit]:
        totals = grades[test_id].totals
        runs = f" over {len(totals)} runs" if len(totals) > 1 else ""
        print(terminal_text(f"  {test_id}: {figure_text(sum(totals) / len(totals))}%{runs}"))
    if len(names) > limit:
        print(terminal_text(f"  ... {len(names) - limit} more: {more}"))


def run_show(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.grading._baseline import figure_text

    path = Path(args.path)
    grades = load_grades(path)
    if args.json:
        from pytest_cleo_grade.grading._baseline import baseline_document

        print(json.dumps(baseline_document(grades, source=str(path)), indent=2))
        return 0
    for test_id in sorted(grades):
        test = grades[test_id]
        mean = sum(test.totals) / len(test.totals)
        runs = f" over {len(test.totals)} runs" if len(test.totals) > 1 else ""
        print(terminal_text(f"{test_id}: {figure_text(mean)}%{runs}"))
        for name, values in test.dimensions.items():
            print(terminal_text(f"    {name}: {figure_text(sum(values) / len(values))}%"))
    return 0


def run_diff(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.grading._baseline import compare_baseline, parse_tolerances
    from pytest_cleo_grade.reports._baseline import baseline_lines

    old = load_grades(Path(args.old))
    new, short = _load(Path(args.new), candidate=True)
    expression: str | None = args.fail_on_regression
    tolerances = parse_tolerances(expression) if expression is not None else {}
    rubric_file = Path(args.rubric_file) if args.rubric_file else None
    if rubric_file is not None and not rubric_file.is_file():
        raise CommandError(
            terminal_text(f"cleo-grade baseline: --rubric-file {rubric_file}: no such file")
        )
    from pytest_cleo_grade.grading._regrade import StoreRegrader, rubric_grader

    regrade = StoreRegrader(db_path(args), rubric_grader(rubric_file))
    comparison = compare_baseline(old, new, tolerances, short, regrade)
    gated = expression is not None
    for line in baseline_lines(comparison, gated=gated, option="--fail-on-regression"):
        print(terminal_text(line))
    # The printed verdict and the exit status ask the same predicate.
    return 1 if gated and comparison.failed else 0
