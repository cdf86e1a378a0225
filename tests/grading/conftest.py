"""The inner pytest runs here share what tests/inner_runs.py says (a leaner start, modules
loaded once)."""

from tests.inner_runs import _inner_run_environment, preload_plugin_modules

__all__ = ["_inner_run_environment"]

preload_plugin_modules()
