"""``POST /api/v1/tco``: cost of owning a server (or several) against renting the same GPUs, and the cost of one
training run per option; ``POST /api/v1/tco/upgrade``: "when should I move from 8x A100 to 8x H100?" for one
job. Both on the effective catalog, so sales price overrides apply."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import CatalogDep, MetricsDep
from app.schemas.problem import problem_responses
from app.schemas.tco import TcoRequest, TcoResponse, UpgradeRequest, UpgradeResponse
from app.services.tco import compute_tco, compute_upgrade

router = APIRouter(prefix="/tco", tags=["tco"])


@router.post("", responses=problem_responses(422), summary="Total cost of ownership: own vs cloud, and per run")
def create_tco(body: TcoRequest, catalog: CatalogDep, metrics: MetricsDep) -> TcoResponse:
    """Owning `num_nodes` of `server` over the assumptions' horizon, next to every cloud offer of the same GPUs;
    the break-even month against the cheapest offer (or `offer_id`, which must rent the same GPU), or null with a
    note when no offer rents that GPU; rack planning at `assumptions.rack_kw`; with a `job`, its cost per run owned
    and on each cloud offer. Unknown ids and invalid combinations are 422s naming the field."""
    metrics.estimates.labels("tco").inc()
    return compute_tco(body, catalog)


@router.post("/upgrade", responses=problem_responses(422),
             summary="Upgrade answer: move this job from the current servers to the candidate?")
def create_upgrade(body: UpgradeRequest, catalog: CatalogDep, metrics: MetricsDep) -> UpgradeResponse:
    """The job estimated on the `current` servers (default 8x A100 80GB in a Dell XE9680) and on the `candidate`
    (default 8x H100 SXM5 in the same chassis), owned: time saved per run, cost difference per run (amortised over
    `assumptions.depreciation_years`), when buying the candidate pays back (runs and months, set against the life),
    the totals over `assumptions.horizon_years`, and a plain-words verdict."""
    metrics.estimates.labels("tco-upgrade").inc()
    return compute_upgrade(body, catalog)
