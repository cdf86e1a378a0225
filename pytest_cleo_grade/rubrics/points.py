"""Building the ``points`` extra: one item per award, deduction or missed award of a grade.

Every rubric explains its score the same way (DESIGN section 8): a list of items, each with
the dimension, the signed points, a stable rule id, one sentence and the indices (in grading
order) of the entries that caused it. A dimension's items sum exactly to its score.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
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


class Violations:
    """The violations of one rule, kept as far as their points items need them.

    The first POINT_ITEM_LIMIT get an item (and a sentence) each; the rest share one item
    that counts them and lists the first POINT_ENTRY_LIMIT of their indices, so a rule
    broken 50,000 times keeps a count, not 50,000 records.
    """

    __slots__ = ("_items", "_rest", "_rest_entries")

    def __init__(self) -> None:
        self._items: list[tuple[str, Iterable[int]]] = []
        self._rest = 0
        self._rest_entries: list[int] = []

    @property
    def itemized(self) -> bool:
        """Whether the next violation gets an item of its own (and so needs a sentence)."""
        return len(self._items) < POINT_ITEM_LIMIT

    def add(self, text: str, where: Iterable[int]) -> None:
        """One violation; ``text`` is never read when it is past the itemized ones."""
        if self.itemized:
            self._items.append((text, where))
            return
        self._rest += 1
        if len(self._rest_entries) < POINT_ENTRY_LIMIT:
            self._rest_entries.extend(where)

    def items(self, dimension: str, each: int | float, rule: str) -> list[dict[str, Any]]:
        """An item per itemized violation (``each`` points), then one for the rest."""
        items = [point(dimension, each, rule, text, where) for text, where in self._items]
        if self._rest:
            text = f"{self._rest} more like the above"
            items.append(point(dimension, each * self._rest, rule, text, self._rest_entries))
        return items


def per_violation(
    dimension: str, each: int | float, rule: str, texts: Iterable[tuple[str, Iterable[int]]]
) -> list[dict[str, Any]]:
    """An item per violation (``each`` points), the ones past POINT_ITEM_LIMIT in one item
    (whose sentences are never read: a caller may leave them empty)."""
    found = Violations()
    for text, where in texts:
        found.add(text, where)
    return found.items(dimension, each, rule)


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
