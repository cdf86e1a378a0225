"""What the inner pytest runs of tests/plugin and tests/grading share (their conftests use it)."""

from __future__ import annotations

import pytest

#: langsmith (installed with the langchain capture extra) registers a pytest plugin whose import
#: takes about 2 s, paid again by every inner pytest process and xdist worker: a fifth of these
#: folders' time went to it. No plugin test is about it (.ci/run's lowest leg has no langsmith),
#: so the inner runs go without it.
INNER_ADDOPTS = "-p no:langsmith_plugin"


@pytest.fixture(autouse=True)
def _inner_runs_without_langsmith(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every inner run (in-process, subprocess, its xdist workers) leaves langsmith's plugin out.

    Pytester discards the outer PYTEST_ADDOPTS when it is set up, so a test using it gets it
    first and the option is set after.
    """
    if "pytester" in request.fixturenames:
        request.getfixturevalue("pytester")
    monkeypatch.setenv("PYTEST_ADDOPTS", INNER_ADDOPTS)
