"""What the inner pytest runs of tests/plugin and tests/grading share (their conftests use it)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import os
import pkgutil
import sys
from collections.abc import Iterable, Iterator
from typing import Any, Final

import pytest

# The root conftest.py (pytest imported it as "conftest"): what no inner run may see.
from conftest import _OUTSIDE_NAMES, _OUTSIDE_PREFIXES
from pytest_cleo_grade.judges._breaker import RUN_BREAKERS

#: The pytest plugins installed for the suite (requirements/dev.txt, the capture extra) that an
#: inner run goes without, unless its test keeps them (the ``inner_plugins`` marker), each with
#: what it needs loaded beside it. langsmith's (installed with the langchain capture extra)
#: takes about 2 s to import: a -n 2 run of a trivial suite took 13 s with it, 4 s without.
#: The others together are a third of what a trivial inner run costs (0.6 CPU-s to 0.4 for a
#: subprocess, 1.3 to 0.9 for a -n 2 run), paid by every inner pytest process and xdist worker,
#: and only the tests about pytest-html, pytest-rerunfailures, pytest-split or anyio use them.
#: (.ci/run's lowest leg has neither langsmith nor anyio: blocking a plugin that is not
#: installed is no error.)
LEFT_OUT: Final[dict[str, tuple[str, ...]]] = {
    "langsmith_plugin": (),
    "anyio": (),
    "rerunfailures": (),
    "pytest-split": (),
    "html": ("metadata", "html_fixtures"),
    "html_fixtures": ("metadata", "html"),
    "metadata": (),
    # pytest's own plugins no inner suite uses (doctests, the tmpdir and testdir fixtures,
    # --pastebin, --setup-only and --setup-plan): a tenth of a trivial run again.
    "doctest": (),
    "legacypath": (),
    "pastebin": (),
    "setuponly": (),
    "setupplan": (),
}
#: What every inner run gets when its test keeps no plugin.
INNER_ADDOPTS: Final = " ".join(f"-p no:{name}" for name in LEFT_OUT)


def inner_addopts(keep: Iterable[str] = ()) -> str:
    """``PYTEST_ADDOPTS`` for an inner run that loads the plugins in ``keep`` as usual."""
    kept = set(keep)
    unknown = kept - LEFT_OUT.keys()
    if unknown:
        raise ValueError(f"inner_plugins: {sorted(unknown)} are not left out of inner runs")
    for name in list(kept):
        kept.update(LEFT_OUT[name])
    return " ".join(f"-p no:{name}" for name in LEFT_OUT if name not in kept)


def inner_environment(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
    keep: Iterable[str] = (),
) -> None:
    """What every inner run (in-process, a subprocess, its xdist workers, a child agent) gets.

    The plugins of LEFT_OUT are left out but for those in ``keep``. And where the environment
    turns the bytecode cache off (PYTHONDONTWRITEBYTECODE), a child Python keeps one in this
    run's temp directory instead: without it every child process compiled pytest, pydantic and
    the plugin from source again, a third to a half of what an xdist worker or a subprocess
    pytest costs. Nothing is written beside the sources, which is what the setting asks for.
    (The cache is this run's own, so a file a test writes twice between two child runs is read
    anew unless both versions have one size and one mtime second: no test here does that.)
    """
    monkeypatch.setenv("PYTEST_ADDOPTS", inner_addopts(keep))
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        root = tmp_path_factory.getbasetemp()
        if os.environ.get("PYTEST_XDIST_WORKER"):
            root = root.parent  # the run's own temp directory, which its workers share
        monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
        monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(root / "pycache"))


def kept_plugins(node: pytest.Item | pytest.Collector) -> set[str]:
    """The plugins a test's (or a module's) ``inner_plugins`` markers keep in its inner runs."""
    return {name for marker in node.iter_markers("inner_plugins") for name in marker.args}


@pytest.fixture(autouse=True)
def _inner_run_environment(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Every test's inner runs get :func:`inner_environment`.

    Pytester discards the outer PYTEST_ADDOPTS when it is set up, so a test using it gets it
    first and the environment is set after.
    """
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
    inner_environment(monkeypatch, tmp_path_factory, kept_plugins(request.node))


#: What grading loads: every module of these packages, and the capture package's own (its
#: adapters import their agent frameworks, seconds each, and no in-process inner run uses one:
#: those runs start a subprocess, a framework's tracing being process-global). The CLI is no
#: part of a pytest run.
_PRELOADED_PACKAGES = ("core", "store", "grading", "rubrics", "judges", "reports", "plugin")
_PRELOADED_CAPTURE = ("capture", "capture.audit", "capture.mapping", "capture._refusals")


