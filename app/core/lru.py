"""A bounded, thread-safe least-recently-used map: the one both answer caches of ``POST /api/v1/estimates``
use (:class:`app.services.estimates.AnswerCache` by validated request, :class:`app.api.replay.ReplayAnswers`
by request bytes)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

__all__ = ["LockedLRU"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LockedLRU(Generic[K, V]):
    """At most ``size`` entries; a hit makes its entry the most recent, a put past ``size`` drops the oldest."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._data.get(key)
            if found is not None:
                self._data.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()
