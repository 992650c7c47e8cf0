"""``POST /api/v1/inference-estimates``: serving memory, speed and cost; one request or a JSON list."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from app.deps import CatalogDep
from app.schemas.problem import problem_responses
from app.services.estimates import MAX_BATCH
from app.services.inference import parse_inference, run_inference, run_inference_many
from estimator.inference import InferenceRequest, InferenceResponse

router = APIRouter(prefix="/inference-estimates", tags=["inference-estimates"])

_BODY_SCHEMA = {
    "oneOf": [
        {"$ref": "#/components/schemas/InferenceRequest"},
        {"type": "array", "items": {"$ref": "#/components/schemas/InferenceRequest"}, "maxItems": MAX_BATCH},
    ]
}
_RESPONSE_SCHEMA = {
    "oneOf": [
        {"$ref": "#/components/schemas/InferenceResponse"},
        {"type": "array", "items": {"$ref": "#/components/schemas/InferenceResponse"}},
    ]
}


@router.post(
    "",
    response_model=InferenceResponse | list[InferenceResponse],
    responses={200: {"content": {"application/json": {"schema": _RESPONSE_SCHEMA}}}, **problem_responses(422)},
    openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": _BODY_SCHEMA}}}},
    summary="Size serving a model on a node: per-GPU memory as the engine allocates it, speed, cost per token",
)
def create_inference_estimates(
    payload: Annotated[Any, Body()],
    catalog: CatalogDep,
) -> InferenceResponse | list[InferenceResponse]:
    """Send one `InferenceRequest`, or a JSON array of them to get an array back in the same order. A set-up the
    engine would refuse is still a 200 with `starts: false` and the engine's own error in `errors`; a bad
    field is a 422 naming it (`serving.tensor_parallel_size`, `1.workload.output_tokens` in a list)."""
    parsed = parse_inference(payload)
    if isinstance(parsed, list):
        return run_inference_many(parsed, catalog)
    return run_inference(parsed, catalog)


__all__ = ["InferenceRequest", "router"]
