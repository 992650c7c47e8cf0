"""The cyclic garbage collector paused around a search that allocates much and frees nothing cyclic.

CPython's collector runs a collection of the oldest generation, which traverses every tracked object in the
process, whenever the objects that survived younger collections since the last full one exceed a quarter of
those it holds (``Modules/gcmodule.c``, ``long_lived_pending > long_lived_total / 4``; the gc module's
documentation). The planner's search fills its caches with tens of thousands of long-lived containers (layouts,
requests, memory and step-time results), so a search of a few tenths of a second triggered one or two full
collections, each a traversal of the whole process (its catalog, the pydantic schemas, the app), a fifth or
more of the search's time (docs/benchmarks.md). Nothing the search allocates refers back to the objects that
refer to it, so its garbage is freed by reference counting when the search's context goes away; the collector
has nothing to find there. :func:`paused` disables automatic collection for the duration of a search and
restores it after, counted across threads: the first search to enter disables it (if it was enabled), the last
to leave enables it again. Explicit ``gc.collect()`` calls still run.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

__all__ = ["paused"]

_lock = threading.Lock()
_state: Final[list[int]] = [0, 0]  # [searches inside, whether the first one found the collector enabled]


@contextmanager
def paused() -> Iterator[None]:
    """Automatic garbage collection off while the block runs (module docstring)."""
    with _lock:
        if _state[0] == 0:
            _state[1] = int(gc.isenabled())
            gc.disable()
        _state[0] += 1
    try:
        yield
    finally:
        with _lock:
            _state[0] -= 1
            if _state[0] == 0 and _state[1]:
                gc.enable()
