"""Model comparison in pytest: variant tests, --cleo-grade-compare's decision and exit status."""

from __future__ import annotations

import json
import re
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Iterator

import pytest

from tests.fake_judge import FakeJudgeServer, Reply, serve
from tests.plugin_suites import make_suite

#: An output passing S-01 and S-03..S-06 (with the entries run_agent records) in every mode;
#: it is far under every mode's size band, so S-02 fails (a point of 36, on every test alike).
AGENT = '''
OUTPUT = """\\
## Memory
- O-7f3a2: the team chose JWT over server sessions
## Codebase
- `src/auth/login.py:42` handles the POST
## Patterns
- Repository pattern, src/repo/base.py:10
## Dispatched
None.
## Gaps
- No tests cover logout.
## Recommendation
Extend login.py first.
"""


def run_agent(session):
    session.record("memory", "find", gateway="cleo_query")
    session.record("tools", "Grep")
    return OUTPUT
'''

#: Seed 002's five queries and their modes.
QUERIES = {
    "TQ-1": "quick",
    "TQ-2": "medium",
    "TQ-3": "medium",
    "TQ-4": "thorough",
    "TQ-5": "thorough",
}
SAME = [4, 4, 4, 4, 4, 4]
#: 2 points below SAME on average: Candidate Degraded.
WORSE = [2, 2, 2, 2, 2, 2]


def suite(candidate: dict[str, list[int]], *, ini: str = "") -> str:
    """A module of 10 tests: baseline 'sonnet' scores SAME everywhere; 'haiku' scores
    ``candidate[query]`` (SAME where not given)."""
    scores = {("sonnet", q): SAME for q in QUERIES} | {
        ("haiku", q): candidate.get(q, SAME) for q in QUERIES
    }
    return (
        AGENT
        + f"QUERIES = {QUERIES!r}\nSCORES = {scores!r}\n"
        + textwrap.dedent(
            """
            CASES = [
                pytest.param(
                    variant, query,
                    marks=pytest.mark.cleo_grade(variant=variant, query=query, mode=mode),
                    id=f"{query}-{variant}",
                )
                for query, mode in QUERIES.items()
                for variant in ("sonnet", "haiku")
            ]

            @pytest.mark.parametrize(("variant", "query"), CASES)
            def test_query(graded_session, variant, query):
                output = run_agent(graded_session)
                values = SCORES[(variant, query)]
                graded_session.set_output(
                    output, scores={f"Q-0{i}": v for i, v in enumerate(values, start=1)}
                )
            """
        )
    )


def junit(path: str) -> dict[str, dict[str, str]]:
    return {
        case.attrib["name"]: {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}
        for case in ET.parse(path).getroot().iter("testcase")
    }


@pytest.fixture
def judge() -> Iterator[FakeJudgeServer]:
    yield from serve()


def test_equal_variants_are_go_and_the_verdict_table_is_in_the_terminal(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, suite({}))
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku")
    result.assert_outcomes(passed=10)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "*- cleo-grade comparison -*",
            "Comparison: haiku (candidate) vs sonnet (baseline)",
            "Query  Mode      sonnet  haiku  Diff  Verdict",
            "TQ-1   quick     4.00    4.00   0.00  Equivalent",
            "TQ-5   thorough  4.00    4.00   0.00  Equivalent",
            "Decision: GO [M3]",
            "Reason:   *",
            "Action:   Keep the candidate as the production model.",
        ]
    )


def test_a_degraded_quick_query_is_no_go_and_fails_the_run_although_every_test_passed(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, suite({"TQ-1": WORSE}))
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku")
    result.assert_outcomes(passed=10)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "TQ-1   quick     4.00    2.00   -2.00  Candidate Degraded",
            "Decision: NO-GO [M1]",
            "*",
            "*",
            "cleo-grade: NO-GO fails the run (exit status 1)",
        ]
    )


def test_a_conditional_decision_warns_but_keeps_exit_status_zero(
    pytester: pytest.Pytester,
) -> None:
    # Two Degraded, both thorough, 3/5 OK: row M6.
    make_suite(pytester, suite({"TQ-4": WORSE, "TQ-5": WORSE}))
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku")
    result.assert_outcomes(passed=10)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "Decision: CONDITIONAL [M6]",
            "*",
            "*",
            "cleo-grade: CONDITIONAL does not change the exit status (cleo-grade compare exits 3)",
        ]
    )


