"""The HTML report's I/O edge: read the history and the store, write the page atomically.

The page itself is rendered by :mod:`pytest_cleo_grade.display_html` (pure); the plugin
(at the end of a run, on the controller) and ``cleo-grade report`` both come through here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_cleo_grade.display_html import build_report, grade_test_id, render_html
from pytest_cleo_grade.errors import CleoGradeError
from pytest_cleo_grade.files import write_atomically
from pytest_cleo_grade.models import GradeResult, collector_paused, order_entries
from pytest_cleo_grade.runs import latest_series
from pytest_cleo_grade.verdict import GradedTest, RunGrade

__all__ = ["ReportError", "latest_run", "session_calls", "write_html_report", "write_report"]


class ReportError(CleoGradeError):
    """The HTML report could not be written."""


def latest_run(
    history: Sequence[GradeResult], *, threshold: float | None, gate: float | None
) -> RunGrade:
    """The last run a history holds: each test's latest grade (a repeated test's latest
    series of runs), in the order the tests last appear."""
    latest = latest_series(history, grade_test_id)
    source = "--fail-under" if threshold is not None else None
    tests = [
        GradedTest(key, result, threshold, source, "fail")
        for key, series in reversed(latest.items())
        for result in reversed(series)
    ]
    return RunGrade(tuple(tests), gate)


def session_calls(db: Path, sessions: Sequence[str]) -> dict[str, dict[int, str]] | None:
    """Each session's entries as ``domain.operation`` by index (grading order), or None when
    the store is missing or unreadable: the report then names entries by index only."""
    if not db.is_file():
        return None
    from pytest_cleo_grade.store import AuditStore

    calls: dict[str, dict[int, str]] = {}
    try:
        with AuditStore(db, read_only=True) as store:
            for session in dict.fromkeys(sessions):
                # The order every rubric grades in, so a point's indices name these entries.
                entries = order_entries(store.session_entries(session))
                calls[session] = {i: f"{e.domain}.{e.operation}" for i, e in enumerate(entries)}
    except CleoGradeError:
        return None
    return calls


def write_report(path: Path, text: str) -> None:
    """Write ``text`` to a new file beside ``path`` and rename it over ``path``.

    A reader (a CI artefact upload) never sees half a page; the temporary file is created
    exclusively under a random name, and a link at ``path`` is replaced, never written
    through. Raises ReportError with one line naming the path.
    """
    # A lone surrogate in an agent's string cannot be UTF-8: show it as its escape.
    data = text.encode("utf-8", "backslashreplace")
    try:
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        if path.parent.exists() and not path.parent.is_dir():
            raise NotADirectoryError(20, f"{path.parent} is not a directory")
        write_atomically(path, data)
    except FileExistsError:
        # mkdir found a file where a parent directory should be.
        raise ReportError(f"HTML report {path}: {path.parent} is not a directory") from None
    except OSError as exc:
        raise ReportError(f"HTML report {path}: {exc.strerror or exc}") from exc


def write_html_report(
    path: Path,
    run: RunGrade,
    history: Sequence[GradeResult],
    *,
    db: Path | None = None,
    baseline: Mapping[str, Sequence[float]] | None = None,
    source: str = "",
    decisions: Mapping[str, str] | None = None,
    gates: Sequence[tuple[bool, str]] = (),
) -> None:
    """Render the run with its history (entries named from the store at ``db``) to ``path``;
    ``decisions`` and ``gates`` as :func:`build_report` takes them."""
    calls = None
    if db is not None:
        calls = session_calls(db, [test.result.session_id for test in run.tests])
    # A page of a long history is many small objects and no cycles: full collections would
    # only traverse the history again (the larger the process, the more they cost).
    with collector_paused():
        page = render_html(
            build_report(
                run,
                history,
                baseline=baseline,
                calls=calls,
                source=source,
                decisions=decisions,
                gates=gates,
            )
        )
    write_report(path, page)
