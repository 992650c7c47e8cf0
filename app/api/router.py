"""``/api/v1``: every JSON router, rate limited, refusing NUL characters (``app.core.nul``) and lax JSON types
(``app.api.strict``), with 400 (unreadable body), 401 and 429 documented on each operation."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from app.api.routes import catalog, compare, estimates, plans, quotes, saved_plans, tco
from app.api.strict import strict_json_body
from app.core.nul import reject_nul
from app.deps import enforce_rate_limit
from app.schemas.problem import problem_responses

__all__ = ["api_router"]

api_router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(enforce_rate_limit), Depends(reject_nul), Depends(strict_json_body)],
    responses=problem_responses(400, 401, 429),
)
for module in (estimates, compare, plans, tco, catalog, quotes, saved_plans):
    api_router.include_router(module.router)
