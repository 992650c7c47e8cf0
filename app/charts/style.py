"""Shared look of every capplan chart.

Money on a chart is the tables' money (issue 28's one truth): amounts converted to the reader's currency by
:func:`money_values` (the same :func:`app.core.currency.convert` as :func:`app.web.templating.money`), labelled and
hovered with :func:`money_labels` (that ``money``), on a :func:`money_axis` with the currency's Babel symbol and
titled with :func:`money_code`. No chart writes "$" or "USD" itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import plotly.graph_objects as go
from babel.numbers import get_decimal_symbol, get_group_symbol

from app.core.currency import convert
from app.core.currency import current as current_currency
from app.core.i18n import DEFAULT, current

__all__ = ["GIB", "MEMORY_COLORS", "base_layout", "compact", "figure_json", "money_axis", "money_code",
           "money_labels", "money_symbol", "money_values"]

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


def money_values(usd: Iterable[float]) -> list[float]:
    """USD amounts in the reader's currency, as a chart plots them: the conversion of the tables' money
    (:func:`app.core.currency.convert`, the operator's dated rate), so a bar's height is the figure its table shows."""
    return [convert(float(v)) for v in usd]


def money_labels(usd: Iterable[float]) -> list[str]:
    """USD amounts as the tables write them: :func:`app.web.templating.money` (the reader's currency, Babel for
    the locale: "$1,306", "R$ 7.183,00", "US$ 1.306"); the charts' hover text and bar labels."""
    from app.web.templating import money

    return [money(float(v)) for v in usd]


def money_code() -> str:
    """The ISO code of the reader's currency ("USD", "BRL"), for an axis title."""
    return current_currency().code


def money_symbol() -> str:
    """The reader's currency symbol as the page's locale writes it (Babel: "$" or "R$" in English, "US$ " or
    "R$ " in pt-BR, where a space follows the symbol)."""
    from app.web.templating import currency_symbol

    symbol = currency_symbol()
    return symbol if current() == DEFAULT else symbol + " "


def money_axis(fmt: str) -> dict[str, str]:
    """An axis of money in the reader's currency (plot :func:`money_values` on it): Plotly's own format without
    its "$" (which ignores the locale and the currency) and the currency's symbol as the tick prefix
    ("$2,000,000" in English, "R$ 10.860.000" in pt-BR with BRL, with the layout's separators)."""
    return {"tickformat": fmt.lstrip("$"), "tickprefix": money_symbol()}
