"""A graded test held packed (``GradedTest.packed``): the form the controller keeps of every
saved grade until the run ends. It must read back as the grade it was, in every respect the
run's summaries, gates and reports use."""

from __future__ import annotations

import copy
import pickle
from datetime import UTC, datetime

import pytest

from pytest_cleo_grade.core.models import DimensionScore, GradeResult
from pytest_cleo_grade.grading._verdict import (
    GradedTest,
    RunGrade,
    decode_graded_test,
    encode_graded_test,
    ungradable_result,
)
from pytest_cleo_grade.reports._display import junit_properties, markdown_summary, summary_lines


def _result(score: float, **extra: object) -> GradeResult:
    return GradeResult.model_validate(
        {
            "sessionId": "s-\udcff",  # agent text that is not UTF-8, spelled as it came
            "totalScore": score,
            "maxScore": 100,
            "dimensions": {"only": DimensionScore(score=score, max=100)},
            "flags": ["a flag", "T-\u00e9"],
            "timestamp": datetime(2026, 3, 1, tzinfo=UTC),
            "entryCount": 3,
            **extra,
        }
    )


TESTS = [
    GradedTest("t.py::test_a", _result(82.5), 75.0, "--cleo-grade-fail-under", "fail"),
    GradedTest("t.py::test_b", _result(40.0), 75.0, "marker", "report", excluded="xfailed"),
    GradedTest(
        "t.py::test_c[run-2]",
        _result(61.0, testId="t.py::test_c", run=2, runs=3, points=[]),
        None,
        None,
        "fail",
    ),
    GradedTest(
        "t.py::test_d",
        ungradable_result(
            "s-d",
            reason="the judge is down",
            timestamp=datetime(2026, 3, 1, tzinfo=UTC),
            entry_count=0,
            test_id="t.py::test_d",
        ),
        75.0,
        "ini",
        "fail",
    ),
]


@pytest.mark.parametrize("from_payload", [False, True], ids=["encoded-again", "as-it-came"])
@pytest.mark.parametrize("test", TESTS, ids=lambda test: test.nodeid)
def test_a_packed_test_reads_back_as_the_test_it_was(test: GradedTest, from_payload: bool) -> None:
    # The xdist controller packs the payload a worker's report brought, as it came.
    payload = encode_graded_test(test) if from_payload else None
    if payload is not None:
        test = decode_graded_test(payload)
    packed = test.packed(payload)
    assert packed._result is None  # holds bytes, not the model
    assert packed == test
    assert packed.result.to_json_dict() == test.result.to_json_dict()
    for name in ("status", "passed", "ungradable", "percent", "test_key", "is_run", "reason"):
        assert getattr(packed, name) == getattr(test, name), name
    assert junit_properties(packed.result, packed.status) == junit_properties(
        test.result, test.status
    )
    assert packed.packed() is packed


def test_a_run_of_packed_tests_summarises_and_gates_as_the_unpacked_run() -> None:
    run = RunGrade(tuple(TESTS), 70.0)
    packed = RunGrade(tuple(test.packed() for test in TESTS), 70.0)
    assert packed.mean == run.mean
    assert packed.verdict() == run.verdict()
    assert summary_lines(packed) == summary_lines(run)
    assert markdown_summary(packed) == markdown_summary(run)


def test_a_graded_test_is_immutable_and_replace_makes_a_new_one() -> None:
    test = TESTS[0].packed()
    with pytest.raises(AttributeError, match="immutable"):
        test.threshold = 10.0  # type: ignore[misc]
    changed = test.replace(excluded="xpassed")
    assert changed.excluded == "xpassed"
    assert changed.result == test.result
    assert test.excluded is None
    with pytest.raises(TypeError, match="no field 'score'"):
        test.replace(score=1)


@pytest.mark.parametrize("packed", [False, True], ids=["model", "packed"])
def test_a_graded_test_copies_and_pickles_as_itself(packed: bool) -> None:
    test = TESTS[2].packed() if packed else TESTS[2]
    for again in (copy.copy(test), copy.deepcopy(test), pickle.loads(pickle.dumps(test))):
        assert again == test
        assert again.test_key == "t.py::test_c"
        assert (again._result is None) is packed
