"""A baseline's sessions graded again under this run's rubric, from the audit store.

When a test was graded under another rubric than its baseline (a rule file's new version, a
file edited without one), the two percentages measure different things. The baseline side
is graded again, not this run's: this run is already graded under the rubric it is judged
by, and the old rubric (an earlier version of a file) is no longer there to grade with. Only
rubrics that ask no judge are re-graded (``cleo``, ``rules``, ``trajectory`` and their
combinations): a judge's second opinion on old sessions is a new measurement, not the old one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Final

from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.core.settings import DEFAULT_RUBRIC, parse_rubric_weights
from pytest_cleo_grade.grading._baseline import TestGrades, grades_from_results

if TYPE_CHECKING:
    from pytest_cleo_grade.core._conversation import Conversation
    from pytest_cleo_grade.core.models import AuditEntry, GradeResult

__all__ = ["DETERMINISTIC_RUBRICS", "StoreRegrader", "deterministic", "rubric_grader"]

#: The built-in rubrics that grade from the entries alone: the same entries, the same grade.
DETERMINISTIC_RUBRICS: Final = frozenset({"cleo", "rules", "trajectory"})

#: Grades one session: (rubric name, entries, conversation, session id) -> its grade.
GradeFunction = Callable[[str, "list[AuditEntry]", "Conversation", str], "GradeResult"]


def deterministic(grades: TestGrades) -> bool:
    """Whether ``grades``' rubric grades from the entries alone (no judge, no plugin's)."""
    if grades.judge_model is not None:
        return False
    name = grades.rubric or DEFAULT_RUBRIC
    try:
        parts = parse_rubric_weights(name)
    except ValueError:
        return False
    return set(parts or {name: 1.0}) <= DETERMINISTIC_RUBRICS


def rubric_grader(rubric_file: Path | None) -> GradeFunction:
    """Grading as the run does with ``rubric_file`` (the run's ``--cleo-grade-rubric-file``)."""

    def grade(
        rubric: str, entries: list[AuditEntry], conversation: Conversation, session_id: str
    ) -> GradeResult:
        from pytest_cleo_grade.rubrics.cleo import grade_entries

        if rubric == DEFAULT_RUBRIC:
            return grade_entries(entries, session_id=session_id)
        from pytest_cleo_grade.rubrics.protocol import GradeContext, RubricConfig
        from pytest_cleo_grade.rubrics.registry import grade_with_rubric

        return grade_with_rubric(
            rubric,
            entries,
            session_id=session_id,
            config=RubricConfig(rubric_file=rubric_file),
            context=GradeContext(conversation=conversation),
        )

    return grade


class StoreRegrader:
    """The :data:`~.grading._baseline.Regrader` of one audit store: a baseline test's
    sessions, every one of them, graded under the rubric of this run's grades, or None (a
    rubric with a judge, a session the store does not hold, a grading that fails)."""

    def __init__(self, store: Path, grade: GradeFunction) -> None:
        self.store = store
        self.grade = grade

    def __call__(self, before: TestGrades, now: TestGrades) -> TestGrades | None:
        if not deterministic(now) or not before.sessions or not self.store.is_file():
            return None
        if len(before.sessions) != len(before.totals):
            return None  # a hand-edited baseline: its runs are not its sessions
        from pytest_cleo_grade.store import AuditStore

        rubric = now.rubric or DEFAULT_RUBRIC
        results = []
        try:
            with AuditStore(self.store, read_only=True) as audit:
                for run, session_id in enumerate(before.sessions):
                    entries = audit.session_entries(session_id)
                    if not entries:
                        return None  # pruned, or another machine's store
                    conversation = audit.session_conversation(session_id)
                    result = self.grade(rubric, entries, conversation, session_id)
                    extra = {"testId": before.test_id, "run": run}
                    results.append(result.model_copy(update=extra))
        except CleoGradeError:
            return None  # the rubric cannot be rebuilt here (a marker's expect=, say)
        return grades_from_results(results).get(before.test_id)
