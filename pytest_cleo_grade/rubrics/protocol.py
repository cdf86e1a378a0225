"""The rubric protocol every grading scheme implements, and the settings passed to rubrics."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core.models import AuditEntry, GradeResult
from pytest_cleo_grade.core.settings import DEFAULT_RUBRIC
from pytest_cleo_grade.core.settings import JudgeCacheMode as CacheMode
from pytest_cleo_grade.rubrics._identity import HASH_KEY

if TYPE_CHECKING:
    from pytest_cleo_grade.judges.protocol import Judge, JudgeConnector

__all__ = [
    "DEFAULT_RUBRIC",
    "CacheMode",
    "ConfigurableRubric",
    "GradeContext",
    "Rubric",
    "RubricConfig",
    "stamp_rubric",
]

#: The rubric used when none is named: CLEO's 5-dimension rubric (CLEO Grade Specification v1.0.0).


@dataclass(frozen=True, slots=True)
class GradeContext:
    """What a rubric may know about a session besides its entries.

    ``task`` describes what the agent was asked to do (a judge needs it; the CLEO rubric
    ignores it); ``task_id`` becomes the result's ``taskId``; ``extra`` is free-form for
    third-party rubrics; ``conversation`` is the session's messages, model calls and final
    output, when they were captured (the weighted judge reads the goal and the output there).
    """

    task: str | None = None
    task_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    conversation: Conversation | None = None


@dataclass(frozen=True, slots=True)
class RubricConfig:
    """How the caller (the pytest plugin, the CLI) configures a rubric before grading.

    Rubrics that need no configuration ignore it. ``rubric_file`` is a TOML or JSON rubric
    file; ``judge`` replaces the judge the file describes (any callable taking a prompt);
    ``judge_overrides`` replace single ``[judge]`` settings of the file (``base_url``,
    ``model``...); ``cache_path`` is the SQLite file holding the judge cache (the audit store)
    and ``cache_mode`` says how to use it; ``options`` is free-form for third-party rubrics.
    ``connector`` builds the HTTP judge and the reply cache (rubrics themselves do no I/O):
    ``pytest_cleo_grade.judges.connect.DefaultConnector()``, which the plugin and CLI pass.
    """

    rubric_file: Path | None = None
    judge: Judge | None = None
    judge_overrides: Mapping[str, Any] = field(default_factory=dict)
    cache_path: Path | None = None
    cache_mode: CacheMode = "on"
    options: Mapping[str, Any] = field(default_factory=dict)
    connector: JudgeConnector | None = None


@runtime_checkable
class Rubric(Protocol):
    """A grading scheme: turns one session's audit entries into a GradeResult.

    ``name`` is the registry key (``--cleo-grade-rubric=NAME``), ``version`` is recorded in
    every result it produces, and ``dimensions`` maps each dimension name, in rubric order, to
    its maximum points (the maxima add up to the result's ``maxScore``).
    """

    @property
    def name(self) -> str:
        """The rubric's registry name, e.g. ``cleo``."""
        ...

    @property
    def version(self) -> str:
        """The rubric's version, recorded as ``rubricVersion`` in its results."""
        ...

    @property
    def dimensions(self) -> Mapping[str, float]:
        """Dimension name → maximum points, in rubric order."""
        ...

    def grade(
        self,
        entries: Iterable[AuditEntry | Mapping[str, Any]],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        """Grade ``session_id``'s entries (AuditEntry objects or CLEO-shaped dicts).

        ``now`` fixes the result's timestamp. Raise RubricError (or a subclass) for anything
        that prevents grading; never print and never exit.
        """
        ...


@runtime_checkable
class ConfigurableRubric(Rubric, Protocol):
    """A rubric that takes settings (a rubric file, a judge, a cache) before grading."""

    def configure(self, config: RubricConfig) -> Rubric:
        """Return a rubric configured by ``config``; ``self`` is left unchanged."""
        ...


def stamp_rubric(result: GradeResult, rubric: Rubric) -> GradeResult:
    """Record which rubric graded ``result`` as the extras ``rubric`` and ``rubricVersion``
    (and ``rubricHash``, its settings' hash, when the rubric has a ``settings_hash``).

    Results of the default CLEO rubric are returned unchanged so they stay byte-identical to
    the CLEO spec's GradeResult (no ``rubric`` key means CLEO). Keys a rubric already set win.
    """
    if rubric.name == DEFAULT_RUBRIC:
        return result
    extra = result.model_extra or {}
    update: dict[str, Any] = {}
    if "rubric" not in extra:
        update["rubric"] = rubric.name
    if "rubricVersion" not in extra:
        update["rubricVersion"] = rubric.version
    # A rubric that knows its settings' hash offers it (rules, weighted); one whose settings
    # come with the test (trajectory, combined) sets it on its result itself.
    digest = getattr(rubric, "settings_hash", None)
    if HASH_KEY not in extra and isinstance(digest, str) and digest:
        update[HASH_KEY] = digest
    return result.model_copy(update=update) if update else result
