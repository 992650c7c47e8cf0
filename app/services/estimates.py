"""Running the estimator for the API, the pages and the CLI: one request, or a list with indexed errors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from app.api.strict import strict_validate
from estimator import EstimateRequest, EstimateResponse, EstimatorError, estimate

__all__ = ["MAX_BATCH", "parse_one_or_many", "prefix_error", "run_estimate", "run_many"]

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


def run_estimate(request: EstimateRequest, catalog: Any) -> EstimateResponse:
    return estimate(request, catalog)


def run_many(requests: Sequence[EstimateRequest], catalog: Any) -> list[EstimateResponse]:
    results = []
    for i, request in enumerate(requests):
        try:
            results.append(estimate(request, catalog))
        except EstimatorError as exc:
            raise prefix_error(exc, str(i)) from exc
    return results
