"""One bounded memo for the estimator's pure sub-results.

The planner, the largest-micro-batch search and the suggestions ask again and again for results that depend on
a few request fields only (model states do not depend on the batch shape, for instance), so each such function
memoises on the fields it reads. A memo is a plain dict emptied whole when it reaches its size, which bounds
memory in a long-running server without the bookkeeping of an LRU (``functools.lru_cache`` would also need the
whole request to be hashable, and hashing it costs more than the fields do).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, Final, Generic, TypeVar

__all__ = ["BoundedMemo", "ObjectMemo", "clear_all", "field_values"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MISSING: Final = object()
_ALL: Final[list[BoundedMemo[Any, Any] | ObjectMemo[Any]]] = []  # every memo made (module-level: a fixed set)


def clear_all() -> None:
    """Empty every memo: the next calls compute afresh, as the first request of a process does (benchmarks
    time a search with and without what earlier searches left; answers are the same either way)."""
    for memo in _ALL:
        memo.clear()


class BoundedMemo(Generic[K, V]):
    """A dict memo of at most ``max_entries`` entries (emptied when full). Values may be ``None``."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._data: dict[K, V] = {}
        _ALL.append(self)

    def clear(self) -> None:
        self._data.clear()

    def __contains__(self, key: K) -> bool:
        return key in self._data

    def __getitem__(self, key: K) -> V:
        return self._data[key]

    def get(self, key: K) -> V | None:
        return self._data.get(key)

    def remember(self, key: K, value: V) -> V:
        if len(self._data) >= self.max_entries:
            self._data.clear()
        self._data[key] = value
        return value

    def get_or_compute(self, key: K, compute: Callable[[], V]) -> V:
        """The value remembered for ``key``, else ``compute()`` remembered. (The memos on the planner's per-layout
        path use :meth:`get` and :meth:`remember` instead: the ``lambda`` a call here passes is two objects
        allocated at every call, hit or miss, about 350 machine instructions compiled.)"""
        found = self._data.get(key, _MISSING)
        if found is _MISSING:
            return self.remember(key, compute())
        return found  # type: ignore[return-value]


class ObjectMemo(Generic[V]):
    """A memo keyed on objects by identity (catalog GPUs and servers, memoised sub-results: hashing them by value
    costs more than the work saved) plus hashable extras. The entry keeps the objects, so an ``id`` reused after
    one was freed cannot match another object; at most ``max_entries`` entries (emptied when full)."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._data: dict[tuple[tuple[int, ...], tuple[Hashable, ...]], tuple[tuple[object, ...], V]] = {}
        _ALL.append(self)

    def clear(self) -> None:
        self._data.clear()

    def get_or_compute(self, objects: tuple[object, ...], extra: tuple[Hashable, ...],
                       compute: Callable[[], V]) -> V:
        key = (tuple([id(o) for o in objects]), extra)
        found = self._data.get(key)
        if found is not None and _same(found[0], objects):
            return found[1]
        if len(self._data) >= self.max_entries:
            self._data.clear()
        value = compute()
        self._data[key] = (objects, value)
        return value


def _same(kept: tuple[object, ...], objects: tuple[object, ...]) -> bool:
    """Whether the entry's objects are these very objects (not others that reuse their ``id``)."""
    return len(kept) == len(objects) and all(kept[i] is objects[i] for i in range(len(kept)))


def field_values(model: object) -> tuple[object, ...]:
    """A frozen pydantic model's field values, in order (its ``__dict__`` holds exactly its fields), for a memo key
    in a position that fixes the model's class: equal models give equal tuples, hashed and compared in C, where
    pydantic's ``__hash__`` and ``__eq__`` run in Python at every lookup."""
    return tuple(vars(model).values())
