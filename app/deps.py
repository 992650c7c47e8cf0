"""Every injectable, declared once as an ``Annotated`` alias. Routes never call ``Depends()`` inline.

Dependencies are ``async``, so FastAPI does not send each of them to the thread pool (a hop costs more than
most of them do): those that only read ``app.state`` answer at once, and those that may touch the database
(an API key lookup, a catalog check, closing a used session) send only that work to a worker thread, when
there is some. An estimate without an ``X-API-Key`` reads no database at all while the catalog is fresh."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import contextmanager
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from app.core.metrics import Metrics
from app.core.ratelimit import DECISION_KEY
from app.core.settings import Settings, get_settings
from app.errors import RateLimited, Unauthorized
from app.models import ApiKey
from app.repositories.api_keys import authenticate

__all__ = [
    "CatalogDep",
    "ClientDep",
    "MetricsDep",
    "SessionDep",
    "SettingsDep",
    "SourceCatalogDep",
    "WriterDep",
    "api_key_header",
    "enforce_rate_limit",
    "get_catalog",
    "get_session",
]

API_KEY_HEADER = "X-API-Key"
api_key_header = APIKeyHeader(
    name=API_KEY_HEADER,
    scheme_name="ApiKey",
    auto_error=False,
    description="Key made with `capplan api-keys create`; needed for every write.",
)

SettingsDep = Annotated[Settings, Depends(get_settings)]


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session on the app's engine; routes that write commit explicitly before answering. Making one opens
    no connection (SQLAlchemy connects on first use), so it is made here; closing one that was used (it rolls
    back and returns its connection) is blocking I/O, done in a worker thread."""
    session: Session = request.app.state.sessionmaker()
    try:
        yield session
    finally:
        if session.in_transaction():
            await run_in_threadpool(session.close)
        else:
            session.close()


SessionDep = Annotated[Session, Depends(get_session)]

_T = TypeVar("_T")


def _in_own_session(request: Request, work: Callable[[Session], _T]) -> _T:
    """``work`` on a session of its own, closed afterwards (blocking: run it in a worker thread). For the
    dependencies that need the database only now and then (an API key to look up, a catalog to check), so
    that a request without either makes no session. The session is the app's, or what ``get_session`` is
    overridden with (the tests' database)."""
    override = request.app.dependency_overrides.get(get_session)
    if override is None:
        with request.app.state.sessionmaker() as session:
            return work(session)
    if inspect.isgeneratorfunction(override):
        with contextmanager(override)() as session:
            return work(session)
    return work(override())


async def get_source_catalog(request: Request) -> Any:
    """The hardware catalog as shipped (YAML), loaded once at start."""
    return request.app.state.catalog_cache.source


async def get_catalog(request: Request) -> Any:
    """The effective catalog: seeded data, sales overrides and custom entries (see app.catalog_cache; from
    memory while nothing can have changed, else checked against the database in a worker thread)."""
    cache = request.app.state.catalog_cache
    catalog = cache.fresh()
    if catalog is None:
        catalog = await run_in_threadpool(_in_own_session, request, cache.get)
    return catalog


SourceCatalogDep = Annotated[Any, Depends(get_source_catalog)]
CatalogDep = Annotated[Any, Depends(get_catalog)]


async def get_metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


MetricsDep = Annotated[Metrics, Depends(get_metrics)]


_CLIENT_STATE = "capplan_api_client"


async def get_client(request: Request) -> ApiKey | None:
    """The API key presented in ``X-API-Key``; ``None`` when there is none; 401 when it is unknown or revoked.

    Reads the header directly, so that routes open to everyone do not declare a security requirement. The
    key found is kept on the request (``request.state``), so calling this again (the API's checks call it
    directly, a write route as ``ClientDep``) looks it up once."""
    presented = request.headers.get(API_KEY_HEADER)
    if presented is None:
        return None
    state = request.scope.setdefault("state", {})
    if _CLIENT_STATE in state:
        found: ApiKey = state[_CLIENT_STATE]
        return found
    client = await run_in_threadpool(
        _in_own_session, request, lambda session: authenticate(session=session, presented=presented))
    if client is None:
        raise Unauthorized("unknown or revoked API key", headers={"WWW-Authenticate": "ApiKey"})
    state[_CLIENT_STATE] = client
    return client


ClientDep = Annotated[ApiKey | None, Depends(get_client)]


async def require_writer(client: ClientDep, _key: Annotated[str | None, Security(api_key_header)]) -> ApiKey:
    if client is None:
        raise Unauthorized(
            f"this endpoint changes data and needs an {API_KEY_HEADER} header", headers={"WWW-Authenticate": "ApiKey"}
        )
    return client


WriterDep = Annotated[ApiKey, Depends(require_writer)]


async def enforce_rate_limit(request: Request, client: ClientDep) -> None:
    """Count the request against its API key, or its client address when it has none; 429 past the limit.
    A shared store (``redis://``, ...) is a network round trip: that goes to a worker thread. The settings are
    the app's (``app.state.settings``, what ``get_settings`` is overridden with), not a thread-pool dependency."""
    settings: Settings = request.app.state.settings
    if client is not None:
        identity, limit = f"key:{client.id}", client.rate_limit or settings.rate_limit_per_key
    else:
        identity = f"ip:{request.client.host if request.client else 'unknown'}"
        limit = settings.rate_limit_anonymous
    limiter = request.app.state.limiter
    decision = request.scope.pop(DECISION_KEY, None)  # counted (and refused) already by app.api.replay
    if decision is None:
        decision = limiter.hit(identity, limit) if limiter.in_process else await run_in_threadpool(
            limiter.hit, identity, limit)
    if not decision.allowed:
        raise RateLimited(
            f"more than {limit} requests; retry in {decision.retry_after_s} s",
            headers={"Retry-After": str(decision.retry_after_s)},
        )
