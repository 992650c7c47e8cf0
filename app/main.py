"""The application factory: ``create_app(settings)``; its lifespan owns the engine.

``uvicorn app.main:create_app --factory`` (what ``capplan serve`` runs) builds it from the environment.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import TYPE_CHECKING

import anyio.to_thread
from fastapi import FastAPI

from app.admission import AdmissionMiddleware, BodyLimitMiddleware
from app.api import docs, health
from app.api.replay import EstimateReplay, ReplayAnswers
from app.api.router import api_router
from app.api.routes.estimates import create_estimates
from app.core.catalog_cache import CatalogCache
from app.core.db import make_engine, make_sessionmaker
from app.core.metrics import Metrics, MetricsMiddleware
from app.core.ratelimit import RateLimiter
from app.core.request_id import RequestIdMiddleware
from app.core.settings import Settings, get_settings
from app.core.startup import frozen_heap, load_source_catalog, prepare_database
from app.errors import install_error_handlers
from app.http_security import install_http_security
from app.openapi import install_openapi, operation_id
from app.services.estimates import AnswerCache
from app.web import render_problem
from app.web import router as web_router
from app.web.assets import AssetFiles
from app.web.templating import HTMX_JS, PLOTLY_JS
from estimator import ESTIMATOR_VERSION, native

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["create_app"]

log = logging.getLogger("capplan.startup")

DESCRIPTION = f"""Capacity planner for training and fine-tuning LLMs on multi-GPU servers
(estimator {ESTIMATOR_VERSION}).

Reads are open; writes (quotes, saved plans, catalog changes) need an `X-API-Key` made with
`capplan api-keys create`. Every error is `application/problem+json` (RFC 9457) with a `request_id`.
"""


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    engine = make_engine(settings.database_url)
    try:
        if app.state.catalog_cache is None:
            app.state.catalog_cache = CatalogCache(await anyio.to_thread.run_sync(load_source_catalog),
                                                   settings.catalog_refresh_s)
        source = app.state.catalog_cache.source
        await anyio.to_thread.run_sync(
            lambda: prepare_database(
                engine, source, migrate=settings.migrate_on_start, seed=settings.seed_catalog_on_start
            )
        )
        app.state.engine = engine
        app.state.sessionmaker = make_sessionmaker(engine)
        build = native.status()
        # uvicorn's own logger, so that `capplan serve` shows it (each worker says which estimator it runs)
        logging.getLogger("uvicorn.error").info(
            "capplan estimator %s: %s", ESTIMATOR_VERSION,
            f"compiled ({build.modules} modules)" if build.active else f"plain Python ({build.reason})")
        with frozen_heap(settings.gc_freeze):
            yield
    finally:
        engine.dispose()


def create_app(settings: Settings | None = None, *, catalog: Catalog | None = None) -> FastAPI:
    """Build the app. ``settings`` default to the environment's; ``catalog`` to the shipped hardware catalog."""
    app = FastAPI(
        title="capplan",
        version=version("capplan"),
        lifespan=_lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=docs.OPENAPI_URL,
        generate_unique_id_function=operation_id,
    )
    if settings is None:
        settings = get_settings()
    else:
        app.dependency_overrides[get_settings] = lambda: settings
    app.state.settings = settings
    app.state.catalog_cache = CatalogCache(catalog, settings.catalog_refresh_s) if catalog is not None else None
    app.state.limiter = RateLimiter(settings.rate_limit_storage)
    app.state.metrics = Metrics()
    app.state.estimate_answers = AnswerCache()
    app.state.estimate_replay = ReplayAnswers(create_estimates)
    app.state.html_error_renderer = render_problem

    install_error_handlers(app)
    install_openapi(app, DESCRIPTION)
    app.add_middleware(EstimateReplay)  # innermost: inside the metrics, request id and security headers
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=settings.max_body_bytes,
                       body_timeout_s=settings.body_timeout_s)
    app.add_middleware(AdmissionMiddleware, max_concurrent=settings.max_concurrent_requests,
                       max_queued=settings.max_queued_requests, queue_timeout_s=settings.queue_timeout_s)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    app.add_middleware(RequestIdMiddleware)
    install_http_security(app, settings.allowed_hosts)
    app.include_router(api_router)
    app.include_router(health.router)
    app.include_router(docs.router)
    app.include_router(web_router)
    static = AssetFiles(directory=settings.static_dir)
    static.precompress([PLOTLY_JS, HTMX_JS, "css/app.css", "js/app.js"])
    app.mount("/static", static, name="static")
    return app
