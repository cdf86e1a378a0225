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


class MissingExtraError(CleoGradeError, ModuleNotFoundError):
    """An adapter or export whose optional framework (an extra) is not installed.

    A ModuleNotFoundError, so ``pytest.importorskip("pytest_cleo_grade.capture.mcp")`` skips
    the tests of a framework that is not installed (its default ``exc_type``), and the message
    is one line with the install command.
    """


def install_command(extra: str) -> str:
    """The command that installs ``extra``, from the package index and from a checkout."""
    return f"pip install 'pytest-cleo-grade[{extra}]' (in a checkout: pip install -e '.[{extra}]')"


def missing_extra(what: str, framework: str, extra: str, exc: ImportError) -> ImportError:
    """The one-line error for ``what`` (an adapter's module, an export) missing ``framework``.

    A module that is not there is a MissingExtraError (skipped by ``importorskip``); one that
    is there but lacks a name (a release too old or too new) stays a plain ImportError, so a
    suite is told rather than silently skipping the tests of a framework it has.
    """
    if isinstance(exc, ModuleNotFoundError):
        module = exc.name or "a module it needs"
        return MissingExtraError(
            f"{what} needs {framework} (the {extra} extra; {module} is not installed): "
            f"{install_command(extra)}",
            name=exc.name,
        )
    return ImportError(
        f"{what} needs {framework} (the {extra} extra), and the installed one does not fit "
        f"({exc}): {install_command(extra)}"
    )


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
