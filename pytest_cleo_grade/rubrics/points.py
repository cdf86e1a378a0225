"""Building the ``points`` extra: one item per award, deduction or missed award of a grade.

Every rubric explains its score the same way (DESIGN section 8): a list of items, each with
the dimension, the signed points, a stable rule id, one sentence and the indices (in grading
order) of the entries that caused it. A dimension's items sum exactly to its score.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import chain, islice
from typing import Any, Final

#: The most entry indices one item lists; a million-entry session would otherwise carry a
#: million indices in every history line. The sentence still counts them all.
POINT_ENTRY_LIMIT: Final = 100
#: The most items one rule adds for one dimension; further violations share a last item.
POINT_ITEM_LIMIT: Final = 100


def point(
    dimension: str, points: int | float, rule: str, text: str, entries: Iterable[int] = ()
) -> dict[str, Any]:
    """One item of the ``points`` extra, in its JSON shape (see ``models.Point``)."""
    listed = list(islice(entries, POINT_ENTRY_LIMIT))
    return {"dimension": dimension, "points": points, "rule": rule, "text": text, "entries": listed}


def per_violation(
    dimension: str, each: int | float, rule: str, texts: Sequence[tuple[str, Iterable[int]]]
) -> list[dict[str, Any]]:
    """An item per violation (``each`` points), the ones past POINT_ITEM_LIMIT in one item
    (whose sentences are never read: a caller may leave them empty)."""
    items = [point(dimension, each, rule, text, where) for text, where in texts[:POINT_ITEM_LIMIT]]
    rest = texts[POINT_ITEM_LIMIT:]
    if rest:
        entries = chain.from_iterable(where for _, where in rest)  # point() takes the first
        items.append(
            point(dimension, each * len(rest), rule, f"{len(rest)} more like the above", entries)
        )
    return items


def balance(
    items: list[dict[str, Any]], dimension: str, score: int | float, rule: str
) -> list[dict[str, Any]]:
    """Add the item that a floor or a cap took away, so the dimension's items sum to ``score``."""
    total = sum(item["points"] for item in items if item["dimension"] == dimension)
    if total != score:
        clipped = "floor of 0" if total < score else "cap"
        items.append(
            point(
                dimension,
                score - total,
                rule,
                f"The dimension's {clipped} keeps its score at {score:g}",
            )
        )
    return items
