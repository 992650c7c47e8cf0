"""``POST /api/v1/tco``: cost of a job and of owning, per option. Answers 501 until ``estimator.tco`` lands."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body

from app.errors import NotImplementedYet
from app.schemas.problem import problem_responses

router = APIRouter(prefix="/tco", tags=["tco"])


@router.post("", responses=problem_responses(501), summary="Total cost of ownership (not implemented yet)")
def create_tco(payload: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    """Will compare renting and owning per option once the TCO model exists; answers 501 until then."""
    raise NotImplementedYet("the TCO model is not available yet")
