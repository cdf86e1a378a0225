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

from pytest_cleo_grade.files import open_append_no_follow, open_regular

__all__ = ["note_refusal", "refusals_for", "refusals_path"]

#: How much of the file is read, from its end: older runs' lines are not this run's.
_READ_LIMIT: Final = 1024 * 1024
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


def refusals_for(db_path: str | os.PathLike[str], session_id: str) -> list[str]:
    """The reasons other processes noted for ``session_id``, oldest first (none: [])."""
    path = refusals_path(db_path)
    try:
        if not path.is_file():
            return []
        with open_regular(path) as handle:
            size = os.fstat(handle.fileno()).st_size
            handle.seek(max(0, size - _READ_LIMIT))
            data = handle.read(_READ_LIMIT)
    except OSError:
        return []
    reasons = []
    needle = json.dumps(session_id).encode("utf-8")
    for raw in data.splitlines():
        if needle not in raw:  # most lines are other sessions': no JSON parse for them
            continue
        try:
            noted = json.loads(raw)
        except ValueError:
            continue  # the first line of a tail read, cut in two
        if isinstance(noted, dict) and noted.get("session") == session_id:
            reasons.append(str(noted.get("reason", "")))
    return reasons
