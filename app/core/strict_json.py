"""Strict JSON validation of decoded JSON (:func:`strict_validate`): ``false`` is not an integer, ``0``/``1`` are
not booleans, ``"4096"`` is not an integer, ``4096.0`` is not an integer (pydantic docs, "Strict Mode").

The rule the API router's :func:`app.api.strict.strict_json_body` applies to a typed body, for the bodies typed
``Any`` that the services parse themselves (the estimates list, inference requests). It depends on nothing of the
app: the services call it without reaching up into the API layer.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import TypeAdapter, ValidationError

__all__ = ["strict_validate"]

_POSITION = re.compile(r" at line \d+ column \d+$")


def strict_validate(adapter: TypeAdapter[Any], data: Any) -> Any:
    """``data`` (decoded JSON) validated in strict JSON mode: the same rules as
    :func:`app.api.strict.strict_json_body`. A body that was not sent as JSON reaches a route typed ``Any`` as
    bytes: validated as it is (a type error)."""
    if isinstance(data, bytes | bytearray | memoryview):
        return adapter.validate_python(data, strict=True)
    try:
        return adapter.validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        if not any(e["type"] == "json_invalid" for e in exc.errors()):
            raise
        # the parser's limit (nesting deeper than pydantic-core's 200 levels), found in the text re-made from
        # ``data``: its line and column are not the client's, so leave them out
        raise ValidationError.from_exception_data(exc.title, [
            {"type": "json_invalid", "loc": e["loc"], "input": "",
             "ctx": {"error": _POSITION.sub("", str((e.get("ctx") or {}).get("error", "")))}}
            for e in exc.errors() if e["type"] == "json_invalid"]) from None
