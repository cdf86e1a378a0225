"""Rubrics in pytest: --cleo-grade-rubric and the judge options, against a local fake judge."""

from __future__ import annotations

import json
import sqlite3
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.fake_judge import FakeJudgeServer, Reply, Status, serve, verdict_json
from tests.plugin_suites import REPLAY, make_suite

#: One test the fake judge scores 67.17/100 (its default reply), with a docstring as its task.
ONE_TEST = '''
def test_agent(graded_session):
    """Find the release notes and summarise them."""
    perfect(graded_session)
'''

#: A conftest rubric: 10 points per recorded entry, at most 100.
STEPS_RUBRIC = """
from pytest_cleo_grade.core.models import DimensionScore, GradeResult


class Steps:
    name = "steps"
    version = "0.1"
    dimensions = {"steps": 100}

    def grade(self, entries, *, session_id, now=None, context=None):
        count = len(list(entries))
        score = min(100, 10 * count)
        return GradeResult(
            sessionId=session_id,
            totalScore=score,
            maxScore=100,
            dimensions={"steps": DimensionScore(score=score, max=100)},
            flags=[],
            timestamp="2026-01-01T00:00:00Z",
            entryCount=count,
        )


def cleo_grade_register_rubrics(register):
    register(Steps())
"""


@pytest.fixture
def judge() -> Iterator[FakeJudgeServer]:
    yield from serve()


def judge_args(judge: FakeJudgeServer) -> list[str]:
    return [f"--cleo-grade-judge-url={judge.base_url}", "--cleo-grade-judge-model=fake-judge"]


def junit_properties(path: Path) -> dict[str, list[tuple[str, str]]]:
    return {
        case.attrib["name"]: [(p.attrib["name"], p.attrib["value"]) for p in case.iter("property")]
        for case in ET.parse(path).getroot().iter("testcase")
    }


def test_the_weighted_rubric_grades_a_test_through_the_judge_endpoint(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    make_suite(pytester, ONE_TEST)
    result = pytester.runpytest(
        "--cleo-grade-rubric=weighted", *judge_args(judge), "--junitxml=out.xml"
    )
    result.assert_outcomes(passed=1)
    assert judge.count == 1
    assert judge.received[0].body["model"] == "fake-judge"
    props = dict(junit_properties(pytester.path / "out.xml")["test_agent"])
    assert props["cleo_rubric"] == "weighted"
    assert props["cleo_score"] == "67.17/100"
    assert props["cleo_grade"] == "C"
    assert props["cleo_dim_goal_achievement"] == "20/30"
    assert props["cleo_dim_context_efficiency"] == "7.5/15"
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_agent  67.17/100      67%  C  *",
            "judge usage: 120 tokens (100 prompt + 20 completion) in 1 request, "
            "0 cached replies, over 1 judged grade",
        ]
    )


