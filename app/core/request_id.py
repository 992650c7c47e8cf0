"""``X-Request-ID``: accept a sane id from the caller or make one, keep it on the request, echo it back."""

from __future__ import annotations

import re
import uuid

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HEADER", "RequestIdMiddleware", "request_id_of"]

HEADER = "X-Request-ID"
_SANE = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def request_id_of(request: Request) -> str:
    """The id of ``request`` (set by the middleware; a fresh one if the middleware did not run)."""
    state = request.scope.setdefault("state", {})
    if "request_id" not in state:
        state["request_id"] = uuid.uuid4().hex
    return str(state["request_id"])


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope["headers"]).get(HEADER.lower().encode(), b"").decode("latin-1")
        request_id = incoming if _SANE.match(incoming) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                if HEADER not in headers:
                    headers.append(HEADER, request_id)
            await send(message)

        await self.app(scope, receive, send_with_id)
