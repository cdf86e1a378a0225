"""The plugin's history readers through the history's index: the same runs as the streaming
tests of ``--cleo-grade-baseline=latest`` and ``--cleo-grade-html``, with every history
indexed (these histories are small: a large one is indexed by default)."""

from __future__ import annotations

import pytest

from pytest_cleo_grade.store._history_index import INDEX_VARIABLE, index_path
from tests.plugin import test_baseline, test_html
from tests.plugin_suites import make_suite


@pytest.fixture(autouse=True)
def always_indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(INDEX_VARIABLE, "on")


test_latest_compares_with_the_previous_run_and_lists_new_and_missing_tests = (
    test_baseline.test_latest_compares_with_the_previous_run_and_lists_new_and_missing_tests
)
test_a_short_series_in_the_history_is_no_baseline_and_no_candidate = (
    test_baseline.test_a_short_series_in_the_history_is_no_baseline_and_no_candidate
)
test_latest_is_the_latest_run_so_a_test_deleted_from_the_suite_no_longer_counts = (
    test_baseline.test_latest_is_the_latest_run_so_a_test_deleted_from_the_suite_no_longer_counts
)
test_a_run_writes_its_report_with_every_graded_test_and_the_gate = (
    test_html.test_a_run_writes_its_report_with_every_graded_test_and_the_gate
)
test_with_a_baseline_the_change_is_against_it = (
    test_html.test_with_a_baseline_the_change_is_against_it
)
test_a_repeated_test_is_one_row_with_its_flaky_verdict = (
    test_html.test_a_repeated_test_is_one_row_with_its_flaky_verdict
)


def test_the_runs_history_is_indexed_beside_it(pytester: pytest.Pytester) -> None:
    make_suite(pytester, test_html.SUITE)
    args = ["--cleo-grade-html=out/report.html", "--cleo-grade-baseline=latest"]
    pytester.runpytest(*args).assert_outcomes(passed=6)
    pytester.runpytest(*args).assert_outcomes(passed=6)
    history = pytester.path / ".cleo" / "metrics" / "GRADES.jsonl"
    assert index_path(history).is_file()
    page = (pytester.path / "out" / "report.html").read_text()
    assert page.count("±0 vs baseline") + page.count("±0 vs previous run") == 6
