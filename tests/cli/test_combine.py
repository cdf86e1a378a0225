"""``cleo-grade combine`` and ``cleo-grade report --gate`` over shards' histories."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.store.history import append_grades, read_grades

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def line(test: str, score: float, run: str, **extra: object) -> GradeResult:
    return GradeResult(
        session_id=f"s-{test}-{run}",
        total_score=score,
        dimensions={"d": DimensionScore(score=score, max=100, evidence=[])},
        timestamp=NOW,
        entry_count=1,
        testId=test,
        runId=run,
        **extra,
    )


def shard(root: Path, name: str, *grades: GradeResult) -> Path:
    folder = root / name / ".cleo"
    append_grades(list(grades), folder / "metrics" / "GRADES.jsonl")
    return root / name


def test_combining_shards_is_idempotent_and_report_gate_is_the_exit_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    one = shard(tmp_path, "a", line("t::a", 100, "r1", position=0))
    two = shard(tmp_path, "b", line("t::b", 40, "r1", position=1, cleoThreshold=60.0))
    assert main(["combine", str(one), str(two)]) == 0
    out = capsys.readouterr().out
    assert "combined 2 shards of run r1: 2 new grades" in out
    assert main(["combine", str(one / ".cleo"), str(two)]) == 0
    assert "0 new grades" in capsys.readouterr().out
    history = tmp_path / ".cleo" / "metrics" / "GRADES.jsonl"
    assert [g.model_extra["testId"] for g in read_grades(history)] == ["t::a", "t::b"]
    # The mean (70 %) reaches C, but t::b is below its own threshold: the run failed.
    assert main(["report", "--gate", "C"]) == 1
    captured = capsys.readouterr()
    assert "gate passed: mean 70% reaches 60% (C)" in captured.out
    assert "run grade C: mean 70% over 2 graded tests (1 below)" in captured.out
    assert "1 test below its threshold failed" in captured.err
    assert main(["report", "--gate", "A", "--fail-under", "F"]) == 1
    assert "gate FAILED: mean 70% is below 90% (A)" in capsys.readouterr().out
    assert main(["report", "--gate", "D", "--fail-under", "F"]) == 0
    # Without --gate, report renders only.
    assert main(["report", "--fail-under", "A"]) == 0


def test_a_shard_of_another_run_is_refused_unless_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    one = shard(tmp_path, "a", line("t::a", 100, "r1"))
    other = shard(tmp_path, "b", line("t::b", 40, "r0"))
    assert main(["combine", str(one), str(other)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "its grades are of run r0, not r1" in err and "--allow-other-runs" in err
    assert not (tmp_path / ".cleo").exists()
    assert main(["combine", str(one), str(other), "--allow-other-runs"]) == 0
    capsys.readouterr()
    lines = (tmp_path / ".cleo" / "metrics" / "GRADES.jsonl").read_text().splitlines()
    relabelled = json.loads(lines[1])
    assert (relabelled["runId"], relabelled["combinedFrom"]) == ("r1", "r0")
    assert main(["report", "--gate", "F"]) == 0
    assert "over 2 graded tests" in capsys.readouterr().out


def test_report_writes_the_step_summary_and_junit_of_the_combined_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    history = tmp_path / "GRADES.jsonl"
    reason = "cleo-grade: t::j: cannot grade with rubric weighted: judge down"
    append_grades(
        [
            line("t::a", 90, "r1"),
            GradeResult.model_validate(
                {
                    **line("t::j", 0, "r1").to_json_dict(),
                    "dimensions": {},
                    "cleoStatus": "ungradable",
                    "reason": reason,
                }
            ),
        ],
        history,
    )
    assert main(["report", "--history", str(history), "--step-summary"]) == 2
    assert "GITHUB_STEP_SUMMARY is not set" in capsys.readouterr().err
    args = ["report", "--history", str(history), "--gate", "B", "--junit", "j.xml"]
    assert main([*args, "--step-summary", "s.md"]) == 1
    out = capsys.readouterr().out
    assert "gate FAILED: 1 test could not be graded (mean 90%)" in out
    assert "could not be graded: t::j: cannot grade with rubric weighted: judge down" in out
    summary = (tmp_path / "s.md").read_text()
    assert "| `t::j` | - | - | - | - | ungradable | not graded |" in summary
    junit = (tmp_path / "j.xml").read_text()
    assert junit.count("<testcase") == 2 and junit.count("<failure") == 1
    assert '<property name="cleo_status" value="ungradable" />' in junit


def test_combine_names_a_missing_shard(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["combine", "nope"]) == 2
    assert capsys.readouterr().err == "cleo-grade combine: nope: no such file or directory\n"
    (tmp_path / "empty").mkdir()
    assert main(["combine", "empty"]) == 2
    assert "no audit store (audit.db) and no grade history" in capsys.readouterr().err


def test_regrade_grades_a_runs_stored_sessions_again_into_a_new_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.cli.test_grading import session_entries, write_jsonl

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CLEO_AUDIT_DB", raising=False)
    assert main(["import", str(write_jsonl(tmp_path / "e.jsonl", session_entries("s1")))]) == 0
    history = tmp_path / ".cleo" / "metrics" / "GRADES.jsonl"
    old = line("t::a", 10, "r1", cleoThreshold=60.0, position=4)
    append_grades([old.model_copy(update={"session_id": "s1"})], history)
    capsys.readouterr()
    assert main(["regrade", "--new-run-id", "r2"]) == 0
    assert "regraded 1 session of run r1 with rubric cleo into run r2" in capsys.readouterr().out
    _, new = read_grades(history)
    extra = new.model_extra or {}
    assert (extra["runId"], extra["regradedFrom"], extra["testId"], extra["position"]) == (
        "r2",
        "r1",
        "t::a",
        4,
    )
    assert new.entry_count == 5 and new.total_score > 10
    assert extra["cleoStatus"] == ("passed" if new.percent >= 60 else "below")
    # The new run is the latest: report shows it.
    assert main(["report", "--gate", "F"]) == 0
    assert f"{new.display_percent}%" in capsys.readouterr().out
    assert main(["regrade", "--run-id", "nope"]) == 2
    assert "no graded sessions of run nope" in capsys.readouterr().err


def test_combining_carries_each_sessions_conversation_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_cleo_grade.core._conversation import Message, bounded
    from pytest_cleo_grade.core.models import AuditEntry
    from pytest_cleo_grade.store import AuditStore

    monkeypatch.chdir(tmp_path)
    shards = []
    for name in ("a", "b"):
        folder = shard(tmp_path, name, line(f"t::{name}", 90, "r1"))
        with AuditStore(folder / ".cleo" / "audit.db") as store:
            session = f"s-t::{name}-r1"
            store.append_many(
                [
                    AuditEntry.model_validate(
                        {
                            "timestamp": "2026-01-02T03:04:05Z",
                            "sessionId": session,
                            "domain": "session",
                            "operation": "list",
                            "params": {},
                            "result": {"success": True, "exitCode": 0, "duration": 1},
                            "metadata": {"gateway": "query", "source": "mcp"},
                        }
                    )
                ]
            )
            talk = bounded(
                [
                    Message(timestamp=NOW, role="user", text=f"goal of {name}"),
                    Message(timestamp=NOW, role="assistant", text=f"answer of {name}"),
                ],
                [],
                f"output of {name}",
            )
            store.append_conversation(session, talk)
        shards.append(str(folder))
    for _ in range(2):  # combining again adds nothing
        assert main(["combine", *shards]) == 0
    capsys.readouterr()
    with AuditStore(tmp_path / ".cleo" / "audit.db", read_only=True) as store:
        for name in ("a", "b"):
            talk = store.session_conversation(f"s-t::{name}-r1")
            assert [(m.role, m.text) for m in talk.messages] == [
                ("user", f"goal of {name}"),
                ("assistant", f"answer of {name}"),
            ]
            assert talk.output == f"output of {name}"
