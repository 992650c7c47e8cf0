"""What the server lets in: a body size limit, a read timeout for slow bodies, and a bounded queue.

Two ASGI middlewares, each answering with the usual problem+json (or the HTML error page):

- :class:`BodyLimitMiddleware`: a body over ``max_body_bytes`` is a 413, found from ``Content-Length`` before
  anything is read or, for a chunked body, as soon as the bytes read pass the limit (so at most the limit plus
  one chunk is ever held); a body whose next chunk does not come within ``body_timeout_s`` is a 408.
- :class:`AdmissionMiddleware`: at most ``max_concurrent`` requests are handled at once; up to ``max_queued``
  more wait their turn (first come, first served) for at most ``queue_timeout_s``; beyond either bound the
  answer is at once a 503 with ``Retry-After``, so an overloaded server says so quickly instead of hanging.
  Liveness, readiness, metrics and static files skip the queue.

Slow *headers* never reach the app: ``capplan serve`` closes those connections (app.serve).
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import anyio
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import problem_response

__all__ = ["QUEUE_EXEMPT", "AdmissionMiddleware", "BodyLimitMiddleware"]

#: paths that skip the queue: cheap, and what monitoring (and the planner page's progress bar) needs while the
#: server is busy
QUEUE_EXEMPT = ("/healthz", "/readyz", "/metrics", "/static/", "/plan/progress")


async def _answer(scope: Scope, receive: Receive, send: Send, status: int, slug: str, title: str, detail: str,
                  headers: dict[str, str] | None = None) -> None:
    response = problem_response(Request(scope, receive), status, slug, title, detail, (), headers)
    await response(scope, receive, send)


class BodyLimitMiddleware:
    """413 for a body over ``max_body_bytes``, 408 for one whose next chunk does not come in time."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, body_timeout_s: float) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.body_timeout_s = body_timeout_s

    def _too_large(self) -> str:
        return f"the request body is over the {self.max_body_bytes:,}-byte limit (CAPPLAN_MAX_BODY_BYTES)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length", b"").strip()
        if length.isdigit() and int(length) > self.max_body_bytes:
            await _answer(scope, receive, send, 413, "request-too-large", "Request too large", self._too_large(),
                          {"Connection": "close"})
            return
        seen = 0

        async def limited_receive() -> Message:
            # Raised as HTTP errors: FastAPI passes those on from its body reading, and the handlers in
            # app.errors turn them into problem+json.
            nonlocal seen
            with anyio.move_on_after(self.body_timeout_s) as waited:
                message = await receive()
            if waited.cancelled_caught:
                raise HTTPException(408, f"the request body did not arrive within {self.body_timeout_s:g} s",
                                    headers={"Connection": "close"})
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body_bytes:
                    raise HTTPException(413, self._too_large(), headers={"Connection": "close"})
            return message

        started = False

        async def tracked_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracked_send)
        except HTTPException as exc:
            # a middleware inside this one (EstimateReplay) read the body before any route's handlers could
            # turn the error into a problem: answer it here, unless a response has begun
            if started or exc.status_code not in (408, 413):
                raise
            slug, title = (("request-too-large", "Request too large") if exc.status_code == 413
                           else ("request-timeout", "Request timeout"))
            await _answer(scope, receive, send, exc.status_code, slug, title, str(exc.detail),
                          {"Connection": "close"})


class AdmissionMiddleware:
    """A bounded first-come-first-served queue in front of the app (see the module docstring)."""

    def __init__(self, app: ASGIApp, max_concurrent: int, max_queued: int, queue_timeout_s: float) -> None:
        self.app = app
        self.max_concurrent = max_concurrent
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self.active = 0
        self.rejected = 0
        self._waiters: deque[anyio.Event] = deque()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def _retry_after(self) -> str:
        return str(max(1, math.ceil(self.queue_timeout_s / 4)))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or str(scope["path"]).startswith(QUEUE_EXEMPT):
            await self.app(scope, receive, send)
            return
        if not await self._enter():
            self.rejected += 1
            await _answer(scope, receive, send, 503, "overloaded", "Service unavailable",
                          f"the server is busy ({self.active} requests running, {self.queued} waiting); retry later",
                          {"Retry-After": self._retry_after()})
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._leave()

    async def _enter(self) -> bool:
        if self.active < self.max_concurrent and not self._waiters:
            self.active += 1
            return True
        if len(self._waiters) >= self.max_queued:
            return False
        turn = anyio.Event()
        self._waiters.append(turn)
        try:
            with anyio.move_on_after(self.queue_timeout_s):
                await turn.wait()
        except BaseException:  # the client went away while waiting: give back a place handed over meanwhile
            if turn.is_set():
                self._leave()
            else:
                self._waiters.remove(turn)
            raise
        if turn.is_set():
            return True  # _leave handed its place over: active already counts this request
        self._waiters.remove(turn)
        return False

    def _leave(self) -> None:
        if self._waiters:
            self._waiters.popleft().set()  # the place passes to the next in line
        else:
            self.active -= 1

    def snapshot(self) -> dict[str, Any]:
        return {"active": self.active, "queued": self.queued, "rejected": self.rejected}
