"""Root conftest: enables pytester for the plugin's own tests."""

from __future__ import annotations

import gc
import os
import sys

import pytest

pytest_plugins = ["pytester"]


def pytest_configure(config: pytest.Config) -> None:
    # pytester's in-process runs put sys.modules back as they found it, so a module first
    # imported inside one is imported again by the next run: the package is loaded once here,
    # for every folder's tests (tests/inner_runs.py says what and why). Imported here, not at
    # the top: tests/inner_runs.py reads this module's names.
    from tests.inner_runs import preload_plugin_modules, remember_distributions

    preload_plugin_modules()
    remember_distributions()
    # The suite's in-process pytest runs make millions of short-lived objects over a heap of
    # every framework the tests import: the default thresholds collect the old generation
    # often, for nothing (measured: 7-12 % of a worker's CPU). What is loaded by now is kept
    # out of every collection, and the young generation is collected less often.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)


def pytest_collection_finish(session: pytest.Session) -> None:
    # The collected tests (items, their fixtures' definitions, the test modules) live as long
    # as the run: kept out of every collection too. On pytest 8.4 (.ci/run's lowest leg) each
    # in-process inner run ends with five full collections (the unraisable-exception check,
    # which pytest 9's pytester turns off), and over the whole suite's collection one took
    # about 280 ms: a third of that leg's CPU.
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _fresh_judge_breakers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no judge failures counted.

    The judges' circuit breakers count failures per process and per endpoint. A test's fake
    judge server can be given the port an earlier test's failing one had, and would then
    start with that test's failures (seen once in CI: a breaker opened one request early).
    """
    breaker = sys.modules.get("pytest_cleo_grade.judges._breaker")
    if breaker is not None:
        monkeypatch.setattr(breaker.RUN_BREAKERS, "_streaks", {})


# What the machine running the suite may set and the product, its SDKs or pytest's own output
# read: a test sets what it needs itself. On CI (CI or BUILD_NUMBER set) pytest prints the short
# summary's messages in full where a terminal cuts them to its width (the README shows the
# latter); a runner's GITHUB_STEP_SUMMARY, COLUMNS, proxy or CLEO_* would reach every run.
_OUTSIDE_NAMES = (
    *("CI", "BUILD_NUMBER", "GITHUB_STEP_SUMMARY", "COLUMNS", "LINES", "NO_COLOR"),
    # A proxy no test's loopback server is behind (a test that means one sets it).
    *("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"),
)
_OUTSIDE_PREFIXES = ("CLEO_", "LANGFUSE_", "OTEL_")


@pytest.fixture(autouse=True)
def _no_outside_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name in _OUTSIDE_NAMES or name.startswith(_OUTSIDE_PREFIXES):
            monkeypatch.delenv(name)