def test_the_conditional_note_claims_no_exit_status_when_another_test_fails(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        suite({"TQ-4": WORSE, "TQ-5": WORSE}) + "\n\ndef test_other():\n    assert 1 == 2\n",
    )
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku")
    result.assert_outcomes(passed=10, failed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["cleo-grade: CONDITIONAL does not change the exit status*"])
    assert "exit status 0" not in result.stdout.str()


def test_the_gate_follows_the_printed_decision_with_monitoring_note_passing(
    pytester: pytest.Pytester,
) -> None:
    # 1.5 below on TQ-2 (medium): Candidate Degraded once; 4/5 OK -> GO with monitoring.
    make_suite(pytester, suite({"TQ-2": [3, 3, 3, 2, 2, 2]}))
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["Decision: GO (with monitoring note) [M5]"])


def test_the_markdown_verdict_table_goes_to_the_github_step_summary(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    make_suite(pytester, suite({"TQ-1": WORSE}))
    assert pytester.runpytest("--cleo-grade-compare=sonnet:haiku").ret == 1
    text = summary.read_text()
    assert "### Model comparison: haiku vs sonnet" in text
    assert "| TQ-1 | quick | 4.00 | 2.00 | -2.00 | Candidate Degraded |" in text
    assert "**Decision: NO-GO** (M1)" in text
    assert "### cleo-grade" in text  # the usual grade summary stays


def test_comparison_tests_carry_the_comparison_junit_properties(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, suite({"TQ-3": [5, 4, 4, 4, 4, 4]}))
    pytester.runpytest("--junitxml=out.xml").assert_outcomes(passed=10)
    props = junit(str(pytester.path / "out.xml"))["test_query[TQ-3-haiku]"]
    assert props["cleo_rubric"] == "comparison"
    # S-02 fails: the suite's short output is far under the medium budget's band.
    assert props["cleo_score"] == "30/36"
    assert (props["cleo_variant"], props["cleo_query"], props["cleo_mode"]) == (
        "haiku",
        "TQ-3",
        "medium",
    )
    assert props["cleo_q_average"] == "4.17"
    assert (props["cleo_Q-01"], props["cleo_S-04"]) == ("5", "pass")


def test_the_ini_twin_sets_the_comparison(pytester: pytest.Pytester) -> None:
    make_suite(pytester, suite({"TQ-1": WORSE}), ini="cleo_grade_compare = sonnet:haiku\n")
    result = pytester.runpytest()
    assert result.ret == 1
    result.stdout.fnmatch_lines(["Decision: NO-GO [M1]"])


@pytest.mark.parametrize(
    ("args", "ini", "message"),
    [
        pytest.param(
            ["--cleo-grade-compare=sonnet"],
            "",
            "*argument --cleo-grade-compare: invalid comparison 'sonnet': expected BASE:CAND*",
            id="no-colon",
        ),
        pytest.param(
            ["--cleo-grade-compare=a:b:c"],
            "",
            "*argument --cleo-grade-compare: invalid comparison 'a:b:c': expected BASE:CAND*",
            id="two-colons",
        ),
        pytest.param(
            ["--cleo-grade-compare=:haiku"],
            "",
            "*argument --cleo-grade-compare: invalid comparison ':haiku'*",
            id="empty-base",
        ),
        pytest.param(
            [],
            "cleo_grade_compare = haiku:haiku",
            "ERROR: cleo-grade: ini option cleo_grade_compare: invalid comparison "
            "'haiku:haiku': baseline and candidate are the same variant",
            id="ini-same",
        ),
    ],
)
def test_a_bad_comparison_pair_is_a_usage_error(
    pytester: pytest.Pytester, args: list[str], ini: str, message: str
) -> None:
    make_suite(pytester, "def test_x():\n    pass\n", ini=ini)
    result = pytester.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_candidate_without_runs_fails_the_run_saying_why(pytester: pytest.Pytester) -> None:
    make_suite(pytester, suite({}))
    result = pytester.runpytest("--cleo-grade-compare=sonnet:opus")
    result.assert_outcomes(passed=10)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: opus vs sonnet: cannot compare: no scored runs of candidate variant "
            "'opus' (variants found: haiku, sonnet) (exit status 1)"
        ]
    )


def test_a_run_without_comparison_tests_says_so_and_keeps_its_exit_status(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, "def test_agent(graded_session):\n    perfect(graded_session)\n")
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: haiku vs sonnet: no comparison tests (marker variant=) were graded in "
            "this run (exit status unchanged)"
        ]
    )


