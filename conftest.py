"""Root conftest: enables pytester for the plugin's own tests."""

from __future__ import annotations

import sys

import pytest

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _fresh_judge_breakers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with no judge failures counted.

    The judges' circuit breakers count failures per process and per endpoint. A test's fake
    judge server can be given the port an earlier test's failing one had, and would then
    start with that test's failures (seen once in CI: a breaker opened one request early).
    """
    breaker = sys.modules.get("pytest_cleo_grade.judges.breaker")
    if breaker is not None:
        monkeypatch.setattr(breaker.RUN_BREAKERS, "_streaks", {})