def test_the_task_given_to_the_judge_is_the_docstring_or_the_marker_task(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    make_suite(
        pytester,
        ONE_TEST
        + """
@pytest.mark.cleo_grade(task="Book a meeting room for Friday.")
def test_marked(graded_session):
    \"\"\"This docstring loses to the marker.\"\"\"
    perfect(graded_session)
""",
    )
    pytester.runpytest("--cleo-grade-rubric=weighted", *judge_args(judge))
    prompts = sorted(received.prompt for received in judge.received)
    assert any("Find the release notes and summarise them." in p for p in prompts)
    marked = [p for p in prompts if "Book a meeting room for Friday." in p]
    assert len(marked) == 1
    assert "This docstring loses to the marker." not in marked[0]


def test_a_weighted_grade_below_the_threshold_fails_the_test_like_a_cleo_grade(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    make_suite(pytester, ONE_TEST)
    result = pytester.runpytest(
        "--cleo-grade-rubric=weighted", *judge_args(judge), "--cleo-grade-fail-under=B"
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: 67.17/100 (67%, grade C) is below the threshold 75% (B) "
            "set by --cleo-grade-fail-under",
            "  goal_achievement     20/30",
            # A judge's partial scores are where its points were lost; a full one is not.
            "where points were lost (entry #: position in the session):",
            "   +20 goal_achievement goal_achievement.judge: The judge scored goal_achievement "
            "20 of 30: goal_achievement observed",
            "  +6.67 error_handling error_handling.judge: *6.67 of 10*",
            "----* cleo-grade *----",
        ]
    )
    assert "output_quality.judge" not in result.stdout.str()


def test_the_run_gate_averages_weighted_grades_and_sets_exit_status_one(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    make_suite(pytester, ONE_TEST)
    result = pytester.runpytest(
        "--cleo-grade-rubric=weighted", *judge_args(judge), "--cleo-grade-gate=70"
    )
    assert result.ret == 1
    result.stdout.fnmatch_lines(["gate FAILED: mean 67.17% is below 70% (C)"])


def test_the_ini_file_configures_the_rubric_and_the_judge(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    make_suite(
        pytester,
        ONE_TEST,
        ini=f"""
        cleo_grade_rubric = weighted
        cleo_grade_judge_url = {judge.base_url}
        cleo_grade_judge_model = ini-model
        cleo_grade_judge_cache = off
        """,
    )
    pytester.runpytest("--junitxml=out.xml").assert_outcomes(passed=1)
    pytester.runpytest("--junitxml=out.xml").assert_outcomes(passed=1)
    assert [r.body["model"] for r in judge.received] == ["ini-model", "ini-model"]
    assert ("cleo_rubric", "weighted") in junit_properties(pytester.path / "out.xml")["test_agent"]


@pytest.mark.parametrize(
    ("ini_rubric", "args", "marker", "expected"),
    [
        pytest.param("weighted", ["--cleo-grade-rubric=cleo"], "", "cleo", id="cli-beats-ini"),
        pytest.param(
            "", ["--cleo-grade-rubric=cleo"], "rubric='weighted'", "weighted", id="marker-beats-cli"
        ),
        pytest.param("weighted", [], "rubric='cleo'", "cleo", id="marker-beats-ini"),
        pytest.param("weighted", [], "", "weighted", id="ini-alone"),
    ],
)
def test_the_rubric_is_chosen_by_marker_then_command_line_then_ini(
    pytester: pytest.Pytester,
    judge: FakeJudgeServer,
    ini_rubric: str,
    args: list[str],
    marker: str,
    expected: str,
) -> None:
    decorator = f"@pytest.mark.cleo_grade({marker})\n" if marker else ""
    make_suite(
        pytester,
        decorator + "def test_agent(graded_session):\n    perfect(graded_session)\n",
        ini=f"cleo_grade_rubric = {ini_rubric}\n" if ini_rubric else "",
    )
    pytester.runpytest(*args, *judge_args(judge), "--junitxml=out.xml").assert_outcomes(passed=1)
    props = dict(junit_properties(pytester.path / "out.xml")["test_agent"])
    # A CLEO grade stays exactly seed 000's: no rubric property, no judge asked.
    assert props.get("cleo_rubric", "cleo") == expected
    assert judge.count == (1 if expected == "weighted" else 0)


@pytest.mark.parametrize(
    ("args", "ini", "marker", "message"),
    [
        pytest.param(
            ["--cleo-grade-rubric=wieghted"],
            "",
            "",
            "ERROR: cleo-grade: --cleo-grade-rubric: unknown rubric 'wieghted'; "
            "available rubrics: cleo, comparison, rules, trajectory, weighted",
            id="cli-rubric",
        ),
        pytest.param(
            [],
            "cleo_grade_rubric = nope",
            "",
            "ERROR: cleo-grade: ini cleo_grade_rubric: unknown rubric 'nope'; "
            "available rubrics: cleo, comparison, rules, trajectory, weighted",
            id="ini-rubric",
        ),
        pytest.param(
            [],
            "",
            "rubric='nope'",
            "ERROR: cleo-grade: test_agent.py::test_agent: @pytest.mark.cleo_grade(rubric=...): "
            "unknown rubric 'nope'; available rubrics: "
            "cleo, comparison, rules, trajectory, weighted",
            id="marker-rubric",
        ),
        pytest.param(
            [],
            "",
            "rubric=3",
            "ERROR: cleo-grade: test_agent.py::test_agent: @pytest.mark.cleo_grade(rubric=...): "
            "invalid rubric 3: expected a non-empty string",
            id="marker-rubric-type",
        ),
        pytest.param(
            [],
            "",
            "task=''",
            "ERROR: cleo-grade: test_agent.py::test_agent: @pytest.mark.cleo_grade(task=...): "
            "invalid task '': expected a non-empty string",
            id="marker-task",
        ),
        pytest.param(
            ["--cleo-grade-judge-cache=sometimes"],
            "",
            "",
            "*argument --cleo-grade-judge-cache: invalid judge cache mode 'sometimes': "
            "expected one of on, off, refresh",
            id="cli-cache",
        ),
        pytest.param(
            [],
            "cleo_grade_judge_cache = yes",
            "",
            "ERROR: cleo-grade: ini option cleo_grade_judge_cache: invalid judge cache mode "
            "'yes': expected one of on, off, refresh",
            id="ini-cache",
        ),
        pytest.param(
            ["--cleo-grade-judge-url=localhost:8000"],
            "",
            "",
            "*argument --cleo-grade-judge-url: invalid judge URL 'localhost:8000': expected "
            "an http:// or https:// URL such as http://127.0.0.1:8000",
            id="cli-judge-url",
        ),
        # urlsplit's ValueError reached argparse: "invalid _url_arg value".
        pytest.param(
            ["--cleo-grade-judge-url=http://[::1"],
            "",
            "",
            "*argument --cleo-grade-judge-url: invalid judge URL 'http://[[]::1': expected *",
            id="cli-judge-url-unclosed-ipv6",
        ),
        # Accepted here, it failed every judged test naming judge.base_url, not the option.
        pytest.param(
            [],
            "cleo_grade_judge_url = http://127.0.0.1:99999",
            "",
            "ERROR: cleo-grade: ini option cleo_grade_judge_url: invalid judge URL "
            "'http://127.0.0.1:99999': expected *",
            id="ini-judge-url-port",
        ),
        pytest.param(
            [],
            "cleo_grade_judge_url = ftp://judge.example",
            "",
            "ERROR: cleo-grade: ini option cleo_grade_judge_url: invalid judge URL "
            "'ftp://judge.example': expected an http:// or https:// URL such as "
            "http://127.0.0.1:8000",
            id="ini-judge-url",
        ),
        pytest.param(
            ["--cleo-grade-rubric= "],
            "",
            "",
            "*argument --cleo-grade-rubric: --cleo-grade-rubric must not be empty",
            id="cli-empty-rubric",
        ),
    ],
)
def test_bad_rubric_settings_are_usage_errors_naming_the_option_and_the_choices(
    pytester: pytest.Pytester, args: list[str], ini: str, marker: str, message: str
) -> None:
    decorator = f"@pytest.mark.cleo_grade({marker})\n" if marker else ""
    make_suite(
        pytester,
        decorator + "def test_agent(graded_session):\n    perfect(graded_session)\n",
        ini=ini,
    )
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def cached_replies(db: Path) -> int:
    with closing(sqlite3.connect(db)) as connection:
        (count,) = connection.execute("SELECT count(*) FROM judge_cache").fetchone()
    return int(count)


def test_judge_replies_are_cached_in_the_audit_store_unless_the_cache_is_off(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    # Each run is a new session, but the cache key ignores the session id and keys on times
    # relative to the session's start: re-running the unchanged suite asks the judge nothing.
    make_suite(pytester, REPLAY + "\ndef test_agent(graded_session):\n    replay(graded_session)\n")
    base = ["--cleo-grade-rubric=weighted", *judge_args(judge), "--cleo-grade-db=store.db"]
    pytester.runpytest(*base).assert_outcomes(passed=1)
    assert cached_replies(pytester.path / "store.db") == 1
    pytester.runpytest(*base, "--cleo-grade-judge-cache=off").assert_outcomes(passed=1)
    assert cached_replies(pytester.path / "store.db") == 1
    assert judge.count == 2
    pytester.runpytest(*base, "--cleo-grade-judge-cache=refresh").assert_outcomes(passed=1)
    assert cached_replies(pytester.path / "store.db") == 1  # the same key, replaced
    assert judge.count == 3
    pytester.runpytest(*base).assert_outcomes(passed=1)
    assert judge.count == 3


def test_a_broken_judge_cache_changes_no_outcome_when_warnings_are_errors(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    # The audit store works; its judge_cache table is not the one the cache expects.
    with closing(sqlite3.connect(pytester.path / "store.db")) as db, db:
        db.execute("CREATE TABLE judge_cache (key TEXT)")
    make_suite(pytester, ONE_TEST, warnings="error")
    result = pytester.runpytest(
        "--cleo-grade-rubric=weighted", *judge_args(judge), "--cleo-grade-db=store.db"
    )
    result.assert_outcomes(passed=1, warnings=2)
    result.stdout.fnmatch_lines(
        ["*CleoGradeWarning*judge cache not read*", "*CleoGradeWarning*judge reply not cached*"]
    )
    assert judge.count == 1


def test_a_rubric_file_configures_the_judge_and_the_command_line_overrides_its_model(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    rubric = pytester.path / "rubric.toml"
    rubric.write_text(
        textwrap.dedent(
            f"""
            name = "release-review"
            version = "2.1.0"

            [judge]
            base_url = "{judge.base_url}"
            model = "file-model"

            [[dimensions]]
            name = "shipped"
            type = "categorical"
            weight = 0.5
            categories = [{{ label = "no", value = 0 }}, {{ label = "yes", value = 1 }}]

            [[dimensions]]
            name = "care"
            type = "numeric"
            weight = 0.5
            """
        )
    )
    reply = {
        "shipped": {"score": "yes", "evidence": ["tag pushed"], "rationale": "published"},
        "care": {"score": 0.5, "evidence": ["some checks"], "rationale": "half"},
    }
    judge.default = Reply(json.dumps(reply))
    make_suite(pytester, ONE_TEST)
    pytester.runpytest(
        "--cleo-grade-rubric=weighted",
        "--cleo-grade-rubric-file=rubric.toml",
        "--junitxml=out.xml",
    ).assert_outcomes(passed=1)
    props = dict(junit_properties(pytester.path / "out.xml")["test_agent"])
    assert props["cleo_rubric"] == "release-review"
    assert props["cleo_score"] == "75/100"
    assert props["cleo_dim_care"] == "25/50"
    pytester.runpytest(
        "--cleo-grade-rubric=weighted",
        "--cleo-grade-rubric-file=rubric.toml",
        "--cleo-grade-judge-model=cli-model",
    ).assert_outcomes(passed=1)
    assert [r.body["model"] for r in judge.received] == ["file-model", "cli-model"]
    # The ini twin, its path relative to the ini file (here in a subdirectory).
    (pytester.path / "ci").mkdir()
    rubric.rename(pytester.path / "ci" / "rubric.toml")
    (pytester.path / "ci" / "pytest.ini").write_text(
        "[pytest]\nfilterwarnings = default\n"
        "cleo_grade_rubric = weighted\ncleo_grade_rubric_file = rubric.toml\n"
    )
    # refresh: the first run's reply for this very prompt is cached, and the judge must be asked.
    pytester.runpytest(
        "-c", "ci/pytest.ini", "--rootdir=.", "--cleo-grade-judge-cache=refresh"
    ).assert_outcomes(passed=1)
    assert judge.received[-1].body["model"] == "file-model"
    assert judge.count == 3


def test_a_rubric_defined_in_a_conftest_grades_tests_by_name(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(STEPS_RUBRIC)
    make_suite(pytester, "def test_agent(graded_session):\n    seventy_five(graded_session)\n")
    result = pytester.runpytest("--cleo-grade-rubric=steps", "--junitxml=out.xml")
    result.assert_outcomes(passed=1)
    props = dict(junit_properties(pytester.path / "out.xml")["test_agent"])
    assert (props["cleo_rubric"], props["cleo_score"]) == ("steps", "20/100")
    listed = pytester.runpytest("--cleo-grade-rubric=stpes")
    listed.stderr.fnmatch_lines(
        [
            "*unknown rubric 'stpes'; available rubrics: "
            "cleo, comparison, rules, steps, trajectory, weighted"
        ]
    )


def test_a_rubric_from_a_conftest_loaded_during_collection_is_known_to_the_marker(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, "")
    sub = pytester.mkpydir("agents_sub")
    (sub / "conftest.py").write_text(STEPS_RUBRIC)
    (sub / "test_sub.py").write_text(
        "import pytest\nfrom suite_agents import perfect\n\n"
        "@pytest.mark.cleo_grade(rubric='steps', fail_under=60)\n"
        "def test_sub(graded_session):\n    perfect(graded_session)\n"
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cleo-grade: 50/100 (50%, grade D) is below the threshold 60%*"])


def test_a_judge_failure_fails_only_its_test_with_the_endpoint_error(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    judge.push(Status(400, '{"error": {"message": "model not found"}}'))
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(rubric="weighted")
        def test_judged(graded_session):
            perfect(graded_session)

        def test_cleo(graded_session):
            perfect(graded_session)
        """,
    )
    result = pytester.runpytest(*judge_args(judge))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: test_agent.py::test_judged: cannot grade with rubric weighted: judge "
            "POST http://127.0.0.1:*/v1/chat/completions: HTTP 400 Bad Request: *model not found*",
        ]
    )
    assert "ERROR" not in result.stdout.str()


def test_a_judge_outage_is_could_not_be_graded_in_every_output_not_a_worse_agent(
    pytester: pytest.Pytester, judge: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The judge answers 503 to every request (its retries included): the test is not an
    # agent that got worse, and every output says it could not be graded, with the reason.
    # The rubric file retries twice, as the built-in judge settings do, without their waits.
    for _ in range(20):
        judge.push(Status(503, '{"error": {"message": "overloaded"}}'))
    (pytester.path / "rubric.toml").write_text(
        textwrap.dedent(
            """
            name = "weighted"
            version = "1.0.0"

            [judge]
            retries = 2
            backoff = 0

            [[dimensions]]
            name = "care"
            type = "numeric"
            weight = 1.0
            """
        )
    )
    make_suite(
        pytester,
        """
        @pytest.mark.cleo_grade(rubric="weighted")
        def test_judged(graded_session):
            perfect(graded_session)

        @pytest.mark.cleo_grade(rubric="cleo")  # the rubric file alone selects weighted
        def test_cleo(graded_session):
            perfect(graded_session)
        """,
    )
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest(
        *judge_args(judge),
        "--cleo-grade-rubric-file=rubric.toml",
        "--junitxml=out.xml",
        "--cleo-grade-html=r.html",
        "--cleo-grade-gate=C",
    )
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == 1
    assert judge.count == 3  # the request and its two retries
    result.stdout.fnmatch_lines(
        [
            "test_agent.py::test_judged  *ungradable  not graded",
            "could not be graded: test_agent.py::test_judged: cannot grade with rubric weighted: "
            "judge *503*",
            "*(1 could not be graded)",
            "gate FAILED: 1 test could not be graded (mean 100%)",
        ]
    )
    cases = {c.get("name"): c for c in ET.parse(pytester.path / "out.xml").iter("testcase")}
    props = {p.get("name"): p.get("value") for p in cases["test_judged"].iter("property")}
    assert props["cleo_status"] == "ungradable"
    assert "503" in str(props["cleo_reason"])
    history = (pytester.path / ".cleo" / "metrics" / "GRADES.jsonl").read_text().splitlines()
    statuses = sorted(json.loads(line)["cleoStatus"] for line in history)
    assert statuses == ["passed", "ungradable"]
    assert "| ungradable | not graded |" in summary.read_text()
    assert "ungradable" in (pytester.path / "r.html").read_text()


def test_an_invalid_judge_reply_fails_the_test_showing_the_raw_reply(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    # Its escapes (clear the screen, set the window title) and line breaks are shown, not
    # obeyed; each of its lines is marked as the reply's (not read as pytest's own).
    judge.default = Reply("I would rather not say.\x1b[2J\x1b]0;PWNED\x07\r\nFAKE: PASSED")
    make_suite(pytester, ONE_TEST)
    result = pytester.runpytest("--cleo-grade-rubric=weighted", *judge_args(judge))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*cannot grade with rubric weighted: judge reply for session * is invalid after "
            "one re-ask*",
            "judge's last reply (first 500 characters):",
            "  | I would rather not say.\\x1b[2J\\x1b]0;PWNED\\x07\\r",
            "  | FAKE: PASSED",
        ]
    )
    assert "\x1b" not in result.stdout.str() and "\x07" not in result.stdout.str()
    assert judge.count == 2


def test_a_judge_failure_in_a_test_that_failed_on_its_own_is_shown_beside_its_failure(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    judge.default = Status(404)
    make_suite(
        pytester,
        """
        def test_agent(graded_session):
            perfect(graded_session)
            assert 1 == 2
        """,
    )
    result = pytester.runpytest("--cleo-grade-rubric=weighted", *judge_args(judge))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*assert 1 == 2", "*- CLEO grade -*", "cleo-grade: *cannot grade with rubric weighted*"]
    )


def test_a_missing_judge_endpoint_fails_the_test_saying_what_to_set(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, ONE_TEST)
    result = pytester.runpytest("--cleo-grade-rubric=weighted")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*cannot grade with rubric weighted: judge.base_url is not set*"])


def test_the_github_step_summary_sums_the_judge_usage(
    pytester: pytest.Pytester, judge: FakeJudgeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    judge.default = Reply(verdict_json(), prompt_tokens=1000, completion_tokens=50)
    make_suite(
        pytester,
        """
        @pytest.mark.parametrize("n", range(3))
        def test_agent(graded_session, n):
            perfect(graded_session)
            # Three different sessions: identical ones would share one cached reply.
            graded_session.record("tasks", "show", {"taskId": f"T{n}"}, gateway="cleo_query")
        """,
    )
    result = pytester.runpytest("--cleo-grade-rubric=weighted", *judge_args(judge), "-q")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["cleo-grade: run grade C: *; judge usage: 3150 tokens (3000 prompt + 150 completion)*"]
    )
    assert (
        "Judge usage: 3150 tokens (3000 prompt + 150 completion) in 3 requests, "
        "0 cached replies, over 3 judged grades"
    ) in summary.read_text()


@pytest.mark.e2e  # two xdist workers; the controller runs in this process
def test_a_two_worker_run_grades_with_a_conftest_rubric_and_the_judge_on_the_workers(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    pytester.makeconftest(STEPS_RUBRIC)
    make_suite(
        pytester,
        """
        @pytest.mark.parametrize("n", range(4))
        @pytest.mark.cleo_grade(rubric="steps")
        def test_steps(graded_session, n):
            perfect(graded_session)

        @pytest.mark.parametrize("n", range(2))
        @pytest.mark.cleo_grade(rubric="weighted")
        def test_judged(graded_session, n):
            perfect(graded_session)
            graded_session.record("tasks", "show", {"taskId": f"T{n}"}, gateway="cleo_query")
        """,
    )
    result = pytester.runpytest("-n", "2", *judge_args(judge), "--junitxml=out.xml")
    result.assert_outcomes(passed=6)
    props = junit_properties(pytester.path / "out.xml")
    assert {dict(p)["cleo_score"] for name, p in props.items() if "steps" in name} == {"50/100"}
    assert {dict(p)["cleo_rubric"] for name, p in props.items() if "judged" in name} == {"weighted"}
    result.stdout.fnmatch_lines(["judge usage: 240 tokens * in 2 requests, *over 2 judged grades"])


def test_grade_inside_a_test_uses_the_tests_own_rubric(pytester: pytest.Pytester) -> None:
    make_suite(pytester, "")
    pytester.makeconftest(STEPS_RUBRIC)
    pytester.makepyfile(
        test_inside="""
        from datetime import datetime, timezone

        import pytest

        @pytest.mark.cleo_grade(rubric="steps")
        def test_steps(graded_session):
            graded_session.record("tasks", "find")
            graded_session.record("tasks", "show")
            now = graded_session.grade()
            assert (now.total_score, now.model_extra["rubric"]) == (20, "steps")
            # grade(now=...) too: the test's rubric in every form, never CLEO's by default.
            at = graded_session.grade(now=datetime(2020, 1, 2, tzinfo=timezone.utc))
            assert (at.total_score, at.model_extra["rubric"]) == (20, "steps")

        def test_default(graded_session):
            graded_session.record("session", "list")
            assert list(graded_session.grade().dimensions)[0] == "sessionDiscipline"
        """
    )
    pytester.runpytest("test_inside.py").assert_outcomes(passed=2)
