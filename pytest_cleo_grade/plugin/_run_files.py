"""The files a run writes or reads by path, checked before any test runs: none is the audit
store, and no file written is also another of the run's files."""

from __future__ import annotations

from pathlib import Path
from typing import Final, NamedTuple

import pytest

from pytest_cleo_grade.core.settings import PluginOptions, expanded, unresolved_leaf
from pytest_cleo_grade.plugin._repeat_options import RepeatOptions

__all__ = ["check_run_files"]


def check_run_files(config: pytest.Config, options: PluginOptions, repeats: RepeatOptions) -> None:
    """A usage error when the run would write over the store or over another of its files."""
    files = _run_files(config, options, repeats)
    _refuse_writing_over_the_store(options, files)
    _refuse_one_file_for_two(files)


class _RunFile(NamedTuple):
    """A file the run writes (or appends to) or reads, with the option naming it."""

    option: str
    role: str
    path: Path
    writes: bool
    ours: bool = True


def _run_files(
    config: pytest.Config, options: PluginOptions, repeats: RepeatOptions
) -> list[_RunFile]:
    """Every file this run writes or reads by path: ours, and the reports of pytest (JUnit
    XML) and pytest-html (when installed) that the grades go into."""
    baseline = repeats.baseline if isinstance(repeats.baseline, Path) else None  # or "latest"
    ours = (
        ("history", "grade history", options.history_path, True),
        ("save-baseline", "saved baseline", repeats.save_baseline, True),
        ("html", "HTML report", options.html_path, True),
        ("rubric-file", "rubric file", options.rubric_file, False),
        ("baseline", "baseline", baseline, False),
    )
    files = [
        _RunFile(f"--cleo-grade-{name} (ini cleo_grade_{name.replace('-', '_')})", role, path, w)
        for name, role, path, w in ours
        if path is not None
    ]
    # pytest's own path options are relative to where pytest runs, expanded as ours are.
    for dest, option, role in (
        ("htmlpath", "--html (pytest-html)", "pytest-html report"),
        ("xmlpath", "--junitxml", "JUnit XML report"),
    ):
        value = getattr(config.option, dest, None)
        if isinstance(value, str) and value:
            path = unresolved_leaf(config.invocation_params.dir / expanded(value))
            files.append(_RunFile(option, role, path, writes=True, ours=False))
    return files


def _refuse_writing_over_the_store(options: PluginOptions, files: list[_RunFile]) -> None:
    """A usage error when a file the run writes is the audit store or one of its side
    files: the history's lock waited forever on the store's, a baseline replaced the store,
    and lines appended to ``-wal`` vanished when SQLite removed it. The paths have their
    directories resolved (``unresolved_leaf``); a link at the leaf is refused by writers."""
    from pytest_cleo_grade.core._files import SQLITE_SIDE_FILES

    db = options.db_path
    store = {db, *(db.with_name(db.name + suffix) for suffix in SQLITE_SIDE_FILES)}
    for file in files:
        if file.writes and file.path in store:
            raise pytest.UsageError(
                f"cleo-grade: {file.option} {file.path}: is the audit store's file "
                f"(--cleo-grade-db {db}); writing it would destroy the store: choose another path"
            )


#: Pairs of roles left alone at the start: the writer refuses them itself with a warning or a
#: note, and the run keeps its outcome (the report or a saved baseline over the history, the
#: report over the baseline read); saving over the baseline compared with updates it on
#: purpose; a baseline read from the history file is only read.
_NOT_REFUSED_AT_START: Final = {
    frozenset(pair)
    for pair in (
        ("HTML report", "grade history"),
        ("HTML report", "baseline"),
        ("saved baseline", "grade history"),
        ("saved baseline", "baseline"),
        ("grade history", "baseline"),
    )
}


def _refuse_one_file_for_two(files: list[_RunFile]) -> None:
    """A usage error when two of the run's paths name one file and one of them is written:
    the page replaced the baseline the run had just saved, or the rubric file (the next run
    failed on invalid TOML), and pytest-html's page was lost under ours. Before any test
    runs, as for the store; ``./x``, ``d/../x``, a linked directory or a link to the other
    file are the same file (``files.replaced_input``, both ways: pytest-html and JUnit XML
    write through a link)."""
    pairs = [
        (first, second)
        for index, first in enumerate(files)
        for second in files[index + 1 :]
        if (first.writes or second.writes)
        and (first.ours or second.ours)
        and frozenset((first.role, second.role)) not in _NOT_REFUSED_AT_START
    ]
    if not pairs:
        return
    from pytest_cleo_grade.core._files import replaced_input

    for first, second in pairs:
        if (
            replaced_input(first.path, [second.path]) is None
            and replaced_input(second.path, [first.path]) is None
        ):
            continue
        raise pytest.UsageError(_one_file_for_two(first, second))


def _one_file_for_two(first: _RunFile, second: _RunFile) -> str:
    """The usage error's line: the written file first, the other's path when spelt apart."""
    writer, other = (second, first) if second.writes else (first, second)
    same = "" if other.path == writer.path else f" {other.path}"
    harm = (
        "one would destroy the other"
        if other.writes
        else f"writing the {writer.role} would destroy the {other.role}"
    )
    return (
        f"cleo-grade: {writer.option} {writer.path}: is also the file of {other.option}{same}; "
        f"{harm}: choose another path"
    )
