"""Per-client rate limits with the ``limits`` library (moving window).

A request with a valid API key counts against that key (its own limit, else ``rate_limit_per_key``);
one without counts against its client address (``rate_limit_anonymous``). Storage defaults to memory, per
process; point ``CAPPLAN_RATE_LIMIT_STORAGE`` at e.g. ``redis://`` when running several replicas.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import lru_cache

from limits import RateLimitItem, parse
from limits.storage import storage_from_string
from limits.strategies import MovingWindowRateLimiter

__all__ = ["DECISION_KEY", "Decision", "RateLimiter"]

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


class RateLimiter:
    def __init__(self, storage_uri: str = "memory://") -> None:
        self._limiter = MovingWindowRateLimiter(storage_from_string(storage_uri))
        #: the counters live in this process (``memory://``): a hit does no I/O and need not leave the event loop
        self.in_process = storage_uri.strip().startswith("memory://")

    def hit(self, identity: str, limit: str) -> Decision:
        item: RateLimitItem = _parsed(limit)
        allowed = self._limiter.hit(item, identity)
        stats = self._limiter.get_window_stats(item, identity)
        retry = 0 if allowed else max(1, math.ceil(stats.reset_time - time.time()))
        return Decision(allowed, item.amount, stats.remaining, retry)
