"""``/api/v1/quotes``: named quotes with customer, chosen option, server count, price, the full result and the
estimator and catalog versions; recompute adds a revision with a diff, never changing a saved one."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.routes.saved_routes import add_create_route, add_export_routes, add_saved_routes
from app.schemas.saved import QuoteCreate

router = APIRouter(prefix="/quotes", tags=["quotes"])

add_create_route(router, "quote", "quote", QuoteCreate)
add_export_routes(router, "quote", "quote")
add_saved_routes(router, "quote", "quote", "quotes")
