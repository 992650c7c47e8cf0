"""``POST /api/v1/compare``: one job on several GPUs or servers, side by side."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import CatalogDep, MetricsDep
from app.schemas.compare import CompareRequest, CompareResponse
from app.schemas.problem import problem_responses
from app.services.compare import compare

router = APIRouter(prefix="/compare", tags=["compare"])


@router.post("", responses=problem_responses(422), summary="Compare one job on several GPUs or servers")
def create_comparison(body: CompareRequest, catalog: CatalogDep, metrics: MetricsDep) -> CompareResponse:
    """Each option replaces the job's hardware; results come back in the options' order with a summary row
    (memory, fit, speed, time to train) and the full estimate. An option that cannot be estimated fails the
    whole request with a 422 naming `options.<i>.<field>` (or `request.<field>`)."""
    metrics.estimates.labels("compare").inc(len(body.options))
    return compare(body, catalog)
