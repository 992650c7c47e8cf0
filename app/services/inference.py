"""Running the inference estimator for the API, the ``/serve`` page and ``capplan infer``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from pydantic import TypeAdapter, ValidationError

from app.core.strict_json import strict_validate
from app.services.estimates import MAX_BATCH, prefix_error
from estimator.errors import EstimatorError
from estimator.inference import InferenceRequest, InferenceResponse, estimate_inference

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["parse_inference", "run_inference", "run_inference_many"]

_ONE: TypeAdapter[InferenceRequest] = TypeAdapter(InferenceRequest)
_MANY: TypeAdapter[list[InferenceRequest]] = TypeAdapter(list[InferenceRequest])


def parse_inference(payload: Any, max_batch: int = MAX_BATCH) -> InferenceRequest | list[InferenceRequest]:
    """One JSON object or a list of at most ``max_batch``, in strict JSON mode as every API body
    (``app.api.strict``: ``false`` is no number, ``"8"`` no integer); errors carry body locations
    (``body.serving.x``)."""
    if isinstance(payload, list) and len(payload) > max_batch:
        raise RequestValidationError(
            [{"loc": ("body",), "msg": f"at most {max_batch} requests in one batch", "type": "too_long"}])
    adapter: TypeAdapter[Any] = _MANY if isinstance(payload, list) else _ONE
    try:
        result: InferenceRequest | list[InferenceRequest] = strict_validate(adapter, payload)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]) from None
    return result


def run_inference(request: InferenceRequest, catalog: Catalog) -> InferenceResponse:
    return estimate_inference(request, catalog)


def run_inference_many(requests: Sequence[InferenceRequest], catalog: Catalog) -> list[InferenceResponse]:
    out = []
    for i, request in enumerate(requests):
        try:
            out.append(estimate_inference(request, catalog))
        except EstimatorError as exc:
            raise prefix_error(exc, str(i)) from exc
    return out
