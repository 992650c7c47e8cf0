"""The allowed-host check, and the set-up of the security headers (:mod:`app.core.security_headers`).

``CAPPLAN_ALLOWED_HOSTS`` (comma separated; ``*.example.com`` wildcards; ``*`` = any) goes to Starlette's
``TrustedHostMiddleware``: a request whose ``Host`` is not listed gets a 400 problem naming ``header.host``, so
a DNS-rebinding page (whose Origin and Host would agree) cannot reach the app under another name.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.core.security_headers import SecurityHeadersMiddleware, content_security_policy, csp_nonce, security_headers
from app.errors import field_error, problem_response

__all__ = [
    "AllowedHostsMiddleware",
    "SecurityHeadersMiddleware",
    "content_security_policy",
    "csp_nonce",
    "install_http_security",
    "security_headers",
]


def allowed_hosts(setting: str) -> list[str]:
    return [h.strip() for h in setting.split(",") if h.strip()]


class AllowedHostsMiddleware:
    """Starlette's ``TrustedHostMiddleware`` decides; its refusal (a plain-text 400) is answered as every other
    error is, a problem (JSON under ``/api/``, else a small page) naming the ``Host`` header."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str]) -> None:
        self.app = app
        self.check = TrustedHostMiddleware(self._allowed, allowed_hosts=allowed_hosts, www_redirect=False)

    async def _allowed(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["capplan.host_allowed"] = True
        await self.app(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.check(scope, receive, send)
            return

        async def refuse_or_pass(message: Message) -> None:
            if scope.get("capplan.host_allowed"):
                await send(message)
            elif message["type"] == "http.response.start":  # the check's own 400: answer with a problem
                request = Request(scope, receive)
                host = request.headers.get("host", "")
                response = problem_response(
                    request, 400, "host-not-allowed", "Host not allowed",
                    f"this server does not answer to the host {host[:200]!r} (CAPPLAN_ALLOWED_HOSTS)",
                    [field_error(["header", "host"], "not one of the allowed hosts", "host_not_allowed")])
                await response(scope, receive, send)

        await self.check(scope, receive, refuse_or_pass)


def install_http_security(app: FastAPI, allowed_hosts_setting: str) -> None:
    """Add the allowed-host check, then the headers around it (so its 400s carry them too)."""
    app.add_middleware(AllowedHostsMiddleware, allowed_hosts=allowed_hosts(allowed_hosts_setting))
    app.add_middleware(SecurityHeadersMiddleware)
