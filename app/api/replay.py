"""Answering a repeated ``POST /api/v1/estimates`` without going through the router (issue 19).

``estimate()`` is a pure function of the request and the catalog, so the same request bytes against the same
catalog object get the same answer bytes. :class:`EstimateReplay`, the innermost middleware, keeps the last
``size`` answers of single estimates that the route answered 200, by (``Content-Type``, body bytes), with the
catalog object they were computed with. A request it can answer from there skips FastAPI's routing, dependency
resolution and body parsing, which cost several times what the answer does; everything else still happens:

- only a request the route would treat the same way: ``POST``, that exact path, no query string, no
  ``X-API-Key`` (a key is looked up and counted on its own), the same ``Content-Type`` and body bytes as a
  request the route answered 200 (so its NUL and strict-JSON checks passed: the same bytes pass them again);
- only while the effective catalog is the very object the answer was computed with
  (``CatalogCache.fresh()``: nothing written since, checked within ``catalog_refresh_s``);
- the rate limit is counted here exactly as the route's check counts it (client address,
  ``rate_limit_anonymous``), only for in-process counters (a shared store goes through the route); past the
  limit the request goes on to the route with this decision, which answers the 429 as always;
- the metrics see the route (``scope["endpoint"]``) and the estimate is counted; the outer middlewares
  (request id, security headers, allowed hosts, metrics) run as for every request.

Anything else goes on to the app unchanged, its body replayed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.lru import LockedLRU
from app.core.ratelimit import DECISION_KEY

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["DECISION_KEY", "PATH", "EstimateReplay", "ReplayAnswers", "replay_key"]

PATH = "/api/v1/estimates"
_API_KEY = b"x-api-key"


def replay_key(scope: Scope, body: bytes) -> tuple[bytes, bytes] | None:
    """The key of a request this middleware may answer (see the module docstring), else ``None``."""
    if scope.get("method") != "POST" or scope.get("path") != PATH or scope.get("query_string"):
        return None
    content_type = b""
    for name, value in scope["headers"]:
        if name == _API_KEY:
            return None
        if name == b"content-type":
            content_type = value
    return content_type, body


class ReplayAnswers:
    """The answers :class:`EstimateReplay` may give (``app.state.estimate_replay``; the route fills it).

    ``endpoint`` is the route's function, which the router would set as ``scope["endpoint"]`` (the metrics label
    the route by it): handed in by the app factory, as this middleware sits below the routes."""

    def __init__(self, endpoint: Callable[..., Any], size: int = 1024) -> None:
        self.endpoint = endpoint
        self.size = size
        self._answers: LockedLRU[tuple[bytes, bytes], tuple[Any, bytes]] = LockedLRU(size)

    def remember(self, key: tuple[bytes, bytes], catalog: Catalog, answer: bytes) -> None:
        """Keep the route's 200 ``answer`` to the request ``key``, computed with ``catalog``."""
        self._answers.put(key, (catalog, answer))

    def kept(self, key: tuple[bytes, bytes]) -> tuple[Any, bytes] | None:
        return self._answers.get(key)


class EstimateReplay:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") != PATH:
            await self.app(scope, receive, send)
            return
        messages: list[Message] = []
        more = True
        while more:
            message = await receive()
            messages.append(message)
            more = message["type"] == "http.request" and bool(message.get("more_body"))
        body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
        key = replay_key(scope, body) if messages[-1]["type"] == "http.request" else None
        answers: ReplayAnswers | None = getattr(getattr(scope.get("app"), "state", None), "estimate_replay", None)
        kept = answers.kept(key) if key is not None and answers is not None else None
        if kept is not None and answers is not None and await self._answer(scope, send, answers.endpoint, kept):
            return

        pending = list(messages)

        async def replay() -> Message:
            return pending.pop(0) if pending else await receive()

        await self.app(scope, replay, send)

    async def _answer(self, scope: Scope, send: Send, endpoint: Callable[..., Any], kept: tuple[Any, bytes]) -> bool:
        app = scope.get("app")
        state = getattr(app, "state", None)
        if state is None:
            return False
        catalog, answer = kept
        if state.catalog_cache.fresh() is not catalog:
            return False
        limiter = state.limiter
        if not limiter.in_process:
            return False
        client = scope.get("client")
        decision = limiter.hit(f"ip:{client[0] if client else 'unknown'}", state.settings.rate_limit_anonymous)
        if not decision.allowed:
            scope[DECISION_KEY] = decision  # the route answers the 429, without counting the request again
            return False
        scope["endpoint"] = endpoint  # what the router sets: the metrics label the route
        scope.setdefault("path_params", {})
        state.metrics.estimates.labels("estimates").inc()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-length", str(len(answer)).encode("latin-1")), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": answer})
        return True
