"""The one path from an exception to an error response.

Under ``/api/`` (and for clients that ask for JSON) every error is RFC 9457 ``application/problem+json`` with
``type, title, status, detail, instance, request_id`` and an ``errors`` list naming each field; elsewhere it is
a small HTML page. Estimator errors, request validation, HTTP errors and our own :class:`ApiError` all come
here; anything else becomes a 500 problem with no traceback (the traceback goes to the log).
"""

from __future__ import annotations

import html
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.core.request_id import HEADER, request_id_of
from app.core.security_headers import csp_nonce, security_headers
from app.openapi import allowed_methods
from app.schemas.problem import PROBLEM_MEDIA_TYPE, FieldError, Problem
from estimator.errors import (
    EstimatorError,
    ModelConfigError,
    UnknownHardwareError,
    UnknownModelError,
    UnsupportedCombinationError,
)
from estimator.planner.budget import DeadlineExceeded
from hardware_catalog import UnknownCatalogIdError

__all__ = [
    "BODY",
    "ApiError",
    "Conflict",
    "Forbidden",
    "NotFound",
    "NotImplementedYet",
    "RateLimited",
    "Unauthorized",
    "field_errors_from_locs",
    "install_error_handlers",
    "problem_response",
]

log = logging.getLogger("capplan.errors")

HtmlRenderer = Callable[[Request, Problem], Response]


class ApiError(Exception):
    """An error with its HTTP status; raise a subclass from a route or dependency."""

    status = 400
    slug = "bad-request"
    title = "Bad request"

    def __init__(
        self, detail: str, errors: Sequence[FieldError] = (), headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = list(errors)
        self.headers = headers or {}


class Unauthorized(ApiError):
    status, slug, title = 401, "unauthorized", "API key required"


class Forbidden(ApiError):
    status, slug, title = 403, "forbidden", "Forbidden"


class NotFound(ApiError):
    status, slug, title = 404, "not-found", "Not found"


class Conflict(ApiError):
    status, slug, title = 409, "conflict", "Conflict"


class RateLimited(ApiError):
    status, slug, title = 429, "rate-limited", "Too many requests"


class NotImplementedYet(ApiError):
    status, slug, title = 501, "not-implemented", "Not implemented yet"


_ESTIMATOR: list[tuple[type[EstimatorError], str, str]] = [
    (UnsupportedCombinationError, "unsupported-combination", "Unsupported combination"),
    (UnknownModelError, "unknown-model", "Unknown model"),
    (UnknownHardwareError, "unknown-hardware", "Unknown hardware"),
    (ModelConfigError, "model-config", "Unreadable model config"),
    (EstimatorError, "invalid-request", "Invalid request"),
]

_HTTP_TITLES = {
    400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found", 405: "Method not allowed",
    408: "Request timeout", 413: "Request too large",
}


def _type_uri(slug: str) -> str:
    return f"urn:capplan:problem:{slug}"


#: the field name of an error about the request body as a whole (unreadable JSON, a cross-field rule)
BODY = "body"


def field_error(path: Sequence[str | int], detail: str, kind: str | None = None) -> FieldError:
    """An error at ``path`` into the request; the empty path is the body as a whole (field ``body``, pointer
    ``#``, the JSON pointer of the whole document)."""
    parts = [str(p) for p in path]
    if not parts:
        return FieldError(field=BODY, pointer="#", detail=detail, type=kind)
    return FieldError(field=".".join(parts), pointer="#/" + "/".join(parts), detail=detail, type=kind)


# Location segments pydantic adds for the members of a union (``str``, ``HfConfigModel``,
# ``function-after[_check(), ModelArch]``, ``list[EstimateRequest]``): not fields, so not in the path.
_UNION_MEMBER = re.compile(r"^(str|int|float|bool|none|[A-Z]\w*|[\w-]+\[.*\])$")


def _json_invalid(err: Any) -> FieldError:
    """FastAPI locates unreadable JSON at ``("body", <character offset>)``: not a field. Name the body and give
    the parser's message with the offset."""
    loc = list(err.get("loc", ()))
    reason = (err.get("ctx") or {}).get("error") or "not valid JSON"
    where = f" at character {loc[1]}" if len(loc) > 1 and isinstance(loc[1], int) else ""
    return field_error([], f"invalid JSON: {reason}{where}", "json_invalid")


def field_errors_from_locs(errors: Iterable[Any]) -> list[FieldError]:
    """Pydantic/FastAPI errors → field errors. Body fields lose the ``body`` prefix; query/path keep it; an
    error about the whole body (unreadable JSON, a model-level rule) is field ``body``."""
    result = []
    for err in errors:
        if err.get("type") == "json_invalid":
            result.append(_json_invalid(err))
            continue
        loc = list(err.get("loc", ()))
        if loc and loc[0] == "body":
            loc = loc[1:]
        path = [p for p in loc if not (isinstance(p, str) and _UNION_MEMBER.match(p))]
        result.append(field_error(path, str(err.get("msg", "invalid")), err.get("type")))
    return result


def _wants_html(request: Request) -> bool:
    if request.url.path.startswith("/api/"):
        return False
    accept = request.headers.get("accept", "")
    return "text/html" in accept or not accept or accept == "*/*"


def _default_html(_request: Request, problem: Problem) -> Response:
    title, detail = html.escape(problem.title), html.escape(problem.detail)
    body = (
        f"<!doctype html><html lang=en><meta charset=utf-8><title>{problem.status} {title}</title>"
        f"<h1>{problem.status} {title}</h1><p>{detail}</p>"
        f"<p><small>request id {html.escape(problem.request_id)}</small></p></html>"
    )
    return HTMLResponse(body, status_code=problem.status)


def problem_response(
    request: Request,
    status: int,
    slug: str,
    title: str,
    detail: str,
    errors: Sequence[FieldError] = (),
    headers: dict[str, str] | None = None,
) -> Response:
    request_id = request_id_of(request)
    problem = Problem(
        type=_type_uri(slug),
        title=title,
        status=status,
        detail=detail,
        instance=request.url.path,
        request_id=request_id,
        errors=list(errors),
    )
    all_headers = {**(headers or {}), HEADER: request_id}
    if _wants_html(request):
        renderer: HtmlRenderer = getattr(request.app.state, "html_error_renderer", None) or _default_html
        response = renderer(request, problem)
        response.headers.update(all_headers)
        return response
    return JSONResponse(
        problem.model_dump(mode="json"), status_code=status, headers=all_headers, media_type=PROBLEM_MEDIA_TYPE
    )


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return problem_response(request, exc.status, exc.slug, exc.title, exc.detail, exc.errors, exc.headers)


async def _estimator_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, EstimatorError)
    slug, title = next((s, t) for cls, s, t in _ESTIMATOR if isinstance(exc, cls))
    errors = [field_error(exc.field.split("."), exc.message, slug)] if exc.field else []
    return problem_response(request, 422, slug, title, exc.message, errors)


