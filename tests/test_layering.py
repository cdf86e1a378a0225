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
#: layer and lower ones. 0-3 are the pure core (no files, SQLite, sockets or HTTP); 4 is the
#: I/O edge; 5-6 grade a test without pytest; 7 is pytest's glue and the CLI.
LAYERS: dict[str, int] = {
    f"{PKG}.errors": 0,
    f"{PKG}.settings": 0,
    f"{PKG}.stats": 0,
    f"{PKG}.scale": 0,
    # Stdlib-only primitives for opening untrusted files safely, shared by the rubric loaders
    # and the I/O edge.
    f"{PKG}.files": 0,
    f"{PKG}.faults": 3,
    f"{PKG}.expectations": 0,
    f"{PKG}.models": 1,
    f"{PKG}.not_found": 1,
    f"{PKG}.verdict": 2,
    f"{PKG}.display": 2,
    f"{PKG}.schemas": 2,
    f"{PKG}.runs": 2,
    f"{PKG}.baseline": 2,
    f"{PKG}.display_repeats": 2,
    f"{PKG}.display_baseline": 2,
    f"{PKG}.display_points": 2,
    f"{PKG}.display_html": 2,
    f"{PKG}.rubrics": 3,
    f"{PKG}.comparison": 3,
    f"{PKG}.judges": 3,
    f"{PKG}.judges.protocol": 3,
    f"{PKG}.judges.http": 4,
    f"{PKG}.judges.cache": 4,
    f"{PKG}.judges.connect": 4,
    f"{PKG}.history": 4,
    f"{PKG}.store": 4,
    f"{PKG}.sources": 4,
    # Worker processes for import batches: no files, but processes (with the store).
    f"{PKG}.workers": 4,
    f"{PKG}.audit": 4,
    # Refusals another process notes beside the store, read by the grading process.
    f"{PKG}.refusals": 4,
    f"{PKG}.capture": 4,
    f"{PKG}.exports": 4,
    f"{PKG}.html_report": 4,
    f"{PKG}.session": 5,
    # Compatibility modules: earlier import paths, each at the layer of what it re-exports.
    f"{PKG}.rubrics.judge": 4,
    f"{PKG}.entryfile": 4,
    f"{PKG}.graded": 5,
    f"{PKG}.grading": 6,
    f"{PKG}.plugin": 7,
    f"{PKG}.options": 7,
    f"{PKG}.reporter": 7,
    f"{PKG}.html_columns": 7,
    f"{PKG}.repeats": 7,
    f"{PKG}.repeat_options": 7,
    f"{PKG}.baseline_gate": 7,
    f"{PKG}.cli": 7,
}
#: The layer from which a module may touch files, SQLite, sockets or HTTP.
IO_LAYER = 4
IO_MODULES = {"sqlite3", "sqlite_utils", "urllib", "http", "socket"}
PYTEST_GLUE = {
    f"{PKG}.plugin",
    f"{PKG}.options",
    f"{PKG}.reporter",
    f"{PKG}.repeats",
    f"{PKG}.repeat_options",
    f"{PKG}.baseline_gate",
}


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
            # `from pkg.cli import compare` imports the submodule pkg.cli.compare; only a name
            # that is not a submodule comes from the package's own __init__.
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if (ROOT.parent / candidate.replace(".", "/")).with_suffix(".py").exists():
                    names.add(candidate)
                else:
                    names.add(node.module)
    return names


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py")) if module_name(p) != PKG}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_its_own_and_lower_layers(module: str) -> None:
    own = layer(module)
    imported = {name for name in imports_of(MODULES[module]) if name.startswith(PKG + ".")}
    upward = sorted(name for name in imported if layer(name) > own)
    assert upward == [], f"{module} (layer {own}) imports higher layers: {upward}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_pytest_glue_imports_pytest(module: str) -> None:
    roots = {name.split(".")[0] for name in imports_of(MODULES[module])}
    if module not in PYTEST_GLUE:
        assert not roots & {"pytest", "_pytest"}, f"{module} imports pytest"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if layer(m) < IO_LAYER))
def test_nothing_below_the_io_layer_touches_sqlite_sockets_or_http(module: str) -> None:
    roots = {name.split(".")[0] for name in imports_of(MODULES[module])}
    assert not roots & IO_MODULES, f"{module} imports {sorted(roots & IO_MODULES)}"


def _import_graph() -> dict[str, set[str]]:
    """Every module's imports of package modules, lazy (function-level) ones included."""
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = {name for name in imports_of(path) if name in MODULES and name != module}
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_circle_exists_anywhere_in_the_package() -> None:
    assert _cycles(_import_graph()) == []


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


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
