"""Hook specifications of the ``cleo_grade`` plugin manager (rubric plugins implement them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import pluggy

if TYPE_CHECKING:
    from pytest_cleo_grade.rubrics.protocol import Rubric

__all__ = ["PROJECT_NAME", "hookimpl", "hookspec"]

#: The pluggy project name and the entry-point group third-party rubrics are published under.
PROJECT_NAME: Final = "cleo_grade"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def cleo_grade_register_rubrics(register: Callable[[Rubric], None]) -> None:
    """Register rubrics by calling ``register(rubric)`` once per rubric.

    A rubric is any object with ``name``, ``version``, ``dimensions`` (dimension name →
    maximum points, in order) and ``grade(entries, *, session_id, now=None, context=None)``
    returning a :class:`~pytest_cleo_grade.core.models.GradeResult` (see
    :class:`pytest_cleo_grade.rubrics.protocol.Rubric`). Names must be unique across all plugins;
    ``cleo`` (the default) and ``weighted`` are built in.

    Implement this hook in a module published under the ``cleo_grade`` entry-point group::

        # pyproject.toml of your package
        [project.entry-points.cleo_grade]
        my_rubric = "my_rubric"

    or directly in a ``conftest.py`` (the pytest plugin registers conftest modules). Example::

        from datetime import UTC, datetime

        from pytest_cleo_grade.core.models import DimensionScore, GradeResult
        from pytest_cleo_grade.core.models import coerce_entries
        from pytest_cleo_grade.rubrics.hookspecs import hookimpl


        class FewCallsRubric:
            name = "few-calls"
            version = "1.0.0"
            dimensions = {"economy": 100}

            def grade(self, entries, *, session_id, now=None, context=None):
                entries = coerce_entries(entries)
                score = max(0, 100 - 10 * max(0, len(entries) - 5))
                return GradeResult(
                    session_id=session_id,
                    total_score=score,
                    dimensions={"economy": DimensionScore(score=score, max=100)},
                    timestamp=now or datetime.now(UTC),
                    entry_count=len(entries),
                )


        @hookimpl
        def cleo_grade_register_rubrics(register):
            register(FewCallsRubric())

    :param register: call it with each rubric object this plugin provides.
    """
