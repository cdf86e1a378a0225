"""Bulk work on many entries: pausing the cyclic garbage collector while it runs."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["collector_paused"]


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector for a block that builds many objects at once.

    Validating, reading or grading a large session allocates millions of small objects, none
    of which form cycles; the allocations trigger full collections that traverse every live
    object again and again. Measured on a 50k-entry session, reading it from the store took
    1.7x as long with the collector running. The previous state is restored on exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
