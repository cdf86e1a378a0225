"""Untrusted text made safe for where it goes: one terminal line, HTML, a Markdown cell.

Agent-controlled strings (tool names, flags, test ids, judge replies) reach the terminal, the
HTML report and the GitHub step summary; every renderer escapes them here, the one place.
"""

from __future__ import annotations

import functools
import re
from typing import Final

#: The characters shown as escapes, as ranges: C0, DEL and C1 controls; the line and
#: paragraph separators and bidirectional overrides (U+2028 to U+202E) and isolates (U+2066
#: to U+2069), which break lines in some terminals or reorder what follows them on screen;
#: and the surrogates, which cannot be printed alone.
_ESCAPED: Final = ((0x00, 0x1F), (0x7F, 0x9F), (0x2028, 0x202E), (0x2066, 0x2069), (0xD800, 0xDFFF))

#: Whether a text holds anything to escape: most text holds nothing, and a search for it
#: costs a tenth of translating it character by character.
_NEEDS_ESCAPE: Final = re.compile(
    "[" + "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in _ESCAPED) + "]"
)


#: Printable ASCII (space to ``~``), and with the line break: the bytes
#: :func:`printable_ascii` deletes from a text to see whether anything is left.
PRINTABLE: Final = bytes(range(0x20, 0x7F))
PRINTABLE_LINES: Final = PRINTABLE + b"\n"


def printable_ascii(text: str, keep: bytes = PRINTABLE) -> bool:
    """Whether ``text`` is ASCII of the bytes ``keep`` alone (printable ASCII: text no
    escaping here changes; ``PRINTABLE_LINES``, with line breaks). At C speed (``isascii``
    reads a flag; encoding and deleting the kept bytes are one pass each): a tenth of a
    regular expression's search of the same text."""
    return text.isascii() and not text.encode("ascii").translate(None, keep)


def needs_escape_but_newline(text: str) -> bool:
    """Whether :func:`terminal_text` would escape anything in ``text`` but its line breaks."""
    if printable_ascii(text, PRINTABLE_LINES):
        return False
    return _needs_escape_but_newline().search(text) is not None


@functools.cache
def _needs_escape_but_newline() -> re.Pattern[str]:
    """:data:`_NEEDS_ESCAPE` but for the line break (compiled on first need, as most text is
    printable ASCII): a text of lines joined by it holds nothing else to escape when this
    finds nothing (see reports._display.render_grade)."""
    ranges = ((0x00, 0x09), (0x0B, 0x1F), *_ESCAPED[1:])
    return re.compile("[" + "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in ranges) + "]")


@functools.cache
def _escape_table() -> dict[int, str]:
    """Each escaped character's escape (built on first need: most runs never need it)."""
    codes = [code for low, high in _ESCAPED for code in range(low, high + 1)]
    table = {code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" for code in codes}
    table.update({ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"})
    return table


def terminal_text(text: object) -> str:
    """``text`` safe to print on a terminal: every control character shown as an escape.

    Evidence, flags, session and test ids come from the graded agent: an ANSI escape in them
    could recolour, hide or rewrite the report (or the terminal's title), and a newline could
    forge a line of it. C0 and C1 controls, DEL, bidirectional overrides, line separators
    and lone surrogates become ``\\x1b``-style escapes; everything else is left as written.
    Every terminal path (the plugin's summary and failure message, the CLI) goes through
    this one function.
    """
    text = str(text)
    if printable_ascii(text) or _NEEDS_ESCAPE.search(text) is None:
        return text
    return text.translate(_escape_table())


def html_text(text: object) -> str:
    """``text`` safe in an HTML page: escaped, and its control characters shown as escapes
    (as :func:`terminal_text` shows them; HTML has no meaning for them, and a \\r read as a
    line break)."""
    import html  # here: html.entities' table is a tenth of `cleo-grade list`'s start-up

    return html.escape(terminal_text(text), quote=True)


def terminal_lines(text: str) -> str:
    """Text of several lines made safe line by line: its own line breaks are kept."""
    return "\n".join(map(terminal_text, text.split("\n")))


#: Characters that end or restyle a plain Markdown table cell, escaped with a backslash.
_MARKDOWN_SPECIAL: Final = frozenset("\\`*_[]<>|~#!&")


def _one_line(text: str) -> str:
    # A line break ends a table row, whatever the cell; agent text must stay in its cell.
    return " ".join(text.splitlines())


#: What GitHub turns into a link in plain text (its autolink extension): a scheme's ``://``,
#: ``mailto:`` and ``xmpp:``, ``www.``, and an e-mail address's ``@``.
_AUTOLINK: Final = re.compile(r"(?i)(://|\b(?:mailto|xmpp):|\bwww\.|@)")


def _unlinked(match: re.Match[str]) -> str:
    found = match.group()
    if found == "@":
        # No escape stops an address from linking; an HTML comment (rendered as nothing)
        # splits it where the autolinker looks.
        return "@<!-- -->"
    # An escaped ``:`` or ``.`` is the same character on the page, but no longer a link's.
    if found == "://":
        return "\\://"
    return found[:-1] + "\\" + found[-1]


def markdown_cell(text: str) -> str:
    """``text`` as one plain GitHub-flavoured Markdown table cell, shown exactly as written:
    it cannot leave its cell, restyle the page, add a link or carry a control character
    (shown escaped, as on the terminal)."""
    line = terminal_text(_one_line(text))
    escaped = "".join("\\" + c if c in _MARKDOWN_SPECIAL else c for c in line)
    return _AUTOLINK.sub(_unlinked, escaped)


def markdown_code_cell(text: str, *, in_table: bool = True) -> str:
    """``text`` as a code span, shown exactly (backslashes and backticks too).

    Inside a code span a backslash is literal, so in a table only the table's ``|`` is escaped
    (GFM splits cells before parsing spans), and outside one nothing is; the fence is one
    backtick longer than the longest run in the text, padded with spaces when the text starts
    or ends with a backtick.
    """
    line = terminal_text(_one_line(text))
    longest = max((len(run) for run in re.findall(r"`+", line)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if line.startswith("`") or line.endswith("`") else ""
    if in_table:
        line = line.replace("|", chr(92) + "|")
    return f"{fence}{pad}{line}{pad}{fence}"
