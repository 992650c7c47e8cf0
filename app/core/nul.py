"""Reject NUL characters (U+0000) in what a request sends: path and query parameters, JSON and form bodies.

PostgreSQL cannot store U+0000 in ``text``/``varchar`` columns nor in ``jsonb`` ("text fields cannot contain
NUL (0x00) bytes"; "unsupported Unicode escape sequence"), so a NUL that reached a query or an insert was a 500
there while SQLite took it. No field of the API or the pages has a use for it, so :func:`reject_nul` turns it
away up front, on both databases alike: a 422 naming each field that holds one (``name``,
``inputs.model.name``, ``query.customer``, ``path.entry_id``). It is a router dependency of the API and of the
pages, so every route, present and future, gets it.
"""

from __future__ import annotations

import email.message
from collections.abc import Iterator
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

__all__ = ["NUL", "NUL_MESSAGE", "nul_locations", "reject_nul"]

NUL = "\x00"
NUL_MESSAGE = "must not contain a NUL character (\\u0000)"
_FORMS = ("application/x-www-form-urlencoded", "multipart/form-data")


def nul_locations(value: Any, path: tuple[str | int, ...] = ()) -> Iterator[tuple[str | int, ...]]:
    """The path of every string in a JSON-like ``value`` (dict keys included) that contains a NUL."""
    if isinstance(value, str):
        if NUL in value:
            yield path
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and NUL in key:
                yield (*path, key)
            yield from nul_locations(item, (*path, key))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from nul_locations(item, (*path, index))


def _error(loc: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    return {"type": "string_nul", "loc": loc, "msg": NUL_MESSAGE, "input": value}


def _media_type(request: Request) -> str:
    message = email.message.Message()
    message["content-type"] = request.headers.get("content-type", "")
    return message.get_content_type()


async def _body_errors(request: Request) -> list[dict[str, Any]]:
    media = _media_type(request)
    if media in _FORMS:
        try:
            form = await request.form()  # cached: the route has already parsed it
        except (HTTPException, ValueError):
            return []  # an unreadable form is the route's business
        return [_error(("body", key), value) for key, value in form.multi_items()
                if not isinstance(value, UploadFile) and (NUL in key or NUL in value)]
    if request.method in ("GET", "HEAD"):
        return []
    raw = await request.body()  # cached: the route has already read it
    if b"\\u0000" not in raw and b"\x00" not in raw:  # a JSON NUL is always the escape \u0000
        return []
    try:
        data = await request.json()
    except ValueError:
        return []
    return [_error(("body", *loc), "") for loc in nul_locations(data)]


async def reject_nul(request: Request) -> None:
    """422 when a path parameter, query parameter or body field contains U+0000 (see the module docstring)."""
    errors = [_error(("path", key), value) for key, value in request.path_params.items()
              if isinstance(value, str) and NUL in value]
    errors += [_error(("query", key), value) for key, value in request.query_params.multi_items()
               if NUL in key or NUL in value]
    errors += await _body_errors(request)
    if errors:
        raise RequestValidationError(errors)
