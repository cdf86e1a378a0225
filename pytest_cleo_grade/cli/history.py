"""``cleo-grade history compact`` / ``restore``: keep a long history's file small, losslessly."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from pytest_cleo_grade.cli._archived import count_text as _count
from pytest_cleo_grade.cli._archived import shown_path as _shown
from pytest_cleo_grade.cli.common import CommandError, add_history_option, db_path, history_path

if TYPE_CHECKING:
    from pytest_cleo_grade.store._compact import Compaction, RunLines
    from pytest_cleo_grade.store._restore import Restoration

__all__ = ["register"]

#: How long compact and restore wait for a pytest run or another cleo-grade appending to
#: the history (they hold its lock for a line at a time) before giving up.
DEFAULT_WAIT_S: Final = 30.0


def _keep_runs(value: str) -> int:
    text = value.strip()
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise argparse.ArgumentTypeError(
        f"invalid run count {value!r}: expected a whole number of runs, at least 1"
    )


def _seconds(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"invalid wait {value!r}: expected seconds, 0 or more")
    return seconds


def register(subparsers: Any) -> None:
    history = subparsers.add_parser(
        "history",
        help="compact the grade history (archive older runs into the store), or restore it",
        description="Keep GRADES.jsonl small without losing a line: `compact` moves every "
        "run but the newest N into the audit store's archive and rewrites the file "
        "atomically; `restore` puts every archived line back where it was.",
    )
    actions = history.add_subparsers(dest="action", metavar="ACTION", required=True)
    compact = actions.add_parser(
        "compact",
        help="keep the newest N runs in the history, archive the older ones into the store",
        description="Keep the newest N runs (a run is as new as its last line; lines without "
        "a run id are one run) in the grade history and move every older run's lines, byte "
        "for byte, into the audit store's archive; the history is rewritten atomically under "
        "the lock its writers take. `cleo-grade history restore` puts them back.",
    )
    compact.add_argument(
        "--keep-runs",
        dest="keep_runs",
        type=_keep_runs,
        required=True,
        metavar="N",
        help="how many of the newest runs stay in the history (1 or more)",
    )
    restore = actions.add_parser(
        "restore",
        help="put every archived line back into the history, where it was",
        description="Put back every line `cleo-grade history compact` archived from this "
        "history, in its place (the file as it was, byte for byte, followed by the lines "
        "appended since), and remove them from the archive.",
    )
    for parser, verb in ((compact, "move"), (restore, "put back")):
        add_history_option(parser)
        _add_store_option(parser)
        parser.add_argument(
            "--dry-run",
            dest="dry_run",
            action="store_true",
            help=f"say what would {verb}, change nothing",
        )
        parser.add_argument(
            "--wait",
            type=_seconds,
            default=DEFAULT_WAIT_S,
            metavar="SECONDS",
            help="how long to wait for a pytest run or cleo-grade writing the history "
            f"(default {DEFAULT_WAIT_S:.0f})",
        )
    compact.set_defaults(handler=run_compact)
    restore.set_defaults(handler=run_restore)


def _add_store_option(parser: argparse.ArgumentParser) -> None:
    from pytest_cleo_grade.core.settings import DEFAULT_DB

    # --db as every other command spells it; --store says what it is here, where the
    # archive lives.
    parser.add_argument(
        "--db",
        "--store",
        dest="db",
        metavar="PATH",
        help=f"audit store holding the archive (default: $CLEO_AUDIT_DB, else ./{DEFAULT_DB})",
    )


def _paths(args: argparse.Namespace, where: str, *, history_needed: bool) -> tuple[Path, Path]:
    history = history_path(args)
    store = db_path(args)
    if history_needed and not os.path.lexists(history):
        raise CommandError(f"{where}: {history}: no grade history there")
    if not store.is_file():
        raise CommandError(f"{where}: {store}: no audit store there (name it with --db)")
    return history, store


def run_compact(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.core._text import terminal_text
    from pytest_cleo_grade.store._compact import compact

    where = "cleo-grade history compact"
    history, store = _paths(args, where, history_needed=True)
    try:
        done = compact(history, store, args.keep_runs, dry_run=args.dry_run, wait=args.wait)
    except OSError as exc:  # the history unreadable, a link, not a regular file
        raise CommandError(
            terminal_text(f"{where}: {exc.filename or history}: {exc.strerror or exc}")
        ) from None
    if args.dry_run:
        for run in done.archived:
            print(terminal_text(f"would archive {_run_text(run)}"))
    print(terminal_text(_compact_line(done, history, store, args.keep_runs, dry=args.dry_run)))
    return 0


def run_restore(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.core._text import terminal_text
    from pytest_cleo_grade.store._restore import restore

    where = "cleo-grade history restore"
    # A history lost since (a cache that kept only the store) is restored from the archive.
    history, store = _paths(args, where, history_needed=args.dry_run)
    try:
        done = restore(history, store, dry_run=args.dry_run, wait=args.wait)
    except OSError as exc:
        raise CommandError(
            terminal_text(f"{where}: {exc.filename or history}: {exc.strerror or exc}")
        ) from None
    for when in done.misplaced:
        print(
            terminal_text(
                f"cleo-grade: warning: {history} no longer starts with the lines compact kept "
                f"at {when}: the lines archived then {'go' if args.dry_run else 'went'} back "
                "before it, in their order"
            ),
            file=sys.stderr,
        )
    print(terminal_text(_restore_line(done, history, store, dry=args.dry_run)))
    return 0


def _restore_line(done: Restoration, history: Path, store: Path, *, dry: bool) -> str:
    if not done.lines:
        return (
            f"cleo-grade: nothing to restore: {_shown(store)} holds no lines of {_shown(history)}"
        )
    verb = "would restore" if dry else "restored"
    text = (
        f"cleo-grade: {verb} {_count(done.runs, 'run')} ({_count(done.lines, 'line')}) from "
        f"{_shown(store)}; {_shown(history)} {_size(done.size_before)} -> "
        f"{_size(done.size_after)}"
    )
    return text + (" (dry run: nothing changed)" if dry else "")


def _compact_line(
    done: Compaction, history: Path, store: Path, keep_runs: int, *, dry: bool
) -> str:
    settled = ""
    if done.settled:
        settled = f" (settled {_count(done.settled, 'interrupted batch', 'interrupted batches')})"
    unread = ""
    if done.unread_lines:
        unread = f"; {_count(done.unread_lines, 'unreadable line')} left in place"
    if not done.archived:
        return (
            f"cleo-grade: nothing to archive: {_shown(history)} holds "
            f"{_count(len(done.kept), 'run')} ({_count(done.kept_lines, 'line')}), "
            f"--keep-runs {keep_runs}{unread}{settled}"
        )
    kept, archived = ("would keep", "archive") if dry else ("kept", "archived")
    text = (
        f"cleo-grade: {kept} {_count(len(done.kept), 'run')} ({_count(done.kept_lines, 'line')}), "
        f"{archived} {_count(len(done.archived), 'run')} ({_count(done.archived_lines, 'line')}) "
        f"into {_shown(store)}; {_shown(history)} {_size(done.size_before)} -> "
        f"{_size(done.size_after)}{unread}{settled}"
    )
    return text + (" (dry run: nothing changed)" if dry else "")


def _run_text(run: RunLines) -> str:
    span = ""
    if run.first is not None and run.last is not None:
        span = f", {run.first} to {run.last}" if run.first != run.last else f", {run.first}"
    return f"run {run.name}: {_count(run.lines, 'line')}{span}"


def _size(size: int) -> str:
    """Bytes as people read a file's size: decimal units, three digits."""
    if size < 1000:
        return f"{size} B"
    value = float(size)
    for unit in ("kB", "MB", "GB", "TB"):
        value /= 1000
        if value < 999.95 or unit == "TB":
            return f"{value:.1f} {unit}"
    raise AssertionError("unreachable")
