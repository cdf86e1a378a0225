"""Langfuse export with the real SDK against a local Langfuse stand-in: score configs made
once from the rubric, one score per dimension and the overall score per graded session."""

from __future__ import annotations

import base64
import contextlib
import gzip
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("langfuse", reason="needs the langfuse extra (the Langfuse SDK)")

from pytest_cleo_grade import append_grade, grade_entries
from pytest_cleo_grade.cli import main
from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.reports.langfuse import ExportDeadlineError, export_grades, plan
from tests.entries import NOW, sequence
from tests.fake_langfuse import FakeLangfuse
from tests.local_http import ScriptedServer, status
from tests.processes import DEADLINE

GRADE = grade_entries(sequence(("session", "list"), ("tasks", "find")), session_id="s1", now=NOW)


@pytest.fixture
def fake() -> Iterator[FakeLangfuse]:
    with FakeLangfuse() as server:
        yield server


def send(fake: FakeLangfuse, *grades: GradeResult) -> str:
    summary = export_grades(
        grades, public_key="pk-test", secret_key="sk-test", base_url=fake.base_url
    )
    return summary.line(len({g.session_id for g in grades}), "here")


def test_a_cleo_grade_becomes_seven_scores_with_their_configs(fake: FakeLangfuse) -> None:
    assert (
        send(fake, GRADE)
        == "langfuse: 7 scores for 1 session sent to here (7 score configs created, 0 existed)"
    )
    configs = {c["name"]: c for c in fake.configs}
    assert configs["sessionDiscipline"] == {
        **configs["sessionDiscipline"],
        "dataType": "NUMERIC",
        "minValue": 0.0,
        "maxValue": 20.0,
    }
    assert configs["cleo_total"]["maxValue"] == 100.0
    assert configs["cleo_grade"]["dataType"] == "CATEGORICAL"
    assert configs["cleo_grade"]["categories"] == [
        {"label": "A", "value": 4}, {"label": "B", "value": 3}, {"label": "C", "value": 2},
        {"label": "D", "value": 1}, {"label": "F", "value": 0},
    ]  # fmt: skip
    scores = {s["name"]: s for s in fake.scores()}
    assert scores["discoveryEfficiency"]["value"] == 15.0
    assert scores["cleo_total"]["value"] == 75.0
    # A categorical score is sent as its label, with its config.
    assert (scores["cleo_grade"]["value"], scores["cleo_grade"]["dataType"]) == ("B", "CATEGORICAL")
    assert scores["cleo_grade"]["configId"] == configs["cleo_grade"]["id"]
    assert {s["sessionId"] for s in scores.values()} == {"s1"}
    assert all(r.auth and r.auth.startswith("Basic ") for r in fake.requests)


def test_a_second_export_creates_no_config_and_rewrites_the_same_score_ids(
    fake: FakeLangfuse,
) -> None:
    send(fake, GRADE)
    first = [s["id"] for s in fake.scores()]
    line = send(fake, GRADE)
    assert line.endswith("(0 score configs created, 7 existed)")
    assert len(fake.configs) == 7
    assert [s["id"] for s in fake.scores()][7:] == first  # upserts, not duplicates


def test_the_weighted_rubric_sends_the_designs_seven_scores() -> None:
    judged = GradeResult.model_validate(
        {
            "sessionId": "s2",
            "totalScore": 67.17,
            "maxScore": 100,
            "dimensions": {
                "goal_achievement": DimensionScore(score=20, max=30, evidence=["closed it"]),
                "tool_efficiency": DimensionScore(score=14, max=20),
            },
            "flags": [],
            "timestamp": NOW,
            "entryCount": 3,
            "rubric": "weighted",
            "judgeScores": {"goal_achievement": "complete", "tool_efficiency": 0.7},
            "overallQuality": 0.6717,
        }
    )
    scores = {s.config.name: s for s in plan(judged)}
    assert list(scores) == ["goal_achievement", "tool_efficiency", "overall_quality"]
    goal = scores["goal_achievement"]
    assert (goal.value, goal.config.data_type) == ("complete", "CATEGORICAL")
    assert goal.config.categories[2] == ("complete", 2)
    assert (scores["tool_efficiency"].value, scores["overall_quality"].value) == (0.7, 0.6717)


