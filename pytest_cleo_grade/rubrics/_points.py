"""Building the ``points`` extra: one item per award, deduction or missed award of a grade.

Every rubric explains its score the same way (DESIGN section 8): a list of items, each with
the dimension, the signed points, a stable rule id, one sentence and the indices (in grading
order) of the entries that caused it. A dimension's items sum exactly to its score.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from itertools import chain, islice
from typing import Any, Final

from pytest_cleo_grade.core.models import POINT_ENTRY_LIMIT as POINT_ENTRY_LIMIT

#: The most items one rule adds for one dimension; further violations share a last item.
POINT_ITEM_LIMIT: Final = 100


def point(
    dimension: str, points: int | float, rule: str, text: str, entries: Iterable[int] = ()
) -> dict[str, Any]:
    """One item of the ``points`` extra, in its JSON shape (see ``models.Point``)."""
    listed = list(islice(entries, POINT_ENTRY_LIMIT))
    return {"dimension": dimension, "points": points, "rule": rule, "text": text, "entries": listed}


def violation_items(
    dimension: str,
    each: int | float,
    rule: str,
    wheres: Sequence[Iterable[int]],
    text: Callable[[int], str],
) -> list[dict[str, Any]]:
    """The items of one rule's violations, ``wheres[i]`` being where the i-th one happened.

    The first POINT_ITEM_LIMIT get an item each, with the sentence ``text(i)`` (asked for
    those only: a rule broken 50,000 times writes a hundred sentences); the rest share one
    item that counts them and lists the first POINT_ENTRY_LIMIT of their indices.
    """
    shown = min(len(wheres), POINT_ITEM_LIMIT)
    items = [point(dimension, each, rule, text(i), wheres[i]) for i in range(shown)]
    rest = len(wheres) - shown
    if rest:
        entries = islice(chain.from_iterable(islice(wheres, shown, None)), POINT_ENTRY_LIMIT)
        text_of_rest = f"{rest} more like the above"
        items.append(point(dimension, each * rest, rule, text_of_rest, entries))
    return items


def per_violation(
    dimension: str, each: int | float, rule: str, texts: Iterable[tuple[str, Iterable[int]]]
) -> list[dict[str, Any]]:
    """An item per violation (``each`` points), the ones past POINT_ITEM_LIMIT in one item
    (whose sentences are never read: a caller may leave them empty)."""
    found = list(texts)
    return violation_items(dimension, each, rule, [w for _, w in found], lambda i: found[i][0])


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
