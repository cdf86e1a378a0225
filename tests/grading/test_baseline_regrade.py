"""Baselines that know their rubric's settings, and a changed rubric re-graded from the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_cleo_grade.core.models import AuditEntry, GradeResult
from pytest_cleo_grade.grading._baseline import (
    BaselineError,
    TestGrades,
    compare_baseline,
    grades_from_results,
    parse_baseline,
    parse_tolerances,
    read_baseline,
    write_baseline,
)
from pytest_cleo_grade.grading._regrade import StoreRegrader, deterministic, rubric_grader
from pytest_cleo_grade.reports._baseline import baseline_lines, baseline_markdown
from pytest_cleo_grade.rubrics.protocol import RubricConfig
from pytest_cleo_grade.rubrics.registry import grade_with_rubric
from pytest_cleo_grade.store import AuditStore

RULES = """# {comment}
name = "protocol"
version = "{version}"

[[dimensions]]
name = "protocol"
max = 100

[[dimensions.rules]]
id = "listed"
kind = "called"
match = {{ calls = ["session.list"] }}
points = {listed}
flag = "Never listed the sessions"

[[dimensions.rules]]
id = "ended"
kind = "called"
match = {{ calls = ["session.end"] }}
points = {ended}
flag = "Never ended the session"
"""


def rule_file(
    path: Path, version: str = "1.0.0", listed: int = 50, ended: int = 50, comment: str = ""
) -> Path:
    path.write_text(RULES.format(version=version, listed=listed, ended=ended, comment=comment))
    return path


def entries(session: str, *calls: tuple[str, str]) -> list[AuditEntry]:
    return [
        AuditEntry.model_validate(
            {
                "id": f"{session}-{index}",
                "timestamp": f"2026-03-01T00:00:0{index}Z",
                "sessionId": session,
                "domain": domain,
                "operation": operation,
                "params": {},
                "result": {"success": True},
                "metadata": {"source": "mcp", "gateway": "cleo_query"},
            }
        )
        for index, (domain, operation) in enumerate(calls)
    ]


#: Lists the sessions, never ends: 50 under 50/50 points, 40 under 40/60.
LISTS_ONLY = (("session", "list"), ("tasks", "find"))


def graded(path: Path, session: str, calls: tuple[tuple[str, str], ...]) -> GradeResult:
    result = grade_with_rubric(
        "rules",
        entries(session, *calls),
        session_id=session,
        config=RubricConfig(rubric_file=path),
    )
    return result.model_copy(update={"testId": "t::a"})


def test_a_rule_files_hash_follows_its_rules_not_its_comments(tmp_path: Path) -> None:
    path = tmp_path / "rules.toml"

    def digest(**changes: object) -> str:
        rule_file(path, **changes)  # type: ignore[arg-type]
        return str((graded(path, "s", LISTS_ONLY).model_extra or {})["rubricHash"])

    first = digest()
    assert len(first) == 64
    assert digest(comment="reworded") == first  # no rule changed
    assert digest(listed=40, ended=60) != first  # the same version, other points


def test_a_baseline_records_the_hash_and_sessions_and_reads_them_back(tmp_path: Path) -> None:
    path = rule_file(tmp_path / "rules.toml")
    before = grades_from_results([graded(path, "s1", LISTS_ONLY)])
    out = tmp_path / "base.json"
    write_baseline(out, before, source="test")
    entry = json.loads(out.read_text())["tests"]["t::a"]
    assert entry["sessions"] == ["s1"] and entry["rubricHash"] == before["t::a"].rubric_hash
    assert read_baseline(out) == before
    document = json.loads(out.read_text())
    document["tests"]["t::a"]["sessions"] = "s1"
    with pytest.raises(BaselineError, match=r"tests\['t::a'\]\.sessions: expected a list"):
        parse_baseline(document, "base.json")


def test_only_rubrics_without_a_judge_are_regraded() -> None:
    def of(rubric: str, model: str | None = None) -> TestGrades:
        return TestGrades("t", (1.0,), {}, rubric, judge_model=model)

    assert deterministic(of("rules")) and deterministic(of("cleo:0.7,trajectory:0.3"))
    assert not deterministic(of("weighted", "m"))
    assert not deterministic(of("cleo:0.5,weighted:0.5"))
    assert not deterministic(of("my-plugins-rubric"))


def _store(tmp_path: Path, *sessions: tuple[str, tuple[tuple[str, str], ...]]) -> Path:
    db = tmp_path / "audit.db"
    with AuditStore(db) as audit:
        for session, calls in sessions:
            audit.append_many(entries(session, *calls))
    return db


def test_an_edited_rule_file_regrades_the_baseline_and_compares_like_with_like(
    tmp_path: Path,
) -> None:
    path = rule_file(tmp_path / "rules.toml")
    base = grades_from_results([graded(path, "old", LISTS_ONLY)])
    db = _store(tmp_path, ("old", LISTS_ONLY))
    rule_file(path, listed=40, ended=60)  # edited, version unchanged
    now = grades_from_results([graded(path, "new", LISTS_ONLY)])
    gate = parse_tolerances("total:5")
    # Compared as they were, 50 -> 40 would read as a 10-point regression.
    regrade = StoreRegrader(db, rubric_grader(path))
    result = compare_baseline(base, now, gate, regrade=regrade)
    assert not result.failed and result.rubric_changed == ()
    ((test, why),) = result.regraded
    assert test == "t::a" and why.startswith("rules 1.0.0 (settings ") and "-> rules 1.0.0" in why
    assert [(c.baseline, c.current) for c in result.changes if c.metric == "total"] == [(40, 40)]
    lines = baseline_lines(result, gated=True)
    assert lines[0] == "baseline gate passed: no drop beyond the tolerances"
    assert f"baseline re-graded under the current rubric ({why}): t::a" in lines
    assert "Baseline re-graded under the current rubric" in baseline_markdown(result, gated=True)
    # A real drop is still one: the agent that now lists nothing scores 0 of the re-graded 40.
    worse = grades_from_results([graded(path, "new", (("tasks", "find"),))])
    assert compare_baseline(base, worse, gate, regrade=regrade).regressions


def test_without_the_sessions_in_the_store_a_changed_rubric_is_not_compared(
    tmp_path: Path,
) -> None:
    path = rule_file(tmp_path / "rules.toml")
    base = grades_from_results([graded(path, "old", LISTS_ONLY)])
    rule_file(path, version="1.1.0", listed=40, ended=60)
    now = grades_from_results([graded(path, "new", LISTS_ONLY)])
    gate = parse_tolerances("total:5")
    empty = _store(tmp_path, ("other", LISTS_ONLY))
    for regrade in (None, StoreRegrader(empty, rubric_grader(path))):
        result = compare_baseline(base, now, gate, regrade=regrade)
        assert not result.failed and not result.regraded
        assert result.rubric_changed == (("t::a", "rules 1.0.0 -> rules 1.1.0"),)
    # Once the store holds the baseline's session: re-graded with a rubric that is not this
    # run's (another file), its identity differs from this run's, so it is not compared.
    other = rule_file(tmp_path / "other.toml", version="9")
    with AuditStore(empty) as audit:
        audit.append_many(entries("old", *LISTS_ONLY))
    regrade = StoreRegrader(empty, rubric_grader(other))
    result = compare_baseline(base, now, gate, regrade=regrade)
    assert result.rubric_changed and not result.regraded
    # With the file it was graded by, the same store re-grades it.
    regrade = StoreRegrader(empty, rubric_grader(path))
    result = compare_baseline(base, now, gate, regrade=regrade)
    assert result.regraded and not result.rubric_changed


def test_a_test_moved_from_cleo_to_a_combination_is_regraded_under_the_combination(
    tmp_path: Path,
) -> None:
    from pytest_cleo_grade.rubrics.cleo import grade_entries

    path = rule_file(tmp_path / "rules.toml")
    db = _store(tmp_path, ("old", LISTS_ONLY))
    old = grade_entries(entries("old", *LISTS_ONLY), session_id="old")
    base = grades_from_results([old.model_copy(update={"testId": "t::a"})])
    combined = "cleo:0.5,rules:0.5"
    now_result = grade_with_rubric(
        combined,
        entries("new", *LISTS_ONLY),
        session_id="new",
        config=RubricConfig(rubric_file=path),
    )
    now = grades_from_results([now_result.model_copy(update={"testId": "t::a"})])
    assert now["t::a"].rubric_hash is not None
    result = compare_baseline(
        base, now, parse_tolerances("total:5"), regrade=StoreRegrader(db, rubric_grader(path))
    )
    assert result.regraded == (("t::a", f"cleo -> {combined} cleo 1.0.0 + rules 1.0.0"),)
    (total,) = [c for c in result.changes if c.metric == "total"]
    assert total.baseline == total.current == now_result.percent
    # The combination's hash follows its parts' weights: another weighting is another rubric.
    other = grade_with_rubric(
        "cleo:0.7,rules:0.3",
        entries("new", *LISTS_ONLY),
        session_id="new",
        config=RubricConfig(rubric_file=path),
    )
    assert (other.model_extra or {})["rubricHash"] != now["t::a"].rubric_hash
