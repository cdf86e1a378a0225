"""Exceptions and warnings raised by pytest-cleo-grade (standard library only)."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator


class CleoGradeError(Exception):
    """Base class of every error this package raises on purpose.

    The message is always one line that names the place (file and line, field, option), so
    the CLI can print it as is and the plugin can turn it into a usage error or a warning.
    """


class EntryError(CleoGradeError):
    """An audit entry (or a file of them) is malformed."""


class HistoryError(CleoGradeError):
    """GRADES.jsonl could not be read or written."""


class StoreError(CleoGradeError):
    """The SQLite audit store could not be opened, read or written."""


class RubricError(CleoGradeError):
    """A rubric is unknown, misconfigured, or failed to grade."""


class JudgeError(RubricError):
    """An LLM judge could not be reached or gave an unusable answer."""


class CleoGradeWarning(UserWarning):
    """Something was skipped or could not be stored, but nothing was lost silently."""


@contextlib.contextmanager
def warnings_shown_not_raised() -> Iterator[None]:
    """Within the block, CleoGradeWarnings are shown (and recorded by pytest), never raised.

    A storage failure must not change the outcome of the code that hit it (DESIGN section 5),
    not even where ``filterwarnings = error`` turns every warning into an exception.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("always", CleoGradeWarning)
        yield
