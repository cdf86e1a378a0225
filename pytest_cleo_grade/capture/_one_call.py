"""One call, one entry, whichever processes saw it.

In one process an adapter and the spans around a call know of each other (``_direct``).
Across processes they cannot: an MCP client traced in the pytest process
(``--cleo-grade-capture=otel``) calls a stdio server whose ``audit_middleware`` records the
same call into the store, or whose own spans reach the OTLP receiver. What ties them is the
trace context the MCP SDK sends with the request (W3C ``traceparent`` in ``_meta``): the
server's span names the client's span as its parent, and the middleware notes it as
``callerSpanId``. :func:`one_entry_per_call` joins the entries so linked into one, when
they are the same call (the same tool, the same arguments where both know them):

- an adapter's entry (it saw the result: the isError text, CLEO's envelope) wins over the
  spans' entries of its call;
- of spans only, the outermost is kept, with the failure of a deeper one when it saw none
  (the client's span of a call whose result was isError says nothing; the server's says
  ``tool_error``) and the deeper one's parameters when it has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_cleo_grade.capture._direct import CallIdentity, same_call
from pytest_cleo_grade.core.models import AuditEntry

__all__ = ["one_entry_per_call"]


def _extra(entry: AuditEntry, key: str) -> str | None:
    value = (entry.metadata.model_extra or {}).get(key)
    return value if isinstance(value, str) and value else None


def _identity(entry: AuditEntry) -> CallIdentity:
    tool = _extra(entry, "tool")
    # A span that carries no arguments (the MCP SDK's) says nothing of them: not "none".
    return CallIdentity.of(tool, None, dict(entry.params) if entry.params else None)


def one_entry_per_call(entries: Sequence[AuditEntry]) -> list[AuditEntry]:
    """``entries`` with the entries of one call seen in several processes joined into one
    (see the module's text); the order is kept. Linear in the entries."""
    by_span: dict[str, int] = {}
    for index, entry in enumerate(entries):
        span_id = _extra(entry, "spanId")
        if span_id is not None:
            by_span.setdefault(span_id, index)
            # The spans folded into this one as layers of its call (its MCP client span).
            layers = (entry.metadata.model_extra or {}).get("layerSpanIds")
            for layer in layers if isinstance(layers, list) else ():
                if isinstance(layer, str) and layer:
                    by_span.setdefault(layer, index)
    if not by_span:
        return list(entries)
    # Each entry linked to the entry of the span it was called in (its outer layer).
    outer: dict[int, int] = {}
    for index, entry in enumerate(entries):
        link = _extra(entry, "callerSpanId") or _extra(entry, "parentSpanId")
        around = by_span.get(link) if link is not None else None
        if around is None or around == index:
            continue
        if same_call(_identity(entry), _identity(entries[around])):
            outer[index] = around
    if not outer:
        return list(entries)
    groups: dict[int, list[int]] = {}
    for index in outer:
        groups.setdefault(_root(index, outer), []).append(index)
    replaced: dict[int, AuditEntry] = {}
    dropped: set[int] = set()
    for root, inner in groups.items():
        members = [root, *inner]
        direct = [i for i in members if _extra(entries[i], "spanId") is None]
        if direct:
            dropped.update(i for i in members if i not in direct)
            continue
        dropped.update(inner)
        replaced[root] = _joined(entries[root], [entries[i] for i in inner])
    return [
        replaced.get(index, entry) for index, entry in enumerate(entries) if index not in dropped
    ]


def _root(index: int, outer: dict[int, int]) -> int:
    seen = {index}
    while index in outer and outer[index] not in seen:
        index = outer[index]
        seen.add(index)
    return index


def _joined(kept: AuditEntry, deeper: list[AuditEntry]) -> AuditEntry:
    update: dict[str, Any] = {}
    if kept.result.success:
        failed = next((e for e in deeper if not e.result.success), None)
        if failed is not None:
            update["result"] = failed.result.model_copy(update={"duration": kept.result.duration})
            update["error"] = failed.error
    if not kept.params:
        known = next((e for e in deeper if e.params), None)
        if known is not None:
            update["params"] = known.params
    return kept.model_copy(update=update) if update else kept
