"""Compatibility: the entry-file reader's earlier home; import from ``sources``."""

from __future__ import annotations

from pytest_cleo_grade.sources import load_entries_file

__all__ = ["load_entries_file"]
