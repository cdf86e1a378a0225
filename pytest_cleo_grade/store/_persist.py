"""The one persist(): a grade saved to the history (GRADES.jsonl) and the grades table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.core.models import GradeResult
from pytest_cleo_grade.store._store import AuditStore
from pytest_cleo_grade.store.history import append_grades

__all__ = ["PersistError", "persist"]


class PersistError(CleoGradeError):
    """Some grades were not saved (``keep_going``): which halves failed, and why."""

    def __init__(self, problems: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{half} not written: {why}" for half, why in problems.items()))
        self.problems = dict(problems)


def persist(
    results: Sequence[GradeResult],
    *,
    history: Path | None,
    store: AuditStore | None,
    keep_going: bool = False,
    sync: bool = True,
) -> None:
    """Save grades: one append to the history (GRADES.jsonl), then the store's grades table.

    The one write order of every path that saves a grade (the plugin, the CLI); each half is
    all or nothing on its own (one locked append; one transaction). By default the save is
    all or nothing as a whole, so an error means "saved nowhere" (the CLI's exit status 2):
    a history that cannot be written stops before the table is touched, and a table that
    cannot be written cuts the appended lines off the history again. ``keep_going`` (a test
    run) writes each half it can and names every half not written in one PersistError,
    which the run shows as a warning. ``sync=False`` skips the history's fsync (see
    ``history.append_grades``).
    """
    if not results:
        return
    if not keep_going and history is not None and store is not None:
        # The table is written while the history is still locked, and a failure cuts the
        # history back (append_grades' ``then``). The other order (the table's transaction
        # left open until the append is done) would also survive a killed process, but it
        # would hold the store's write lock, which every recording process waits on, while
        # waiting for the history's lock; the history's lock delays only other grade
        # appends. A process killed between the halves still leaves the history's line.
        target = store
        append_grades(results, history, sync=sync, then=lambda: target.add_grades(results))
        return
    problems: dict[str, str] = {}
    if history is not None:
        try:
            append_grades(results, history, sync=sync)
        except CleoGradeError as exc:
            if not keep_going:
                raise
            problems["grade history"] = str(exc)
    if store is not None:
        try:
            store.add_grades(results)
        except CleoGradeError as exc:
            if not keep_going:
                raise
            problems["grades table"] = str(exc)
    if problems:
        raise PersistError(problems)
