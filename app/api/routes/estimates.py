"""``POST /api/v1/estimates``: one request → one response; a JSON list → a list (at most ``MAX_BATCH``)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from app.deps import CatalogDep, MetricsDep
from app.schemas.problem import problem_responses
from app.services.estimates import MAX_BATCH, parse_one_or_many, run_estimate, run_many
from estimator import EstimateRequest, EstimateResponse

router = APIRouter(prefix="/estimates", tags=["estimates"])

_BODY_SCHEMA = {
    "oneOf": [
        {"$ref": "#/components/schemas/EstimateRequest"},
        {"type": "array", "items": {"$ref": "#/components/schemas/EstimateRequest"}, "maxItems": MAX_BATCH},
    ]
}
_RESPONSE_SCHEMA = {
    "oneOf": [
        {"$ref": "#/components/schemas/EstimateResponse"},
        {"type": "array", "items": {"$ref": "#/components/schemas/EstimateResponse"}},
    ]
}


@router.post(
    "",
    response_model=EstimateResponse | list[EstimateResponse],
    responses={
        200: {"content": {"application/json": {"schema": _RESPONSE_SCHEMA}}},
        **problem_responses(422),
    },
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": _BODY_SCHEMA}}}},
    summary="Estimate memory, speed and cost of one training setup (or a list of them)",
)
def create_estimates(
    payload: Annotated[Any, Body()],
    catalog: CatalogDep,
    metrics: MetricsDep,
) -> EstimateResponse | list[EstimateResponse]:
    """The estimator-core contract. Send one `EstimateRequest` object, or a JSON array of them to get an
    array back in the same order. Errors name the field, prefixed by the index for a list (`2.training.seq_len`)."""
    parsed = parse_one_or_many(payload)
    if isinstance(parsed, list):
        metrics.estimates.labels("estimates").inc(len(parsed))
        return run_many(parsed, catalog)
    metrics.estimates.labels("estimates").inc()
    return run_estimate(parsed, catalog)


__all__ = ["EstimateRequest", "router"]
