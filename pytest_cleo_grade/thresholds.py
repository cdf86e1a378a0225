"""Grade thresholds: a letter or a percentage, turned into the minimum exact percentage."""

from __future__ import annotations

import math
from typing import Final

from pytest_cleo_grade.models import LETTER_CUTOFFS

__all__ = ["THRESHOLD_FORMS", "parse_grade_threshold"]

THRESHOLD_FORMS: Final = (
    "a letter A-F (F means no minimum) or a percentage 0-100 such as 85, 85% or 85.5"
)

_LETTERS: Final[dict[str, float]] = dict(LETTER_CUTOFFS)


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
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"invalid grade {value!r}: expected {THRESHOLD_FORMS}") from None
    if not math.isfinite(number) or not 0 <= number <= 100:
        raise ValueError(f"invalid grade {value!r}: expected {THRESHOLD_FORMS}")
    return number
