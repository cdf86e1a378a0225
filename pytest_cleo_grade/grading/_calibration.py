"""How far a judge agrees with people: judged grades against manual ones, per dimension.

Pairs: each session with both a judged grade (``judgeScores``) and a manual grade
(``evaluator: "manual"``, ``manualScores``) in the history, the latest of each. The
dimensions' shapes (categories and their order, numeric ranges) come from the manual grade.

- categorical: *agreement* is the share of sessions where both chose the same category;
  *Cohen's weighted kappa* uses **quadratic** weights, w(i, j) = (i - j)^2 / (k - 1)^2 over
  the k ordered categories: kappa = 1 - sum(w * observed) / sum(w * expected), the expected
  table being the product of the two raters' category frequencies (None when that sum is 0:
  both raters always chose one category); the confusion table counts (person, judge) pairs.
- numeric: *agreement* is the share within a tenth of the dimension's range; *Spearman's rho*
  is the Pearson correlation of the two ranks (ties take their average rank; None when either
  side is constant); the *mean absolute difference* is in the dimension's own units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from pytest_cleo_grade.core.models import GradeResult

__all__ = [
    "NUMERIC_TOLERANCE",
    "Calibration",
    "DimensionAgreement",
    "calibrate",
    "spearman",
    "weighted_kappa",
]

#: A numeric score agrees when within this share of the dimension's range.
NUMERIC_TOLERANCE: Final = 0.1
_JUDGE_KEY: Final = "judgeScores"
_MANUAL_KEY: Final = "manualScores"
_SHAPES_KEY: Final = "judgeDimensions"


@dataclass(frozen=True, slots=True)
class DimensionAgreement:
    name: str
    kind: str  # "categorical" | "numeric"
    pairs: int
    agreement: float
    kappa: float | None = None
    spearman: float | None = None
    mean_abs_diff: float | None = None
    #: Categories in order, and counts[person][judge] (categorical only).
    labels: tuple[str, ...] = ()
    confusion: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Calibration:
    sessions: tuple[str, ...]
    dimensions: tuple[DimensionAgreement, ...]
    #: Why a pair or a dimension was left out (one line each).
    notes: tuple[str, ...] = field(default=())


def weighted_kappa(person: Sequence[int], judge: Sequence[int], k: int) -> float | None:
    """Cohen's kappa with quadratic weights over categories 0..k-1 (None: undefined)."""
    n = len(person)
    if n == 0 or k < 2:
        return None
    observed = [[0] * k for _ in range(k)]
    for a, b in zip(person, judge, strict=True):
        observed[a][b] += 1
    rows = [sum(observed[i]) for i in range(k)]
    cols = [sum(observed[i][j] for i in range(k)) for j in range(k)]
    disagree = 0.0
    chance = 0.0
    for i in range(k):
        for j in range(k):
            w = (i - j) ** 2 / (k - 1) ** 2
            disagree += w * observed[i][j] / n
            chance += w * rows[i] * cols[j] / (n * n)
    if chance == 0:
        return None
    return 1 - disagree / chance


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for position in range(i, j + 1):
            ranks[order[position]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Spearman's rho: Pearson's r of the average ranks (None when a side is constant)."""
    if len(a) < 2:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb, strict=True))
    va = sum((x - ma) ** 2 for x in ra)
    vb = sum((y - mb) ** 2 for y in rb)
    if va == 0 or vb == 0:
        return None
    return cov / math.sqrt(va * vb)


def _latest(
    history: Sequence[GradeResult],
) -> tuple[dict[str, GradeResult], dict[str, GradeResult]]:
    judged: dict[str, GradeResult] = {}
    manual: dict[str, GradeResult] = {}
    for result in history:
        extra = result.model_extra or {}
        if result.evaluator == "manual" and isinstance(extra.get(_MANUAL_KEY), Mapping):
            manual[result.session_id] = result
        elif result.evaluator == "auto" and isinstance(extra.get(_JUDGE_KEY), Mapping):
            judged[result.session_id] = result
    return judged, manual


def calibrate(history: Sequence[GradeResult]) -> Calibration:
    """Every dimension's agreement over the sessions graded by both a judge and a person."""
    judged, manual = _latest(history)
    sessions = [s for s in manual if s in judged]
    notes: list[str] = []
    values: dict[str, list[tuple[Any, Any]]] = {}
    shapes: dict[str, Mapping[str, Any]] = {}
    for session in sessions:
        person_extra = manual[session].model_extra or {}
        judge_scores = (judged[session].model_extra or {})[_JUDGE_KEY]
        session_shapes = person_extra.get(_SHAPES_KEY)
        if not isinstance(session_shapes, Mapping):
            notes.append(f"{session}: the manual grade names no dimension shapes; left out")
            continue
        for name, score in person_extra[_MANUAL_KEY].items():
            shape = session_shapes.get(name)
            if not isinstance(shape, Mapping) or name not in judge_scores:
                notes.append(f"{session}: {name}: not judged; left out")
                continue
            shapes.setdefault(name, shape)
            values.setdefault(name, []).append((score, judge_scores[name]))
    dimensions = [_agreement(name, shapes[name], pairs, notes) for name, pairs in values.items()]
    return Calibration(tuple(sessions), tuple(d for d in dimensions if d is not None), tuple(notes))


def _category(categories: Mapping[str, int], value: object) -> int | None:
    if isinstance(value, str):
        by_fold = {label.casefold(): rank for label, rank in categories.items()}
        return by_fold.get(value.strip().casefold())
    if isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer():
        rank = int(value)
        return rank if 0 <= rank < len(categories) else None
    return None


def _agreement(
    name: str, shape: Mapping[str, Any], pairs: list[tuple[Any, Any]], notes: list[str]
) -> DimensionAgreement | None:
    if shape.get("type") == "categorical":
        categories = shape.get("categories")
        if not isinstance(categories, Mapping) or not categories:
            notes.append(f"{name}: no categories; left out")
            return None
        ranked = [(_category(categories, a), _category(categories, b)) for a, b in pairs]
        kept = [(a, b) for a, b in ranked if a is not None and b is not None]
        if len(kept) < len(ranked):
            notes.append(f"{name}: {len(ranked) - len(kept)} scores not among its categories")
        if not kept:
            return None
        k = len(categories)
        confusion = [[0] * k for _ in range(k)]
        for a, b in kept:
            confusion[a][b] += 1
        labels = tuple(sorted(categories, key=lambda label: categories[label]))
        return DimensionAgreement(
            name,
            "categorical",
            len(kept),
            sum(a == b for a, b in kept) / len(kept),
            kappa=weighted_kappa([a for a, _ in kept], [b for _, b in kept], k),
            labels=labels,
            confusion=tuple(tuple(row) for row in confusion),
        )
    low, high = shape.get("min", 0.0), shape.get("max", 1.0)
    numbers = [
        (float(a), float(b))
        for a, b in pairs
        if isinstance(a, int | float) and isinstance(b, int | float)
    ]
    if not numbers:
        return None
    span = (float(high) - float(low)) or 1.0
    return DimensionAgreement(
        name,
        "numeric",
        len(numbers),
        sum(abs(a - b) <= NUMERIC_TOLERANCE * span + 1e-12 for a, b in numbers) / len(numbers),
        spearman=spearman([a for a, _ in numbers], [b for _, b in numbers]),
        mean_abs_diff=sum(abs(a - b) for a, b in numbers) / len(numbers),
    )
