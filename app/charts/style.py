"""Shared look of every capplan chart."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from babel.numbers import get_decimal_symbol, get_group_symbol

from app.core.i18n import DEFAULT, current

__all__ = ["GIB", "MEMORY_COLORS", "base_layout", "compact", "figure_json"]

GIB = 2**30

#: One colour per memory kind, in stacking order (model state first, then transient memory).
MEMORY_COLORS: dict[str, str] = {
    "parameters": "#1f4e79",
    "gradients": "#2e75b6",
    "optimizer_states": "#9dc3e6",
    "activations": "#c55a11",
    "logits": "#f4b183",
    "temporary": "#bf9000",
    "overhead": "#a5a5a5",
}


def base_layout(title: str, height: int) -> dict[str, Any]:
    """The common layout; in a locale other than English, Plotly's number separators follow it (``,.`` for
    pt-BR: decimal comma, thousands dot), so axis ticks read like the page's numbers."""
    layout = {
        "title": {"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
        "height": height,
        "margin": {"l": 10, "r": 20, "t": 44, "b": 96},
        "font": {"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12, "color": "#222"},
        "paper_bgcolor": "white",
        "plot_bgcolor": "white",
        "legend": {"orientation": "h", "yref": "container", "y": 0, "yanchor": "bottom", "x": 0,
                   "traceorder": "normal"},
        "hoverlabel": {"font": {"size": 12}},
    }
    if current() != DEFAULT:
        layout["separators"] = get_decimal_symbol(current()) + get_group_symbol(current())
    return layout


def figure_json(fig: go.Figure) -> str:
    """JSON for ``Plotly.newPlot``; plotly escapes ``<``, ``>`` and ``/`` so it is safe inside ``<script>``."""
    text: str = fig.to_json()
    return text


def compact(value: float) -> str:
    """``123456`` → ``123k``; ``2.5e6`` → ``2.5M``; the decimal mark of the page's locale (``1,63k`` in pt-BR)."""
    from app.core.i18n import localize_number

    for factor, suffix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return localize_number(f"{value / factor:.3g}") + suffix
    return localize_number(f"{value:.3g}")


def usd_symbol() -> str:
    """The US dollar's symbol as the page's locale writes it (Babel: "$" in English, "US$" in pt-BR)."""
    from babel.numbers import get_currency_symbol

    from app.core.i18n import current

    return "$" if current() == "en" else str(get_currency_symbol("USD", locale=current())) + " "


def usd_axis(fmt: str) -> dict[str, str]:
    """An axis of US dollars: Plotly's own format without its "$" (which ignores the locale) and the locale's
    symbol as the tick prefix ("$2,000,000" in English, "US$ 2.000.000" in pt-BR with the layout's separators)."""
    return {"tickformat": fmt.lstrip("$"), "tickprefix": usd_symbol()}
