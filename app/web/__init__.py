"""HTML pages (Jinja2 + HTMX) for capplan: one router, included by ``create_app``.

``render_problem`` draws an error as an HTML page (or an htmx fragment); ``create_app`` sets it as
``app.state.html_error_renderer`` so ``app.errors`` uses it for every non-API error. Every page goes through
``app.web.guard`` (same-origin form posts, rate limits) and ``app.core.nul`` (no NUL characters).
"""

from fastapi import APIRouter, Depends

from app.core.currency import router as currency_router
from app.core.currency import use_currency
from app.core.i18n import router as i18n_router
from app.core.i18n import use_locale
from app.core.nul import reject_nul
from app.web import (
    catalog_page,
    cluster_page,
    compare_page,
    estimate_page,
    faq_page,
    import_page,
    layout_suggestion,
    measurements_page,
    multi_quote,
    planner_page,
    saved_pages,
    serve_page,
    tco_page,
)
from app.web.error_page import render_problem
from app.web.guard import guard_page

__all__ = ["render_problem", "router"]

router = APIRouter(include_in_schema=False,
                   dependencies=[Depends(use_locale), Depends(use_currency), Depends(guard_page),
                                 Depends(reject_nul)])
for module in (estimate_page, layout_suggestion, faq_page, compare_page, planner_page, tco_page, catalog_page,
               multi_quote, saved_pages, serve_page, cluster_page, measurements_page):
    router.include_router(module.router)
router.include_router(import_page.router)
router.include_router(i18n_router)
router.include_router(currency_router)
