"""A Babel extraction method for the catalog's YAML data: each ``description:`` and ``unit:`` of the TCO defaults
is shown on ``/tco`` (the assumption's label and unit), so it is a page message (``babel.cfg`` names this function)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

__all__ = ["extract_descriptions"]


def extract_descriptions(fileobj: IO[bytes], keywords: Any, comment_tags: Any,
                         options: Any) -> Iterator[tuple[int, str | None, str, list[str]]]:
    """``(line, function, message, comments)`` for every ``description:`` or ``unit:`` line (plain scalars only)."""
    del keywords, comment_tags, options
    for lineno, raw in enumerate(fileobj, start=1):
        line = raw.decode("utf-8").strip()
        if line.startswith(("description:", "unit:")):
            text = line.partition(":")[2].strip().strip("\"'")
            if text:
                yield lineno, None, text, []
