"""``POST /api/v1/plans``: the planner (``estimator.planner.plan``) over the effective catalog."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from app.deps import CatalogDep
from app.schemas.problem import problem_responses
from estimator.planner import PlanRequest, PlanResponse, plan

router = APIRouter(prefix="/plans", tags=["plans"])


@router.post(
    "",
    response_model=PlanResponse,
    responses=problem_responses(422),
    summary="Find the fastest and the cheapest layouts that fit, ranked, with ready-to-run configs",
)
def create_plan(payload: Annotated[PlanRequest, Body()], catalog: CatalogDep) -> PlanResponse:
    """The estimate contract (parallelism and hardware optional: what is given is pinned) plus `constraints`
    (`gpus`, `servers`, `max_nodes`, `budget_usd`, `deadline_days`). Answers `{"plans": [...]}` ranked by the
    objective; an empty list with `notes` when nothing fits."""
    return plan(payload, catalog)
