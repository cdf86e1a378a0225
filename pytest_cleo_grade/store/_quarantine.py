"""The quarantine file: tests whose verdict flips, graded report-only until they settle.

JSON, meant to be committed or kept as a CI artefact::

    {"quarantine": 1, "stableRuns": 5,
     "tests": [{"testId": "test_x.py::test_agent", "since": "2026-03-01T12:00:00Z",
                "reason": "4 flips in 10 runs (44%)"}]}

``stableRuns`` (M) is how many latest runs with one verdict release a test when the file is
written again (``cleo-grade flaky --write-quarantine``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pytest_cleo_grade.core._files import read_regular_bytes, write_atomically
from pytest_cleo_grade.core.errors import HistoryError

__all__ = [
    "DEFAULT_QUARANTINE",
    "DEFAULT_STABLE_RUNS",
    "Quarantine",
    "QuarantinedTest",
    "read_quarantine",
    "write_quarantine",
]

DEFAULT_QUARANTINE: Final = ".cleo/quarantine.json"
#: M: the latest runs with one verdict that take a test out of quarantine.
DEFAULT_STABLE_RUNS: Final = 5
_VERSION: Final = 1
_MAX_BYTES: Final = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class QuarantinedTest:
    test_id: str
    since: str
    reason: str


@dataclass(frozen=True, slots=True)
class Quarantine:
    stable_runs: int
    tests: tuple[QuarantinedTest, ...]

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(test.test_id for test in self.tests)


def _bad(path: Path, why: str) -> HistoryError:
    return HistoryError(f"{path}: not a quarantine file: {why}")


def read_quarantine(path: str | Path) -> Quarantine:
    """The file at ``path``; HistoryError naming the path and the field when it is bad."""
    target = Path(path)
    try:
        raw = read_regular_bytes(target, _MAX_BYTES)
    except OSError as exc:
        raise HistoryError(
            f"{target}: cannot read the quarantine file: {exc.strerror or exc}"
        ) from None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _bad(target, f"invalid JSON ({exc})") from None
    if not isinstance(data, Mapping) or data.get("quarantine") != _VERSION:
        raise _bad(target, 'expected an object with "quarantine": 1')
    stable = data.get("stableRuns", DEFAULT_STABLE_RUNS)
    if not isinstance(stable, int) or isinstance(stable, bool) or stable < 1:
        raise _bad(target, f"stableRuns: {stable!r} is not a whole number >= 1")
    tests = data.get("tests", [])
    if not isinstance(tests, list):
        raise _bad(target, "tests: expected a list")
    parsed = []
    for number, item in enumerate(tests):
        test_id = item.get("testId") if isinstance(item, Mapping) else None
        if not isinstance(test_id, str) or not test_id:
            raise _bad(target, f"tests[{number}].testId: expected a test id")
        since = item.get("since", "")
        reason = item.get("reason", "")
        if not isinstance(since, str) or not isinstance(reason, str):
            raise _bad(target, f"tests[{number}]: since and reason are text")
        parsed.append(QuarantinedTest(test_id, since, reason))
    return Quarantine(stable, tuple(parsed))


def write_quarantine(path: str | Path, quarantine: Quarantine) -> None:
    """Replace the file at ``path`` atomically (a reader sees the old file or the new)."""
    data = {
        "quarantine": _VERSION,
        "stableRuns": quarantine.stable_runs,
        "tests": [
            {"testId": test.test_id, "since": test.since, "reason": test.reason}
            for test in quarantine.tests
        ],
    }
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    write_atomically(Path(path), text.encode("utf-8", "surrogateescape"))