def test_names_langfuse_refuses_are_made_safe() -> None:
    combined = GRADE.model_copy(update={"rubric": "cleo:0.7,trajectory:0.3"})
    names = [s.config.name for s in plan(combined)]
    assert "cleo_0.7_trajectory_0.3_total" in names
    assert all(len(name) <= 35 for name in names)


def test_the_cli_sends_each_sessions_latest_grade(
    fake: FakeLangfuse,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    history = tmp_path / "GRADES.jsonl"
    append_grade(GRADE, history)
    append_grade(GRADE.model_copy(update={"session_id": "s9"}), history)
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    assert main(["export", "langfuse", "--history", str(history)]) == 0
    out = capsys.readouterr().out
    sent = f"langfuse: 14 scores for 2 sessions sent to {fake.base_url}"
    assert out == f"{sent} (7 score configs created, 0 existed)\n"


def test_a_misspelt_history_or_session_is_said_not_sent_as_nothing(
    fake: FakeLangfuse,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A CI job's typo in --history exported nothing with exit 0, as for an empty history.
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    missing = tmp_path / "GRADE.jsonl"
    assert main(["export", "langfuse", "--history", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"cleo-grade export langfuse: {missing}: no grade history there\n"
    history = tmp_path / "GRADES.jsonl"
    append_grade(GRADE, history)
    assert main(["export", "langfuse", "--history", str(history), "--session-id", "nope"]) == 0
    assert capsys.readouterr().out == f"langfuse: no grades of 'nope' in {history}: nothing sent\n"


def test_the_cli_without_keys_says_which_to_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    monkeypatch.delenv("LANGFUSE_SECRET_KEY", raising=False)
    assert main(["export", "langfuse", "--history", str(tmp_path / "G.jsonl")]) == 2
    err = capsys.readouterr().err
    assert "set LANGFUSE_PUBLIC_KEY and LANGFUSE_SECRET_KEY" in err and err.count("\n") == 1


def test_the_cli_reports_a_refusing_server_in_one_line(
    fake: FakeLangfuse,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert cli_export(fake, tmp_path, monkeypatch, LANGFUSE_SECRET_KEY="wrong") == 1
    err = capsys.readouterr().err
    assert f"cleo-grade: langfuse export to {fake.base_url} failed: HTTP 401: Unauthorized\n" == err
    assert err.count("\n") == 1 and "wrong" not in err


def cli_export(
    fake: FakeLangfuse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str
) -> int:
    """`cleo-grade export langfuse` of one grade to ``fake``, with ``env`` over its keys."""
    history = tmp_path / "GRADES.jsonl"
    append_grade(GRADE, history)
    for key, value in {**fake.env(), **env}.items():
        monkeypatch.setenv(key, value)
    return main(["export", "langfuse", "--history", str(history)])


def test_a_server_echoing_the_keys_as_sent_never_shows_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK sends the keys as a Basic authorization (base64 of public:secret).
    with FakeLangfuse(echo_auth=True) as fake:
        wrong = {"LANGFUSE_SECRET_KEY": "sk-wrong-secret"}
        assert cli_export(fake, tmp_path, monkeypatch, **wrong) == 1
    err = capsys.readouterr().err
    sent = base64.b64encode(b"pk-test:sk-wrong-secret").decode()
    assert "Unauthorized: Basic ***" in err and sent not in err and "wrong" not in err


def test_a_server_that_never_runs_out_of_pages_ends_the_export_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeLangfuse(endless_pages=True) as fake:
        assert cli_export(fake, tmp_path, monkeypatch) == 1
        listed = [r for r in fake.requests if r.path == "/api/public/score-configs"]
    [line] = capsys.readouterr().err.splitlines()
    assert line.endswith("the server lists more than 100 pages of score configs")
    assert len(listed) == 100


SUITE = """
def test_agent(graded_session):
    graded_session.record("session", "list", gateway="cleo_query")
    graded_session.record("tasks", "find", gateway="cleo_query")
"""


def test_the_plugin_exports_at_the_end_of_the_run(
    fake: FakeLangfuse, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--cleo-grade-export=langfuse")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["cleo-grade: langfuse: 7 scores for 1 session sent to *"])
    # The default rubric is named too, as with any other rubric (its configs say cleo_*).
    assert {tuple(sorted(s["metadata"].items())) for s in fake.scores()} == {
        (
            ("rubric", "cleo"),
            ("testId", "test_the_plugin_exports_at_the_end_of_the_run.py::test_agent"),
        )
    }


def test_the_plugin_without_keys_is_a_quiet_no_op(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANGFUSE_PUBLIC_KEY", raising=False)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--cleo-grade-export=langfuse")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["cleo-grade: langfuse export skipped: LANGFUSE_PUBLIC_KEY*"])


def test_a_langfuse_refusing_the_scores_never_fails_the_run(
    fake: FakeLangfuse, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.refuse_scores = True
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--cleo-grade-export=langfuse", "-W", "error")
    assert result.ret == 0
    result.stdout.fnmatch_lines([f"*cleo-grade: langfuse export to {fake.base_url} failed: *"])
    assert len(fake.configs) == 7  # the configs were made; the scores' request was refused


def test_a_host_written_with_its_credentials_is_shown_without_them() -> None:
    from pytest_cleo_grade.reports.langfuse import ExportSummary

    line = ExportSummary(scores_sent=7).line(1, "http://user:hunter2@127.0.0.1:18765")
    assert "hunter2" not in line and "user" not in line
    assert "sent to http://***@127.0.0.1:18765 " in line


def test_a_failure_names_the_host_without_credentials_and_masks_what_the_sdk_echoes() -> None:
    from pytest_cleo_grade.reports.langfuse import failure_line

    error = ConnectionError("cannot reach http://user:hunter2@h:1/api with key sk-secret\nretry")
    line = failure_line(error, "http://user:hunter2@h:1", "sk-secret")
    assert line == (
        "langfuse export to http://***@h:1 failed: ConnectionError: "
        "cannot reach http://***@h:1/api with key *** retry"
    )


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_two_rule_files_keep_their_own_ranges(
    fake: FakeLangfuse,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both grades are the `rules` rubric's: the support rule file out of 50, CLEO's rules out
    # of 100. The one exported first made `rules_total` 0..50; the other's total needs its own.
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    support, cleo = tmp_path / "support.jsonl", tmp_path / "cleo.jsonl"
    rules = ["--rubric", "rules", "--no-save"]
    sessions = EXAMPLES / "sessions"
    rule_file = str(EXAMPLES / "rubrics" / "support-rules.toml")
    for entries, history, more in [
        ("support-session.jsonl", support, ["--rubric-file", rule_file]),
        ("agent-session.jsonl", cleo, []),
    ]:
        main(["grade", "--entries", str(sessions / entries), *rules[:2], *more, "--json"])
        append_grade(GradeResult.model_validate_json(capsys.readouterr().out), history)
    assert main(["export", "langfuse", "--history", str(support)]) == 0
    assert main(["export", "langfuse", "--history", str(cleo)]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines()[1].endswith(
        "7 scores for 1 session sent to " + fake.base_url + " (6 score configs created, 1 existed)"
    )
    assert out.err == ""  # nothing refused
    configs = {c["name"]: c for c in fake.configs}
    assert len(configs) == len(fake.configs)  # no name made twice
    assert (configs["rules_total"]["maxValue"], configs["rules_total (0-100)"]["maxValue"]) == (
        50.0,
        100.0,
    )
    assert "rules_grade (" not in str(list(configs))  # the same letters: one config
    assert len(fake.stored) == 4 + 7
    # Each export again finds its own configs, and replaces its scores.
    assert main(["export", "langfuse", "--history", str(support)]) == 0
    assert main(["export", "langfuse", "--history", str(cleo)]) == 0
    again = capsys.readouterr().out.splitlines()
    assert again[0].endswith("(0 score configs created, 4 existed)")
    assert again[1].endswith("(0 score configs created, 7 existed)")
    assert len(fake.configs) == 10 and len(fake.stored) == 11


def test_a_dimension_of_another_range_gets_its_own_config(fake: FakeLangfuse) -> None:
    send(fake, GRADE)  # CLEO: taskHygiene 0..20
    dimensions = {**GRADE.dimensions, "taskHygiene": DimensionScore(score=25, max=30)}
    wider = GRADE.model_copy(update={"session_id": "s2", "dimensions": dimensions})
    assert send(fake, wider).endswith("(1 score configs created, 6 existed)")
    made = fake.configs[-1]
    assert (made["name"], made["minValue"], made["maxValue"]) == ("taskHygiene (0-30)", 0.0, 30.0)
    assert {s["name"]: s["value"] for s in fake.stored.values() if s["sessionId"] == "s2"}[
        "taskHygiene (0-30)"
    ] == 25.0


def test_long_names_sharing_their_start_stay_two_scores(fake: FakeLangfuse) -> None:
    start = "a_dimension_name_longer_than_langfuse_allows_"
    dimensions = {
        f"{start}first": DimensionScore(score=1, max=10),
        f"{start}second": DimensionScore(score=2, max=10),
    }
    graded = GRADE.model_copy(update={"dimensions": dimensions})
    names = [score.config.name for score in plan(graded)][:2]
    assert len(set(names)) == 2 and all(len(name) <= 35 for name in names)
    assert send(fake, graded).startswith("langfuse: 4 scores for 1 session")
    values = {s["name"]: s["value"] for s in fake.stored.values()}
    assert [values[name] for name in names] == [1.0, 2.0]  # neither overwrote the other


def test_rejected_scores_say_why_in_one_safe_line_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Langfuse refuses each of the grade's seven scores (a project's quota, say). (A grade
    # whose dimensions score above their maximum never gets this far: the history skips it.)
    names = [score.config.candidate_names()[0] for score in plan(GRADE)]
    history = tmp_path / "GRADES.jsonl"
    append_grade(GRADE, history)
    refuse = dict.fromkeys(names, "over the project's score quota")
    with FakeLangfuse(detail=" \x1b[2J\nforged line", refuse=refuse) as fake:
        for key, value in fake.env().items():
            monkeypatch.setenv(key, value)
        assert main(["export", "langfuse", "--history", str(history)]) == 1
    out, err = capsys.readouterr()
    assert ", 7 rejected (" in out
    # One stderr line each, without Python's "file:line: Category:" and source line.
    warned = err.splitlines()
    assert len(warned) == 6  # the first five reasons, then the rest counted
    assert warned[0] == (
        f"cleo-grade: warning: langfuse rejected a score: score '{names[0]}': over the "
        "project's score quota \\x1b[2J forged line"
    )
    assert warned[5] == "cleo-grade: warning: langfuse rejected 2 more scores"
    assert "\x1b" not in err


def test_an_archived_config_is_not_reused(fake: FakeLangfuse) -> None:
    fake.configs.append(
        {
            "id": "old",
            "name": "cleo_total",
            "dataType": "NUMERIC",
            "minValue": 0.0,
            "maxValue": 100.0,
            "createdAt": "2026-11-24T00:00:00.000Z",
            "updatedAt": "2026-11-24T00:00:00.000Z",
            "projectId": "project-1",
            "isArchived": True,
        }
    )
    assert send(fake, GRADE).endswith("(7 score configs created, 0 existed)")
    assert "cleo_total (0-100)" in {c["name"] for c in fake.configs}
    assert len(fake.stored) == 7


def test_in_pytest_a_rejected_score_is_a_warning_that_never_fails_the_run(
    fake: FakeLangfuse, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.refuse = {"cleo_total": "over the project's score quota \x1b[31m"}
    for key, value in fake.env().items():
        monkeypatch.setenv(key, value)
    pytester.makepyfile(SUITE)
    result = pytester.runpytest("--cleo-grade-export=langfuse", "-W", "error")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["cleo-grade: langfuse: 6 scores for 1 session sent to *, 1 rejected (*"]
    )
    result.stdout.fnmatch_lines(
        [
            "*CleoGradeWarning: cleo-grade: langfuse rejected a score: score 'cleo_total': "
            "over the project's score quota \\x1b[31m"
        ]
    )
    assert "\x1b" not in result.stdout.str()


class Trickle:
    """Headers promising a long body, then a byte every 200 ms for 20 s (a stalled upstream
    behind a proxy): every byte resets a per-read timeout. ``ended``: it got to the end, its
    client still reading."""

    def __init__(self) -> None:
        self.ended = threading.Event()

    def __call__(self, handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        for _ in range(100):  # until the client hangs up
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.2)  # sleep-ok: plays a server trickling its answer
        self.ended.set()


def test_a_server_trickling_its_answer_stops_the_export_at_its_deadline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    history = tmp_path / "GRADES.jsonl"
    append_grade(GRADE, history)
    trickle = Trickle()
    with ScriptedServer(trickle) as server:
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", "pk-test")
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-test")
        monkeypatch.setenv("LANGFUSE_HOST", server.base_url)
        argv = ["export", "langfuse", "--history", str(history), "--deadline", "1"]
        assert main(argv) == 1
        assert not trickle.ended.is_set()  # it stopped while the server still trickled
    assert capsys.readouterr().err == (
        f"cleo-grade: langfuse export to {server.base_url} stopped at its 1 s deadline: "
        "0 of 7 scores sent (0 score configs created), the rest not sent (the server "
        "answered too slowly)\n"
    )


def test_a_long_retry_after_stops_the_export_at_its_deadline_having_sent_nothing_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Listing the configs is answered 429, retry in a minute (the SDK would wait, twice).
    # The SDK's wait before a retry lasts until the test ends it (or the minute passes):
    # once the export stopped at its deadline, the retry is due, and must never leave.
    from langfuse.api.core import http_client

    retry_due = threading.Event()
    waits: list[float] = []

    def sdk_wait(seconds: float) -> None:
        waits.append(seconds)
        retry_due.wait(seconds)

    monkeypatch.setattr(http_client, "time", SimpleNamespace(sleep=sdk_wait, time=time.time))
    busy = status(429, '{"message": "slow down"}', {"Retry-After": "60"})
    earlier = set(threading.enumerate())  # another test's export may still be reading
    with ScriptedServer(busy) as server:
        with pytest.raises(ExportDeadlineError) as raised:
            export_grades(
                [GRADE],
                public_key="pk-test",
                secret_key="sk-test",
                base_url=server.base_url,
                deadline=3.0,  # the first request leaves well within it on a loaded machine
            )
        assert waits == [60]  # stopped while the SDK waited to retry
        retry_due.set()
        started = set(threading.enumerate()) - earlier
        [export] = [t for t in started if t.name == "cleo-grade langfuse export"]
        export.join(DEADLINE)  # its retry refused, the export's thread ends
        assert not export.is_alive()
        assert len(server.seen) == 1  # the SDK's retry, after the deadline, never left
    assert raised.value.summary.scores_sent == 0
    assert "stopped at its 3 s deadline: 0 of 7 scores sent" in str(raised.value)


def test_a_refused_request_says_its_status_and_the_servers_message_not_its_headers() -> None:
    from pytest_cleo_grade.reports.langfuse import failure_line

    headers = {"Vary": "RSC, Next-Router-State-Tree", "x-vercel-id": "fra1::iad1::" + "a" * 300}
    body = '{"message": "Invalid request data", "error": ["name: too long"]}'
    with ScriptedServer(status(400, body, headers)) as server, pytest.raises(Exception) as raised:
        export_grades([GRADE], public_key="pk", secret_key="sk", base_url=server.base_url)
    line = failure_line(raised.value, server.base_url, "sk", "pk")
    assert line == (
        f"langfuse export to {server.base_url} failed: HTTP 400: Invalid request data - "
        "['name: too long']"
    )


def weighted_file_grade(tmp_path: Path, name: str) -> GradeResult:
    """A real grade of the rubric file of docs/judges.md (named ``name``): the judge says
    shipped=broken (categorical), care=0.5 (0..1), speed=4 (1..5)."""
    from pytest_cleo_grade.rubrics.protocol import RubricConfig
    from pytest_cleo_grade.rubrics.weighted.rubric import WeightedJudgeRubric
    from tests.rubrics.test_weighted_file import RUBRIC_TOML

    path = tmp_path / "release.toml"
    path.write_text(RUBRIC_TOML.replace('name = "release-review"', f'name = "{name}"'))
    reply = (
        '{"shipped": {"score": "broken", "evidence": ["tag only"]}, '
        '"care": {"score": 0.5, "evidence": []}, "speed": {"score": 4, "evidence": []}}'
    )
    rubric = WeightedJudgeRubric().configure(RubricConfig(rubric_file=path, judge=lambda _: reply))
    return rubric.grade(sequence(("tasks", "add")), session_id="s1", now=NOW)


def shown(result: GradeResult) -> dict[str, tuple[str, object, object]]:
    return {
        s.config.name: (
            s.config.data_type,
            s.value,
            s.config.categories or (s.config.min_value, s.config.max_value),
        )
        for s in plan(result)
    }


@pytest.mark.parametrize("name", ["release-review", "weighted"])
def test_a_weighted_rubric_file_is_exported_as_the_weighted_rubric_whatever_its_name(
    tmp_path: Path, name: str
) -> None:
    from pytest_cleo_grade.reports.langfuse import DIMENSIONS_KEY

    result = weighted_file_grade(tmp_path, name)
    # The grade carries its file's dimension shapes: the design's configs, as for the
    # built-in rubric (a categorical dimension of its own, speed on its own 1..5).
    assert shown(result) == {
        "shipped": ("CATEGORICAL", "broken", (("no", 0), ("broken", 1), ("yes", 2))),
        "care": ("NUMERIC", 0.5, (0.0, 1.0)),
        "speed": ("NUMERIC", 4.0, (1.0, 5.0)),
        "overall_quality": ("NUMERIC", 0.55, (0.0, 1.0)),
    }
    # A grade written without them (an older history line): each dimension is sent as its
    # points, never dropped and never outside its config (speed 4 on 0..1).
    older = result.model_copy(update={DIMENSIONS_KEY: None})
    assert shown(older) == {
        "shipped": ("NUMERIC", 25.0, (0.0, 50.0)),
        "care": ("NUMERIC", 15.0, (0.0, 30.0)),
        "speed": ("NUMERIC", 15.0, (0.0, 20.0)),
        "overall_quality": ("NUMERIC", 0.55, (0.0, 1.0)),
    }


def test_a_weighted_grade_carrying_its_dimensions_shapes_gets_the_designs_configs(
    tmp_path: Path,
) -> None:
    from pytest_cleo_grade.reports.langfuse import DIMENSIONS_KEY

    shapes = {
        "shipped": {"type": "categorical", "categories": {"no": 0, "broken": 1, "yes": 2}},
        "care": {"type": "numeric", "min": 0, "max": 1},
        "speed": {"type": "numeric", "min": 1, "max": 5},
    }
    result = weighted_file_grade(tmp_path, "release-review")
    result = result.model_copy(update={DIMENSIONS_KEY: shapes})
    assert shown(result) == {
        "shipped": ("CATEGORICAL", "broken", (("no", 0), ("broken", 1), ("yes", 2))),
        "care": ("NUMERIC", 0.5, (0.0, 1.0)),
        "speed": ("NUMERIC", 4.0, (1.0, 5.0)),
        "overall_quality": ("NUMERIC", 0.55, (0.0, 1.0)),
    }
    # Shapes are input (a history line): one that makes no sense is ignored.
    broken = {
        "shipped": {"type": "categorical", "categories": []},
        "speed": {"type": "numeric"},
        "care": {"type": "numeric", "min": 10**400, "max": 1},  # no float holds it
    }
    result = result.model_copy(update={DIMENSIONS_KEY: broken})
    assert shown(result)["shipped"] == ("NUMERIC", 25.0, (0.0, 50.0))
    assert shown(result)["speed"] == ("NUMERIC", 15.0, (0.0, 20.0))
    assert shown(result)["care"] == ("NUMERIC", 15.0, (0.0, 30.0))


def huge_reply(*, declared: bool, gzipped: bool = False) -> Any:
    """A 200 answer of 6 MiB of JSON whitespace (or its few KB gzip'd), with or without a
    Content-Length: a server (or a proxy) that never stops talking."""

    def answer(handler: BaseHTTPRequestHandler) -> None:
        body = b"{" + b" " * (6 * 1024 * 1024) + b"}"
        if gzipped:
            body = gzip.compress(body)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if gzipped:
            handler.send_header("Content-Encoding", "gzip")
        if declared:
            handler.send_header("Content-Length", str(len(body)))
        else:
            handler.send_header("Connection", "close")
        handler.end_headers()
        with contextlib.suppress(OSError):  # the client hangs up at its cap
            handler.wfile.write(body)

    return answer


@pytest.mark.parametrize(
    ("declared", "gzipped"),
    [(True, False), (False, False), (True, True)],
    ids=["content-length", "until-close", "gzip"],
)
def test_a_reply_over_the_size_cap_is_never_read_whole(declared: bool, gzipped: bool) -> None:
    from pytest_cleo_grade.reports.langfuse import MAX_REPLY_BYTES, failure_line

    with (
        ScriptedServer(huge_reply(declared=declared, gzipped=gzipped)) as server,
        pytest.raises(Exception) as raised,
    ):
        export_grades([GRADE], public_key="pk", secret_key="sk", base_url=server.base_url)
    line = failure_line(raised.value, server.base_url, "sk", "pk")
    assert f"ReplyTooLarge: the reply is over {MAX_REPLY_BYTES} bytes" in line
