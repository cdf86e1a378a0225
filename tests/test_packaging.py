"""The wheel's metadata, built by the real build backend, and the pins that CI installs from."""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import pytest_cleo_grade

ROOT = Path(__file__).resolve().parent.parent
DISTRIBUTION = "pytest-cleo-grade"
REPOSITORY = "https://github.com/cleo-grade/pytest-cleo-grade"


@pytest.fixture(scope="module")
def dist_info(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The .dist-info folder setuptools prepares for a wheel, from a copy of the sources (the
    backend writes an egg-info folder next to pyproject.toml, which must not land in the tree).
    """
    work = tmp_path_factory.mktemp("build")
    return _build_hook(work, "prepare_metadata_for_build_wheel", timeout=120)


def _build_hook(work: Path, hook: str, *, timeout: float) -> Path:
    """What setuptools' build ``hook`` makes from a copy of the sources under ``work``: its
    output folder's entry (the backend writes an egg-info folder next to pyproject.toml,
    which must not land in the tree)."""
    source = work / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, source / name)
    shutil.copytree(
        ROOT / "pytest_cleo_grade",
        source / "pytest_cleo_grade",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    out = work / "out"
    out.mkdir()
    code = f"import sys\nfrom setuptools import build_meta\nprint(build_meta.{hook}(sys.argv[1]))\n"
    done = subprocess.run(
        [sys.executable, "-c", code, str(out)],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def metadata(dist_info: Path) -> Message:
    return Parser().parsestr((dist_info / "METADATA").read_text(encoding="utf-8"))


def runtime_requirements(metadata: Message) -> dict[str, Requirement]:
    requirements = [Requirement(text) for text in metadata.get_all("Requires-Dist", [])]
    return {req.name.lower(): req for req in requirements if req.marker is None}


def lower_bound(requirement: Requirement) -> Version:
    bounds = [Version(spec.version) for spec in requirement.specifier if spec.operator == ">="]
    assert len(bounds) == 1, f"{requirement} needs exactly one >= lower bound"
    return bounds[0]


def read_pins(name: str) -> dict[str, str]:
    pins: dict[str, str] = {}
    path = ROOT / "requirements" / name
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([A-Za-z0-9_.+-]+)", line)
        assert match, f"requirements/{name}:{number}: {line!r} is not an exact pin (name==version)"
        pins[match[1].lower()] = match[2]
    return pins


@pytest.mark.e2e
def test_the_built_and_the_installed_version_are_the_package_version(metadata: Message) -> None:
    assert metadata["Version"] == pytest_cleo_grade.__version__
    assert importlib.metadata.version(DISTRIBUTION) == pytest_cleo_grade.__version__


def test_pyproject_reads_the_version_from_the_package_instead_of_writing_it() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in pyproject["project"]
    assert pyproject["project"]["dynamic"] == ["version"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "pytest_cleo_grade.__version__"
    }


@pytest.mark.e2e
def test_sqlite_utils_is_required_from_4_which_has_the_migrations_module(
    metadata: Message,
) -> None:
    requirement = runtime_requirements(metadata)["sqlite-utils"]
    assert lower_bound(requirement) >= Version("4")
    assert not requirement.specifier.contains("3.39.1")


@pytest.mark.e2e
def test_classifiers_name_pytest_posix_typing_and_exactly_the_pythons_ci_tests(
    metadata: Message,
) -> None:
    classifiers = metadata.get_all("Classifier", [])
    assert "Framework :: Pytest" in classifiers
    assert "Operating System :: POSIX" in classifiers
    assert "Typing :: Typed" in classifiers
    declared = {
        c.removeprefix("Programming Language :: Python :: ")
        for c in classifiers
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    ci_run = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    tested = re.search(r'^PYTHONS="([^"]*)"$', ci_run, re.MULTILINE)
    assert tested, '.ci/run no longer names its Python versions in PYTHONS="..."'
    assert declared == set(tested[1].split())
    oldest = min(declared, key=Version)
    assert metadata["Requires-Python"] == f">={oldest}"


@pytest.mark.e2e
def test_the_license_is_mit_by_expression_and_its_file_ships_in_the_wheel(
    metadata: Message, dist_info: Path
) -> None:
    assert metadata["License-Expression"] == "MIT"
    assert metadata.get_all("License-File") == ["LICENSE"]
    # PEP 639: a license expression replaces the License :: classifiers.
    assert not [c for c in metadata.get_all("Classifier", []) if c.startswith("License ::")]
    shipped = (dist_info / "licenses" / "LICENSE").read_text(encoding="utf-8")
    assert shipped.startswith("MIT License\n")
    assert "Copyright (c) 2026 the pytest-cleo-grade authors" in shipped


@pytest.mark.e2e
def test_the_project_urls_point_at_the_repository(metadata: Message) -> None:
    urls = dict(entry.split(", ", 1) for entry in metadata.get_all("Project-URL", []))
    assert set(urls) == {"Homepage", "Repository", "Documentation", "Issues", "Changelog"}
    assert all(url.startswith(REPOSITORY) for url in urls.values()), urls
    assert urls["Changelog"].endswith("/CHANGELOG.md")
    assert (ROOT / "CHANGELOG.md").is_file()
    # The messages that send a user to the documentation link this published address.
    from pytest_cleo_grade.core._links import DOCS_URL

    assert urls["Documentation"] == DOCS_URL
    assert DOCS_URL.endswith("/docs")


@pytest.mark.e2e
def test_the_lowest_constraints_pin_every_runtime_dependency_at_its_lower_bound(
    metadata: Message,
) -> None:
    requirements = runtime_requirements(metadata)
    pins = read_pins("lowest.txt")
    assert set(pins) == set(requirements)
    for name, requirement in requirements.items():
        assert Version(pins[name]) == lower_bound(requirement), name
        assert requirement.specifier.contains(pins[name]), name


def test_the_dev_tools_are_pinned_and_installed_at_their_pins() -> None:
    pins = read_pins("dev.txt")
    assert {"ruff", "mypy", "pytest-xdist", "setuptools"} <= set(pins)
    installed = {name: importlib.metadata.version(name) for name in pins}
    assert installed == pins


@pytest.mark.e2e
def test_a_platform_without_fcntl_gets_a_one_line_import_error() -> None:
    # Python marks a module as absent with None in sys.modules, as on a platform lacking it.
    probe = "import sys\nsys.modules['fcntl'] = None\nimport pytest_cleo_grade\n"
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: pytest-cleo-grade runs on POSIX systems only"), last
    assert "fcntl" in last


@pytest.mark.e2e
def test_the_wheel_ships_the_package_data_the_commands_read(tmp_path: Path) -> None:
    # `cleo-grade skill` reads the ct-grade skill file, the rule rubric its cleo.toml.
    wheel_path = _build_hook(tmp_path, "build_wheel", timeout=300)
    with zipfile.ZipFile(wheel_path) as wheel:
        names = set(wheel.namelist())
        skill = wheel.read("pytest_cleo_grade/cli/ct_grade_skill.md").decode("utf-8")
    assert "pytest_cleo_grade/rubrics/cleo.toml" in names
    assert skill == (ROOT / "pytest_cleo_grade" / "cli" / "ct_grade_skill.md").read_text()
