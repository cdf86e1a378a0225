"""Shared pieces of the CLI: errors with exit statuses, paths, and grade rendering."""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from pytest_cleo_grade.core._text import terminal_text
from pytest_cleo_grade.store.history import DEFAULT_HISTORY

__all__ = [
    "CommandError",
    "Handler",
    "add_history_option",
    "existing_history",
    "history_path",
    "parse_threshold",
    "print_json",
    "session_id_arg",
    "warning_line",
    "warnings_to_stderr",
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
    if value == "":
        # As --db '': an empty path is a mistake (an unset variable), not the default.
        raise CommandError("cleo-grade: error: --history: an empty path (name a grade history)")
    return Path(value) if value else Path.cwd() / DEFAULT_HISTORY


def existing_history(args: argparse.Namespace, *, where: str) -> Path:
    """The history a command reads, which must exist: a misspelt ``--history`` in a CI job
    must not pass as an empty history (nothing exported, an empty JUnit file, exit 0)."""
    history = history_path(args)
    if not history.exists():  # what is there but cannot be read says so when it is read
        raise CommandError(f"{where}: {history}: no grade history there")
    return history


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
    from pytest_cleo_grade.grading._verdict import parse_grade_threshold

    try:
        return parse_grade_threshold(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


#: Characters json.dumps(ensure_ascii=False) leaves raw that a terminal acts on: C1 controls,
#: bidirectional overrides, line separators, lone surrogates. They can only occur inside JSON
#: strings, where a \\u escape is the same text.
_JSON_ESCAPES: Final = {
    code: f"\\u{code:04x}"
    for code in (
        *range(0x7F, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x2028,
        0x2029,
        *range(0xD800, 0xE000),
    )
}


def json_text(data: object) -> str:
    """Indented JSON for a terminal: non-ASCII text kept, control characters escaped."""
    return json.dumps(data, indent=2, ensure_ascii=False).translate(_JSON_ESCAPES)


def print_json(data: object) -> None:
    print(json_text(data))


@contextmanager
def warnings_to_stderr() -> Iterator[None]:
    """Show CleoGradeWarnings (a skipped corrupt line) as one stderr line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        print(warning_line(warning.message), file=sys.stderr)


def warning_line(message: object) -> str:
    """A CleoGradeWarning as the CLI says it: one ``cleo-grade: warning: ...`` line."""
    text = str(message).removeprefix("cleo-grade: ")  # said once, in front
    return terminal_text(f"cleo-grade: warning: {text}")
