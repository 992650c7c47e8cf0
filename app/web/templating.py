"""The Jinja2 environment of the pages: template folder, vendored asset paths and display filters."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from babel.dates import format_date, format_time
from babel.numbers import format_currency
from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from plotly.offline import get_plotlyjs_version

from app.core.currency import convert
from app.core.currency import current as current_currency
from app.core.i18n import DEFAULT as DEFAULT_LOCALE
from app.core.i18n import LOCALES, N_, localize_number, translate
from app.core.i18n import current as current_locale
from app.core.i18n import gettext as _gettext
from app.core.i18n import ngettext as _ngettext
from app.formatting import count, percent
from app.formatting import money as _money
from app.formatting import rate as _rate
from app.web.assets import asset_url
from hardware_catalog.urls import web_url

__all__ = ["HTMX_JS", "HTMX_VERSION", "PLOTLY_JS", "is_htmx", "render", "templates"]

TEMPLATE_DIR = Path(__file__).resolve().parents[1] / "templates"
HTMX_VERSION = "2.0.11"
PLOTLY_JS = f"vendor/plotly-basic-{get_plotlyjs_version()}.min.js"  # scripts/vendor-plotly
HTMX_JS = f"vendor/htmx-{HTMX_VERSION}.min.js"

NAV = [
    ("home", "/", N_("Size a fine-tune")),
    ("compare", "/compare", N_("Compare GPUs")),
    ("plan", "/plan", N_("Planner")),
    ("tco", "/tco", N_("TCO")),
    ("cluster", "/cluster", N_("Cluster")),
    ("serve", "/serve", N_("Serve it")),
    ("catalog", "/catalog", N_("Catalog")),
    ("quotes", "/quotes", N_("Saved quotes")),
    ("measurements", "/measurements", N_("Measurements")),
]


_loc = localize_number

#: a TCO option's kind (``estimator.tco`` OptionKind) for people
OPTION_KINDS = {"own": N_("own"), "cloud-on-demand": N_("cloud on-demand"), "cloud-reserved": N_("cloud reserved"),
                "cloud-capacity-block": N_("cloud capacity block")}


def _na() -> str:
    return _gettext("n/a")


def gib(value: float | None, digits: int = 1) -> str:
    """Bytes as GiB (2**30), the unit nvidia-smi and PyTorch report."""
    if value is None:
        return _na()
    return _loc(f"{value / 2**30:,.{digits}f}") + " GiB"


def duration(seconds: float | None) -> str:
    """Seconds in the largest sensible unit: ``850 ms``, ``42 s``, ``3.2 h``, ``11.5 days``."""
    if seconds is None or not math.isfinite(seconds):
        return _na()
    for limit, div, unit in ((1, 1e-3, "ms"), (120, 1, "s"), (7200, 60, "min"), (172800, 3600, "h")):
        if seconds < limit:
            return _loc(f"{seconds / div:,.3g}") + f" {unit}"
    return _loc(f"{seconds / 86400:,.1f}") + " " + _gettext("days")


def si(value: float | None, unit: str = "") -> str:
    """``1.23e9`` → ``1.23 G``; for parameter and token counts."""
    if value is None:
        return _na()
    for factor, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{_loc(f'{value / factor:,.3g}')} {prefix}{unit}".rstrip()
    return f"{_loc(f'{value:,.3g}')} {unit}".rstrip()


def params(value: float | None) -> str:
    """Parameter counts the way model cards write them: ``70.6B``, ``207M``."""
    if value is None:
        return _na()
    for factor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if value >= factor:
            return _loc(f"{value / factor:.3g}") + suffix
    return str(int(value))


def pct(value: float | None, digits: int = 0) -> str:
    """A fraction (0.42) as a percentage (42%): Babel in English (app/formatting.py), the locale's digits else."""
    if current_locale() == DEFAULT_LOCALE or value is None:
        return percent(value, digits)
    return _loc(f"{value * 100:.{digits}f}") + "%"


def plain(value: Any) -> str:
    """A value as a person would type it: ``1e9`` → ``1000000000``, ``80.0`` → ``80``; ``None`` → empty."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e18:
        return str(int(value))
    return str(value)


def figure(value: Any) -> str:
    """A catalog figure for reading: thousands separators, no trailing ``.0``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.6g}" if abs(value) < 1e6 else f"{value:,.0f}"
    return f"{int(value):,}"


