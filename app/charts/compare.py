"""Side-by-side charts for one job on several GPUs or servers."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from app.charts.style import base_layout, compact

__all__ = ["metric_bar_figure"]


def metric_bar_figure(
    rows: Sequence[tuple[str, float | None]], title: str, unit: str, fmt: str | None = None, prefix: str = ""
) -> go.Figure:
    """One horizontal bar per option, labelled compactly (or with ``fmt``); ``None`` shows as "n/a"."""
    labels = [label for label, _ in rows]
    values = [value if value is not None else 0.0 for _, value in rows]
    text = [prefix + (compact(v) if fmt is None else format(v, fmt)) if v is not None else "n/a" for _, v in rows]
    fig = go.Figure(
        go.Bar(
            y=labels,
            x=values,
            orientation="h",
            marker={"color": "#2e75b6"},
            text=text,
            textposition="outside",
            cliponaxis=False,
            hovertemplate=f"%{{y}}: %{{text}} {unit}<extra></extra>",
            name=title,
        )
    )
    layout = base_layout(title, height=120 + 44 * len(rows))
    layout.update(
        showlegend=False,
        xaxis={"title": {"text": unit}, "gridcolor": "#eee", "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True},
        margin={"l": 10, "r": 70, "t": 44, "b": 40},
    )
    fig.update_layout(layout)
    return fig
