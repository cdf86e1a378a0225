"""A fixture for tests that run pydantic-ai's ``run_sync`` in the pytest process."""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Iterator

import pytest


@pytest.fixture
def close_the_loop_run_sync_leaves() -> Iterator[None]:
    """Close the event loop ``run_sync`` leaves behind.

    run_sync leaves its event loop as the thread's current loop, to reuse it; a later
    asyncio.run() (the OpenAI Agents tests, say) replaces it, and the loop is collected
    unclosed, during whichever test runs then: a ResourceWarning, an error under
    filterwarnings = error.
    """
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # no current loop: made, then closed
        try:
            loop = asyncio.get_event_loop_policy().get_event_loop()
        except RuntimeError:  # none, and none may be made (set to None before)
            return
    if not loop.is_running():
        loop.close()
        asyncio.set_event_loop(None)
