"""Shared pieces of the CLI: errors with exit statuses, paths, and grade rendering."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from pytest_cleo_grade.history import DEFAULT_HISTORY
from pytest_cleo_grade.models import GradeResult, format_timestamp
from pytest_cleo_grade.report import number_text, score_text

__all__ = [
    "CommandError",
    "Handler",
    "add_history_option",
    "history_path",
    "parse_threshold",
    "print_json",
    "render_grade",
    "session_id_arg",
]

Handler = Callable[[argparse.Namespace], int]


class CommandError(Exception):
    """A usage or input error: one line on stderr and an exit status (2 by default)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def add_history_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history",
        metavar="PATH",
        help=f"grade history file (default: {DEFAULT_HISTORY} under the current directory)",
    )


def history_path(args: argparse.Namespace) -> Path:
    value: str | None = getattr(args, "history", None)
    return Path(value) if value else Path.cwd() / DEFAULT_HISTORY


def session_id_arg(value: str) -> str:
    """A session id from the command line: text the store and the history can hold.

    A byte that is not UTF-8 reaches Python as a lone surrogate, which no SQLite query or
    JSON line can carry.
    """
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"{value!r} is not valid UTF-8 text") from None
    return value


def parse_threshold(value: str) -> float:
    """A threshold as a letter (A-F) or a percentage (``85``, ``85%``, ``85.5``)."""
    from pytest_cleo_grade.thresholds import parse_grade_threshold

    try:
        return parse_grade_threshold(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def render_grade(result: GradeResult) -> str:
    """The human-readable report of one grade (seed 000's CLI fields)."""
    lines = [
        f"Session:    {result.session_id}",
        *([f"Task:       {result.task_id}"] if result.task_id else []),
        f"Score:      {score_text(result)}  ({result.display_percent}%, grade {result.letter})",
        f"Entries:    {result.entry_count}",
        f"Graded at:  {format_timestamp(result.timestamp)}",
        "",
        "Dimensions:",
    ]
    width = max((len(name) for name in result.dimensions), default=0)
    for name, dim in result.dimensions.items():
        lines.append(f"  {name:<{width}}  {number_text(dim.score):>3}/{number_text(dim.max)}")
        lines.extend(f"  {'':<{width}}    - {text}" for text in dim.evidence)
    lines.append("")
    if result.flags:
        lines.append(f"Flags ({len(result.flags)}):")
        lines.extend(f"  - {flag}" for flag in result.flags)
    else:
        lines.append("Flags: none")
    return "\n".join(lines)


@contextmanager
def warnings_to_stderr() -> Iterator[None]:
    """Show CleoGradeWarnings (a skipped corrupt line) as one stderr line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        print(f"cleo-grade: warning: {warning.message}", file=sys.stderr)