def test_the_query_defaults_to_the_test_function_and_mode_report_combines_with_it(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        AGENT
        + textwrap.dedent(
            """
            @pytest.mark.cleo_grade(thoroughness="quick", mode="report", fail_under="A")
            @pytest.mark.parametrize("variant", [
                pytest.param(v, marks=pytest.mark.cleo_grade(variant=v)) for v in ("a", "b")
            ])
            def test_login_flow(graded_session, variant):
                graded_session.set_output(run_agent(graded_session), scores={
                    "Q-01": 3, "Q-02": 3, "Q-03": 3, "Q-04": 3, "Q-05": 3, "Q-06": 3,
                })
            """
        ),
    )
    result = pytester.runpytest("--cleo-grade-compare=a:b")
    # 24/36 is below A, but mode="report" only annotates.
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["test_login_flow  quick  3.00  3.00  0.00  Equivalent"])


@pytest.mark.parametrize(
    ("marker", "message"),
    [
        pytest.param(
            "variant='a'",
            "*@pytest.mark.cleo_grade: a comparison test (variant=) needs thoroughness='quick', "
            "'medium' or 'thorough' (or mode= with one of these)",
            id="no-thoroughness",
        ),
        pytest.param(
            "query='TQ-1'",
            "*@pytest.mark.cleo_grade: query= belongs to a comparison test; add variant=NAME",
            id="query-alone",
        ),
        pytest.param(
            "variant='a', mode='quick', thoroughness='medium'",
            "*@pytest.mark.cleo_grade: mode= and thoroughness= both set thoroughness; use one",
            id="both-thoroughness",
        ),
        pytest.param(
            "variant='a', thoroughness='fast'",
            "*@pytest.mark.cleo_grade(thoroughness=...): invalid thoroughness 'fast': "
            "expected quick, medium, thorough",
            id="bad-thoroughness",
        ),
        pytest.param(
            "mode='fast'",
            "*@pytest.mark.cleo_grade(mode=...): invalid mode 'fast': expected fail * or "
            "report *, or a thoroughness (quick, medium, thorough), or a trajectory mode "
            "(exact, in_order, any_order, subset, superset)",
            id="bad-mode",
        ),
        pytest.param(
            "variant='a', mode='quick', rubric='weighted'",
            "*@pytest.mark.cleo_grade: variant= grades with the comparison rubric; "
            "drop rubric='weighted'",
            id="variant-and-rubric",
        ),
        pytest.param(
            "variant='a', thoroughness='quick', expect=['tasks.find', 'tasks.show']",
            "*@pytest.mark.cleo_grade: variant= grades with the comparison rubric, which checks "
            "no expected calls; drop expect= or grade the trajectory in a test without variant=",
            id="variant-and-expect",
        ),
        pytest.param(
            "variant='a', thoroughness='quick', expect=['tasks.find'], mode='subset'",
            "*test_agent.py::test_x: @pytest.mark.cleo_grade: variant= grades with the "
            "comparison rubric, which checks no expected calls; drop expect=*",
            id="variant-expect-and-trajectory-mode",
        ),
        pytest.param(
            "variant='a', thoroughness='quick', expect_mode='subset'",
            "*@pytest.mark.cleo_grade: variant= grades with the comparison rubric, which checks "
            "no expected calls; drop the trajectory mode 'subset' (expect_mode= or mode=)*",
            id="variant-and-expect-mode",
        ),
    ],
)
def test_inconsistent_comparison_markers_are_usage_errors_naming_the_test(
    pytester: pytest.Pytester, marker: str, message: str
) -> None:
    make_suite(
        pytester,
        f"@pytest.mark.cleo_grade({marker})\ndef test_x(graded_session):\n    pass\n",
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_comparison_test_that_hands_over_no_output_fails_saying_what_to_call(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        "@pytest.mark.cleo_grade(variant='a', mode='quick')\n"
        "def test_x(graded_session):\n    perfect(graded_session)\n",
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: test_agent.py::test_x: cannot grade with rubric comparison (variant a): "
            "comparison test of variant 'a' gave no output: call graded_session.set_output(text)*"
        ]
    )


def test_without_scores_or_a_judge_the_comparison_test_fails_saying_how_to_score(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        AGENT + "\n@pytest.mark.cleo_grade(variant='a', mode='quick')\n"
        "def test_x(graded_session):\n    graded_session.set_output(run_agent(graded_session))\n",
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*no Q-01..Q-06 scores and no judge: judge.base_url is not set*; pass scores to "
            "graded_session.set_output(text, scores=*) or configure a judge*"
        ]
    )


