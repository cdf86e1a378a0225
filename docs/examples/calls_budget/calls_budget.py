"""calls_budget: a small third-party rubric for pytest-cleo-grade (an example)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from pytest_cleo_grade.core.models import AuditEntry, DimensionScore, GradeResult
from pytest_cleo_grade.rubrics.protocol import GradeContext
from pytest_cleo_grade.rubrics.cleo import coerce_entries, order_entries
from pytest_cleo_grade.rubrics.hookspecs import hookimpl


class CallsBudgetRubric:
    """Few calls, and calls that work: 50 points each."""

    name = "calls-budget"
    version = "1.0.0"
    dimensions: Mapping[str, float] = {"economy": 50, "reliability": 50}
    budget = 5

    def grade(
        self,
        entries: Iterable[AuditEntry | Mapping[str, Any]],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        mine = order_entries(
            [e for e in coerce_entries(entries) if e.session_id in (None, session_id)]
        )
        over = max(0, len(mine) - self.budget)
        economy = max(0, 50 - 10 * over)
        succeeded = sum(e.result.success for e in mine)
        reliability = (100 * succeeded + len(mine)) // (2 * len(mine)) if mine else 0
        flags = [f"{over} call(s) over the budget of {self.budget}"] if over else []
        return GradeResult(
            session_id=session_id,
            task_id=context.task_id if context else None,
            total_score=economy + reliability,
            dimensions={
                "economy": DimensionScore(
                    score=economy, max=50, evidence=[f"{len(mine)} calls, budget {self.budget}"]
                ),
                "reliability": DimensionScore(
                    score=reliability, max=50, evidence=[f"{succeeded}/{len(mine)} calls succeeded"]
                ),
            },
            flags=flags,
            timestamp=now or datetime.now(UTC),
            entry_count=len(mine),
        )


@hookimpl
def cleo_grade_register_rubrics(register: Any) -> None:
    register(CallsBudgetRubric())
