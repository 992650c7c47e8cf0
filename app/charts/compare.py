"""Side-by-side charts for one job on several GPUs or servers."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from app.charts.style import base_layout, compact, money_axis, money_code, money_labels, money_values

__all__ = ["metric_bar_figure"]


def _label(value: float, fmt: str | None, prefix: str) -> str:
    """A bar's label in the page's locale: money (``prefix="$"``) by the pages' own ``money`` (locale and the
    reader's currency: "US$ 1.306", "R$ 7.183"), other numbers compact or by ``fmt`` with the locale's marks."""
    from app.core.i18n import localize_number

    if prefix == "$":
        return money_labels([value])[0]
    return prefix + (compact(value) if fmt is None else localize_number(format(value, fmt)))


def metric_bar_figure(
    rows: Sequence[tuple[str, float | None]], title: str, unit: str, fmt: str | None = None, prefix: str = ""
) -> go.Figure:
    """One horizontal bar per option, labelled compactly (or with ``fmt``); ``None`` shows as "n/a". Money
    (``prefix="$"``, USD amounts in) is plotted in the reader's currency and labelled as the tables write it, its
    axis titled with the currency's code (:mod:`app.charts.style`)."""
    labels = [label for label, _ in rows]
    values = [value if value is not None else 0.0 for _, value in rows]
    text = [_label(v, fmt, prefix) if v is not None else "n/a" for _, v in rows]
    hover, axis = f"%{{y}}: %{{text}} {unit}<extra></extra>", {}
    if prefix == "$":
        values, unit, hover = money_values(values), money_code(), "%{y}: %{text}<extra></extra>"
        axis = money_axis(fmt or ",.0f")
    fig = go.Figure(
        go.Bar(
            y=labels,
            x=values,
            orientation="h",
            marker={"color": "#2e75b6"},
            text=text,
            textposition="outside",
            cliponaxis=False,
            hovertemplate=hover,
            name=title,
        )
    )
    layout = base_layout(title, height=120 + 44 * len(rows))
    layout.update(
        showlegend=False,
        xaxis={"title": {"text": unit}, "gridcolor": "#eee", "rangemode": "tozero", **axis},
        yaxis={"autorange": "reversed", "automargin": True},
        margin={"l": 10, "r": 70, "t": 44, "b": 40},
    )
    fig.update_layout(layout)
    return fig