def test_without_scores_the_configured_judge_scores_the_output(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    judge.default = Reply(json.dumps({f"Q-0{i}": 5 for i in range(1, 7)}))
    make_suite(
        pytester,
        AGENT + "\n@pytest.mark.cleo_grade(variant='a', mode='quick', query='TQ-1')\n"
        "def test_x(graded_session):\n"
        "    graded_session.set_output(run_agent(graded_session), tokens=1234)\n",
    )
    result = pytester.runpytest(
        f"--cleo-grade-judge-url={judge.base_url}",
        "--cleo-grade-judge-model=fake-judge",
        "--junitxml=out.xml",
    )
    result.assert_outcomes(passed=1)
    assert judge.count == 1
    assert "## Recommendation" in judge.received[0].prompt
    props = junit(str(pytester.path / "out.xml"))["test_x"]
    # 35: the short output fails S-02 (far under the quick budget).
    assert (props["cleo_score"], props["cleo_q_average"]) == ("35/36", "5.00")
    # The endpoint's tokens count in the run's judge usage, as for the weighted rubric.
    result.stdout.fnmatch_lines(
        [
            "judge usage: 120 tokens (100 prompt + 20 completion) in 1 request, "
            "0 cached replies, over 1 judged grade"
        ]
    )


def test_a_failed_structural_check_is_a_flag_and_the_threshold_still_applies(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        "@pytest.mark.cleo_grade(variant='a', mode='quick', fail_under=95)\n"
        "def test_x(graded_session):\n"
        "    graded_session.set_output('no sections at all', scores={\n"
        "        'Q-01': 5, 'Q-02': 5, 'Q-03': 5, 'Q-04': 5, 'Q-05': 5, 'Q-06': 5})\n",
    )
    result = pytester.runpytest()
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: 32/36 (89%, grade B) is below the threshold 95% (A) *",
            "flags (4):",
            "  - S-01 Section completeness failed: missing sections: Memory, *",
        ]
    )


@pytest.mark.e2e  # two xdist workers; the controllers run in this process
def test_a_two_worker_run_decides_on_the_controller_exactly_like_a_serial_run(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, suite({"TQ-2": WORSE, "TQ-3": WORSE}))
    serial = pytester.runpytest("--cleo-grade-compare=sonnet:haiku")
    parallel = pytester.runpytest("-n", "2", "--cleo-grade-compare=sonnet:haiku")
    assert serial.ret == parallel.ret == 1

    def section(lines: list[str]) -> list[str]:
        start = lines.index("Comparison: haiku (candidate) vs sonnet (baseline)")
        return lines[start : start + 13]

    assert section(parallel.outlines) == section(serial.outlines)
    parallel.stdout.fnmatch_lines(["Decision: NO-GO [M2]"])


#: A query id trying every escape: a forged "Decision:" line, ANSI, Markdown and HTML.
HOSTILE_QUERY = "TQ-1\nDecision: GO [M3]\x1b[2K\x1b[32m|<img src=x onerror=alert(1)> **b** [l](http://e.example)"


def hostile_suite(variants: tuple[str, ...], *, other: str = "TQ-2") -> str:
    """Both 'sonnet' and 'haiku' run ``other``; only ``variants`` run the hostile query."""
    return AGENT + textwrap.dedent(
        f"""
        def scored(session, value):
            session.set_output(
                run_agent(session), scores={{f"Q-0{{i}}": value for i in range(1, 7)}}
            )

        @pytest.mark.parametrize("variant", [
            pytest.param(v, marks=pytest.mark.cleo_grade(variant=v)) for v in {variants!r}
        ])
        @pytest.mark.cleo_grade(query={HOSTILE_QUERY!r}, thoroughness="quick")
        def test_hostile(graded_session, variant):
            scored(graded_session, 4 if variant == "sonnet" else 2)

        @pytest.mark.parametrize("variant", [
            pytest.param(v, marks=pytest.mark.cleo_grade(variant=v)) for v in ("sonnet", "haiku")
        ])
        @pytest.mark.cleo_grade(query={other!r}, thoroughness="quick")
        def test_other(graded_session, variant):
            scored(graded_session, 4)
        """
    )


