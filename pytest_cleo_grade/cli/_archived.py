"""Where a run the history lacks went: ``cleo-grade history compact`` may have archived it
into the audit store. Said by every reader asked for such a run (``report``, ``regrade``), and
the wording of ``history``'s own lines."""

from __future__ import annotations

import argparse
from pathlib import Path

from pytest_cleo_grade.cli.common import db_path, history_path

__all__ = ["archived_run_hint", "count_text", "shown_path"]


def count_text(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"


def shown_path(path: Path) -> str:
    """The path as the user would type it: relative to the current directory when under it."""
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def archived_run_hint(args: argparse.Namespace, run_id: str) -> str | None:
    """For a reader asked for a run the history lacks: where the run went, when ``history
    compact`` archived it into the store the command uses (None: it did not)."""
    from pytest_cleo_grade.core.errors import CleoGradeError
    from pytest_cleo_grade.store import AuditStore
    from pytest_cleo_grade.store._archive import archived_run_lines, history_key

    history, store = history_path(args), db_path(args)
    if not store.is_file():
        return None
    try:
        with AuditStore(store, read_only=True) as audit:
            lines = archived_run_lines(audit, history_key(store, history), run_id)
    except CleoGradeError:
        return None  # an unreadable store: the reader's own error says what it found
    if not lines:
        return None
    return (
        f"run {run_id} is archived ({count_text(lines, 'line')} in {shown_path(store)}, "
        "moved there by `cleo-grade history compact`): `cleo-grade history restore` puts it "
        "back"
    )
