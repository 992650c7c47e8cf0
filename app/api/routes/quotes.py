"""``/api/v1/quotes``: named quotes with customer, chosen option, server count, price, the full result and the
estimator and catalog versions; recompute adds a revision with a diff, never changing a saved one."""

from __future__ import annotations

from fastapi import APIRouter, status

from app.api.routes.saved_routes import add_export_routes, add_saved_routes
from app.deps import CatalogDep, MetricsDep, SessionDep, WriterDep
from app.schemas.problem import problem_responses
from app.schemas.saved import QuoteCreate, SavedOut
from app.services.saved import save_quote

router = APIRouter(prefix="/quotes", tags=["quotes"])


@router.post("", status_code=status.HTTP_201_CREATED, responses=problem_responses(422),
             summary="Save a quote (computes and stores the full result)")
def create_quote(
    body: QuoteCreate, session: SessionDep, catalog: CatalogDep, writer: WriterDep, metrics: MetricsDep
) -> SavedOut:
    item = save_quote(session=session, catalog=catalog, body=body, actor=writer.name)
    session.commit()
    metrics.saved.labels("quote").inc()
    return SavedOut.with_revision(item, item.revisions[-1])


add_export_routes(router, "quote", "quote")
add_saved_routes(router, "quote", "quote", "quotes")
