"""``cleo-grade``'s command table: what ``--help`` lists without importing the commands."""

from __future__ import annotations

import argparse
import ast
import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import pytest_cleo_grade.cli
from pytest_cleo_grade.cli import main
from pytest_cleo_grade.cli.main import COMMANDS, build_parser


class _Recording:
    """Subparsers that note each command a module adds (its name and help line)."""

    def __init__(self, subparsers: Any) -> None:
        self._subparsers = subparsers
        self.added: list[tuple[str, str]] = []

    def add_parser(self, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        self.added.append((name, kwargs["help"]))
        parser: argparse.ArgumentParser = self._subparsers.add_parser(name, **kwargs)
        return parser


def test_the_command_table_is_what_each_module_registers() -> None:
    # The table is read where --help lists the commands without importing their modules:
    # a name or a help line changed in a module alone would list a command that is not there.
    modules = list(dict.fromkeys(module for _, module, _ in COMMANDS))
    listed = []
    for module in modules:
        subparsers = _Recording(argparse.ArgumentParser().add_subparsers())
        importlib.import_module(f"pytest_cleo_grade.cli.{module}").register(subparsers)
        listed += [(name, module, text) for name, text in subparsers.added]
    assert listed == list(COMMANDS)


def test_the_top_level_help_without_the_modules_is_the_full_parsers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == build_parser().format_help()


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--fail-under", "x"], id="listing-options-with-a-bad-value"),
        pytest.param(["--db", "a.db", "--fail-under", "x"], id="before-a-session"),
    ],
)
def test_a_bad_value_before_any_session_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    # Options without a session are tried as a listing first: grade's parse of them raised
    # its one-line error out of main(), as a traceback.
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("cleo-grade grade: argument --fail-under: invalid grade 'x'")
    assert err.count("\n") == 1


PROBE = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from pytest_cleo_grade.cli import main
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(sys.argv[1:])
        except SystemExit as exc:
            status = exc.code
    print(json.dumps([status, out.getvalue(), sorted(sys.modules)]))
    """
)


@pytest.mark.e2e
def test_the_top_level_help_imports_no_command_module() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, "--help"], capture_output=True, text=True, check=True
    )
    status, out, modules = json.loads(done.stdout)
    assert status == 0
    assert all(f"\n    {name}" in out for name, _, _ in COMMANDS)
    loaded = {m for m in modules if m.startswith("pytest_cleo_grade.cli.")}
    assert loaded == {"pytest_cleo_grade.cli.main", "pytest_cleo_grade.cli.common"}
    assert not {m.split(".")[0] for m in modules} & {"pydantic", "sqlite_utils", "sqlite3"}


def _cli_imports(module: str) -> set[str]:
    """The modules of ``pytest_cleo_grade.cli`` that ``module`` imports anywhere in its code
    (a function's lazy import included: every path a run of it could take)."""
    source = Path(pytest_cleo_grade.cli.__file__).with_name(f"{module}.py").read_text()
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "pytest_cleo_grade.cli":
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("pytest_cleo_grade.cli."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(
                alias.name.split(".")[2]
                for alias in node.names
                if alias.name.startswith("pytest_cleo_grade.cli.")
            )
    return found


def test_a_command_never_imports_another_commands_module() -> None:
    # A command's run imports its own module and the shared helpers (common, the _private
    # ones), never another command's: what two commands share lives in a helper.
    commands = {module for _, module, _ in COMMANDS}
    assert "_grading" in _cli_imports("grade")  # the walk sees what it should
    for command in sorted(commands):
        reached, todo = set(), [command]
        while todo:
            for imported in _cli_imports(todo.pop()) - reached:
                reached.add(imported)
                todo.append(imported)
        others = (reached & commands) - {command}
        assert not others, f"cli/{command}.py reaches the command modules {sorted(others)}"
        assert "main" not in reached, f"cli/{command}.py reaches cli/main.py"
