"""``/api/v1/saved-plans``: named estimates saved from the pages or a tool, recomputable like quotes.

Once the planner lands, a saved plan will also be able to hold a planner request (``input_kind="plan"``)."""

from __future__ import annotations

from fastapi import APIRouter, status

from app.api.routes.saved_routes import add_export_routes, add_saved_routes
from app.deps import CatalogDep, MetricsDep, SessionDep, WriterDep
from app.schemas.problem import problem_responses
from app.schemas.saved import PlanCreate, SavedOut
from app.services.saved import save_plan

router = APIRouter(prefix="/saved-plans", tags=["saved-plans"])


@router.post("", status_code=status.HTTP_201_CREATED, responses=problem_responses(422),
             summary="Save a plan (computes and stores the full result)")
def create_saved_plan(
    body: PlanCreate, session: SessionDep, catalog: CatalogDep, writer: WriterDep, metrics: MetricsDep
) -> SavedOut:
    item = save_plan(session=session, catalog=catalog, body=body, actor=writer.name)
    session.commit()
    metrics.saved.labels("plan").inc()
    return SavedOut.with_revision(item, item.revisions[-1])


add_export_routes(router, "plan", "saved_plan")
add_saved_routes(router, "plan", "saved_plan", "saved_plans")
