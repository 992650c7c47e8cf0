"""What changed between two JSON documents, leaf by leaf (lists compare as whole values)."""

from __future__ import annotations

from typing import Any

__all__ = ["json_diff"]


def json_diff(before: Any, after: Any, path: str = "") -> list[dict[str, Any]]:
    """``[{"path": "memory.total_bytes", "before": 1, "after": 2}, ...]``, sorted by path; ``[]`` if equal."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[dict[str, Any]] = []
        for key in sorted(set(before) | set(after), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in before:
                changes.append({"path": sub, "before": None, "after": after[key]})
            elif key not in after:
                changes.append({"path": sub, "before": before[key], "after": None})
            else:
                changes.extend(json_diff(before[key], after[key], sub))
        return changes
    return [] if before == after else [{"path": path, "before": before, "after": after}]
