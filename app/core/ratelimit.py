"""Per-client rate limits with the ``limits`` library (moving window).

A request with a valid API key counts against that key (its own limit, else ``rate_limit_per_key``);
one without counts against its client address (``rate_limit_anonymous``). Storage defaults to memory, per
process; point ``CAPPLAN_RATE_LIMIT_STORAGE`` at e.g. ``redis://`` when running several replicas.

In memory (``memory://``) the moving windows are :class:`MovingWindows`, not ``limits``' ``MemoryStorage``: that
one inserts every hit at the front of a list (a copy of the whole window per hit: 60,000 entries at 1,000
requests/s in a one-minute window) and starts a timer thread every 10 ms to trim the lists, which held the
event loop for milliseconds under load (issue 19, p99). Same rule: a hit is allowed when fewer than the limit's
amount of hits are in the last expiry seconds; ``remaining`` and the reset time as ``limits`` computes them.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from functools import lru_cache

from limits import RateLimitItem, parse
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

__all__ = ["DECISION_KEY", "Decision", "MovingWindows", "RateLimiter"]

#: the scope key under which a refused rate-limit decision goes on to the route (``app.deps.enforce_rate_limit``;
#: set by ``app.api.replay``, which counts a request it may answer itself)
DECISION_KEY = "capplan.rate_limit_decision"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    limit: int
    remaining: int
    retry_after_s: int


@lru_cache(maxsize=256)
def _parsed(limit: str) -> RateLimitItem:
    return parse(limit)


class MovingWindows:
    """Moving-window counters in this process: per key, the times of the hits in the window, oldest first
    (appended on the right, expired ones dropped from the left: constant time per hit). Keys whose window
    has emptied are swept every ``sweep_every`` hits, so the map stays as large as the clients of the last
    window."""

    def __init__(self, sweep_every: int = 10_000) -> None:
        self._hits: dict[tuple[int, int, str], deque[float]] = {}
        self._lock = threading.Lock()
        self._sweep_every = sweep_every
        self._since_sweep = 0

    def hit(self, item: RateLimitItem, identity: str, now: float | None = None) -> tuple[bool, int, float]:
        """(allowed, remaining, reset time) after one hit of ``identity`` against ``item``."""
        now = time.time() if now is None else now
        expiry = item.get_expiry()
        key = (item.amount, expiry, identity)
        with self._lock:
            times = self._hits.get(key)
            if times is None:
                times = self._hits[key] = deque()
            start = now - expiry
            while times and times[0] < start:
                times.popleft()
            allowed = len(times) < item.amount
            if allowed:
                times.append(now)
            self._since_sweep += 1
            if self._since_sweep >= self._sweep_every:
                self._sweep(now)
            reset = (times[0] if times else now) + expiry
            return allowed, item.amount - len(times), reset

    def _sweep(self, now: float) -> None:
        self._since_sweep = 0
        for key in [k for k, times in self._hits.items() if not times or times[-1] < now - k[1]]:
            del self._hits[key]


class RateLimiter:
    def __init__(self, storage_uri: str = "memory://") -> None:
        #: the counters live in this process (``memory://``): a hit does no I/O and need not leave the event loop
        self.in_process = storage_uri.strip().startswith("memory://")
        self._windows = MovingWindows() if self.in_process else None
        self._limiter = None if self.in_process else MovingWindowRateLimiter(storage_from_string(storage_uri))

    def hit(self, identity: str, limit: str) -> Decision:
        item: RateLimitItem = _parsed(limit)
        if self._windows is not None:
            allowed, remaining, reset = self._windows.hit(item, identity)
            retry = 0 if allowed else max(1, math.ceil(reset - time.time()))
            return Decision(allowed, item.amount, max(0, remaining), retry)
        assert self._limiter is not None
        allowed = self._limiter.hit(item, identity)
        stats = self._limiter.get_window_stats(item, identity)
        retry = 0 if allowed else max(1, math.ceil(stats.reset_time - time.time()))
        return Decision(allowed, item.amount, stats.remaining, retry)
