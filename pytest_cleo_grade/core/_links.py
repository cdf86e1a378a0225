"""Where the published documentation lives: messages link to it, not to a checkout's files.

``DOCS_URL`` is ``[project.urls] Documentation`` of pyproject.toml (a test keeps them equal).
"""

from __future__ import annotations

from typing import Final

__all__ = ["DOCS_URL", "docs_page"]

#: The documentation's home: the docs folder of the project's repository.
DOCS_URL: Final = "https://github.com/cleo-grade/pytest-cleo-grade/blob/main/docs"


def docs_page(page: str, anchor: str | None = None) -> str:
    """The address of ``page`` (``capture.md``), at its section ``anchor`` if given."""
    return f"{DOCS_URL}/{page}" + (f"#{anchor}" if anchor else "")
