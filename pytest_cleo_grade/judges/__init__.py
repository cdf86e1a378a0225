"""Judges: the Judge protocol (pure), the OpenAI-compatible HTTP client and the reply cache.

The rubrics depend on :mod:`pytest_cleo_grade.judges.protocol` only; the modules that talk
HTTP (:mod:`~pytest_cleo_grade.judges.http`) or SQLite (:mod:`~pytest_cleo_grade.judges._cache`)
are wired in by the layers above (grading, the CLI).
"""

from __future__ import annotations
