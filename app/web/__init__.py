"""HTML pages (Jinja2 + HTMX) for capplan: one router, included by ``create_app``.

``render_problem`` draws an error as an HTML page (or an htmx fragment); ``create_app`` sets it as
``app.state.html_error_renderer`` so ``app.errors`` uses it for every non-API error.
"""

from fastapi import APIRouter

from app.web import catalog_page, compare_page, estimate_page, planner_page, saved_pages, tco_page
from app.web.error_page import render_problem

__all__ = ["render_problem", "router"]

router = APIRouter(include_in_schema=False)
for module in (estimate_page, compare_page, planner_page, tco_page, catalog_page, saved_pages):
    router.include_router(module.router)
