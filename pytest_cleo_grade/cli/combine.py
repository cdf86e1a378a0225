"""``cleo-grade combine SHARD...``: merge shards' ``.cleo/`` folders into one run.

As ``coverage combine`` does for coverage data: each CI job of a split suite uploads its
``.cleo/`` (the audit store and the grade history), and one final job combines them into its
own ``.cleo/``, where ``cleo-grade report --gate`` decides the whole run.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.cli.common import (
    CommandError,
    add_db_option,
    add_history_option,
    db_path,
    history_path,
    warnings_to_stderr,
)
from pytest_cleo_grade.core._text import terminal_text

if TYPE_CHECKING:
    from pytest_cleo_grade.core.models import GradeResult
    from pytest_cleo_grade.store import AuditStore

__all__ = ["register"]

WHERE = "cleo-grade combine"


def register(subparsers: Any) -> None:
    combine = subparsers.add_parser(
        "combine",
        help="merge shards' .cleo/ folders (stores and histories) into one run",
        description="Merge the .cleo/ folders of a split suite's shards (each one's audit store "
        "and grade history) into this one's (or --db / --history). Combining a shard again "
        "adds nothing. Every shard must be of one run id (shards of one CI run share it), "
        "unless --allow-other-runs.",
    )
    combine.add_argument(
        "sources",
        nargs="+",
        metavar="SHARD",
        help="a shard's .cleo/ directory (or a directory holding one), its audit store "
        "(an SQLite file) or its grade history (a GRADES.jsonl file)",
    )
    add_db_option(combine)
    add_history_option(combine)
    combine.add_argument(
        "--run-id",
        dest="run_id",
        metavar="ID",
        help="the run to combine (default: the run of the first shard's last history line)",
    )
    combine.add_argument(
        "--allow-other-runs",
        dest="allow_other_runs",
        action="store_true",
        help="combine shards of other run ids too, relabelled as the combined run (a re-run "
        "of some jobs only): their lines keep their own id as combinedFrom",
    )
    combine.set_defaults(handler=run_combine)


@dataclass
class _Shard:
    """What one SHARD argument names: its store and its history (either may be absent)."""

    given: str
    store: Path | None = None
    history: Path | None = None
    lines: list[GradeResult] = field(default_factory=list)


def _resolve(given: str) -> _Shard:
    """A shard's store and history from a directory, an SQLite file or a history file."""
    from pytest_cleo_grade.core.settings import DEFAULT_DB, DEFAULT_HISTORY
    from pytest_cleo_grade.store.sources import is_sqlite_file

    path = Path(given)
    if not path.exists():
        raise CommandError(f"{WHERE}: {given}: no such file or directory")
    if path.is_dir():
        # The .cleo/ folder itself (an artifact downloaded as is), or a folder holding one.
        for root in (path, path / DEFAULT_DB.parts[0]):
            store = root / DEFAULT_DB.name
            history = root / Path(*DEFAULT_HISTORY.parts[1:])
            if store.is_file() or history.is_file():
                return _Shard(
                    given,
                    store if store.is_file() else None,
                    history if history.is_file() else None,
                )
        raise CommandError(
            f"{WHERE}: {given}: no audit store ({DEFAULT_DB.name}) and no grade history "
            f"({Path(*DEFAULT_HISTORY.parts[1:])}) in it or in its {DEFAULT_DB.parts[0]}/"
        )
    if is_sqlite_file(path):
        return _Shard(given, store=path)
    return _Shard(given, history=path)


def _existing_keys(history: Path, sessions: set[str]) -> set[tuple[object, ...]]:
    """The keys of the target history's lines of these sessions (only those can be the
    same grade): through its index only their rows, else every line read."""
    from pytest_cleo_grade.store._history_index import open_index
    from pytest_cleo_grade.store.history import read_grades

    index = open_index(history)
    if index is None:
        return {_key(result) for result in read_grades(history)}
    with index:
        index.warn_skipped()
        index.query("CREATE TEMP TABLE IF NOT EXISTS combined (session TEXT PRIMARY KEY)")
        index.query("DELETE FROM combined")
        for session in sessions:
            index.query("INSERT INTO combined VALUES (?)", (session,))
        return {
            _key(point) for point in index.points("session_id IN (SELECT session FROM combined)")
        }


def _key(result: Any) -> tuple[object, ...]:
    """What makes a history line the same grade, whichever shard or relabelling it came
    through: its session, test, time and run index."""
    extra = result.model_extra or {}
    return (result.session_id, extra.get("testId"), result.timestamp, extra.get("run"))


