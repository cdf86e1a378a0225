"""Dependencies point one way, folder by folder (docs/development.md's map): core <- judges,
store <- rubrics, capture <- grading <- reports <- plugin, cli. Checked statically over every
import statement, lazy ones included, and at run time in a fresh interpreter for the entry
points that must stay light.
"""

from __future__ import annotations

import ast
import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

PKG = "pytest_cleo_grade"
REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / PKG

#: Each folder's layer: a folder imports only folders on lower layers, and two folders on one
#: layer never import each other. The package root (``__init__.py``, the lazy public API) may
#: name anything: it imports nothing but ``core`` eagerly.
LAYERS: dict[str, int] = {
    "core": 0,
    "judges": 1,
    "store": 1,
    "rubrics": 2,
    "capture": 2,
    "grading": 3,
    "reports": 4,
    "plugin": 5,
    "cli": 5,
}
#: Folders that never touch SQLite, sockets or HTTP (DESIGN §11): they are pure, or grade
#: through what the folders beside them hand in.
PURE = {"core", "rubrics", "grading"}
IO_MODULES = {"sqlite3", "sqlite_utils", "urllib", "http", "socket"}
#: The only folder that imports pytest: everything else runs without it (the CLI, rubrics).
PYTEST_GLUE = "plugin"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def folder_of(module: str) -> str | None:
    """The capability folder a package module lives in (None: the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


@functools.cache
def imports_of(path: Path) -> frozenset[str]:
    """Every name a module imports (parsed once: every check below reads it)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg.cli import compare` imports the submodule pkg.cli.compare; only a name
            # that is not a submodule comes from the package's own __init__.
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                if (REPO / candidate.replace(".", "/")).with_suffix(".py").exists():
                    names.add(candidate)
                else:
                    names.add(node.module)
    return frozenset(names)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}
FOLDERS = sorted({f for f in map(folder_of, MODULES) if f is not None})


@functools.cache
def folder_imports() -> dict[str, set[str]]:
    """Which folders each folder imports (its own left out)."""
    graph: dict[str, set[str]] = {folder: set() for folder in FOLDERS}
    for module, path in MODULES.items():
        source = folder_of(module)
        if source is None:
            continue
        for name in imports_of(path):
            if name.startswith(PKG + "."):
                target = folder_of(name)
                if target is not None and target != source:
                    graph[source].add(target)
    return graph


def test_the_package_root_holds_its_front_door_and_the_capability_folders_only() -> None:
    entries = sorted(p.name for p in ROOT.iterdir() if p.name != "__pycache__")
    assert entries == sorted(["__init__.py", "py.typed", *LAYERS]), entries
    assert len(entries) <= 12


def test_every_folder_has_a_layer() -> None:
    assert set(FOLDERS) == set(LAYERS)


@pytest.mark.parametrize("folder", sorted(LAYERS))
def test_a_folder_imports_only_folders_on_lower_layers(folder: str) -> None:
    own = LAYERS[folder]
    wrong = sorted(t for t in folder_imports()[folder] if LAYERS[t] >= own)
    assert wrong == [], f"{folder}/ (layer {own}) imports {wrong}: same or higher layers"


def test_the_layer_check_sees_two_folders_of_one_layer_importing_each_other() -> None:
    # The loop this check exists for (rubrics/ and comparison/ once imported each other,
    # on one layer): a same-layer import is refused, whichever way it points.
    layers = {"a": 2, "b": 2, "c": 1}
    graph = {"a": {"b"}, "b": set(), "c": set()}
    wrong = {f: sorted(t for t in graph[f] if layers[t] >= layers[f]) for f in graph}
    assert wrong == {"a": ["b"], "b": [], "c": []}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_only_the_plugin_folder_imports_pytest(module: str) -> None:
    roots = {name.split(".")[0] for name in imports_of(MODULES[module])}
    if folder_of(module) != PYTEST_GLUE:
        assert not roots & {"pytest", "_pytest"}, f"{module} imports pytest"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if folder_of(m) in PURE))
def test_the_pure_folders_never_touch_sqlite_sockets_or_http(module: str) -> None:
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
    """Strongly connected components with more than one node (Tarjan's algorithm)."""
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


def test_no_import_circle_exists_between_modules() -> None:
    # The package root's lazy names point into every folder and nothing imports them back
    # but as `pytest_cleo_grade.<folder>...`: it is left out as a node.
    graph = {m: t - {PKG} for m, t in _import_graph().items() if m != PKG}
    assert _cycles(graph) == []


def test_no_import_circle_exists_between_folders() -> None:
    assert _cycles(folder_imports()) == []


def test_the_circle_check_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_what_is_not_api_is_named_with_an_underscore() -> None:
    # The modules a user imports (docs name them) go without one; every other module that
    # is not a package carries one. The two lists are this test's, kept with the docs.
    folders = "|".join(LAYERS)
    spelt = re.findall(rf"\b(?:{PKG}\.)?((?:{folders})(?:\.[a-z_]+)+)", _docs_text())
    public = {f"{PKG}.{name}" for name in spelt}
    wrong = []
    for module in MODULES:
        leaf = module.rsplit(".", 1)[-1]
        if MODULES[module].name == "__init__.py" or folder_of(module) == "cli":
            continue  # packages, and the CLI's commands (one module each)
        named = any(name == module or name.startswith(module + ".") for name in public)
        if leaf.startswith("_") and named:
            wrong.append(f"{module}: the docs send users to a module named as internal")
        elif not leaf.startswith("_") and module in _PUBLIC_UNDOCUMENTED and named:
            wrong.append(f"{module}: documented now: drop it from _PUBLIC_UNDOCUMENTED")
        elif not leaf.startswith("_") and module not in _PUBLIC_UNDOCUMENTED and not named:
            wrong.append(f"{module}: API, yet no doc names it (or prefix it with _)")
    assert wrong == []


#: Public modules the docs do not spell out as a path (their names are reached from a
#: package, the package root or an entry point), kept short on purpose.
_PUBLIC_UNDOCUMENTED = {
    f"{PKG}.rubrics.combined",
    f"{PKG}.rubrics.rules",
    f"{PKG}.rubrics.weighted.rubric",
    f"{PKG}.rubrics.weighted.spec",
    f"{PKG}.rubrics.comparison.decision",
    f"{PKG}.rubrics.comparison.render",
    f"{PKG}.rubrics.comparison.rubric",
    f"{PKG}.rubrics.comparison.scores",
    f"{PKG}.rubrics.comparison.sheets",
    f"{PKG}.rubrics.comparison.stats",
    f"{PKG}.rubrics.comparison.structural",
    f"{PKG}.rubrics.comparison.verdicts",
    f"{PKG}.judges.http",
    f"{PKG}.core.errors",
    f"{PKG}.core.settings",
    f"{PKG}.capture.mapping",
    f"{PKG}.grading.session",
    f"{PKG}.capture.audit",
    f"{PKG}.store.sources",
    f"{PKG}.store.history",
    f"{PKG}.reports.langfuse",
}


def _docs_text() -> str:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def test_the_development_map_is_the_tree() -> None:
    # docs/development.md draws the package: every folder, with its layer, in layer order.
    page = (REPO / "docs" / "development.md").read_text(encoding="utf-8")
    drawn = re.findall(r"^  ([a-z]+)/ +layer (\d)", page, flags=re.MULTILINE)
    assert [(name, int(layer)) for name, layer in drawn] == sorted(
        LAYERS.items(), key=lambda item: (item[1], list(LAYERS).index(item[0]))
    )


PROBE = """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("module", "absent"),
    [
        (PKG, {"pytest", "_pytest", "sqlite_utils", "pluggy", "pydantic"}),
        (f"{PKG}.plugin", {"sqlite_utils", "pydantic", "sqlite3"}),
        (f"{PKG}.cli", {"pytest", "_pytest", "pydantic", "sqlite_utils"}),
        (f"{PKG}.rubrics.comparison", {"pytest", "_pytest", "sqlite_utils"}),
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
