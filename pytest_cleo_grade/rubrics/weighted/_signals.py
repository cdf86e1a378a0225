"""Automatic signals beside the judged dimensions: what the log proves, counted.

The Enhanced Scoring System Design rates its dimensions "partial auto-signals": some of what
the judge is asked to weigh (retries, re-reads, errors and their recovery) is countable from
the tool-call log alone. These counts are computed for every weighted grade, given to the
judge as facts, kept beside its scores (the ``autoSignals`` extra, evidence lines and
zero-point ``points`` items naming the calls), and a judged score that a count contradicts is
flagged. They never change a score: the judge decides, the log is the check.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from pytest_cleo_grade.core.models import AuditEntry

__all__ = [
    "RECOVERY_WINDOW",
    "SIGNALS_KEY",
    "AutoSignals",
    "auto_signals",
    "contradictions",
    "facts_block",
    "signal_evidence",
    "signal_points",
]

#: An error is recovered when one of the next 4 calls succeeds (CLEO's S4 window).
RECOVERY_WINDOW: Final = 4
#: The extra key holding the counts.
SIGNALS_KEY: Final = "autoSignals"

_READS: Final = frozenset({"read", "show", "get", "cat", "view", "open", "fetch", "readfile"})
_FINDS: Final = ("find", "search", "grep")
_LISTS: Final = ("list", "ls", "glob")
#: A numeric score at or above this share of its range is the design's top band ("0.9-1.0").
_TOP_BAND: Final = Fraction(9, 10)
#: From this many retries / re-reads, a top-band score is contradicted ("few retries" and
#: "minimal re-reads" are the bands below it).
_MANY: Final = 2


@dataclass(frozen=True, slots=True)
class AutoSignals:
    """Positions (in grading order, from #0) of the calls behind each count."""

    retries: tuple[int, ...] = ()
    repeated_reads: tuple[int, ...] = ()
    list_calls: tuple[int, ...] = ()
    find_calls: tuple[int, ...] = ()
    errors: tuple[int, ...] = ()
    unrecovered: tuple[int, ...] = ()

    def counts(self) -> dict[str, int]:
        """The ``autoSignals`` extra: one count per signal, camelCase as the history is."""
        return {
            "retries": len(self.retries),
            "repeatedReads": len(self.repeated_reads),
            "listCalls": len(self.list_calls),
            "findCalls": len(self.find_calls),
            "errors": len(self.errors),
            "errorsWithoutRecovery": len(self.unrecovered),
        }


def _last(operation: str) -> str:
    return operation.lower().rsplit(".", 1)[-1].replace("_", "")


def _identity(entry: AuditEntry) -> tuple[str, str, str]:
    params = json.dumps(entry.params, sort_keys=True, default=str)
    return entry.domain.lower(), entry.operation.lower(), params


def auto_signals(entries: Sequence[AuditEntry]) -> AutoSignals:
    """Count, over entries in session order:

    - retries: a call identical (domain, operation, params) to an earlier call that failed;
    - repeated reads: a successful read (``read``, ``show``, ``get``, ``cat``, ``view``,
      ``open``, ``fetch``) identical to an earlier successful read;
    - list and find calls: an operation ending in ``list``/``ls``/``glob`` or in
      ``find``/``search``/``grep`` (CLEO's tasks.list against tasks.find);
    - errors: failed calls; errors without recovery: a failed call none of whose next 4
      calls succeeds (a session ending on an error included).
    """
    failed: set[tuple[str, str, str]] = set()
    read: set[tuple[str, str, str]] = set()
    retries, rereads, lists, finds, errors, unrecovered = [], [], [], [], [], []
    for position, entry in enumerate(entries):
        identity = _identity(entry)
        last = _last(entry.operation)
        if identity in failed:
            retries.append(position)
        if last in _READS and entry.result.success:
            # A failed read brought nothing into context: only a successful one is re-read.
            if identity in read:
                rereads.append(position)
            read.add(identity)
        if last.endswith(_LISTS):
            lists.append(position)
        elif last.endswith(_FINDS):
            finds.append(position)
        if not entry.result.success:
            failed.add(identity)
            errors.append(position)
            window = entries[position + 1 : position + 1 + RECOVERY_WINDOW]
            if not any(later.result.success for later in window):
                unrecovered.append(position)
    return AutoSignals(
        tuple(retries), tuple(rereads), tuple(lists), tuple(finds), tuple(errors),
        tuple(unrecovered),
    )  # fmt: skip


def facts_block(signals: AutoSignals) -> list[str]:
    """The prompt's facts: the counts as one JSON object between fences. Numbers the grader
    computed, not text the agent wrote; fenced all the same, as every other block is."""
    return [
        "Facts the grader counted from the whole log (not written by the agent; weigh them, "
        "they are not scores): retries = calls repeating an earlier failed call exactly; "
        "repeatedReads = successful reads repeating an earlier successful read exactly; "
        "listCalls / findCalls = list-style and find-style discovery calls; errors = failed "
        "calls; "
        f"errorsWithoutRecovery = failed calls none of whose next {RECOVERY_WINDOW} calls "
        "succeeded.",
        "```json",
        json.dumps(signals.counts(), separators=(", ", ": ")),
        "```",
    ]


def _calls(positions: Sequence[int], limit: int = 5) -> str:
    shown = ", ".join(f"#{p}" for p in positions[:limit])
    more = f" and {len(positions) - limit} more" if len(positions) > limit else ""
    return f" ({shown}{more})" if positions else ""


def _plural(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


#: Which judged dimension of the design each signal sits beside.
_BESIDE: Final[dict[str, tuple[str, ...]]] = {
    "tool_efficiency": ("retries", "list_find"),
    "context_efficiency": ("repeated_reads",),
    "error_handling": ("errors", "unrecovered"),
}


def _sentences(signals: AutoSignals) -> dict[str, tuple[str, tuple[int, ...]]]:
    s = signals
    return {
        "retries": (
            f"auto-signal: {_plural(len(s.retries), 'retry', 'retries')} of a failed call"
            + _calls(s.retries),
            s.retries,
        ),
        "list_find": (
            f"auto-signal: {_plural(len(s.list_calls), 'list call', 'list calls')}, "
            f"{_plural(len(s.find_calls), 'find call', 'find calls')}",
            s.list_calls + s.find_calls,
        ),
        "repeated_reads": (
            f"auto-signal: {_plural(len(s.repeated_reads), 'repeated read', 'repeated reads')}"
            + _calls(s.repeated_reads),
            s.repeated_reads,
        ),
        "errors": (
            f"auto-signal: {_plural(len(s.errors), 'failed call', 'failed calls')}"
            + _calls(s.errors),
            s.errors,
        ),
        "unrecovered": (
            f"auto-signal: {_plural(len(s.unrecovered), 'error', 'errors')} without recovery"
            + _calls(s.unrecovered),
            s.unrecovered,
        ),
    }


def signal_evidence(signals: AutoSignals, dimension: str) -> list[str]:
    """The evidence lines shown beside ``dimension``'s judged score: each signal it sits
    beside that counted something (none for a dimension no signal sits beside)."""
    sentences = _sentences(signals)
    return [sentences[name][0] for name in _BESIDE.get(dimension, ()) if sentences[name][1]]


def signal_points(signals: AutoSignals, dimensions: Sequence[str]) -> list[dict[str, Any]]:
    """Zero-point ``points`` items naming the calls behind each signal, so ``cleo-grade show``
    and the HTML report's drill-down put the counts beside the calls (a dimension's points
    still sum to its judged score)."""
    from pytest_cleo_grade.rubrics._points import point

    sentences = _sentences(signals)
    items = []
    for dimension in dimensions:
        for name in _BESIDE.get(dimension, ()):
            text, positions = sentences[name]
            if positions:
                items.append(point(dimension, 0, f"{dimension}.signal.{name}", text, positions))
    return items


def contradictions(signals: AutoSignals, judged: Mapping[str, Fraction]) -> list[str]:
    """Flags for judged scores a signal contradicts. ``judged`` maps a dimension to its
    normalised score (0..1: a numeric score's place in its range, a category's value over
    the last category's).

    - tool_efficiency in the top band (>= 0.9) with 2+ retries of a failed call;
    - context_efficiency in the top band with 2+ repeated reads;
    - error_handling at its best category (prevented) with any failed call; at recovered or
      better with an error without recovery; at its worst (poor) with no failed call at all.
    """
    s = signals
    flags = []

    def flag(dimension: str, shown: str, fact: str) -> None:
        flags.append(
            f"auto-signal contradicts the judge: {dimension} judged {shown}, but the log "
            f"shows {fact}"
        )

    tool = judged.get("tool_efficiency")
    if tool is not None and tool >= _TOP_BAND and len(s.retries) >= _MANY:
        flag(
            "tool_efficiency",
            f"{float(tool):.2f} of 1",
            f"{_plural(len(s.retries), 'retry', 'retries')} of a failed call{_calls(s.retries)}",
        )
    context = judged.get("context_efficiency")
    if context is not None and context >= _TOP_BAND and len(s.repeated_reads) >= _MANY:
        flag(
            "context_efficiency",
            f"{float(context):.2f} of 1",
            f"{_plural(len(s.repeated_reads), 'repeated read', 'repeated reads')}"
            f"{_calls(s.repeated_reads)}",
        )
    share = judged.get("error_handling")
    if share is not None:
        if share >= 1 and s.errors:
            flag(
                "error_handling",
                "its best category",
                f"{_plural(len(s.errors), 'failed call', 'failed calls')}{_calls(s.errors)}",
            )
        elif share >= Fraction(2, 3) and s.unrecovered:
            flag(
                "error_handling",
                "a recovery",
                f"{_plural(len(s.unrecovered), 'error', 'errors')} without recovery"
                f"{_calls(s.unrecovered)}",
            )
        elif share <= 0 and not s.errors:
            flag("error_handling", "its worst category", "no failed call at all")
    return flags
