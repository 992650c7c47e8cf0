"""``/api/v1/saved-plans``: named estimates saved from the pages or a tool, recomputable like quotes.

Once the planner lands, a saved plan will also be able to hold a planner request (``input_kind="plan"``)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.routes.saved_routes import add_create_route, add_export_routes, add_saved_routes
from app.schemas.saved import PlanCreate

router = APIRouter(prefix="/saved-plans", tags=["saved-plans"])

add_create_route(router, "plan", "saved_plan", PlanCreate)
add_export_routes(router, "plan", "saved_plan")
add_saved_routes(router, "plan", "saved_plan", "saved_plans")