def preload_plugin_modules() -> None:
    """Import the plugin's modules, and xdist's controller, once in this process.

    An in-process inner run (``pytester.runpytest``) forgets every module first imported during
    it: the next run imported and compiled the store, the rubrics, sqlite_utils and the rest of
    what grading loads lazily again (with the assertion rewriting pytest gives a plugin's
    modules, and no bytecode cache under PYTHONDONTWRITEBYTECODE), most of a second a run.
    Modules already loaded here are kept, and an inner run uses them as they are.
    """
    for name in _PRELOADED_PACKAGES:
        package = importlib.import_module(f"pytest_cleo_grade.{name}")
        for module in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
            try:
                importlib.import_module(module.name)
            except ModuleNotFoundError:
                # A module of an extra this environment lacks (httpx for the Langfuse
                # export's transport, in .ci/run's lowest leg): grading never loads it.
                continue
    for name in _PRELOADED_CAPTURE:
        importlib.import_module(f"pytest_cleo_grade.{name}")
    for name in ("xdist.dsession", "xdist.remote", "xdist.report"):
        importlib.import_module(name)


class _KnownDistribution:
    """An installed distribution whose metadata files are read once, then remembered."""

    def __init__(self, dist: importlib.metadata.Distribution) -> None:
        self._dist = dist

    @functools.cached_property
    def entry_points(self) -> importlib.metadata.EntryPoints:
        return self._dist.entry_points

    @functools.cached_property
    def files(self) -> list[importlib.metadata.PackagePath] | None:
        return self._dist.files

    @functools.cached_property
    def metadata(self) -> Any:
        return self._dist.metadata

    @property
    def name(self) -> str:
        return str(self.metadata["Name"])

    @property
    def version(self) -> str:
        return str(self.metadata["Version"])

    @functools.cached_property
    def _normalized_name(self) -> str:
        return str(self._dist._normalized_name)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._dist, name)


def remember_distributions() -> None:
    """Scan the installed distributions once per ``sys.path``, not once per inner run.

    Every in-process inner run starts by reading the entry points of every installed
    distribution (pluggy, to load plugins) and the files of those that have a pytest plugin
    (pytest, to rewrite their asserts): about 0.05 s of a trivial run's 0.13 s, in several
    hundred runs. Nothing is installed while the suite runs; a run that changes ``sys.path``
    (``pytester.syspathinsert``, a test's own distribution) is scanned again.
    """
    original = importlib.metadata.distributions
    known: dict[tuple[str, ...], list[_KnownDistribution]] = {}

    def distributions(**kwargs: Any) -> Iterator[Any]:
        if kwargs:
            return iter(original(**kwargs))
        key = tuple(sys.path)
        if key not in known:
            if len(known) >= 8:
                known.clear()
            known[key] = [_KnownDistribution(dist) for dist in original()]
        return iter(known[key])

    importlib.metadata.distributions = distributions  # type: ignore[assignment]


class _WiderRequest:
    """A module- or class-scoped request as Pytester reads it: pytest refuses such a request's
    ``function``, which Pytester only asks to name its directory (else by the node)."""

    function = None

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request

    def __getattr__(self, name: str) -> Any:
        return getattr(self._request, name)


@contextlib.contextmanager
def shared_pytester(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[pytest.Pytester, pytest.MonkeyPatch]]:
    """A Pytester for a module- or class-scoped fixture: one inner run several tests read.

    The ``pytester`` fixture is per test; this one lives in its own directory for as long as the
    fixture's scope. While the ``with`` block runs, the working directory is that directory and
    the environment is what a test's inner run gets (nothing from outside the suite, no judge
    failures counted: the root conftest's autouse fixtures do that for each test, after a
    wider-scoped fixture is set up; and :func:`inner_environment`); both are restored when it
    ends, and the directory and the results stay. It is built as pytest's own fixture builds
    one (``_ispytest``), and like it restores ``sys.modules`` when its scope ends.
    """
    with pytest.MonkeyPatch.context() as monkeypatch:
        for name in list(os.environ):
            if name in _OUTSIDE_NAMES or name.startswith(_OUTSIDE_PREFIXES):
                monkeypatch.delenv(name)
        monkeypatch.setattr(RUN_BREAKERS, "_streaks", {})
        pytester = pytest.Pytester(
            _WiderRequest(request), tmp_path_factory, monkeypatch, _ispytest=True
        )
        inner_environment(monkeypatch, tmp_path_factory, kept_plugins(request.node))
        yield pytester, monkeypatch