def num(value: float | None, digits: int = 0) -> str:
    """A plain number with thousands separators, in the request's locale."""
    return _na() if value is None else _loc(f"{value:,.{digits}f}")


def datetime_(value: Any) -> str:
    """A timestamp as ``2026-12-03 17:05`` (English, the stored UTC time) or in the locale's medium date and short
    time (Babel: ``3 de dez. de 2026 17:05`` in pt-BR)."""
    if value is None:
        return ""
    locale = current_locale()
    if locale == DEFAULT_LOCALE:
        return str(value.strftime("%Y-%m-%d %H:%M"))
    return f"{format_date(value, format='medium', locale=locale)} {format_time(value, format='HH:mm', locale=locale)}"


def _shown(value: float, currency: str) -> tuple[float, str]:
    """A USD amount in the reader's currency (app.core.currency: the operator's dated rate); other currencies as
    they are."""
    display = current_currency()
    if currency != "USD" or display.code == "USD":
        return value, currency
    return convert(float(value)), display.code  # the one conversion, the charts' too (app.charts.style)


def money(value: float | None, currency: str = "USD") -> str:
    if value is None:
        return _na()
    locale = current_locale()
    value, currency = _shown(value, currency)
    return _money(value, currency) if locale == DEFAULT_LOCALE else _money(value, currency, locale=locale)


def rate(value: float | None, currency: str = "USD") -> str:
    """A price per unit (per GPU-hour), to the cent, in the reader's locale and currency (issue 28: "$2.23" stood
    beside "US$ 1.887" on a Portuguese page)."""
    if value is None:
        return _na()
    locale = current_locale()
    value, currency = _shown(value, currency)
    return _rate(value, currency) if locale == DEFAULT_LOCALE else _rate(value, currency, locale=locale)


def money_range(low: float | None, high: float | None, currency: str = "USD") -> str:
    if low is None and high is None:
        return _na()
    if low is None or high is None or low == high:
        return money(low if low is not None else high, currency)
    return f"{money(low, currency)}-{money(high, currency)}"


def currency_symbol() -> str:
    """The reader's currency symbol as the page's locale writes it (Babel: "$" or "R$" in English, "US$" or "R$"
    in pt-BR): the money column headings ("R$ per GPU-hour") and the charts' money axis (app.charts.style)."""
    from babel.numbers import get_currency_symbol

    return str(get_currency_symbol(current_currency().code, locale=current_locale()))


def money3(value: float | None) -> str:
    """A price per million tokens to a tenth of a cent: ``$0.123`` (``US$ 0,123`` in pt-BR)."""
    if value is None:
        return _na()
    locale = current_locale()
    value, code = _shown(value, "USD")
    if locale == DEFAULT_LOCALE and code == "USD":
        return f"${value:.3f}"
    return str(format_currency(value, code, format="¤ #,##0.000", locale=locale, currency_digits=False))


templates = Jinja2Templates(directory=TEMPLATE_DIR)
templates.env.add_extension("jinja2.ext.i18n")
templates.env.install_gettext_callables(_gettext, _ngettext, newstyle=True)  # type: ignore[attr-defined]
templates.env.globals.update(KINDS=OPTION_KINDS, PLOTLY_JS=PLOTLY_JS, HTMX_JS=HTMX_JS, NAV=NAV, asset=asset_url,
                             LOCALES=LOCALES, current_locale=current_locale, current_currency=current_currency,
                             currency_symbol=currency_symbol)
templates.env.filters.update(
    gib=gib, duration=duration, si=si, params=params, pct=pct, money=money, plain=plain, figure=figure, num=num,
    datetime=datetime_, tr=translate, num_text=localize_number, web_url=web_url, rate=rate, count=count,
    money_range=money_range, percent=percent, money3=money3,
    upper_first=lambda text: str(text)[:1].upper() + str(text)[1:],
)


def is_htmx(request: Request) -> bool:
    """An htmx request that wants a fragment (a history restore wants the whole page)."""
    headers = request.headers
    return headers.get("hx-request") == "true" and headers.get("hx-history-restore-request") != "true"


def render(
    request: Request, name: str, context: dict[str, Any], status_code: int = 200, **headers: str
) -> HTMLResponse:
    response = templates.TemplateResponse(request, name, context, status_code=status_code)
    response.headers["Vary"] = "HX-Request, Accept-Language, Cookie"
    response.headers["Content-Language"] = current_locale().replace("_", "-")
    response.headers.update(headers)
    return response
