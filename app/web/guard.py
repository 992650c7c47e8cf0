"""What stands in front of the pages: a same-origin check on form posts, and per-client rate limits.

The pages write without an API key (a browser user has none): "Save as quote", "Save as plan" and "Re-compute"
are plain form posts. So that another site cannot make a visitor's browser post them (cross-site request
forgery), a post must come from a page of this site: its ``Origin`` header (or, when a browser sends none, its
``Referer``) must name the host the request was sent to (``Host``). Anything else, a missing header included,
is a 403 page. This is the check OWASP calls "verifying origin with standard headers"; it needs no token,
so the forms keep working without JavaScript.

Form posts count against ``rate_limit_web_writes`` and each costly page (:data:`COSTLY_PAGES`, which run
many estimates or the planner per request) against ``rate_limit_web_pages``, per client address, apart from
the API's counters. Past the limit: a 429 page with ``Retry-After``.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from fastapi import Request

from app.core.settings import Settings
from app.errors import Forbidden, RateLimited

__all__ = ["COSTLY_PAGES", "guard_page", "same_origin"]

#: GET pages that cost far more than a page view: the planner searches layouts, compare runs one estimate per GPU
COSTLY_PAGES = frozenset({"/plan", "/compare", "/cluster"})
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _host_port(netloc: str, scheme: str) -> tuple[str, int | None] | None:
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname:
        return None
    return parts.hostname.lower(), port or _DEFAULT_PORTS.get(scheme)


def same_origin(request: Request) -> bool:
    """Whether the ``Origin`` (else ``Referer``) of ``request`` names the host it was sent to."""
    claimed = request.headers.get("origin") or request.headers.get("referer")
    host = request.headers.get("host")
    if not claimed or not host or claimed == "null":
        return False
    try:
        origin = urlsplit(claimed)
    except ValueError:
        return False
    if origin.scheme not in _DEFAULT_PORTS:
        return False
    mine, theirs = _host_port(host, origin.scheme), _host_port(origin.netloc, origin.scheme)
    return mine is not None and mine == theirs


def _limit(request: Request, what: str, limit: str) -> None:
    """Count the request against its client address, for ``what`` (form posts, or one costly page)."""
    identity = f"web:{what}:ip:{request.client.host if request.client else 'unknown'}"
    decision = request.app.state.limiter.hit(identity, limit)
    if not decision.allowed:
        raise RateLimited(
            f"more than {limit} {what} from your address; retry in {decision.retry_after_s} s",
            headers={"Retry-After": str(decision.retry_after_s)},
        )


async def guard_page(request: Request) -> None:
    """A router dependency of every page: same-origin check and rate limit for posts, rate limit for costly pages."""
    settings: Settings = request.app.state.settings
    if request.method not in _SAFE_METHODS:
        if not same_origin(request):
            raise Forbidden(
                "this form can only be sent from a page of this site (the Origin or Referer header must match "
                "the Host); reload the page and try again"
            )
        _limit(request, "form posts", settings.rate_limit_web_writes)
    elif request.url.path in COSTLY_PAGES:
        _limit(request, f"requests for {request.url.path}", settings.rate_limit_web_pages)
