"""Dependencies point one way (STYLE.md): errors <- models <- rubrics <- audit/store <- session
<- plugin | cli. Checked statically over every import statement, and at run time in a fresh
interpreter for the entry points that must stay light.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PKG = "pytest_cleo_grade"
ROOT = Path(__file__).resolve().parent.parent / PKG

#: Layer of each module (by the longest matching prefix); a module may import only its own
#: layer and lower ones.
LAYERS: dict[str, int] = {
    f"{PKG}.errors": 0,
    f"{PKG}.bulk": 0,
    f"{PKG}.models": 1,
    f"{PKG}.thresholds": 2,
    f"{PKG}.schemas": 2,
    f"{PKG}.entryfile": 2,
    f"{PKG}.history": 2,
    f"{PKG}.rubrics": 3,
    f"{PKG}.comparison": 3,
    f"{PKG}.store": 4,
    f"{PKG}.audit": 4,
    f"{PKG}.cleoimport": 4,
    f"{PKG}.session": 5,
    f"{PKG}.report": 5,
    f"{PKG}.graded": 5,
    f"{PKG}.grading": 5,
    f"{PKG}.plugin": 6,
    f"{PKG}.options": 6,
    f"{PKG}.plugin_compare": 6,
    f"{PKG}.cli": 6,
}
PYTEST_GLUE = {f"{PKG}.plugin", f"{PKG}.options", f"{PKG}.plugin_compare"}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> int:
    matches = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    assert matches, f"{module} has no layer: add it to LAYERS"
    return LAYERS[max(matches, key=len)]


def imports_of(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            # `from pkg.cli import compare` imports the submodule pkg.cli.compare.
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if (ROOT.parent / candidate.replace(".", "/")).with_suffix(".py").exists():
                    names.add(candidate)
    return names


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py")) if module_name(p) != PKG}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_and_lower_layers(module: str) -> None:
    own = layer(module)
    imported = {name for name in imports_of(MODULES[module]) if name.startswith(PKG + ".")}
    upward = sorted(name for name in imported if layer(name) > own)
    assert upward == [], f"{module} (layer {own}) imports higher layers: {upward}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_pytest_glue_imports_pytest_and_pure_layers_no_sqlite_utils(
    module: str,
) -> None:
    roots = {name.split(".")[0] for name in imports_of(MODULES[module])}
    if not any(module == g or module.startswith(g + ".") for g in PYTEST_GLUE):
        assert not roots & {"pytest", "_pytest"}, f"{module} imports pytest"
    if layer(module) <= 3:
        assert "sqlite_utils" not in roots, f"{module} imports sqlite_utils"


def test_the_cli_does_not_import_the_pytest_glue() -> None:
    for module, path in MODULES.items():
        if module.startswith(f"{PKG}.cli"):
            assert not {n for n in imports_of(path) if n in PYTEST_GLUE}, module


PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


@pytest.mark.parametrize(
    ("module", "absent"),
    [
        (PKG, {"pytest", "_pytest", "sqlite_utils", "pluggy"}),
        (f"{PKG}.cli", {"pytest", "_pytest"}),
        (f"{PKG}.comparison", {"pytest", "_pytest", "sqlite_utils"}),
        (f"{PKG}.rubrics.registry", {"pytest", "_pytest", "sqlite_utils"}),
    ],
)
def test_importing_an_entry_point_in_a_fresh_interpreter_stays_light(
    module: str, absent: set[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module], capture_output=True, text=True, check=True
    )
    assert set(json.loads(done.stdout)) & absent == set()
