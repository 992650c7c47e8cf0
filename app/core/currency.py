"""The currency the pages show money in (issue 28): US dollars by default; Brazilian reais when the operator has
set a dated, sourced exchange rate (``CAPPLAN_BRL_PER_USD``, ``CAPPLAN_BRL_RATE_DATE``, ``CAPPLAN_BRL_RATE_SOURCE``;
a rate without its date and source is refused at start-up). ``CAPPLAN_CURRENCY`` is the default; a reader picks
with the switch (``/currency/{code}``, kept in a cookie). Every price in the catalog and the estimator is in USD:
the pages convert at display (``app.web.templating.money`` / ``rate``), formatted by Babel for the locale, and
keep the USD amount in their ``data-usd`` attributes. The API stays in USD.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse

__all__ = ["COOKIE", "CURRENCIES", "Display", "convert", "current", "router", "use_currency"]

COOKIE = "capplan_currency"
CURRENCIES = ("USD", "BRL")


@dataclass(frozen=True)
class Display:
    code: str = "USD"
    per_usd: float = 1.0
    date: str | None = None
    source: str | None = None
    choices: tuple[str, ...] = ("USD",)


USD = Display()
_current: contextvars.ContextVar[Display] = contextvars.ContextVar("capplan_currency", default=USD)
router = APIRouter()


def current() -> Display:
    return _current.get()


def convert(usd: float) -> float:
    """A USD amount in the display currency (the operator's dated rate)."""
    return usd * _current.get().per_usd


def _brl(settings: object) -> Display | None:
    rate = getattr(settings, "brl_per_usd", None)
    if not rate:
        return None
    return Display("BRL", float(rate), str(getattr(settings, "brl_rate_date", "") or ""),
                   str(getattr(settings, "brl_rate_source", "") or ""), CURRENCIES)


async def use_currency(request: Request) -> None:
    """Page dependency: the reader's currency (cookie, else the operator's default) for this request."""
    settings = getattr(request.app.state, "settings", None)
    brl = _brl(settings)
    choice = request.cookies.get(COOKIE) or str(getattr(settings, "currency", "USD"))
    display = brl if (choice == "BRL" and brl is not None) else (
        Display(choices=CURRENCIES) if brl is not None else USD)
    _current.set(display)


@router.get("/currency/{code}", name="set_currency")
def set_currency(code: str, next: str = "/") -> RedirectResponse:
    """The visible switch: keep the choice in a cookie (a year) and go back to the page."""
    target = next if next.startswith("/") and not next.startswith("//") and "\\" not in next else "/"
    response = RedirectResponse(target, status_code=303)
    if code in CURRENCIES:
        response.set_cookie(COOKIE, code, max_age=365 * 86400, samesite="lax", httponly=True)
    return response