def run_combine(args: argparse.Namespace) -> int:
    from pytest_cleo_grade.grading._run_ids import (
        RUN_ID_KEY,
        latest_run_id,
        parse_run_id,
        run_id_of,
    )
    from pytest_cleo_grade.store.history import read_grades

    target_history = history_path(args)
    target_db = db_path(args)
    shards = [_resolve(given) for given in args.sources]
    with warnings_to_stderr():
        for shard in shards:
            if shard.history is not None:
                if _same(shard.history, target_history):
                    raise CommandError(f"{WHERE}: {shard.given}: is the history combined into")
                shard.lines = read_grades(shard.history)
        sessions = {result.session_id for shard in shards for result in shard.lines}
        seen = _existing_keys(target_history, sessions) if target_history.is_file() else set()
    try:
        wanted = parse_run_id(args.run_id) if args.run_id else None
    except ValueError as exc:
        raise CommandError(f"{WHERE}: --run-id: {exc}") from None
    if wanted is None:
        wanted = next(
            (run for shard in shards if (run := latest_run_id(shard.lines)) is not None), None
        )
    relabel: dict[str, str] = {}
    for shard in shards:
        run = latest_run_id(shard.lines)
        if run is None or wanted is None or run == wanted:
            continue
        if not args.allow_other_runs:
            raise CommandError(
                terminal_text(
                    f"{WHERE}: {shard.given}: its grades are of run {run}, not {wanted} "
                    "(a shard of another CI run?); nothing combined. Pass --allow-other-runs "
                    "to combine it as part of this run"
                )
            )
        relabel[run] = wanted
    new: list[GradeResult] = []
    for shard in shards:
        for result in shard.lines:
            run = run_id_of(result)
            if wanted is not None and run != wanted and run not in relabel:
                continue  # an earlier run the shard's history holds: not this run's
            if run in relabel:
                result = result.model_copy(update={RUN_ID_KEY: wanted, "combinedFrom": run})
            if _key(result) in seen:
                continue
            seen.add(_key(result))
            new.append(result)
    entries = _combine_stores(shards, target_db)
    _save(new, target_history, target_db)
    run_text = f" of run {wanted}" if wanted is not None else ""
    print(
        terminal_text(
            f"cleo-grade: combined {len(shards)} shard{'' if len(shards) == 1 else 's'}"
            f"{run_text}: {len(new)} new grade{'' if len(new) == 1 else 's'} into "
            f"{target_history}, {entries} new audit entr{'y' if entries == 1 else 'ies'} "
            f"into {target_db}"
        )
    )
    return 0


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _combine_stores(shards: Sequence[_Shard], target: Path) -> int:
    """Copy every shard store's entries into ``target`` under their own ids (so a shard
    combined again adds nothing); returns how many were new."""
    from pytest_cleo_grade.core.errors import StoreError
    from pytest_cleo_grade.store import AuditStore
    from pytest_cleo_grade.store._imports import import_cleo_rows
    from pytest_cleo_grade.store.sources import read_cleo_db

    stores = [shard for shard in shards if shard.store is not None]
    if not stores:
        return 0
    batches = []
    for shard in stores:
        assert shard.store is not None
        if _same(shard.store, target):
            raise CommandError(f"{WHERE}: {shard.given}: is the store combined into")
        with AuditStore(shard.store, read_only=True) as source:
            if not source.session_ids():
                continue  # a shard that graded nothing
        try:
            batches.append(read_cleo_db(shard.store))
        except StoreError as exc:
            raise CommandError(f"{WHERE}: {exc}") from None
    if not batches:
        return 0
    with AuditStore(target) as store:
        imported = sum(import_cleo_rows(store, items) for items in batches)
        for shard in stores:
            assert shard.store is not None
            _combine_conversations(shard.store, store)
        return imported


def _combine_conversations(source_path: Path, target: AuditStore) -> None:
    """Each session's conversation (messages, model calls, output) from a shard's store, for
    the sessions the target holds none of: combining a shard again adds nothing."""
    from pytest_cleo_grade.core.errors import StoreError
    from pytest_cleo_grade.store import AuditStore

    try:
        with AuditStore(source_path, read_only=True) as source:
            for session_id in source.session_ids():
                talk = source.session_conversation(session_id)
                if talk.empty and not talk.dropped:
                    continue
                held = target.session_conversation(session_id)
                if held.empty and not held.dropped:
                    target.append_conversation(session_id, talk)
    except StoreError as exc:
        raise CommandError(f"{WHERE}: {exc}") from None


def _save(results: list[GradeResult], history: Path, db: Path) -> None:
    """The new lines, appended to the history and the store's grades table at once."""
    if not results:
        return
    from pytest_cleo_grade.store import AuditStore
    from pytest_cleo_grade.store._persist import persist

    with AuditStore(db) as store:
        persist(results, history=history, store=store)
