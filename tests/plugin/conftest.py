"""The inner pytest runs here leave out an unrelated slow plugin (see tests/inner_runs.py)."""

from tests.inner_runs import _inner_runs_without_langsmith  # noqa: F401
