"""Reading a session as graded calls: only the columns CLEO's rubric reads, no entry objects.

``AuditStore.session_entries`` builds every row's JSON in SQLite and validates it into an
AuditEntry: right when the entries are wanted, most of the cost when only a grade is. This
reads the seven facts of each row (``rubrics.cleo_calls.GradedCall``) straight from the
columns, with the same mapping as the entry path (null domain -> ``unknown``, ``action``
when ``operation`` is null, null success -> true, ``schema.exit_code_sql`` when the exit
code column is null or absent).

It answers only for sessions whose every row the entry path would read without complaint
and order by text: timestamps in the store's fixed-width form, text columns holding text,
objects where JSON objects belong. For anything else it returns None and the caller takes
the entry path, which orders mixed timestamp forms and names the first bad row.
"""

from __future__ import annotations

import operator
import sqlite3
from collections import deque
from datetime import datetime
from typing import Final

from pytest_cleo_grade.core.models import GradedCall
from pytest_cleo_grade.store._schema import exit_code_sql, task_id_sql

__all__ = ["read_calls"]

# The store's own form (models.format_timestamp): text order is time order only in it. SQL
# checks the shape; Python's fromisoformat, several times faster than SQLite's strftime, then
# checks that each is a real date and time (no February 30, no hour 24).
_STAMP_CHECK: Final = (
    "timestamp GLOB '[0-9][0-9][0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9]"
    ".[0-9][0-9][0-9]Z'"
)
_STAMP: Final = operator.itemgetter(0)
_DETAILS: Final = "coalesce(nullif(details_json, ''), '{}')"


def _plain(columns: tuple[str, ...]) -> str:
    """SQL true for a row the entry path validates and the calls path reads alike."""
    checks = [
        _STAMP_CHECK,
        # Domain, operation, gateway and task id are checked on the values read (_read_alike).
        "(source IS NULL OR typeof(source) = 'text')",
        "(error_message IS NULL OR typeof(error_message) = 'text')",
        # JSON has no infinity: the entry path refuses one.
        "(duration_ms IS NULL OR (typeof(duration_ms) IN ('integer', 'real') "
        "AND duration_ms BETWEEN 0 AND 1.7976931348623157e308))",
        # A BLOB is text to some SQLite versions and binary JSON to newer ones: not plain.
        f"typeof(details_json) IN ('text', 'null') AND json_type({_DETAILS}) = 'object'",
    ]
    if "exit_code" in columns:
        checks.append("(exit_code IS NULL OR typeof(exit_code) = 'integer')")
    if "metadata_json" in columns:
        checks.append(
            "(metadata_json IS NULL OR (typeof(metadata_json) = 'text' AND "
            "json_type(metadata_json) = 'object' AND "
            "coalesce(json_type(metadata_json, '$.userId'), 'null') IN ('null', 'text') AND "
            # A taskId kept there (schema.task_id_sql) is read as text by both paths.
            "coalesce(json_type(metadata_json, '$.taskId'), 'null') IN ('null', 'text') AND "
            # Field names the entry model also accepts: task_id would stand in for a taskId
            # the columns leave out.
            "json_type(metadata_json, '$.task_id') IS NULL AND "
            "json_type(metadata_json, '$.user_id') IS NULL))"
        )
    # A check that meets an odd value may be NULL rather than false: NULL is not plain.
    return f"coalesce({' AND '.join(checks)}, 0)"


def _select(columns: tuple[str, ...]) -> str:
    exit_code = exit_code_sql(columns)
    operation = "coalesce(operation, action)"
    # A successful tasks.add is the only row whose parameters the rubric reads.
    add = f"coalesce(domain, 'unknown') = 'tasks' AND {operation} = 'add' AND success IS NOT 0"
    return f"""SELECT timestamp, coalesce(domain, 'unknown'), {operation}, gateway, {exit_code},
        success IS NOT 0,
        CASE WHEN {add} THEN json({_DETAILS}) END,
        {task_id_sql(columns)}
        FROM audit_log WHERE session_id = ? ORDER BY timestamp, rowid"""


def read_calls(
    conn: sqlite3.Connection, columns: tuple[str, ...], session_id: str
) -> list[GradedCall] | None:
    """The session's graded calls in session order, or None when a row needs the entry path.

    sqlite3.Error propagates (the caller names the store); malformed JSON in a row is one.
    """
    # The check is a query of its own: as a column of the select it measured slower, and
    # it stops at the first odd row.
    odd = conn.execute(
        f"SELECT 1 FROM audit_log WHERE session_id = ? AND NOT ({_plain(columns)}) LIMIT 1",
        (session_id,),
    ).fetchone()
    if odd is not None:
        return None
    cursor = conn.cursor()
    cursor.row_factory = None
    # Rows come back as the GradedCall tuples themselves: no Python code runs per row.
    calls: list[GradedCall] = cursor.execute(_select(columns), (session_id,)).fetchall()
    if not _read_alike(calls):
        return None
    try:
        deque(map(datetime.fromisoformat, map(_STAMP, calls)), maxlen=0)
    except ValueError:
        return None
    return calls


#: (position in a GradedCall, whether NULL is allowed) of the text columns the calls carry.
_TEXT_FIELDS: Final = ((1, False), (2, False), (3, True), (7, True))


def _read_alike(calls: list[GradedCall]) -> bool:
    """Whether the text columns the calls carry hold what the entry reading accepts.

    A TEXT column can hold only text, NULL or a BLOB (SQLite turns numbers into text): no
    BLOB, no NULL where the entry needs a value, no empty domain or operation. Checked on
    each column's distinct values, which a session has few of: cheaper than typeof() in SQL.
    """
    for position, nullable in _TEXT_FIELDS:
        values = set(map(operator.itemgetter(position), calls))
        kinds = set(map(type, values))
        if not kinds <= ({str, type(None)} if nullable else {str}):
            return False
        if not nullable and "" in values:
            return False
    return True
