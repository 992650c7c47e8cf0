"""``POST /api/v1/plans``: the planner. A placeholder answering 501 until ``estimator.planner`` lands."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from app.errors import NotImplementedYet
from app.schemas.problem import problem_responses

router = APIRouter(prefix="/plans", tags=["plans"])


@router.post("", responses=problem_responses(501), summary="Plan a training job (not implemented yet)")
def create_plan(payload: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    """Will search layouts and server counts for a job once the planner exists; answers 501 until then."""
    raise NotImplementedYet("the planner is not available yet; use POST /api/v1/estimates")