async def _unknown_catalog_id(request: Request, exc: Exception) -> Response:
    """A catalog lookup that missed deep inside the estimator: the client named an id that does not exist."""
    return problem_response(request, 422, "unknown-hardware", "Unknown hardware", str(exc))


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = field_errors_from_locs(exc.errors())
    fields = ", ".join(e.field for e in errors[:5])
    detail = f"{len(errors)} invalid field(s): {fields}" if errors else "invalid request"
    return problem_response(request, 422, "validation-error", "Invalid request", detail, errors)


#: FastAPI's detail when the JSON body could not be decoded for a reason other than a syntax error
_UNREADABLE_BODY = "There was an error parsing the body"


def _unreadable_body(exc: StarletteHTTPException) -> list[FieldError]:
    """FastAPI's 400 for a body ``json.loads`` gave up on (nested too deeply, an integer with too many digits,
    bytes that are not UTF-8): the body as a whole, with the reason. A syntax error is a 422 (``json_invalid``)."""
    if exc.status_code != 400 or exc.detail != _UNREADABLE_BODY:
        return []
    cause = exc.__cause__
    if isinstance(cause, RecursionError):
        reason = "nested too deeply"
    elif isinstance(cause, UnicodeDecodeError):
        reason = f"not UTF-8 text (byte {cause.start})"
    elif isinstance(cause, ValueError) and "digits" in str(cause):
        reason = "an integer with too many digits (at most 4300)"
    else:
        reason = "not readable"
    return [field_error([], f"invalid JSON: {reason}", "json_invalid")]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    title = _HTTP_TITLES.get(exc.status_code, "HTTP error")
    slug = title.lower().replace(" ", "-")
    headers = dict(exc.headers or {})
    body_errors = _unreadable_body(exc)
    if body_errors:
        return problem_response(request, 400, slug, title, body_errors[0].detail, body_errors, headers)
    if exc.status_code == 405:
        methods = allowed_methods(request.app, request.url.path)
        if methods:
            headers["Allow"] = ", ".join(methods)
    return problem_response(request, exc.status_code, slug, title, str(exc.detail), (), headers)


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    detail = f"internal error; quote request id {request_id_of(request)} when reporting it"
    return problem_response(request, 500, "internal-error", "Internal error", detail,
                            headers=security_headers(csp_nonce(request)))


#: seconds a client is told to wait after a 503 (a computation past its cap, no database connection free)
RETRY_AFTER_S = 5


async def _over_deadline(request: Request, exc: Exception) -> Response:
    """A computation past the per-request wall-clock cap (estimator.planner.budget): the server is too busy for it
    now."""
    return problem_response(request, 503, "over-time", "Service unavailable",
                            f"{exc}; the server is busy: retry later, or narrow the request",
                            headers={"Retry-After": str(RETRY_AFTER_S)})


async def _no_connection(request: Request, exc: Exception) -> Response:
    """No database connection came free in time (every one is in use): overload, not a server fault."""
    log.warning("database pool exhausted on %s %s: %s", request.method, request.url.path, exc)
    return problem_response(request, 503, "database-busy", "Service unavailable",
                            "every database connection is in use; retry later",
                            headers={"Retry-After": str(RETRY_AFTER_S)})


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(DeadlineExceeded, _over_deadline)
    app.add_exception_handler(PoolTimeout, _no_connection)
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(EstimatorError, _estimator_error)
    app.add_exception_handler(UnknownCatalogIdError, _unknown_catalog_id)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected)
