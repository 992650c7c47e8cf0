"""Strict JSON types on the API: ``false`` is not an integer, ``0``/``1`` are not booleans, ``"4096"`` is not an
integer, ``4096.0`` is not an integer (a number is still a float).

FastAPI decodes a JSON body with ``json.loads`` and validates the Python objects in pydantic's lax mode, which
converts between those types. :func:`strict_json_body`, a dependency of the API router, validates the raw
body once more in pydantic's strict JSON mode against the route's body type (pydantic docs, "Strict Mode";
in JSON mode strict still takes strings for enums and dates and arrays for tuples, as JSON has no such types)
and raises the errors with body locations, so they name the field like every other 422. Bodies typed ``Any``
or ``dict[str, Any]`` (the estimates list, a posted catalog entry) are validated strictly where they are
parsed (:func:`strict_validate`). The web forms keep their own parsing; the CLI validates strictly too.
"""

from __future__ import annotations

import email.message
from typing import Any, get_origin

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from app.core.strict_json import strict_validate
from app.deps import ClientDep, require_writer

__all__ = ["strict_json_body", "strict_validate", "validation_error"]

#: the attribute each route keeps its (adapter, needs a key) pair in, worked out on its first request (on the
#: route itself: routes are not hashable, and a new route may reuse a freed one's id)
_CACHE = "_capplan_strict_json"


def validation_error(exc: ValidationError, prefix: tuple[str | int, ...] = ("body",)) -> RequestValidationError:
    """A pydantic error as a request validation error at ``prefix`` + each error's location."""
    return RequestValidationError(
        [{**e, "loc": (*prefix, *e["loc"])} for e in exc.errors(include_url=False)]
    )


def _body_adapter(route: Any) -> TypeAdapter[Any] | None:
    field = getattr(route, "body_field", None)
    annotation = getattr(getattr(field, "field_info", None), "annotation", None)
    if annotation is None or annotation is Any or annotation is dict or get_origin(annotation) is dict:
        return None
    return TypeAdapter(annotation)


def _needs_writer(route: Any) -> bool:
    """The route requires an API key (``WriterDep``) somewhere in its dependencies."""
    stack = [getattr(route, "dependant", None)]
    while stack:
        dependant = stack.pop()
        if dependant is None:
            continue
        if dependant.call is require_writer:
            return True
        stack.extend(dependant.dependencies)
    return False


def _route_info(route: Any) -> tuple[TypeAdapter[Any] | None, bool]:
    info: tuple[TypeAdapter[Any] | None, bool] | None = getattr(route, _CACHE, None)
    if info is None:
        info = (_body_adapter(route), _needs_writer(route))
        setattr(route, _CACHE, info)
    return info


def _is_json(request: Request) -> bool:
    message = email.message.Message()
    message["content-type"] = request.headers.get("content-type", "")
    return message.get_content_maintype() == "application" and (
        message.get_content_subtype() == "json" or message.get_content_subtype().endswith("+json"))


async def strict_json_body(request: Request, client: ClientDep) -> None:
    """422 when the JSON body holds a value of the wrong JSON type for its field (see the module docstring).

    A write without a key is left alone: the route's own key check answers it with a 401, before any
    validation error, as for every other invalid write (``client`` is the rate limiter's, resolved once)."""
    if request.method in ("GET", "HEAD", "DELETE") or not _is_json(request):
        return
    route = request.scope.get("route")
    if route is None:
        return
    adapter, needs_writer = _route_info(route)
    if adapter is None or (client is None and needs_writer):
        return
    raw = await request.body()  # cached: the route has already read and decoded it
    if not raw:
        return
    try:
        adapter.validate_json(raw, strict=True)
    except ValidationError as exc:
        raise validation_error(exc) from None
