"""Flatten a JSON document into ``(dotted.path, value)`` rows for CSV and the printable page."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["flatten"]


def flatten(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Leaves of ``value``; lists of scalars become one ``a | b`` cell, lists of objects are indexed."""
    if isinstance(value, dict):
        for key, sub in value.items():
            yield from flatten(sub, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list) and any(isinstance(v, dict | list) for v in value):
        for i, sub in enumerate(value):
            yield from flatten(sub, f"{prefix}.{i}")
    elif isinstance(value, list):
        yield prefix, " | ".join(str(v) for v in value)
    else:
        yield prefix, value
