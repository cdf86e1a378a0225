"""The ``--rubric`` and judge options of the commands that grade (``grade``, ``show``,
``regrade``, ``session end``, ``mcp``), and what they make: a rubric's config and context.

Apart from ``cleo-grade rubrics`` so that a command taking them never imports another
command's module. The rubrics and the judge (pydantic models, an HTTP client) are imported
where a command grades, not for its --help.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_cleo_grade.core._defaults import DEFAULT_RUBRIC

if TYPE_CHECKING:
    from pytest_cleo_grade.rubrics.protocol import GradeContext, RubricConfig

__all__ = ["add_rubric_options", "grade_context_from_args", "rubric_config_from_args"]

CACHE_MODES = ("on", "off", "refresh")


def judge_url_arg(value: str) -> str:
    """judges.http.judge_url_arg, imported once a value is given (argparse names the type
    function only for errors other than ArgumentTypeError, which this never raises)."""
    from pytest_cleo_grade.judges.http import judge_url_arg as check

    return check(value)


def add_rubric_options(
    parser: argparse.ArgumentParser, *, default: str | None = DEFAULT_RUBRIC, default_text: str = ""
) -> None:
    """Add ``--rubric``, ``--rubric-file``, ``--task`` and the judge options to a command.

    ``--rubric`` defaults to ``default``; a command given None decides itself, and says how in
    ``default_text`` (``show`` explains the stored grade).
    """
    group = parser.add_argument_group("rubric")
    group.add_argument(
        "--rubric",
        default=default,
        metavar="NAME",
        help=f"rubric to grade with ({default_text or f'default: {default}'}; see "
        "`cleo-grade rubrics`)",
    )
    group.add_argument(
        "--rubric-file",
        metavar="FILE",
        help="TOML or JSON file of the weighted, rules or trajectory rubric",
    )
    group.add_argument("--task", metavar="TEXT", help="what the agent was asked to do (judges)")
    group.add_argument(
        "--judge-url", type=judge_url_arg, metavar="URL", help="OpenAI-compatible base URL"
    )
    group.add_argument("--judge-model", metavar="MODEL", help="model the judge endpoint runs")
    group.add_argument(
        "--judge-cache",
        choices=CACHE_MODES,
        default="on",
        help="reuse judge replies stored in the audit store (default: on)",
    )


def rubric_config_from_args(args: argparse.Namespace, *, cache_path: Path | None) -> RubricConfig:
    """The RubricConfig of the options :func:`add_rubric_options` added.

    ``cache_path`` is the audit store the judge cache lives in (None: no cache, e.g. when
    grading from someone else's read-only CLEO database).
    """
    from pytest_cleo_grade.judges.connect import DefaultConnector
    from pytest_cleo_grade.rubrics.protocol import RubricConfig

    overrides: dict[str, Any] = {}
    if args.judge_url:
        overrides["base_url"] = args.judge_url
    if args.judge_model:
        overrides["model"] = args.judge_model
    return RubricConfig(
        rubric_file=Path(args.rubric_file) if args.rubric_file else None,
        judge_overrides=overrides,
        cache_path=cache_path,
        cache_mode=args.judge_cache,
        connector=DefaultConnector(),
    )


def grade_context_from_args(args: argparse.Namespace, task_id: str | None = None) -> GradeContext:
    """The GradeContext of ``--task`` (and a task id the caller knows)."""
    from pytest_cleo_grade.rubrics.protocol import GradeContext

    task: str | None = args.task
    return GradeContext(task=task, task_id=task_id)
