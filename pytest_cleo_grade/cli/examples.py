"""``cleo-grade examples``: write out the files the documentation's commands use, at the paths
the docs name them by (``examples/sessions/agent-session.jsonl``, ``tests/fake_judge.py``...),
so that an installed package runs the docs' commands as a checkout does."""

from __future__ import annotations

import argparse
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pytest_cleo_grade.cli.common import CommandError
from pytest_cleo_grade.core._text import terminal_text

__all__ = ["register"]

#: Stored with this suffix: a ``.py`` file inside the package would be one of its modules.
_HELD: str = ".txt"


def register(subparsers: Any) -> None:
    examples = subparsers.add_parser(
        "examples",
        help="write out the example files the documentation uses",
        description="Write the documentation's example files (entry files, rule and "
        "trajectory files, the weighted rubric file, the comparison's score sheets, the local "
        "stand-ins of a judge and of Langfuse) under DIR, at the paths the docs use; run the "
        "docs' commands from DIR. An existing file is never replaced.",
    )
    examples.add_argument(
        "directory",
        nargs="?",
        default="cleo-grade-examples",
        metavar="DIR",
        help="where to write them (default: ./cleo-grade-examples)",
    )
    examples.set_defaults(handler=run_examples)


def _files(folder: Traversable, prefix: str = "") -> list[tuple[str, Traversable]]:
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name == "__pycache__":
            continue
        name = f"{prefix}{entry.name}"
        if entry.is_dir():
            found.extend(_files(entry, name + "/"))
        else:
            found.append((name.removesuffix(_HELD), entry))
    return found


def example_files() -> list[tuple[str, bytes]]:
    """Each example file: its path as the docs name it, and its bytes."""
    root = resources.files("pytest_cleo_grade.cli").joinpath("_examples")
    return [(name, entry.read_bytes()) for name, entry in _files(root)]


def run_examples(args: argparse.Namespace) -> int:
    target = Path(args.directory)
    files = example_files()
    existing = [name for name, _ in files if (target / name).exists()]
    if existing:
        raise CommandError(
            f"cleo-grade examples: {target / existing[0]} exists: nothing written "
            "(name another directory)"
        )
    for name, data in files:
        path = target / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        except OSError as exc:
            raise CommandError(f"cleo-grade examples: {path}: {exc.strerror or exc}") from None
    print(terminal_text(f"cleo-grade: wrote {len(files)} example files under {target}:"))
    for name, _ in files:
        print(terminal_text(f"  {name}"))
    print(terminal_text(f"run the documentation's commands from there: cd {target}"))
    return 0
