"""The comparison's follow-up round in pytest: marker ``follow_up=True`` and the final decision."""

from __future__ import annotations

import textwrap

import pytest

from tests.plugin.test_compare import AGENT, SAME, WORSE, suite
from tests.plugin_suites import make_suite

#: Three additional queries both variants score alike, marked as the follow-up round.
FOLLOW_UP = textwrap.dedent(
    """

    FOLLOW_UP = {"TQ-6": "quick", "TQ-7": "medium", "TQ-8": "thorough"}
    MORE = [
        pytest.param(
            variant, query,
            marks=pytest.mark.cleo_grade(variant=variant, query=query, mode=mode, follow_up=True),
            id=f"{query}-{variant}",
        )
        for query, mode in FOLLOW_UP.items()
        for variant in ("sonnet", "haiku")
    ]

    @pytest.mark.parametrize(("variant", "query"), MORE)
    def test_follow_up(graded_session, variant, query):
        graded_session.set_output(run_agent(graded_session), scores={
            f"Q-0{i}": v for i, v in enumerate(FOLLOW_UP_SCORES[variant], start=1)})
    """
)


def test_three_follow_up_queries_turn_the_conditional_into_a_final_go(
    pytester: pytest.Pytester,
) -> None:
    scores = f"FOLLOW_UP_SCORES = {{'sonnet': {SAME}, 'haiku': {SAME}}}\n"
    module = suite({"TQ-4": WORSE, "TQ-5": WORSE}) + scores + FOLLOW_UP
    make_suite(pytester, module)
    result = pytester.runpytest("--cleo-grade-compare=sonnet:haiku")
    result.assert_outcomes(passed=16)
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "TQ-6 *Equivalent*follow-up",
            "Decision: GO (with monitoring note) [F1]",
            "Round:    the decision rests on the follow-up round (TQ-6, TQ-7, TQ-8); final",
        ]
    )
    assert "CONDITIONAL does not change the exit status" not in result.stdout.str()


def test_follow_up_without_a_variant_is_a_usage_error(pytester: pytest.Pytester) -> None:
    make_suite(
        pytester,
        AGENT + "\n@pytest.mark.cleo_grade(follow_up=True)\n"
        "def test_x(graded_session):\n    run_agent(graded_session)\n",
    )
    result = pytester.runpytest()
    result.stderr.fnmatch_lines(["*follow_up= belongs to a comparison test; add variant=NAME*"])
