"""Response headers that keep pages from being framed, sniffed or made to run foreign scripts.

Every response gets (unless the route set its own):

- ``Content-Security-Policy``: scripts only from this origin, plus inline ``<script>`` elements carrying this
  response's nonce (``request.state.csp_nonce``; only the Swagger UI page has one, its set-up call); styles
  from this origin and inline (plotly.js, Swagger UI and ReDoc set element styles); images and fonts from
  this origin or ``data:``; ReDoc's web worker from ``blob:``; no plugins; forms post only here; no framing
  (``frame-ancestors 'none'``). The charts' figure JSON sits in ``<script type="application/json">`` data
  blocks, which are never executed, so they need no nonce (and keep working when htmx swaps them in).
  W3C Content Security Policy Level 3, sections 6.1.1 (script-src nonces) and 6.4.2 (frame-ancestors).
- ``X-Frame-Options: DENY`` for browsers without ``frame-ancestors`` (RFC 7034).
- ``X-Content-Type-Options: nosniff`` (Fetch standard, "X-Content-Type-Options header").
- ``Referrer-Policy: same-origin``: no ``Referer`` leaves the site. Not ``no-referrer``: with it, browsers send
  ``Origin: null`` on form posts (Fetch standard, "serializing a request origin"), which the pages'
  cross-site check (``app.web.guard``) would refuse.
- ``Cross-Origin-Opener-Policy: same-origin``.

Installed with the allowed-host check by :func:`app.http_security.install_http_security`; ``app.errors`` adds
the same headers to the 500 it answers outside the middleware.
"""

from __future__ import annotations

import secrets

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["SecurityHeadersMiddleware", "content_security_policy", "csp_nonce", "security_headers"]


def content_security_policy(nonce: str) -> str:
    return "; ".join([
        "default-src 'self'",
        f"script-src 'self' 'nonce-{nonce}'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ])


def security_headers(nonce: str) -> dict[str, str]:
    """The headers every response carries. An unexpected error's 500 is answered outside the middleware
    (Starlette's ServerErrorMiddleware is always outermost), so ``app.errors`` adds them to it itself."""
    return {
        "Content-Security-Policy": content_security_policy(nonce),
        "X-Content-Type-Options": "nosniff",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
        "Cross-Origin-Opener-Policy": "same-origin",
    }


def csp_nonce(request: Request) -> str:
    """This response's script nonce (set by :class:`SecurityHeadersMiddleware`; a fresh one without it)."""
    state = request.scope.setdefault("state", {})
    if "csp_nonce" not in state:
        state["csp_nonce"] = secrets.token_urlsafe(18)
    return str(state["csp_nonce"])


class SecurityHeadersMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(18)
        scope.setdefault("state", {})["csp_nonce"] = nonce
        fixed = security_headers(nonce)

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in fixed.items():
                    if name not in headers:
                        headers.append(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)
