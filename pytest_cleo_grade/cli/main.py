"""The ``cleo-grade`` command: grade sessions, list, import and export history."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import importlib
import io
import os
import signal
import sys
import threading
import warnings
from collections.abc import Iterator, Sequence
from types import FrameType
from typing import Final, TextIO

from pytest_cleo_grade.cli.common import CommandError, Handler, warning_line
from pytest_cleo_grade.core.errors import CleoGradeError, CleoGradeWarning

__all__ = ["COMMANDS", "build_parser", "main"]

#: Every command, in the order ``cleo-grade --help`` lists them: its name, the module of
#: this package that registers it (its ``register(subparsers)`` adds the module's commands,
#: each storing its handler as ``handler``) and its line in the help. Only the module of the
#: command that runs is imported: ``cleo-grade --help`` imports none, ``cleo-grade record``
#: one that needs neither pydantic nor sqlite-utils (a test holds this table to what the
#: modules register). A module's commands are listed together, in the order it adds them.
COMMANDS: Final = (
    ("grade", "grade", "grade one session"),
    ("list", "grade", "list graded sessions"),
    ("show", "show", "show a session's calls and the points each one earned or lost"),
    ("import", "importing", "import audit entries into the store"),
    ("record", "record", "record one call into the active graded session (for shell agents)"),
    ("session", "session", "start and end a graded session outside pytest (for shell agents)"),
    ("junit", "export", "write the grade history as JUnit XML"),
    ("query", "export", "the MCP-style read gateway: admin grade / admin grade.list"),
    ("export", "send", "send the grade history to Langfuse as scores"),
    ("rubrics", "rubrics", "list the available rubrics, or check a rubric file"),
    (
        "compare",
        "compare",
        "compare two variants (the model-comparison rubric verdicts and go/no-go)",
    ),
    (
        "baseline",
        "baseline",
        "save, show and compare baselines (grades per test, meant to be committed)",
    ),
    ("report", "report", "write the HTML report of the history's latest grades"),
    ("mcp", "mcp_server", "serve cleo_query / cleo_mutate (grades, graded sessions) over MCP"),
    ("skill", "skill", "print the ct-grade skill file, or install it for an agent"),
    (
        "flaky",
        "flaky",
        "list tests whose verdict flipped in their last runs; write the quarantine file",
    ),
    ("review", "calibration", "record a person's scores for a session as a manual grade"),
    ("calibrate", "calibration", "compare the judge's grades with manual ones, per dimension"),
    ("examples", "examples", "write out the example files the documentation uses"),
    ("combine", "combine", "merge shards' .cleo/ folders (stores and histories) into one run"),
    (
        "regrade",
        "regrade",
        "grade a run's stored sessions again under the current rubric, into a new run",
    ),
    (
        "history",
        "history",
        "compact the grade history (archive older runs into the store), or restore it",
    ),
)
_MODULE_OF: Final = {name: module for name, module, _ in COMMANDS}


class _Parser(argparse.ArgumentParser):
    """argparse that exits with status 2 and one line, as every other usage error does."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CommandError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The whole parser, every command's module imported (the docs' checks read it)."""
    return _build(None)[0]


# Built once per set of modules: a process that runs many commands (a test, a host program
# calling main() in a loop) builds each parser once, not again on every call. A parser is
# not changed by parsing with it: every parse starts from a new namespace.
@functools.cache
def _build(
    modules: tuple[str, ...] | None,
) -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser with the commands of ``modules`` (None: all) registered by their modules;
    every other command is a parser with its name and help alone, enough for the top-level
    help and for argparse's messages, and never chosen (main imports the chosen one's)."""
    parser = _Parser(
        prog="cleo-grade",
        description="Grade agent sessions against CLEO's rubric and keep their history.",
        # CLEO's own spellings, taken before a command is chosen (see _normalise).
        epilog=(
            "As CLEO's `cleo grade`: `cleo-grade SESSION_ID` grades a session, "
            "`cleo-grade` and `cleo-grade --list` list the history."
        ),
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    registered: set[str] = set()
    for name, module, help_text in COMMANDS:
        if modules is not None and module not in modules:
            subparsers.add_parser(name, help=help_text)
        elif module not in registered:
            registered.add(module)
            importlib.import_module(f"{__package__}.{module}").register(subparsers)
    commands: dict[str, argparse.ArgumentParser] = dict(subparsers.choices)
    return parser, commands


def _normalise(argv: list[str]) -> list[str]:
    """CLEO parity: ``cleo-grade`` and ``cleo-grade --list`` list; ``cleo-grade ID`` grades,
    and so do options alone that name what to grade (``--entries FILE``); options alone that
    listing takes (``cleo-grade --history PATH``, ``--json``) list, as a bare ``cleo-grade``."""
    if not argv:
        return ["list"]
    if argv[0] == "--list":
        return ["list", *argv[1:]]
    first = argv[0]
    if first in _MODULE_OF or first in {"-h", "--help"}:
        return argv
    if not first.startswith("-"):
        return ["grade", *argv]
    # Options before the session id (``cleo-grade --db X ID``): grade or list.
    if "--list" in argv:
        return ["list", *[a for a in argv if a != "--list"]]
    if _lists(argv):
        return ["list", *argv]
    return ["grade", *argv]


def _lists(argv: list[str]) -> bool:
    """Whether options given without a session are a listing: nothing to grade is named,
    and ``list`` takes every one of them (else ``grade`` says what it misses)."""
    commands = _build((_MODULE_OF["grade"],))[1]
    with contextlib.redirect_stderr(io.StringIO()):
        try:
            graded, _ = commands["grade"].parse_known_args(argv)
            _, unknown = commands["list"].parse_known_args(argv)
        except (CommandError, SystemExit):  # a bad value: grade's own parse reports it
            return False
    named = graded.session or graded.entries or getattr(graded, "cleo_db", None)
    return not named and not unknown


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is: every path that undoes an interrupted write
    (a transaction rolled back, a store the command created removed) undoes this too."""


