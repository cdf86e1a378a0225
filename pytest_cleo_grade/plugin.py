"""pytest glue for pytest-cleo-grade (the ``pytest11`` entry point)."""

from __future__ import annotations
