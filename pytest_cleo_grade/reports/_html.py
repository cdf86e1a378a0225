"""The HTML report's I/O edge: read the history and the store, write the page atomically.

The page itself is rendered by :mod:`pytest_cleo_grade.reports._html_page` (pure); the plugin
(at the end of a run, on the controller) and ``cleo-grade report`` both come through here.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core._files import (
    NotRegularFileError,
    inputs_of,
    kind_of,
    replaced_input,
    write_atomically,
)
from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.core.models import GradeResult, collector_paused, order_entries
from pytest_cleo_grade.grading._run_ids import (
    MODE_KEY,
    THRESHOLD_KEY,
    latest_run_id,
    of_run,
    result_position,
)
from pytest_cleo_grade.grading._runs import EXCLUDED_KEY, excluded_of, latest_series
from pytest_cleo_grade.grading._verdict import GradedTest, RunGrade
from pytest_cleo_grade.reports._html_page import (
    GradeLine,
    build_report,
    grade_test_id,
    render_html,
)

__all__ = [
    "EXCLUDED_KEY",
    "ReportError",
    "latest_run",
    "refuse_replacing_inputs",
    "session_calls",
    "write_html_report",
    "write_report",
]


class ReportError(CleoGradeError):
    """The HTML report could not be written."""


def latest_run(
    history: Sequence[GradeResult],
    *,
    threshold: float | None,
    gate: float | None,
    run_id: str | None = None,
) -> RunGrade:
    """The last run a history holds: every line of its run id (``run_id``, else the last
    line's; shards combined by ``cleo-grade combine`` share it), each test's latest grade in
    it (a repeated test's latest series of runs). A test deleted from the suite is in no
    later run, so it no longer counts. Lines written before lines carried a run id: each
    test's latest grade, as before.

    Tests are listed in the order of the whole suite's collection when every line says its
    place (extra ``position``), which is the order the unsharded pytest run prints, else in
    the order they last appear. Each test's threshold and mode are its line's unless
    ``threshold`` (``--fail-under``) replaces them. Manual grades (cleo-grade review) are
    people's labels for judge calibration, not grades of a run: left out.
    """
    history = [r for r in history if r.evaluator != "manual"]
    chosen = run_id if run_id is not None else latest_run_id(history)
    lines = of_run(history, chosen) if chosen is not None else history
    latest = latest_series(lines, grade_test_id)
    tests = [
        _graded(key, result, threshold)
        for key, series in reversed(latest.items())
        for result in reversed(series)
    ]
    positions = [(result_position(test.result), index) for index, test in enumerate(tests)]
    if tests and all(position is not None for position, _ in positions):
        order = sorted(range(len(tests)), key=lambda i: (positions[i][0], i))
        tests = [tests[i] for i in order]
    return RunGrade(tuple(tests), gate)


def _graded(key: str, result: GradeResult, threshold: float | None) -> GradedTest:
    extra = result.model_extra or {}
    mode = extra.get(MODE_KEY)
    if threshold is not None:
        return GradedTest(key, result, threshold, "--fail-under", "fail", _excluded(result))
    saved = extra.get(THRESHOLD_KEY)
    own = float(saved) if isinstance(saved, int | float) and not isinstance(saved, bool) else None
    return GradedTest(
        key,
        result,
        own,
        None if own is None else "the test's threshold",
        mode if mode in ("fail", "report") else "fail",
        excluded=_excluded(result),
    )


def _excluded(result: GradeResult) -> str | None:
    """Why the run left this grade out of its mean (its history line says), or None."""
    return excluded_of(result.model_extra)


def session_calls(
    db: Path, sessions: Sequence[str], *, required: bool = False
) -> dict[str, dict[int, str]] | None:
    """Each session's entries as ``domain.operation`` by index (grading order), or None when
    the store is missing or unreadable: the report then names entries by index only.

    ``required`` (a store the user named): a store that cannot be opened is a ReportError
    naming it instead. A session the store cannot read (a bad row) loses only its own names.
    """
    if not required and not db.is_file():
        return None
    from pytest_cleo_grade.store import AuditStore

    calls: dict[str, dict[int, str]] = {}
    try:
        store = AuditStore(db, read_only=True)
    except CleoGradeError as exc:
        if required:
            raise ReportError(f"audit store {exc}") from None
        return None
    with store:
        for session in dict.fromkeys(sessions):
            try:
                entries = store.session_entries(session)
            except CleoGradeError:
                continue  # this session's entries are named by index only
            # The order every rubric grades in, so a point's indices name these entries.
            ordered = order_entries(entries)
            calls[session] = {i: f"{e.domain}.{e.operation}" for i, e in enumerate(ordered)}
    return calls


def session_conversations(db: Path, sessions: Sequence[str]) -> dict[str, Conversation]:
    """Each session's stored conversation (those with none, or unreadable, left out)."""
    if not db.is_file():
        return {}
    from pytest_cleo_grade.store import AuditStore

    found: dict[str, Conversation] = {}
    try:
        store = AuditStore(db, read_only=True)
    except CleoGradeError:
        return {}
    with store:
        for session in dict.fromkeys(sessions):
            try:
                talk = store.session_conversation(session)
            except CleoGradeError:
                continue
            if not talk.empty:
                found[session] = talk
    return found


def refuse_replacing_inputs(path: Path, reads: Mapping[Path, str], *, what: str) -> None:
    """Raise ReportError when writing ``path`` would replace one of the files the command
    reads (DESIGN §9: grading never loses data): one line naming both, before anything is
    written. ``what`` starts the line (``HTML report``)."""
    source = replaced_input(path, reads)
    if source is not None:
        role = reads[Path(source)]
        raise ReportError(f"{what} {path}: would replace the {role} {source}: nothing written")


def write_report(path: Path, text: str) -> None:
    """Write ``text`` to a new file beside ``path`` and rename it over ``path``.

    A reader (a CI artefact upload) never sees half a page; the temporary file is created
    exclusively under a random name, and a link at ``path`` is replaced, never written
    through. Raises ReportError with one line naming the path.
    """
    # A lone surrogate in an agent's string cannot be UTF-8: show it as its escape.
    data = text.encode("utf-8", "backslashreplace")
    try:
        _refuse_target(path)
        write_atomically(path, data)
    except FileExistsError:
        # mkdir found a file where a parent directory should be.
        raise ReportError(f"HTML report {path}: {path.parent} is not a directory") from None
    except OSError as exc:
        raise ReportError(f"HTML report {path}: {exc.strerror or exc}") from exc


def _refuse_target(path: Path) -> None:
    """Raise the OSError :func:`write_report` says for a target no page can replace."""
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory")
    if path.parent.exists() and not path.parent.is_dir():
        raise NotADirectoryError(20, f"{path.parent} is not a directory")
    with contextlib.suppress(FileNotFoundError):
        mode = os.lstat(path).st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            raise NotRegularFileError(path, kind_of(mode))


def check_target(path: Path) -> None:
    """ReportError, as :func:`write_report` would raise it, for a target that cannot take a
    page (a directory, a FIFO): said before the inputs are read, whose problems come next."""
    try:
        _refuse_target(path)
    except OSError as exc:
        raise ReportError(f"HTML report {path}: {exc.strerror or exc}") from None


def write_html_report(
    path: Path,
    run: RunGrade,
    history: Sequence[GradeLine],
    *,
    db: Path | None = None,
    baseline: Mapping[str, Sequence[float]] | None = None,
    calibration: Sequence[GradeResult] | None = None,
    source: str = "",
    decisions: Mapping[str, str] | None = None,
    gates: Sequence[tuple[bool | None, str]] = (),
    reads: Mapping[Path, str] | None = None,
    db_required: bool = False,
) -> None:
    """Render the run with its history (entries named from the store at ``db``) to ``path``;
    ``decisions`` and ``gates`` as :func:`build_report` takes them. ``path`` may not be
    ``db`` or one of ``reads`` (:func:`inputs_of`: the history, a baseline file): ReportError.
    ``db_required``: a store that cannot be opened is a ReportError, nothing written.
    ``calibration``: as :func:`build_report` takes it."""
    refuse_replacing_inputs(path, {**inputs_of(db=db), **(reads or {})}, what="HTML report")
    check_target(path)
    calls = None
    conversations = None
    if db is not None:
        sessions = [test.result.session_id for test in run.tests]
        calls = session_calls(db, sessions, required=db_required)
        conversations = session_conversations(db, sessions)
    # A page of a long history is many small objects and no cycles: full collections would
    # only traverse the history again (the larger the process, the more they cost).
    with collector_paused():
        page = render_html(
            build_report(
                run,
                history,
                baseline=baseline,
                calibration=calibration,
                calls=calls,
                source=source,
                decisions=decisions,
                gates=gates,
                conversations=conversations,
            )
        )
    write_report(path, page)
