"""The rubric registry: built-ins, conftest-style plugins, entry points, and grading by name."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pluggy
import pytest

from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.rubrics import hookspecs
from pytest_cleo_grade.rubrics.cleo import grade_entries
from pytest_cleo_grade.rubrics.hookspecs import hookimpl
from pytest_cleo_grade.rubrics.protocol import GradeContext, Rubric, RubricConfig
from pytest_cleo_grade.rubrics.registry import (
    CleoRubric,
    get_rubric,
    grade_with_rubric,
    make_plugin_manager,
    register_plugin,
    register_plugins_with_hooks,
    rubric_names,
)
from pytest_cleo_grade.rubrics.weighted.rubric import WeightedJudgeRubric
from tests.entries import NOW, entry, sequence
from tests.fake_judge import verdict_json
from tests.processes import NO_UNRELATED_PLUGINS

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "calls_budget"

SESSION = [
    entry("session", "list", at=0),
    entry("admin", "help", at=1),
    entry("tasks", "find", at=2),
    entry("tasks", "add", at=3, params={"title": "Fix", "description": "why"}),
    entry("session", "end", at=4, gateway="cleo_mutate"),
]


class ConstantRubric:
    """A rubric giving every session the same score."""

    version = "0.3.0"
    dimensions: Mapping[str, float] = {"only": 10}

    def __init__(self, name: str = "constant", score: int = 7) -> None:
        self.name = name
        self.score = score

    def grade(
        self,
        entries: Iterable[Any],
        *,
        session_id: str,
        now: datetime | None = None,
        context: GradeContext | None = None,
    ) -> GradeResult:
        return GradeResult(
            session_id=session_id,
            total_score=self.score,
            max_score=10,
            dimensions={"only": DimensionScore(score=self.score, max=10)},
            timestamp=now or datetime.now(UTC),
            entry_count=len(list(entries)),
        )


def plugin_module(*rubrics: object) -> types.ModuleType:
    """A module shaped like a conftest.py: an unmarked hook function and unrelated names."""
    module = types.ModuleType("conftest")

    def cleo_grade_register_rubrics(register: Any) -> None:
        for rubric in rubrics:
            register(rubric)

    def cleo_grade_helper() -> None:
        """Not a hook: only names of hook specs are taken as hooks."""

    module.cleo_grade_register_rubrics = cleo_grade_register_rubrics  # type: ignore[attr-defined]
    module.cleo_grade_helper = cleo_grade_helper  # type: ignore[attr-defined]
    return module


@pytest.fixture
def manager() -> pluggy.PluginManager:
    return make_plugin_manager(entry_points=False)


def test_cleo_is_the_built_in_default_and_weighted_is_built_in(
    manager: pluggy.PluginManager,
) -> None:
    assert rubric_names(manager) == ["cleo", "comparison", "rules", "trajectory", "weighted"]
    assert isinstance(get_rubric("cleo", manager=manager), CleoRubric)
    assert isinstance(get_rubric("weighted", manager=manager), WeightedJudgeRubric)


def test_built_in_rubrics_satisfy_the_protocol_and_declare_their_maxima(
    manager: pluggy.PluginManager,
) -> None:
    cleo = get_rubric("cleo", manager=manager)
    assert isinstance(cleo, Rubric)
    assert (cleo.name, cleo.version) == ("cleo", "1.0.0")
    assert list(cleo.dimensions.items()) == [
        ("sessionDiscipline", 20),
        ("discoveryEfficiency", 20),
        ("taskHygiene", 20),
        ("errorProtocol", 20),
        ("disclosureUse", 20),
    ]
    assert sum(get_rubric("weighted", manager=manager).dimensions.values()) == 100


@pytest.mark.parametrize(
    "entries",
    [SESSION, [], sequence(("tasks", "list"), ("tasks", "show"), ("tasks", "add"))],
    ids=["good-session", "empty", "poor-session"],
)
def test_the_cleo_rubric_output_is_byte_identical_to_grade_entries(
    manager: pluggy.PluginManager, entries: list[dict[str, Any]]
) -> None:
    direct = grade_entries(entries, session_id="s1", now=NOW)
    via_registry = grade_with_rubric("cleo", entries, session_id="s1", now=NOW, manager=manager)
    line = json.dumps(direct.to_json_dict(), separators=(",", ":"))
    assert json.dumps(via_registry.to_json_dict(), separators=(",", ":")) == line
    assert "rubric" not in via_registry.to_json_dict()


def test_the_cleo_rubric_takes_the_task_id_from_the_context(
    manager: pluggy.PluginManager,
) -> None:
    result = grade_with_rubric(
        "cleo",
        SESSION,
        session_id="s1",
        now=NOW,
        context=GradeContext(task_id="T7"),
        manager=manager,
    )
    assert result.task_id == "T7"


def test_an_unknown_rubric_is_an_error_listing_the_available_ones(
    manager: pluggy.PluginManager,
) -> None:
    with pytest.raises(RubricError) as info:
        get_rubric("weigthed", manager=manager)
    assert str(info.value) == (
        "unknown rubric 'weigthed'; available rubrics: "
        "cleo, comparison, rules, trajectory, weighted"
    )


def test_a_conftest_module_registers_a_rubric_without_the_marker(
    manager: pluggy.PluginManager,
) -> None:
    module = plugin_module(ConstantRubric())
    register_plugin(manager, module)
    register_plugin(manager, module)  # again: a no-op
    assert rubric_names(manager) == [
        "cleo",
        "comparison",
        "constant",
        "rules",
        "trajectory",
        "weighted",
    ]
    result = grade_with_rubric("constant", SESSION, session_id="s1", now=NOW, manager=manager)
    assert result.total_score == 7
    data = result.to_json_dict()
    assert (data["rubric"], data["rubricVersion"]) == ("constant", "0.3.0")


def test_an_object_with_a_marked_hook_registers_rubrics(manager: pluggy.PluginManager) -> None:
    class Plugin:
        @hookimpl
        def cleo_grade_register_rubrics(self, register: Any) -> None:
            register(ConstantRubric("first"))
            register(ConstantRubric("second"))

    register_plugin(manager, Plugin(), name="two-rubrics")
    assert rubric_names(manager) == [
        "cleo",
        "comparison",
        "first",
        "rules",
        "second",
        "trajectory",
        "weighted",
    ]


def test_two_rubrics_with_one_name_are_an_error_naming_both(
    manager: pluggy.PluginManager,
) -> None:
    register_plugin(manager, plugin_module(ConstantRubric("cleo")))
    with pytest.raises(RubricError, match="rubric name 'cleo' is registered twice") as info:
        rubric_names(manager)
    assert "CleoRubric" in str(info.value)
    assert "ConstantRubric" in str(info.value)


@pytest.mark.parametrize(
    "thing", [object(), ConstantRubric, ConstantRubric("")], ids=["object", "class", "no-name"]
)
def test_registering_something_that_is_not_a_rubric_is_an_error(
    manager: pluggy.PluginManager, thing: object
) -> None:
    register_plugin(manager, plugin_module(thing))
    with pytest.raises(RubricError, match=r"not a rubric|has no name"):
        rubric_names(manager)


def test_a_misspelled_marked_hook_is_rejected_when_registered(
    manager: pluggy.PluginManager,
) -> None:
    class Typo:
        @hookimpl
        def cleo_grade_register_rubric(self, register: Any) -> None:
            """Missing the final s."""

    with pytest.raises(RubricError, match="cleo_grade_register_rubric"):
        register_plugin(manager, Typo(), name="typo")
    assert rubric_names(manager) == ["cleo", "comparison", "rules", "trajectory", "weighted"]


def test_a_crashing_rubric_becomes_a_rubric_error(manager: pluggy.PluginManager) -> None:
    class Crashing(ConstantRubric):
        def grade(self, entries: Iterable[Any], **kwargs: Any) -> GradeResult:
            raise ZeroDivisionError("division by zero")

    register_plugin(manager, plugin_module(Crashing("crashing")))
    with pytest.raises(RubricError, match="rubric 'crashing' failed: ZeroDivisionError"):
        grade_with_rubric("crashing", SESSION, session_id="s1", manager=manager)


def test_a_rubric_returning_something_else_is_a_rubric_error(
    manager: pluggy.PluginManager,
) -> None:
    class Sloppy(ConstantRubric):
        def grade(self, entries: Iterable[Any], **kwargs: Any) -> GradeResult:
            return {"totalScore": 1}  # type: ignore[return-value]

    register_plugin(manager, plugin_module(Sloppy("sloppy")))
    with pytest.raises(RubricError, match="returned dict, not a GradeResult"):
        grade_with_rubric("sloppy", SESSION, session_id="s1", manager=manager)


@pytest.mark.parametrize(
    ("score", "message"),
    [
        (15, "rubric 'overflowing' returned 15 for dimension 'only', outside 0..10"),
        # The model refuses a negative total itself: still one line.
        (-1, "rubric 'overflowing' failed: ValidationError: total_score: Input should be"),
    ],
)
def test_a_score_outside_its_range_is_a_rubric_error_not_a_grade(
    manager: pluggy.PluginManager, score: int, message: str
) -> None:
    register_plugin(manager, plugin_module(ConstantRubric("overflowing", score=score)))
    with pytest.raises(RubricError) as caught:
        grade_with_rubric("overflowing", SESSION, session_id="s1", manager=manager)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_a_rubric_that_records_its_own_name_keeps_it(manager: pluggy.PluginManager) -> None:
    class SelfStamping(ConstantRubric):
        def grade(self, entries: Iterable[Any], **kwargs: Any) -> GradeResult:
            result = super().grade(entries, **kwargs)
            return result.model_copy(update={"rubric": "family/stamped"})

    register_plugin(manager, plugin_module(SelfStamping("stamped")))
    data = grade_with_rubric("stamped", [], session_id="s1", manager=manager).to_json_dict()
    assert (data["rubric"], data["rubricVersion"]) == ("family/stamped", "0.3.0")


def test_grading_by_name_configures_the_weighted_rubric(manager: pluggy.PluginManager) -> None:
    result = grade_with_rubric(
        "weighted",
        SESSION,
        session_id="s1",
        now=NOW,
        config=RubricConfig(judge=lambda prompt: verdict_json()),
        manager=manager,
    )
    assert result.total_score == 67.17
    assert result.to_json_dict()["rubric"] == "weighted"


def install_example(tmp_path: Path, *, module: str | None = None) -> dict[str, str]:
    """Put the docs' example rubric and a dist-info with its entry point on PYTHONPATH."""
    site = tmp_path / "site"
    site.mkdir()
    shutil.copy(EXAMPLE / "calls_budget.py", site / "calls_budget.py")
    info = site / "calls_budget-1.0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: calls-budget\nVersion: 1.0.0\n")
    (info / "entry_points.txt").write_text(
        f"[cleo_grade]\ncalls_budget = {module or 'calls_budget'}\n"
    )
    return {**os.environ, "PYTHONPATH": str(site), "PYTHONDONTWRITEBYTECODE": "1"}


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.e2e  # an installed distribution: a process started with it on its path
def test_a_rubric_published_under_the_entry_point_group_is_discovered(tmp_path: Path) -> None:
    env = install_example(tmp_path)
    code = (
        "import json\n"
        "from pytest_cleo_grade.rubrics.registry import grade_with_rubric, rubric_names\n"
        "print(json.dumps(rubric_names()))\n"
        "entries = [{'timestamp': '2026-03-01T12:00:00Z', 'domain': 'tasks',"
        " 'operation': 'find', 'result': {'success': True}}]\n"
        "result = grade_with_rubric('calls-budget', entries, session_id='s')\n"
        "print(json.dumps(result.to_json_dict()))\n"
    )
    done = run_python(code, env)
    assert done.returncode == 0, done.stderr
    names, result = (json.loads(line) for line in done.stdout.splitlines())
    assert names == ["cleo", "calls-budget", "comparison", "rules", "trajectory", "weighted"]
    assert result["totalScore"] == 100
    assert (result["rubric"], result["rubricVersion"]) == ("calls-budget", "1.0.0")


