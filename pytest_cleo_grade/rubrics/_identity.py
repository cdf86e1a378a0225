"""A rubric's settings as one hash (the ``rubricHash`` of its grades).

Name and version say which rubric graded; the hash says with which settings, so a rule file
edited without bumping its version is still told apart. It is the SHA-256 of the parsed
settings in a canonical JSON form (sorted keys, no spaces): a comment or a reordered table
changes no grade, so it changes no hash either.
"""

from __future__ import annotations

import hashlib
import json
from typing import Final

__all__ = ["HASH_KEY", "settings_hash"]

#: The extra of a GradeResult (and the field of a baseline) holding the hash.
HASH_KEY: Final = "rubricHash"


def settings_hash(settings: object) -> str:
    """The hex SHA-256 of ``settings`` (JSON-able; anything else by its ``str``)."""
    text = json.dumps(
        settings, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
