"""The run's identity: its run id, the shard it is, and each test's place in the whole suite.

Shards of one CI run (pytest-split's ``--splits/--group``, pytest-shard's
``--num-shards/--shard-id``, or ``--cleo-grade-shard=I/N``) share a run id, so that
``cleo-grade combine`` and ``cleo-grade report --gate`` decide them as one run.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import pytest

from pytest_cleo_grade.grading._run_ids import (
    RUN_ID_VARIABLE,
    Shard,
    parse_run_id,
    parse_shard,
    resolve_run_id,
)
from pytest_cleo_grade.plugin._options import add_scalar_ini

__all__ = ["POSITIONS_KEY", "Positions", "RunOptions", "add_run_options", "load_run_options"]


@dataclass(frozen=True, slots=True)
class RunOptions:
    """The run id every grade of this run carries, and the shard this run is (or None)."""

    run_id: str
    shard: Shard | None


def _run_id_arg(value: str) -> str:
    try:
        return parse_run_id(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _shard_arg(value: str) -> str:
    try:
        parse_shard(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def add_run_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("cleo-grade", "grade AI agents' audit logs (pytest-cleo-grade)")
    group.addoption(
        "--cleo-grade-run-id",
        dest="cleo_grade_run_id",
        metavar="ID",
        type=_run_id_arg,
        default=None,
        help=f"the run id every history line of this run carries (default: ${RUN_ID_VARIABLE}, "
        "else the CI's own, such as github-$GITHUB_RUN_ID-$GITHUB_RUN_ATTEMPT or "
        "gitlab-$CI_PIPELINE_ID, else a fresh one); shards of one run share it",
    )
    group.addoption(
        "--cleo-grade-shard",
        dest="cleo_grade_shard",
        metavar="I/N",
        type=_shard_arg,
        default=None,
        help="this run is shard I of N (pytest-split's --splits/--group and pytest-shard's "
        "--num-shards/--shard-id are read without it): the run gate is deferred to "
        "cleo-grade report --gate over the combined shards",
    )
    _add_ini(parser)


def _add_ini(parser: pytest.Parser) -> None:
    add_scalar_ini(parser, "cleo_grade_run_id", "the run id every history line carries")
    add_scalar_ini(parser, "cleo_grade_shard", "this run is shard I/N of a split suite")


def _detected_shard(config: pytest.Config) -> Shard | None:
    """The shard pytest-split or pytest-shard made of this run, from their own options."""
    option = config.option
    splits, group = getattr(option, "splits", None), getattr(option, "group", None)
    if isinstance(splits, int) and isinstance(group, int) and splits > 1:
        return Shard(group, splits, "pytest-split --splits/--group")
    total, index = getattr(option, "num_shards", None), getattr(option, "shard_id", None)
    if isinstance(total, int) and isinstance(index, int) and total > 1 and 0 <= index < total:
        return Shard(index + 1, total, "pytest-shard --num-shards/--shard-id")
    return None


def load_run_options(config: pytest.Config) -> RunOptions:
    """The run id and shard; UsageError for a bad ``CLEO_GRADE_RUN_ID``."""
    given: str | None = config.getoption("cleo_grade_run_id")
    where = f"${RUN_ID_VARIABLE}"
    if given is None and (ini := str(config.getini("cleo_grade_run_id")).strip()):
        given, where = ini, "ini option cleo_grade_run_id"
    try:
        run_id = resolve_run_id(given, os.environ)
    except ValueError as exc:
        raise pytest.UsageError(f"cleo-grade: {where}: {exc}") from None
    text: str | None = config.getoption("cleo_grade_shard")
    source = "--cleo-grade-shard"
    if text is None and (ini := str(config.getini("cleo_grade_shard")).strip()):
        text, source = ini, "ini cleo_grade_shard"
    try:
        shard = parse_shard(text, source) if text is not None else _detected_shard(config)
    except ValueError as exc:
        raise pytest.UsageError(f"cleo-grade: ini option cleo_grade_shard: {exc}") from None
    return RunOptions(run_id, shard)


POSITIONS_KEY = pytest.StashKey[dict[str, int]]()


class Positions:
    """Each test's index in the whole suite's collection, taken before any shard plugin
    deselects: a run combined from shards then lists its tests as the unsharded run does.
    Registered on every process that collects (an xdist worker too: it grades)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        self.config.stash[POSITIONS_KEY] = {item.nodeid: index for index, item in enumerate(items)}
