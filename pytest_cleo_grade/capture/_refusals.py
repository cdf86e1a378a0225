"""Calls another process could not record, told to the pytest process that grades them.

A child process (an MCP stdio server, a subprocess given ``subprocess_env()``) records into
the store directly. When one of its calls cannot become an entry (a NaN in its parameters) or
cannot be stored (a full disk), the child cannot reach the session held in the pytest
process; grading without that call would grade the session on part of its calls. The child
appends one line to a file beside the store, ``<store>.refused``, and the pytest process
reads its session's lines when it grades: the test fails with the reason, as it does for a
call refused in its own process.

A file rather than a table of the store: a call refused because the store cannot be written
must still be told.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Final

from pytest_cleo_grade.core._files import open_append_no_follow, open_regular

__all__ = ["note_refusal", "refusals_for", "refusals_path", "refusals_size"]

#: The longest reason kept (one line of a failure message).
_REASON_LIMIT: Final = 2000


def refusals_path(db_path: str | os.PathLike[str]) -> Path:
    path = Path(db_path)
    return path.with_name(f"{path.name}.refused")


def note_refusal(db_path: str | os.PathLike[str], session_id: str, reason: str) -> bool:
    """Append that a call of ``session_id`` was not recorded; False when that failed too."""
    line = json.dumps({"session": session_id, "reason": reason[:_REASON_LIMIT]}) + "\n"
    try:
        fd = open_append_no_follow(refusals_path(db_path))
    except OSError:
        return False
    try:
        # One write of a short line with O_APPEND: lines of processes writing at once do
        # not interleave.
        os.write(fd, line.encode("utf-8", "backslashreplace"))
    except OSError:
        return False
    finally:
        os.close(fd)
    return True


def refusals_size(db_path: str | os.PathLike[str]) -> int:
    """How long the file is now (0 when there is none): a session started now reads its
    refusals from there on, never the lines of the runs and tests before it."""
    try:
        return os.stat(refusals_path(db_path)).st_size
    except OSError:
        return 0


def refusals_for(db_path: str | os.PathLike[str], session_id: str, since: int = 0) -> list[str]:
    """The reasons other processes noted for ``session_id`` in the file from byte ``since``
    on (where it ended when the session started), oldest first (none: []).

    Everything written since is read, however many lines other sessions (tests on other
    workers) added meanwhile: a tail of fixed size could miss this session's line.
    """
    path = refusals_path(db_path)
    reasons = []
    needle = json.dumps(session_id).encode("utf-8")
    try:
        if not path.is_file():
            return []
        with open_regular(path) as handle:
            if os.fstat(handle.fileno()).st_size >= since:
                handle.seek(since)  # else the file was replaced: all of it is new
            for raw in handle:  # short lines (reasons are cut): one at a time
                if needle not in raw:  # most lines are other sessions': no JSON parse
                    continue
                try:
                    noted = json.loads(raw)
                except ValueError:
                    continue  # a line another process is still writing, or torn
                if isinstance(noted, dict) and noted.get("session") == session_id:
                    reasons.append(str(noted.get("reason", "")))
    except OSError:
        return reasons
    return reasons
