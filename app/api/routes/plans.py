"""``POST /api/v1/plans``: the planner (``estimator.planner.plan``) over the effective catalog; ``POST
/api/v1/plans/reverse``: its reverse questions (``estimator.planner.reverse.answer``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body

from app.deps import CatalogDep, SettingsDep
from app.schemas.problem import problem_responses
from app.services.budget import request_budget
from estimator.planner.plan import PlanRequest, PlanResponse, plan
from estimator.planner.reverse import ReverseRequest, ReverseResponse, answer

router = APIRouter(prefix="/plans", tags=["plans"])


@router.post(
    "",
    response_model=PlanResponse,
    responses=problem_responses(422, 503),
    summary="Find the fastest and the cheapest layouts that fit, ranked, with ready-to-run configs",
)
def create_plan(payload: Annotated[PlanRequest, Body()], catalog: CatalogDep, settings: SettingsDep) -> PlanResponse:
    """The estimate contract (parallelism and hardware optional: what is given is pinned) plus `constraints`
    (`gpus`, `servers`, `max_nodes`, `budget_usd`, `deadline_days`). Answers `{"plans": [...]}` ranked by the
    objective; an empty list with `notes` when nothing fits. A search over more layouts than one request may do
    is a 422 naming the field to narrow; one that runs past the per-request time cap a 503."""
    with request_budget(settings):
        return plan(payload, catalog)


@router.post(
    "/reverse",
    response_model=ReverseResponse,
    responses=problem_responses(422, 503),
    summary="Reverse questions: the fewest GPUs for a job, the largest model a server trains, the longest sequence",
)
def answer_reverse_question(
    payload: Annotated[ReverseRequest, Body()], catalog: CatalogDep, settings: SettingsDep
) -> ReverseResponse:
    """A plan request plus `question`: `fewest-gpus` (per hardware option, the smallest GPU / node count on which
    some layout fits GPU memory and the node's host RAM, with its fastest plan), `largest-model` (which presets,
    and how many layers of the request's model, fit the pinned node count, else one node) or `longest-sequence`
    (the longest `seq_len`, a multiple of `granularity`, that fits there, with its fastest plan). `answers` says
    it in one sentence per hardware option."""
    with request_budget(settings, "constraints.gpus"):
        return answer(payload, catalog)
