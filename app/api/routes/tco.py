"""``POST /api/v1/tco``: cost of owning a server (or several) against renting the same GPUs, and the cost of one
training run per option; on the effective catalog, so sales price overrides apply."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import CatalogDep, MetricsDep
from app.schemas.problem import problem_responses
from app.schemas.tco import TcoRequest, TcoResponse
from app.services.tco import compute_tco

router = APIRouter(prefix="/tco", tags=["tco"])


@router.post("", responses=problem_responses(422), summary="Total cost of ownership: own vs cloud, and per run")
def create_tco(body: TcoRequest, catalog: CatalogDep, metrics: MetricsDep) -> TcoResponse:
    """Owning `num_nodes` of `server` over the assumptions' horizon, next to every cloud offer of the same GPUs;
    the break-even month against the cheapest offer (or `offer_id`); with a `job`, its cost per run owned and
    on each cloud offer. Unknown ids and invalid combinations are 422s naming the field."""
    metrics.estimates.labels("tco").inc()
    return compute_tco(body, catalog)
