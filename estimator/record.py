"""Value records: the estimator's small immutable results that are made by the thousand per estimate.

A record class lists its fields in ``__slots__`` and sets each once in ``__init__`` (typed ``Final``: mypy
rejects any later assignment); :class:`Record` gives it equality, hashing and a repr by those fields, as a frozen
dataclass would. Why not a frozen dataclass: its generated ``__init__`` goes through ``object.__setattr__`` for
every field, about 1 us per object in CPython and more in the compiled build, where a class with its own
``__init__`` is a native class built in a few tens of nanoseconds (docs/native.md); a step-time estimate makes
some twenty of these objects, an estimate some eighty.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = ["Record"]


class Record:
    """Equality, hash and repr by the fields the subclass names in ``__match_args__`` (its ``__slots__``), in order."""

    __slots__ = ()
    __match_args__: ClassVar[tuple[str, ...]] = ()

    def _fields(self) -> tuple[object, ...]:
        names: tuple[str, ...] = type(self).__match_args__
        return tuple(getattr(self, name) for name in names)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Record) and type(other) is type(self) and self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        names: tuple[str, ...] = type(self).__match_args__
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{type(self).__name__}({shown})"
