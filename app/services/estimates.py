"""Running the estimator for the API, the pages and the CLI: one request, or a list with indexed errors."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from app.core.lru import LockedLRU
from app.core.strict_json import strict_validate
from estimator import EstimateRequest, EstimateResponse, EstimatorError, estimate

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["MAX_BATCH", "AnswerCache", "parse_one_or_many", "prefix_error", "run_estimate", "run_many"]

#: most requests in one POST /estimates list (the OpenAPI schema says the same)
MAX_BATCH = 100

_ONE: TypeAdapter[EstimateRequest] = TypeAdapter(EstimateRequest)
_MANY: TypeAdapter[list[EstimateRequest]] = TypeAdapter(list[EstimateRequest])


def parse_one_or_many(payload: Any, max_batch: int = MAX_BATCH) -> EstimateRequest | list[EstimateRequest]:
    """Validate a JSON object (one request) or a JSON array (a batch), in strict JSON mode (``app.api.strict``:
    ``"4096"`` or ``false`` is not an integer). Errors are raised as a ``RequestValidationError`` with body
    locations, so they name each field the same way as elsewhere."""
    if isinstance(payload, list) and len(payload) > max_batch:
        raise RequestValidationError(
            [{"loc": ("body",), "msg": f"at most {max_batch} requests in one batch", "type": "too_long"}]
        )
    adapter: TypeAdapter[Any] = _MANY if isinstance(payload, list) else _ONE
    try:
        result: EstimateRequest | list[EstimateRequest] = strict_validate(adapter, payload)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
        ) from None
    return result


def prefix_error(exc: EstimatorError, prefix: str) -> EstimatorError:
    """The same error, its field path under ``prefix`` (e.g. ``3`` for the fourth request of a batch)."""
    field = f"{prefix}.{exc.field}" if exc.field else prefix
    return type(exc)(exc.message, field)


def run_estimate(request: EstimateRequest, catalog: Catalog) -> EstimateResponse:
    return estimate(request, catalog)


def run_many(requests: Sequence[EstimateRequest], catalog: Catalog) -> list[EstimateResponse]:
    results = []
    for i, request in enumerate(requests):
        try:
            results.append(estimate(request, catalog))
        except EstimatorError as exc:
            raise prefix_error(exc, str(i)) from exc
    return results


class AnswerCache:
    """The last ``size`` answers (JSON bytes) of single estimates, by validated request, for one catalog.

    ``estimate()`` is a pure function of the request and the catalog, so an equal request against the same
    catalog object gets the very same bytes; a request is equal when its validated fields are (a body with
    other whitespace or key order is a hit too). The catalog is compared by identity: the app's catalog cache
    hands out a new object whenever the effective catalog changes, and that empties this cache. Errors are not
    kept (they are raised again, as fresh as ever)."""

    def __init__(self, size: int = 1024) -> None:
        self.size = size
        self._catalog: Any = None
        self._answers: LockedLRU[EstimateRequest, bytes] = LockedLRU(size)
        self._lock = threading.Lock()  # the catalog switch and the lookup or store it guards are one step

    def answer(self, request: EstimateRequest, catalog: Catalog, compute: Callable[[], bytes]) -> bytes:
        try:
            hash(request)
        except TypeError:  # a field holds a dict (a Hugging Face config given inline): not kept
            return compute()
        with self._lock:
            if catalog is not self._catalog:
                self._answers.clear()
                self._catalog = catalog
            hit = self._answers.get(request)
        if hit is not None:
            return hit
        body = compute()
        with self._lock:
            if catalog is self._catalog:
                self._answers.put(request, body)
        return body
