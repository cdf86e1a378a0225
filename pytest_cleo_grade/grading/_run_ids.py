"""Which run a grade belongs to (pure): the run id, the shard, a test's status and position.

Every history line and grade row carries the run id (extra ``runId``): shards of one CI run
share it, so "the latest run" is every line of the last run id, whichever job wrote it, and a
test deleted from the suite drops out of the next run's gate. No pydantic, no I/O: the plugin
reads this at configure time in every run; the environment is passed in.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal, TypeVar

__all__ = [
    "MODE_KEY",
    "POSITION_KEY",
    "REASON_KEY",
    "RUN_ID_KEY",
    "SHARD_KEY",
    "STATUS_KEY",
    "THRESHOLD_KEY",
    "Shard",
    "Status",
    "ci_run_id",
    "fresh_run_id",
    "latest_run_id",
    "of_run",
    "parse_run_id",
    "parse_shard",
    "resolve_run_id",
    "result_position",
    "run_id_of",
    "status_of",
]

#: The history keys this module owns (extras of a GradeResult line).
RUN_ID_KEY: Final = "runId"
SHARD_KEY: Final = "shard"
STATUS_KEY: Final = "cleoStatus"
REASON_KEY: Final = "reason"
#: The test's index in the whole suite's collection, before any shard's selection: a run
#: combined from shards lists its tests in the order the unsharded run does.
POSITION_KEY: Final = "position"
#: The test's threshold and mode as the run applied them: a report over the history (a
#: combined run) shows and counts each test as the pytest run did.
THRESHOLD_KEY: Final = "cleoThreshold"
MODE_KEY: Final = "cleoMode"

Status = Literal["passed", "below", "ungradable"]
STATUSES: Final = ("passed", "below", "ungradable")

#: The variable that names the run for every process (``--cleo-grade-run-id`` beats it).
RUN_ID_VARIABLE: Final = "CLEO_GRADE_RUN_ID"

# A run id is a label on lines, in file names and in terminal text: printable, no spaces.
_RUN_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+-]{0,127}")

#: CI systems' own ids of one pipeline run, first match wins: (prefix, variables joined).
_CI_VARIABLES: Final = (
    ("github", ("GITHUB_RUN_ID", "GITHUB_RUN_ATTEMPT")),
    ("gitlab", ("CI_PIPELINE_ID",)),
    ("buildkite", ("BUILDKITE_BUILD_ID",)),
    ("circleci", ("CIRCLE_WORKFLOW_ID",)),
    ("azure", ("BUILD_BUILDID", "SYSTEM_JOBATTEMPT")),
    ("jenkins", ("BUILD_TAG",)),
)


def parse_run_id(text: str) -> str:
    """A run id as given (option, variable): ValueError says what a valid one is."""
    value = text.strip()
    if not _RUN_ID.fullmatch(value):
        raise ValueError(
            f"invalid run id {text!r}: 1 to 128 letters, digits and . _ : @ + -, "
            "starting with a letter or digit"
        )
    return value


def ci_run_id(environ: Mapping[str, str]) -> str | None:
    """The CI's id of this pipeline run (``github-12345-1``, ``gitlab-678``), or None.

    Every job of the run sees the same variables, so shards on separate machines agree on it
    without being told. GitHub's attempt is part of it: a re-run is a new run.
    """
    for prefix, names in _CI_VARIABLES:
        first = environ.get(names[0], "").strip()
        if not first:
            continue
        parts = [first, *(environ.get(name, "").strip() or "1" for name in names[1:])]
        candidate = "-".join([prefix, *parts])
        try:
            return parse_run_id(candidate)
        except ValueError:
            continue  # a variable holding something odd: not an id to label lines with
    return None


def fresh_run_id(now: float | None = None) -> str:
    """A new id for a run outside CI: its UTC start time and random bits (sortable)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"local-{stamp}-{os.urandom(3).hex()}"


def resolve_run_id(given: str | None, environ: Mapping[str, str]) -> str:
    """The run id: the option, else ``CLEO_GRADE_RUN_ID``, else the CI's, else a fresh one."""
    if given:
        return parse_run_id(given)
    variable = environ.get(RUN_ID_VARIABLE, "").strip()
    if variable:
        return parse_run_id(variable)
    return ci_run_id(environ) or fresh_run_id()


# A plain class, not a dataclass: this module is on the path of `cleo-grade list`, and the
# dataclasses module alone (inspect with it) would be a tenth of that command's start-up.
class Shard:
    """One shard of a split suite: its 1-based index of ``total``, and who split it."""

    __slots__ = ("index", "source", "total")

    def __init__(self, index: int, total: int, source: str) -> None:
        self.index = index
        self.total = total
        self.source = source

    def _key(self) -> tuple[int, int, str]:
        return (self.index, self.total, self.source)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Shard) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"Shard(index={self.index!r}, total={self.total!r}, source={self.source!r})"

    @property
    def label(self) -> str:
        return f"{self.index}/{self.total}"


def parse_shard(text: str, source: str = "--cleo-grade-shard") -> Shard:
    """``I/N`` (1-based, as pytest-split's ``--group``): ValueError for anything else."""
    match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if match is None:
        raise ValueError(f"invalid shard {text!r}: expected I/N, such as 2/3")
    index, total = int(match[1]), int(match[2])
    if total < 1 or not 1 <= index <= total:
        raise ValueError(f"invalid shard {text!r}: I must be 1 to N, and N at least 1")
    return Shard(index, total, source)


def run_id_of(result: Any) -> str | None:
    """The run id a grade's line carries (None: written before lines carried one)."""
    value = (getattr(result, "model_extra", None) or {}).get(RUN_ID_KEY)
    return value if isinstance(value, str) and value else None


def status_of(result: Any) -> Status | None:
    """The status a grade's line says (None: an older line; passed/below are then the
    reader's to decide against a threshold)."""
    value = (getattr(result, "model_extra", None) or {}).get(STATUS_KEY)
    return value if value in STATUSES else None


R = TypeVar("R")


def latest_run_id(results: Sequence[Any]) -> str | None:
    """The run id of the history's last line, or None when that line carries none."""
    return run_id_of(results[-1]) if results else None


def of_run(results: Sequence[R], run_id: str) -> list[R]:
    """The lines of one run, in history order."""
    return [result for result in results if run_id_of(result) == run_id]


def result_position(result: Any) -> int | None:
    """The test's place in the whole suite's collection its line says, or None."""
    value = (getattr(result, "model_extra", None) or {}).get(POSITION_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) else None
