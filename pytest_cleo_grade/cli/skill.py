"""``cleo-grade skill``: the ct-grade skill file, printed or installed where agents read skills.

The file ships with the package (``cli/ct_grade_skill.md``). ``--install DIR`` writes it in
the agent-skills layout, ``DIR/ct-grade/SKILL.md`` (``DIR`` being, for instance, a project's
``.claude/skills``), replacing an earlier copy atomically.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Final

from pytest_cleo_grade.cli.common import CommandError

__all__ = ["SKILL_NAME", "register", "skill_text"]

SKILL_NAME: Final = "ct-grade"
_RESOURCE: Final = "ct_grade_skill.md"


def register(subparsers: Any) -> None:
    skill = subparsers.add_parser(
        "skill",
        help="print the ct-grade skill file, or install it for an agent",
        description=(
            "Print the ct-grade skill (when to use grade mode, how to start, end and read a "
            "grade through the CLI or the MCP tools, what each flag asks the agent to change), "
            f"or write it as DIR/{SKILL_NAME}/SKILL.md with --install DIR."
        ),
    )
    skill.add_argument(
        "--install",
        metavar="DIR",
        help=f"write DIR/{SKILL_NAME}/SKILL.md (e.g. DIR=.claude/skills), creating folders",
    )
    skill.set_defaults(handler=run_skill)


def skill_text() -> str:
    """The skill file's text, as shipped."""
    return resources.files(__package__).joinpath(_RESOURCE).read_text(encoding="utf-8")


def run_skill(args: argparse.Namespace) -> int:
    text = skill_text()
    if args.install is None:
        sys.stdout.write(text)
        return 0
    from pytest_cleo_grade.core._files import write_atomically
    from pytest_cleo_grade.core._text import terminal_text

    if args.install == "":
        raise CommandError("cleo-grade skill: --install: an empty path (name a skills folder)")
    root = Path(args.install)
    if root.exists() and not root.is_dir():
        raise CommandError(terminal_text(f"cleo-grade skill: --install {root}: not a directory"))
    target = root / SKILL_NAME / "SKILL.md"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(target, text.encode("utf-8"))
    except OSError as exc:
        raise CommandError(
            terminal_text(f"cleo-grade skill: {target}: {exc.strerror or exc}")
        ) from exc
    print(terminal_text(f"{target}: ct-grade skill installed"))
    return 0
