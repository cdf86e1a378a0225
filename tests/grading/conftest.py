"""The inner pytest runs here share what tests/inner_runs.py says (a leaner start; the package is
loaded once by the root conftest)."""

from tests.inner_runs import _inner_run_environment

__all__ = ["_inner_run_environment"]
