"""``/api/v1``: every JSON router, rate limited, refusing NUL characters (``app.core.nul``) and lax JSON types
(``app.api.strict``), with 400 (unreadable body), 401 and 429 documented on each operation.

The three checks are one router dependency, :func:`api_checks`, rather than three: FastAPI's own cost per
dependency (resolving, caching, scoping) is more than what each check costs, on every request."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request

from app.api.routes import (
    catalog,
    clusters,
    compare,
    estimates,
    imports,
    inference,
    measurements,
    plans,
    quotes,
    saved_plans,
    tco,
    version,
)
from app.api.strict import strict_json_body
from app.core.nul import reject_nul
from app.deps import enforce_rate_limit, get_client
from app.schemas.problem import problem_responses

__all__ = ["api_checks", "api_router"]


async def api_checks(request: Request) -> None:
    """Every ``/api/v1`` request, in this order: its rate limit (after its API key, a 401 when unknown), NUL
    characters, strict JSON types."""
    client = await get_client(request)
    await enforce_rate_limit(request, client)
    await reject_nul(request)
    await strict_json_body(request, client)


api_router = APIRouter(
    prefix="/api/v1",
    dependencies=[Depends(api_checks)],
    responses=problem_responses(400, 401, 429),
)
for module in (estimates, compare, plans, tco, catalog, quotes, saved_plans, inference, version, clusters,
               measurements, imports):
    api_router.include_router(module.router)
