"""Reading a file of calls in any supported format into audit entries, once for every door
(``graded_session.ingest()`` and ``cleo-grade import``)."""

from __future__ import annotations

import os
from pathlib import Path

from pytest_cleo_grade.core._conversation import Conversation
from pytest_cleo_grade.core.errors import CleoGradeError
from pytest_cleo_grade.core.models import AuditEntry
from pytest_cleo_grade.store.sources import (
    ENTRY_FILE_FORMATS,
    IMPORT_FORMATS,
    find_cleo_db,
    is_sqlite_file,
    load_entries_file,
    read_cleo_db,
)

__all__ = ["load_conversation", "load_file", "one_cleo_session"]


def load_file(
    source: str | os.PathLike[str], format: str, session_id: str | None
) -> list[AuditEntry]:
    if format == "auto" and (Path(source).is_dir() or is_sqlite_file(source)):
        format = "cleo-db"  # told apart by content, as `cleo-grade import` does
    if format in ("auto", *ENTRY_FILE_FORMATS):
        return load_entries_file(source)
    if format == "cleo-db":
        return one_cleo_session(source, session_id)
    if format == "otlp":
        from pytest_cleo_grade.capture.otlp import load_otlp_file

        return load_otlp_file(source)
    if format == "claude-code":
        from pytest_cleo_grade.capture.claude_code import load_transcript

        return load_transcript(source)
    raise CleoGradeError(
        f"ingest: unknown format {format!r}: expected one of {', '.join(IMPORT_FORMATS)}"
    )


def load_conversation(source: str | os.PathLike[str], format: str) -> Conversation | None:
    """The conversation a file of ``format`` holds beside its calls (Claude Code transcripts,
    OTLP exports with GenAI messages), or None for formats that hold none."""
    if format == "claude-code":
        from pytest_cleo_grade.capture.claude_code import load_transcript_conversation

        return load_transcript_conversation(source)
    if format == "otlp":
        from pytest_cleo_grade.capture.otlp import load_otlp_conversation

        return load_otlp_conversation(source)
    return None


def one_cleo_session(source: str | os.PathLike[str], session_id: str | None) -> list[AuditEntry]:
    """One session of a CLEO database: ``session_id``'s, or the only one it holds (a
    project's database holds many: merging them would grade several agents as one)."""
    entries = [entry for _, entry in read_cleo_db(find_cleo_db(source), session_id=session_id)]
    sessions = sorted({entry.session_id or "" for entry in entries})
    if session_id is None and len(sessions) > 1:
        shown = ", ".join(sessions[:3]) + (", ..." if len(sessions) > 3 else "")
        raise CleoGradeError(
            f"ingest: {source} holds {len(sessions)} sessions ({shown}): pass session_id="
        )
    return entries