@pytest.mark.e2e  # an installed distribution: a process started with it on its path
def test_a_broken_entry_point_is_a_rubric_error_naming_the_group(tmp_path: Path) -> None:
    env = install_example(tmp_path, module="no_such_module")
    code = (
        "from pytest_cleo_grade.core.errors import RubricError\n"
        "from pytest_cleo_grade.rubrics.registry import make_plugin_manager\n"
        "try:\n    make_plugin_manager()\nexcept RubricError as exc:\n    print(exc)\n"
    )
    done = run_python(code, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "cannot load rubric plugins (entry-point group cleo_grade): ModuleNotFoundError"
    )
    assert "no_such_module" in done.stdout


@pytest.mark.e2e  # an installed distribution: a process started with it on its path
def test_the_documented_example_test_passes_against_the_installed_rubric(
    tmp_path: Path,
) -> None:
    env = install_example(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-W",
            "error",
            *NO_UNRELATED_PLUGINS,
            str(EXAMPLE / "test_calls_budget.py"),
            "--rootdir",
            str(tmp_path),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "3 passed" in done.stdout


def test_the_example_in_the_hook_specs_docstring_registers_a_working_rubric(
    manager: pluggy.PluginManager,
) -> None:
    doc = inspect.getdoc(hookspecs.cleo_grade_register_rubrics) or ""
    code = textwrap.dedent(doc.split("Example::", 1)[1].split(":param", 1)[0])
    module = types.ModuleType("docstring_example")
    exec(compile(code, "hookspec-example", "exec"), module.__dict__)
    register_plugin(manager, module)
    session = [entry("tasks", "find", at=i) for i in range(7)]
    result = grade_with_rubric("few-calls", session, session_id="s1", manager=manager)
    assert result.total_score == 80
    assert result.to_json_dict()["rubric"] == "few-calls"


def test_only_candidates_defining_a_rubric_hook_are_registered(
    manager: pluggy.PluginManager,
) -> None:
    with_hook = plugin_module(ConstantRubric())
    without_hook = types.ModuleType("conftest_without_hook")
    candidates = [with_hook, without_hook, object(), with_hook]
    assert register_plugins_with_hooks(manager, candidates) == 1
    assert register_plugins_with_hooks(manager, candidates) == 0
    assert not manager.is_registered(without_hook)
    assert rubric_names(manager) == [
        "cleo",
        "comparison",
        "constant",
        "rules",
        "trajectory",
        "weighted",
    ]
