"""Rubric files (TOML and JSON): loading, grading with them, and their validation errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cleo_grade.core.errors import RubricError
from pytest_cleo_grade.judges.connect import DefaultConnector
from pytest_cleo_grade.rubrics.protocol import RubricConfig
from pytest_cleo_grade.rubrics.weighted.rubric import (
    DEFAULT_SPEC,
    WeightedJudgeRubric,
    load_rubric_file,
)
from tests.entries import NOW, entry

RUBRIC_TOML = """\
name = "release-review"
version = "2.1.0"
description = "Did the agent ship a release cleanly?"

[judge]
base_url = "http://127.0.0.1:9/v1"
model = "judge-small"
api_key_env = "JUDGE_API_KEY"
timeout = 30
retries = 1

[budget]
max_prompt_tokens = 50000
chunk_tokens = 40000

[[dimensions]]
name = "shipped"
type = "categorical"
weight = 0.5
description = "Was the release published?"
categories = [
  { label = "no", value = 0, description = "nothing published" },
  { label = "broken", value = 1 },
  { label = "yes", value = 2 },
]

[[dimensions]]
name = "care"
type = "numeric"
weight = 0.3
description = "Were checks run before publishing?"
guidance = ["0.0: none", "1.0: all of them"]

[[dimensions]]
name = "speed"
type = "numeric"
weight = 0.2
min = 1
max = 5
"""

REPLY = json.dumps(
    {
        "shipped": {"score": "broken", "evidence": ["#2 failed"], "rationale": "half done"},
        "care": {"score": 0.5, "evidence": [], "rationale": ""},
        "speed": {"score": 4, "evidence": ["quick"], "rationale": "fast"},
    }
)


def write(tmp_path: Path, text: str, name: str = "rubric.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_toml_rubric_file_defines_dimensions_judge_and_budget(tmp_path: Path) -> None:
    loaded = load_rubric_file(write(tmp_path, RUBRIC_TOML))
    spec = loaded.spec
    assert (spec.name, spec.version) == ("release-review", "2.1.0")
    assert [d.name for d in spec.dimensions] == ["shipped", "care", "speed"]
    assert spec.judge.model == "judge-small"
    assert spec.judge.api_key_env == "JUDGE_API_KEY"
    assert spec.budget.chunk_tokens == 40000
    assert loaded.source == RUBRIC_TOML.encode()


def test_grading_with_a_rubric_file_uses_its_dimensions_ranges_and_name(tmp_path: Path) -> None:
    path = write(tmp_path, RUBRIC_TOML)
    prompts: list[str] = []

    def judge(prompt: str) -> str:
        prompts.append(prompt)
        return REPLY

    rubric = WeightedJudgeRubric().configure(RubricConfig(rubric_file=path, judge=judge))
    result = rubric.grade([entry("release", "publish")], session_id="s1", now=NOW)
    # 0.5 * 1/2 + 0.3 * 0.5 + 0.2 * (4 - 1) / (5 - 1) = 0.25 + 0.15 + 0.15
    assert result.total_score == 55.0
    assert {n: d.score for n, d in result.dimensions.items()} == {
        "shipped": 25.0,
        "care": 15.0,
        "speed": 15.0,
    }
    assert result.dimensions["care"].evidence == []
    assert result.to_json_dict()["rubric"] == "release-review"
    assert result.to_json_dict()["rubricVersion"] == "2.1.0"
    assert "a number from 1 to 5" in prompts[0]
    assert "no (0): nothing published" in prompts[0]


def test_a_json_rubric_file_is_equivalent(tmp_path: Path) -> None:
    data = DEFAULT_SPEC.model_dump(mode="json")
    loaded = load_rubric_file(write(tmp_path, json.dumps(data), "rubric.json"))
    assert loaded.spec == DEFAULT_SPEC


def test_judge_overrides_replace_single_judge_settings_of_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, RUBRIC_TOML)
    config = RubricConfig(rubric_file=path, judge_overrides={"model": "judge-large"})
    rubric = WeightedJudgeRubric().configure(config)
    assert rubric.spec.judge.model == "judge-large"
    assert rubric.spec.judge.timeout == 30


def test_an_invalid_judge_override_names_the_setting() -> None:
    with pytest.raises(RubricError, match=r"^judge\.timeout: Input should be greater than 0"):
        WeightedJudgeRubric().configure(RubricConfig(judge_overrides={"timeout": 0}))


def test_a_judge_url_override_without_a_scheme_is_an_error_naming_the_setting() -> None:
    overrides = {"base_url": "localhost:8000"}
    with pytest.raises(RubricError, match=r"^judge\.base_url: expected an http:// or https://"):
        WeightedJudgeRubric().configure(RubricConfig(judge_overrides=overrides))


def test_without_a_judge_or_endpoint_grading_says_how_to_configure_one() -> None:
    rubric = WeightedJudgeRubric(connector=DefaultConnector())
    with pytest.raises(RubricError, match=r"judge\.base_url is not set"):
        rubric.grade([entry("tasks", "find")], session_id="s1", now=NOW)


def test_the_pure_rubric_without_a_judge_or_connector_says_how_to_give_one() -> None:
    with pytest.raises(RubricError, match=r"no judge: pass RubricConfig\(judge=\.\.\.\)"):
        WeightedJudgeRubric().grade([entry("tasks", "find")], session_id="s1", now=NOW)


def dims(*tables: str) -> str:
    return "\n".join(f"[[dimensions]]\n{table}" for table in tables)


NUMERIC_HALF = 'name = "a"\ntype = "numeric"\nweight = 0.5\n'
NUMERIC_OTHER_HALF = 'name = "b"\ntype = "numeric"\nweight = 0.5\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            dims(NUMERIC_HALF, 'name = "b"\ntype = "numeric"\nweight = 0.4\n'),
            "dimensions: weights must sum to 1, they sum to 0.9",
        ),
        (
            dims(NUMERIC_HALF, 'name = "b"\ntype = "numeric"\nweight = 0.5000001\n'),
            "dimensions: weights must sum to 1, they sum to 1.0000001",
        ),
        (
            dims(
                NUMERIC_HALF,
                'name = "b"\ntype = "categorical"\nweight = 0.5\n'
                'categories = [{label = "only", value = 0}]\n',
            ),
            "dimensions[1] (b).categories: List should have at least 2 items",
        ),
        (
            dims(
                NUMERIC_HALF,
                'name = "b"\ntype = "categorical"\nweight = 0.5\n'
                'categories = [{label = "lo", value = 0}, {label = "hi"}]\n',
            ),
            "dimensions[1] (b).categories[1].value: Field required",
        ),
        (
            dims(
                NUMERIC_HALF,
                'name = "b"\ntype = "categorical"\nweight = 0.5\n'
                'categories = [{label = "lo", value = 1}, {label = "hi", value = 2}]\n',
            ),
            "dimensions[1] (b).categories: category values must be 0..1 in order, got [1, 2]",
        ),
        (
            dims(NUMERIC_HALF, 'name = "b"\ntype = "scale"\nweight = 0.5\n'),
            "dimensions[1] (b): Input tag 'scale' found using 'type' does not match",
        ),
        (
            dims(NUMERIC_HALF, 'name = "b"\nweight = 0.5\n'),
            "dimensions[1] (b): Unable to extract tag using discriminator 'type'",
        ),
        (
            dims(NUMERIC_HALF, NUMERIC_OTHER_HALF + "min = 1\nmax = 1\n"),
            "dimensions[1] (b): max (1) must be greater than min (1)",
        ),
        (
            dims(NUMERIC_HALF, 'name = "a"\ntype = "numeric"\nweight = 0.5\n'),
            "dimensions: dimension names must be unique: a",
        ),
        (
            dims(NUMERIC_HALF, 'name = "has space"\ntype = "numeric"\nweight = 0.5\n'),
            "dimensions[1] (has space).name: String should match pattern",
        ),
        (
            'colour = "blue"\n' + dims(NUMERIC_HALF, NUMERIC_OTHER_HALF),
            "colour: Extra inputs are not permitted",
        ),
        (
            "[budget]\nchunk_tokens = 90000\n" + dims(NUMERIC_HALF, NUMERIC_OTHER_HALF),
            "budget: chunk_tokens (90000) must not exceed max_prompt_tokens (80000)",
        ),
        (
            '[judge]\nmodle = "x"\n' + dims(NUMERIC_HALF, NUMERIC_OTHER_HALF),
            "judge.modle: Extra inputs are not permitted",
        ),
        (
            '[judge]\nbase_url = "localhost:8000"\n' + dims(NUMERIC_HALF, NUMERIC_OTHER_HALF),
            "judge.base_url: expected an http:// or https:// URL, got 'localhost:8000'",
        ),
        ('name = "x"\n', "dimensions: Field required"),
    ],
    ids=[
        "weights-short",
        "weights-over-tolerance",
        "one-category",
        "category-without-value",
        "category-values-not-ranks",
        "unknown-type",
        "missing-type",
        "empty-range",
        "duplicate-name",
        "bad-name",
        "unknown-key",
        "chunk-over-budget",
        "judge-typo",
        "judge-url-without-scheme",
        "no-dimensions",
    ],
)
def test_an_invalid_rubric_file_names_the_file_and_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(RubricError) as info:
        load_rubric_file(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_weights_within_a_billionth_of_one_are_accepted(tmp_path: Path) -> None:
    text = dims(NUMERIC_HALF, 'name = "b"\ntype = "numeric"\nweight = 0.5000000001\n')
    assert len(load_rubric_file(write(tmp_path, text)).spec.dimensions) == 2


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("rubric.toml", "name = [", "invalid TOML: "),
        ("rubric.json", '{"name": ', "invalid JSON: Expecting value (line 1)"),
        ("rubric.yaml", "name: x", "rubric files must end in .toml or .json"),
        ("rubric.toml", b"\xff\xfe", "not UTF-8 text"),
    ],
    ids=["toml-syntax", "json-syntax", "other-suffix", "binary"],
)
def test_unreadable_rubric_files_are_clear_errors(
    tmp_path: Path, name: str, content: str | bytes, message: str
) -> None:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(RubricError) as info:
        load_rubric_file(path)
    assert str(info.value).startswith(f"{path}: {message}")


def test_a_missing_rubric_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RubricError, match=r"nope\.toml: cannot read rubric file: No such file"):
        load_rubric_file(tmp_path / "nope.toml")


def test_the_documented_rubric_file_is_the_default_rubric() -> None:
    path = Path(__file__).resolve().parents[2] / "docs" / "examples" / "weighted-rubric.toml"
    spec = load_rubric_file(path).spec
    assert spec.dimensions == DEFAULT_SPEC.dimensions
    assert spec.budget == DEFAULT_SPEC.budget
    assert (spec.name, spec.version) == (DEFAULT_SPEC.name, DEFAULT_SPEC.version)


def test_a_key_pasted_as_api_key_env_is_refused_without_being_repeated(tmp_path: Path) -> None:
    # It was accepted, and every judged test then failed saying "environment variable
    # sk-live-... (judge.api_key_env) is not set", in the terminal and in JUnit.
    secret = "sk-live-INLINESECRET999"
    path = write(tmp_path, RUBRIC_TOML.replace('"JUDGE_API_KEY"', f'"{secret}"'))
    with pytest.raises(RubricError) as caught:
        load_rubric_file(path)
    text = str(caught.value)
    assert text == (
        f"{path}: judge.api_key_env: must name an environment variable (letters, digits and "
        "_), not hold the key itself"
    )
    assert secret not in text
