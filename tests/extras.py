"""Skipping a test module whose extra is not installed, decided without importing the extra.

``pytest.importorskip`` imports the module it checks: at collection, so every xdist worker
paid for the agent frameworks a module only names (importing pydantic-ai, the MCP SDK, the
OpenAI Agents SDK and the Claude SDK took 1.8 s of a worker's 8 s collection) even when the
module's tests run elsewhere, or drive the framework in an inner run of their own.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

__all__ = ["installed", "needs"]


def installed(name: str) -> bool:
    """Whether the module ``name`` is there to import, found on disk without importing it.

    ``importlib.util.find_spec`` of a dotted name imports its parent packages; here only the
    top-level package is looked up, and the rest are directories or files inside it.
    """
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None:
        return False
    places = [Path(place) for place in spec.submodule_search_locations or ()]
    for depth, part in enumerate(rest):
        if depth == len(rest) - 1 and any((place / f"{part}.py").is_file() for place in places):
            return True
        places = [place / part for place in places if (place / part / "__init__.py").is_file()]
        if not places:
            return False
    return True


def needs(name: str, reason: str) -> pytest.MarkDecorator:
    """A mark that skips with ``reason`` unless ``name`` is installed (see :func:`installed`)."""
    return pytest.mark.skipif(not installed(name), reason=reason)
