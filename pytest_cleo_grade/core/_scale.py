"""The letter scale: CLEO's cut-offs, letters, half-up rounding, and threshold parsing.

Standard library only, so that the settings layer can check a marker's ``fail_under``
without loading pydantic.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Final, Literal

__all__ = [
    "LETTER_CUTOFFS",
    "THRESHOLD_FORMS",
    "Letter",
    "letter_for",
    "parse_grade_threshold",
    "percent_of",
    "round_half_up",
]

Letter = Literal["A", "B", "C", "D", "F"]

#: The CLEO Grade Specification's letter scale: the first cut-off the exact percentage reaches wins.
LETTER_CUTOFFS: Final[tuple[tuple[Letter, float], ...]] = (
    ("A", 90.0),
    ("B", 75.0),
    ("C", 60.0),
    ("D", 45.0),
    ("F", 0.0),
)


def letter_for(percent: float) -> Letter:
    """Return the letter for an exact percentage (89.99 is a B, 90 an A)."""
    if math.isnan(percent):
        raise ValueError("percent must be a number, not NaN")
    for letter, cutoff in LETTER_CUTOFFS:
        if percent >= cutoff:
            return letter
    return "F"


def round_half_up(value: float) -> int:
    """Round .5 away from zero for positive values, as JavaScript's Math.round does.

    Python's round() rounds half to even (round(82.5) == 82); CLEO's numbers come from
    JavaScript, so displayed percentages must round 82.5 up to 83.
    """
    # to_integral_value, unlike quantize, has no 28-digit limit: 1e300 rounds too.
    return int(Decimal(repr(value)).to_integral_value(rounding=ROUND_HALF_UP))


def hundredths_half_up(value: Fraction) -> float:
    """An exact non-negative value rounded half up to two decimals (2/3 -> 0.67), as a float.

    Rounding the float instead would round 0.135 down: as a float it is 0.13499999...
    """
    return float(Fraction(math.floor(value * 100 + Fraction(1, 2)), 100))


def percent_of(score: float, max_score: float) -> float:
    """The exact percentage of ``score`` out of ``max_score`` (0 when max is 0)."""
    if max_score == 0:
        return 0.0
    return score * 100.0 / max_score


THRESHOLD_FORMS: Final = (
    "a letter A, B, C, D or F (F means no minimum) or a percentage 0-100 such as 85, 85% or 85.5"
)

_LETTERS: Final[dict[str, float]] = dict(LETTER_CUTOFFS)


_DECIMAL: Final = re.compile(r"\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")


def parse_grade_threshold(value: str | float) -> float:
    """Return the minimum percentage a grade must reach; ValueError names the accepted forms."""
    if isinstance(value, bool):
        raise ValueError(f"invalid grade {value!r}: expected {THRESHOLD_FORMS}")
    if isinstance(value, int | float):
        number = float(value)
    else:
        text = value.strip()
        if text.upper() in _LETTERS and len(text) == 1:
            return _LETTERS[text.upper()]
        if text.endswith("%"):
            text = text[:-1].strip()
        # float() would also take other scripts' digits ("٣" is 3), "1_0" and "1e1".
        if not _DECIMAL.fullmatch(text):
            raise ValueError(f"invalid grade {value!r}: expected {THRESHOLD_FORMS}")
        number = float(text)
    if not math.isfinite(number) or not 0 <= number <= 100:
        raise ValueError(f"invalid grade {value!r}: expected {THRESHOLD_FORMS}")
    return number
