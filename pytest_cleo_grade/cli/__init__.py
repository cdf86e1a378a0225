"""The ``cleo-grade`` command line (entry point :func:`pytest_cleo_grade.cli.main.main`)."""

from __future__ import annotations

from pytest_cleo_grade.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
