"""How a grade's ``points`` read: the lines of a failure message, and ``cleo-grade show``.

Every sentence, rule id and call name may come from the graded agent (a task id, a tool
name) or a third-party rubric, so each goes through :func:`display.terminal_text`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from pytest_cleo_grade.core._text import terminal_text
from pytest_cleo_grade.core.models import AuditEntry, GradeResult, Point, format_timestamp
from pytest_cleo_grade.reports._display import (
    calls_counted,
    item_line,
    number_text,
    points_of,
    score_text,
    signed_text,
)

__all__ = ["render_session", "session_json"]


def _call(entry: AuditEntry) -> str:
    return terminal_text(f"{entry.domain}.{entry.operation}")


def _outcome(entry: AuditEntry) -> str:
    if entry.result.success:
        return "ok"
    return f"exit {entry.result.exit_code}"


def _by_entry(items: Sequence[Point]) -> dict[int, list[Point]]:
    found: dict[int, list[Point]] = defaultdict(list)
    for item in items:
        for index in item.entries:
            found[index].append(item)
    return found


def _annotation(item: Point) -> str:
    shared = f" (shared by {calls_counted(item.entries)} calls)" if len(item.entries) > 1 else ""
    return f"{terminal_text(item.rule)} {signed_text(item.points)}{shared}"


def render_session(result: GradeResult, entries: Sequence[AuditEntry]) -> str:
    """The session's calls, one per line with the rules they triggered, then each dimension's
    items (every point of the score with its sentence) and the total."""
    items = points_of(result)
    by_entry = _by_entry(items)
    rubric = (result.model_extra or {}).get("rubric", "cleo")
    lines = [
        f"session {terminal_text(result.session_id)} ({len(entries)} calls), "
        f"rubric {terminal_text(rubric)}",
        "",
    ]
    width = max((len(_call(e)) for e in entries), default=4)
    for index, entry in enumerate(entries):
        notes = "; ".join(_annotation(item) for item in by_entry.get(index, ()))
        gateway = terminal_text(entry.metadata.gateway or "-")
        line = (
            f"#{index:<4} {format_timestamp(entry.timestamp)}  {_call(entry):<{width}}  "
            f"{gateway:<11} {_outcome(entry):<7} {notes}"
        )
        lines.append(line.rstrip())
    if entries:
        lines.append("")
    else:
        lines.append("(no calls: nothing to explain)")
    if entries and not items:
        lines.append("(this rubric explains no points)")
    for name, dimension in result.dimensions.items():
        lines.append(
            f"{terminal_text(name)} {number_text(dimension.score)}/{number_text(dimension.max)}"
        )
        lines.extend(
            f"  {item_line(item, dimension=False)}" for item in items if item.dimension == name
        )
    lines.append(f"total {score_text(result)} ({result.display_percent}%, grade {result.letter})")
    if result.flags:
        lines.append(f"flags ({len(result.flags)}):")
        lines.extend(f"  - {terminal_text(flag)}" for flag in result.flags)
    return "\n".join(lines)


def session_json(result: GradeResult, entries: Sequence[AuditEntry]) -> dict[str, Any]:
    """``cleo-grade show --json``: the grade, and each call with the points items naming it."""
    by_entry = _by_entry(points_of(result))
    calls = [
        {
            "index": index,
            "timestamp": format_timestamp(entry.timestamp),
            "call": f"{entry.domain}.{entry.operation}",
            "success": entry.result.success,
            "exitCode": entry.result.exit_code,
            "points": [
                {"dimension": p.dimension, "rule": p.rule, "points": p.points}
                for p in by_entry.get(index, ())
            ],
        }
        for index, entry in enumerate(entries)
    ]
    return {"grade": result.to_report_dict(), "calls": calls}