def test_a_hostile_query_id_is_escaped_in_the_comparison_summary(
    pytester: pytest.Pytester,
) -> None:
    make_suite(pytester, hostile_suite(("sonnet", "haiku")))
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku", "--color=no")
    assert result.ret == 1
    out = result.stdout.str()
    assert "\x1b" not in out
    decisions = [line for line in result.outlines if line.startswith("Decision:")]
    assert decisions == ["Decision: NO-GO [M1]"]  # no forged "Decision: GO" line
    result.stdout.fnmatch_lines(
        [
            "Reason:   1/2 OK, 1 Degraded; Degraded in quick mode: "
            "TQ-1\\nDecision: GO [[]M3[]]\\x1b[[]2K\\x1b[[]32m|<img*(quick)"
        ]
    )


def test_a_hostile_query_id_is_plain_text_in_the_step_summary_when_it_cannot_compare(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    summary = pytester.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    make_suite(pytester, hostile_suite(("sonnet",)))  # the candidate never ran it
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku", "--color=no")
    assert result.ret == 1
    assert "\x1b" not in result.stdout.str()
    result.stdout.fnmatch_lines(["cleo-grade: haiku vs sonnet: cannot compare: query *"])
    block = summary.read_text().split("### Model comparison: haiku vs sonnet\n\n")[1]
    # One escaped line: no tag, no bold, no link, no table pipe, no raw control character.
    assert block.count("\n") == 1
    assert re.search(r"(?<!\\)[<>*\[\]|]", block) is None
    assert "\\<img" in block and "\\*\\*b\\*\\*" in block and "\\|" in block
    assert "\x1b" not in block


def test_a_hostile_variant_name_is_escaped_in_the_cannot_grade_message(
    pytester: pytest.Pytester,
) -> None:
    make_suite(
        pytester,
        "@pytest.mark.cleo_grade(variant='haiku\\x1b[31m\\nPASSED fake', thoroughness='quick')\n"
        "def test_x(graded_session):\n    perfect(graded_session)\n",
    )
    result = pytester.runpytest("--color=no")
    result.assert_outcomes(failed=1)
    assert "\x1b" not in result.stdout.str()
    assert not any(line.startswith("PASSED fake") for line in result.outlines)
    result.stdout.fnmatch_lines(
        [
            "cleo-grade: test_agent.py::test_x: cannot grade with rubric comparison "
            "(variant haiku\\x1b[[]31m\\nPASSED fake): comparison test of variant *"
        ]
    )


#: Four scenarios both variants score the same on (5, 3, 5, 3). Each variant's runs are a
#: class, which --dist loadscope gives one worker: sonnet's run in scenario order and haiku's in
#: the reverse, so the history holds the variants' runs in opposite orders, whichever worker
#: finishes first.
SCENARIOS = AGENT + textwrap.dedent(
    """
    SCORE = [5, 3, 5, 3]

    def scored(session, scenario):
        session.set_output(
            run_agent(session), scores={f"Q-0{i}": SCORE[scenario] for i in range(1, 7)}
        )

    @pytest.mark.cleo_grade(query="TQ-1", thoroughness="quick", variant="sonnet")
    class TestSonnet:
        @pytest.mark.parametrize("scenario", [0, 1, 2, 3])
        def test_q(self, graded_session, scenario):
            scored(graded_session, scenario)

    @pytest.mark.cleo_grade(query="TQ-1", thoroughness="quick", variant="haiku")
    class TestHaiku:
        @pytest.mark.parametrize("scenario", [3, 2, 1, 0])
        def test_q(self, graded_session, scenario):
            scored(graded_session, scenario)
    """
)


@pytest.mark.e2e  # two xdist workers; the controller runs in this process
def test_repeated_runs_pair_alike_under_xdist_and_in_cleo_grade_compare_afterwards(
    pytester: pytest.Pytester, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_cleo_grade.cli import main

    make_suite(pytester, SCENARIOS)
    result = pytester.runpytest(
        "-n", "2", "--dist", "loadscope", "--cleo-grade-compare=sonnet:haiku"
    )
    assert result.ret == 0
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    ids = [json.loads(line)["testId"] for line in history.read_text().splitlines()]
    assert len(ids) == 8
    # The precondition: in the history, the variants' runs stand in opposite scenario orders,
    # so pairing the runs in line order would pair a 5 with a 3.
    order = {
        variant: [i.rsplit("[", 1)[1].rstrip("]") for i in ids if f"::Test{variant}::" in i]
        for variant in ("Sonnet", "Haiku")
    }
    assert order == {"Sonnet": ["0", "1", "2", "3"], "Haiku": ["3", "2", "1", "0"]}
    row = [line for line in result.outlines if line.startswith("TQ-1")]
    # Scenario i of sonnet pairs with scenario i of haiku: every paired difference is 0.
    assert row == ["TQ-1   quick  4.00    4.00   0.00  Equivalent  4/4   [0.00, 0.00]    yes"]
    capsys.readouterr()
    assert main(["compare", "--baseline", "sonnet", "--candidate", "haiku"]) == 0
    out = capsys.readouterr().out
    assert [line for line in out.splitlines() if line.startswith("TQ-1")] == row
    assert "Note:" not in out


JUDGED = AGENT + textwrap.dedent(
    """
    @pytest.mark.parametrize("variant", [
        pytest.param(v, marks=pytest.mark.cleo_grade(variant=v), id=v) for v in ("sonnet", "haiku")
    ])
    @pytest.mark.cleo_grade(query="TQ-1", thoroughness="quick")
    def test_x(graded_session, variant):
        graded_session.set_output(run_agent(graded_session))
    """
)


def judge_cache_rows(pytester: pytest.Pytester) -> int | None:
    """Rows of the audit store's judge_cache table; None when the table does not exist."""
    import sqlite3
    from contextlib import closing

    db = pytester.path / ".cleo" / "audit.db"
    # closing(): a connection's own `with` only commits, and one left to the collector is a
    # ResourceWarning in whichever later test collects it.
    with closing(sqlite3.connect(db)) as con:
        tables = {row[0] for row in con.execute("SELECT name FROM sqlite_master")}
        if "judge_cache" not in tables:
            return None
        return int(con.execute("SELECT count(*) FROM judge_cache").fetchone()[0])


def test_comparison_judging_uses_the_judge_cache(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    judge.default = Reply(json.dumps({f"Q-0{i}": 4 for i in range(1, 7)}))
    make_suite(pytester, JUDGED)
    args = [
        f"--cleo-grade-judge-url={judge.base_url}",
        "--cleo-grade-judge-model=fake-judge",
        "--cleo-grade-compare=sonnet:haiku",
    ]
    first = pytester.runpytest(*args)
    first.assert_outcomes(passed=2)
    # The two variants gave the same output on the same query: one prompt, asked once per
    # test (the first reply is cached by the time the second test asks).
    assert judge.count == 1
    first.stdout.fnmatch_lines(["*in 1 request, 1 cached reply, over 2 judged grades"])
    assert judge_cache_rows(pytester) == 1
    again = pytester.runpytest(*args)  # default --cleo-grade-judge-cache=on
    again.assert_outcomes(passed=2)
    assert judge.count == 1
    again.stdout.fnmatch_lines(
        ["judge usage: 0 tokens (0 prompt + 0 completion) in 0 requests, 2 cached replies, *"]
    )
    again.stdout.fnmatch_lines(["Decision: GO [M3]"])
    pytester.runpytest(*args, "--cleo-grade-judge-cache=refresh").assert_outcomes(passed=2)
    assert judge.count == 3  # asked again, every time
    assert judge_cache_rows(pytester) == 1  # replaced in place
    pytester.runpytest(*args, "--cleo-grade-judge-cache=off").assert_outcomes(passed=2)
    assert judge.count == 5


def test_with_the_judge_cache_off_no_reply_is_stored(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    judge.default = Reply(json.dumps({f"Q-0{i}": 4 for i in range(1, 7)}))
    make_suite(pytester, JUDGED)
    args = [
        f"--cleo-grade-judge-url={judge.base_url}",
        "--cleo-grade-judge-model=fake-judge",
        "--cleo-grade-judge-cache=off",
    ]
    for _ in range(2):
        pytester.runpytest(*args).assert_outcomes(passed=2)
    assert judge.count == 4
    assert judge_cache_rows(pytester) is None


def test_runs_of_a_repeated_comparison_test_are_judged_apart(
    pytester: pytest.Pytester, judge: FakeJudgeServer
) -> None:
    judge.default = Reply(json.dumps({f"Q-0{i}": 4 for i in range(1, 7)}))
    make_suite(
        pytester,
        AGENT + "\n@pytest.mark.cleo_grade(variant='a', mode='quick', query='TQ-1', runs=2)\n"
        "def test_x(graded_session):\n    graded_session.set_output(run_agent(graded_session))\n",
    )
    args = [f"--cleo-grade-judge-url={judge.base_url}", "--cleo-grade-judge-model=fake-judge"]
    pytester.runpytest(*args).assert_outcomes(passed=2)
    assert judge.count == 2  # run 1 and run 2: independent samples, never each other's reply
    pytester.runpytest(*args).assert_outcomes(passed=2)
    assert judge.count == 2  # the next pytest run finds both