def _terminate(signum: int, frame: FrameType | None) -> None:
    # A second SIGTERM (a supervisor repeating itself) must not cut the undo short; what
    # cannot wait for it sends SIGKILL.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise _Terminated


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout, ``timeout``, a container stop) ends a command as Ctrl-C does.

    Its default action kills the process where it stands: an import into a new store then
    left the store file behind with no entries in it. Left alone: SIGTERM ignored by whoever
    started the command (it is meant to finish), a handler a host program set outside Python
    (getsignal() is None: it could not be restored), and threads other than the main one
    (handlers belong to it).
    """
    previous = signal.getsignal(signal.SIGTERM)
    if (
        previous is None
        or previous == signal.SIG_IGN
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return
    signal.signal(signal.SIGTERM, _terminate)
    try:
        yield
    except _Terminated:
        # Said while further SIGTERMs are still ignored: once the default action is back,
        # one arriving between the line's text and its newline would cut it.
        sys.stderr.write("cleo-grade: terminated\n")
        sys.stderr.flush()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _warnings_in_one_line() -> Iterator[None]:
    """A CleoGradeWarning no command gathered itself (one from deep in a rubric: a judge
    cache that cannot be read) is one ``cleo-grade: warning:`` line, as every other is, not
    Python's two lines naming a source file."""
    shown = warnings.showwarning

    def show(
        message: Warning | str,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: TextIO | None = None,
        line: str | None = None,
    ) -> None:
        if not issubclass(category, CleoGradeWarning):
            shown(message, category, filename, lineno, file, line)
            return
        print(warning_line(message), file=sys.stderr)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = shown


#: What writing the output can fail with (a full disk under `> out.txt`, a quota): said in
#: one line, as every other error, not a traceback with exit status 1 ("below threshold").
_OUTPUT_FAILURES: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _output_failed(exc: OSError) -> int:
    # What stdout still holds would fail again at exit (a second traceback): it goes nowhere.
    with contextlib.suppress(OSError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    print(f"cleo-grade: error: cannot write the output: {exc.strerror or exc}", file=sys.stderr)
    return 2


def _error_line(message: object) -> str:
    # Imported here: escaping text for a terminal loads html's entity table, which a command
    # that succeeds (`cleo-grade record`, once per call of a shell agent) never needs.
    from pytest_cleo_grade.core._text import terminal_text

    return terminal_text(message)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status (0 ok, 1 below threshold, 2 usage/input,
    130 interrupted, 143 terminated)."""
    given = list(sys.argv[1:] if argv is None else argv)
    args_list = _normalise(given)
    chosen = _MODULE_OF.get(args_list[0])
    parser, commands = _build(() if chosen is None else (chosen,))
    try:
        with _terminate_as_interrupt(), _warnings_in_one_line():
            args = parser.parse_args(args_list)
            if given[:1] and not given[0].startswith("-") and given[0] not in commands:
                # `cleo-grade WORD` grades WORD: a mistyped command arrives there as a
                # session id (never so with `cleo-grade grade ID`, said in full).
                args.command_names = tuple(commands)
            handler: Handler = args.handler
            status = handler(args)
            if sys.stdout is not None:  # None: started with its stdout closed (`>&-`)
                sys.stdout.flush()  # output that cannot be written fails here, said in one line
            return status
    except CommandError as exc:
        print(_error_line(exc), file=sys.stderr)
        return exc.status
    except CleoGradeError as exc:
        print(_error_line(f"cleo-grade: error: {exc}"), file=sys.stderr)
        return 2
    except _Terminated:  # said by _terminate_as_interrupt, while SIGTERM was still ignored
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("cleo-grade: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except OSError as exc:
        if exc.errno not in _OUTPUT_FAILURES:
            raise
        return _output_failed(exc)
