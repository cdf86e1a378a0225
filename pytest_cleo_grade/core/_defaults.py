"""The defaults the CLI's light commands print in their help (the rubric's name, where the
store and the history are), apart from the settings: ``cleo-grade list`` names them without
importing the settings' parsing machinery."""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["DEFAULT_DB", "DEFAULT_HISTORY", "DEFAULT_RUBRIC"]

DEFAULT_RUBRIC: Final = "cleo"
#: The audit store, under pytest's rootdir (plugin) or the current directory (CLI).
DEFAULT_DB: Final = Path(".cleo") / "audit.db"
#: The grade history, likewise.
DEFAULT_HISTORY: Final = Path(".cleo") / "metrics" / "GRADES.jsonl"
