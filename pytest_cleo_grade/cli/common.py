"""Shared pieces of the CLI: errors with exit statuses, paths, and grade rendering."""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pytest_cleo_grade.core._defaults import DEFAULT_HISTORY

# Every command imports this module, `cleo-grade --help` and `cleo-grade record` too: what
# only some commands use (the settings' defaults, the threshold parser, the escaping of text
# for a terminal) is imported where used.

__all__ = [
    "DEFAULT_HISTORY",
    "ENV_AUDIT_DB",
    "ENV_GRADE",
    "ENV_GRADE_ID",
    "ENV_SESSION_ID",
    "CommandError",
    "Handler",
    "add_db_option",
    "add_history_option",
    "db_path",
    "existing_history",
    "history_path",
    "parse_threshold",
    "print_json",
    "refuse_replacing",
    "session_id_arg",
    "warning_line",
    "warnings_to_stderr",
    "write_replacing",
]

Handler = Callable[[argparse.Namespace], int]


def __getattr__(name: str) -> Path:
    # The history's default path is the settings' (the plugin's too, a test holds them one
    # object), loaded once asked for: the settings' dataclasses would cost `--help` a third.
    if name == "DEFAULT_HISTORY":
        from pytest_cleo_grade.core._defaults import DEFAULT_HISTORY

        return DEFAULT_HISTORY
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The variables a graded session sets (capture.audit's, which a test holds equal), named
#: here too: `cleo-grade record` reads them without loading the capture layer.
ENV_GRADE: Final = "CLEO_SESSION_GRADE"
ENV_GRADE_ID: Final = "CLEO_SESSION_GRADE_ID"
ENV_SESSION_ID: Final = "CLEO_SESSION_ID"
ENV_AUDIT_DB: Final = "CLEO_AUDIT_DB"


class CommandError(Exception):
    """A usage or input error: one line on stderr and an exit status (2 by default)."""

    def __init__(self, message: str, status: int = 2) -> None:
        super().__init__(message)
        self.status = status


def add_history_option(parser: argparse.ArgumentParser) -> None:
    from pytest_cleo_grade.core._defaults import DEFAULT_HISTORY

    parser.add_argument(
        "--history",
        metavar="PATH",
        help=f"grade history file (default: {DEFAULT_HISTORY} under the current directory)",
    )


def history_path(args: argparse.Namespace) -> Path:
    from pytest_cleo_grade.core._defaults import DEFAULT_HISTORY

    value: str | None = getattr(args, "history", None)
    if value == "":
        # As --db '': an empty path is a mistake (an unset variable), not the default.
        raise CommandError("cleo-grade: error: --history: an empty path (name a grade history)")
    return Path(value) if value else Path.cwd() / DEFAULT_HISTORY


def add_db_option(parser: argparse.ArgumentParser) -> None:
    from pytest_cleo_grade.core._defaults import DEFAULT_DB

    parser.add_argument(
        "--db",
        metavar="PATH",
        help=f"audit store (default: ${ENV_AUDIT_DB}, else ./{DEFAULT_DB})",
    )


def db_path(args: argparse.Namespace) -> Path:
    """--db, else $CLEO_AUDIT_DB, else .cleo/audit.db under the current directory."""
    from pytest_cleo_grade.core._defaults import DEFAULT_DB

    given: str | None = getattr(args, "db", None)
    if given == "":
        raise CommandError("cleo-grade: error: --db: an empty path (name an audit store file)")
    value = given or os.environ.get(ENV_AUDIT_DB)
    if not value:
        return Path.cwd() / DEFAULT_DB
    path = Path(value)
    if not path.name:  # "." or "/": no last component to open or create
        where = "--db" if given else ENV_AUDIT_DB
        from pytest_cleo_grade.core._text import terminal_text

        raise CommandError(
            terminal_text(f"cleo-grade: error: {where} {value}: a directory, not an audit store")
        )
    return path


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


def print_json_list(items: Iterable[object]) -> None:
    """:func:`print_json` of a list, an item at a time: a listing of a history of years is
    never held whole (the same text: each item's lines indented once more)."""
    first = True
    for item in items:
        body = "\n".join("  " + line for line in json_text(item).split("\n"))
        sys.stdout.write(("[\n" if first else ",\n") + body)
        first = False
    print("[]" if first else "\n]")


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
    from pytest_cleo_grade.core._text import terminal_text

    text = str(message).removeprefix("cleo-grade: ")  # said once, in front
    return terminal_text(f"cleo-grade: warning: {text}")


def refuse_replacing(target: Path, history: Path, db: Path, *, where: str) -> None:
    """A one-line error, before anything is written, when ``target`` is the history read or
    the project's audit store (or one of SQLite's files beside it): DESIGN §9, no data loss."""
    from pytest_cleo_grade.core._files import inputs_of, replaced_input

    kept = inputs_of(history=history, db=db)
    source = replaced_input(target, kept)
    if source is not None:
        raise CommandError(
            f"{where}: {target}: would replace the {kept[Path(source)]} {source}: nothing written"
        )


def write_replacing(target: Path, data: bytes | Iterable[bytes], *, where: str) -> None:
    """Write ``data`` over ``target`` atomically (:func:`files.write_atomically`)."""
    from pytest_cleo_grade.core._files import write_atomically

    try:
        write_atomically(target, data)
    except OSError as exc:
        raise CommandError(f"{where}: {target}: {exc.strerror or exc}") from exc
