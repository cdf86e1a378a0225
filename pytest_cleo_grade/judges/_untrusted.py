"""Agent-controlled text in judge prompts: encoded so that it can never leave its line.

A judge prompt quotes what the agent did (its calls, its output). That text is untrusted: a
task id holding a newline and ``Dimensions:`` would otherwise add a log line or a section of
its own. Every such value goes into the prompt through :func:`one_line_json`.
"""

from __future__ import annotations

import json
import re
from typing import Final

__all__ = ["inline", "one_line_json"]

#: Characters json.dumps leaves raw (with ensure_ascii=False) that still end a line for
#: str.splitlines() and for some tokenizers: escaped so no value can start a new line.
_LINE_BREAKS: Final = {"\u0085": "\\u0085", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def one_line_json(value: object) -> str:
    """``value`` as compact JSON on one line: every line break inside it is escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    for raw, escaped in _LINE_BREAKS.items():
        text = text.replace(raw, escaped)
    return text


#: A value that cannot break its line (an id like ``s1`` or ``TQ-1``) is shown as is.
_PLAIN_TOKEN: Final = re.compile(r"[A-Za-z0-9_.:@/+-]{1,200}")


def inline(text: str) -> str:
    """A plain identifier as is; anything else as :func:`one_line_json` of it."""
    return text if _PLAIN_TOKEN.fullmatch(text) else one_line_json(text)
