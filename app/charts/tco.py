"""TCO charts: stacked cost per option, cumulative own-vs-cloud spend, and cost against time to train.

Pure functions: :mod:`estimator.tco` results in, :class:`plotly.graph_objects.Figure` out. Tests read the figure
data (trace names, values), never pixels.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from app.charts.style import base_layout
from estimator.tco import CumulativeCost, RunCost, TcoOption

__all__ = ["COMPONENTS", "cost_vs_time_figure", "cumulative_cost_figure", "tco_stacked_bar_figure"]

#: (TcoOption field, legend name, colour) in stacking order
COMPONENTS: tuple[tuple[str, str, str], ...] = (
    ("capex_usd", "Capex", "#1f4e79"),
    ("power_usd", "Power", "#c55a11"),
    ("colocation_usd", "Colocation", "#bf9000"),
    ("maintenance_usd", "Maintenance", "#7f7f7f"),
    ("staff_usd", "Staff", "#9dc3e6"),
    ("cloud_usd", "Cloud", "#2e75b6"),
)

KIND_STYLE: dict[str, tuple[str, str]] = {
    "own": ("Own", "#1f4e79"),
    "cloud-on-demand": ("Cloud on-demand", "#2e75b6"),
    "cloud-reserved": ("Cloud reserved", "#9dc3e6"),
    "cloud-capacity-block": ("Cloud capacity block", "#bf9000"),
}


def tco_stacked_bar_figure(options: Sequence[TcoOption], title: str = "Total cost of ownership") -> go.Figure:
    """One stacked bar per option; each stack sums to the option's ``total_usd``."""
    labels = [o.label for o in options]
    fig = go.Figure()
    for field, name, colour in COMPONENTS:
        values = [float(getattr(o, field)) for o in options]
        if any(values):
            fig.add_trace(
                go.Bar(
                    name=name,
                    x=labels,
                    y=values,
                    marker={"color": colour},
                    hovertemplate=f"{name}: $%{{y:,.0f}}<extra>%{{x}}</extra>",
                )
            )
    years = options[0].years if options else 0
    layout = base_layout(f"{title} over {years:g} years", height=420)
    layout.update(
        barmode="stack",
        yaxis={"title": {"text": "USD"}, "tickformat": "$,.0f", "gridcolor": "#eee"},
        xaxis={"automargin": True},
    )
    fig.update_layout(layout)
    return fig


def cumulative_cost_figure(
    cumulative: CumulativeCost,
    own_label: str = "Own",
    cloud_label: str = "Cloud",
    title: str = "Cumulative cost: own vs cloud",
) -> go.Figure:
    """Cumulative spend by month for owning and renting, with the break-even month marked."""
    months = list(cumulative.months)
    fig = go.Figure(
        [
            go.Scatter(name=own_label, x=months, y=list(cumulative.own_usd), mode="lines", line={"color": "#1f4e79"}),
            go.Scatter(
                name=cloud_label, x=months, y=list(cumulative.cloud_usd), mode="lines", line={"color": "#2e75b6"}
            ),
        ]
    )
    layout = base_layout(title, height=380)
    layout.update(
        xaxis={"title": {"text": "months"}, "gridcolor": "#eee"},
        yaxis={"title": {"text": "USD"}, "tickformat": "$,.0f", "gridcolor": "#eee"},
    )
    fig.update_layout(layout)
    _mark_break_even(fig, cumulative)
    return fig


def _mark_break_even(fig: go.Figure, cumulative: CumulativeCost) -> None:
    month = cumulative.break_even_month
    if month is None:
        return
    value = cumulative.own_usd[month]
    fig.add_trace(
        go.Scatter(
            name=f"Break-even (month {month})",
            x=[month],
            y=[value],
            mode="markers",
            marker={"color": "#c00000", "size": 10, "symbol": "diamond"},
        )
    )
    fig.add_vline(x=month, line={"color": "#c00000", "dash": "dot", "width": 1})


def cost_vs_time_figure(runs: Sequence[RunCost], title: str = "Cost vs time to train") -> go.Figure:
    """One point per option for the same job: time to train (hours) against cost per run (USD)."""
    fig = go.Figure()
    for kind, (name, colour) in KIND_STYLE.items():
        group = [r for r in runs if r.kind == kind]
        if group:
            fig.add_trace(
                go.Scatter(
                    name=name,
                    x=[r.time_to_train_h for r in group],
                    y=[r.cost_usd for r in group],
                    text=[r.label for r in group],
                    mode="markers",
                    marker={"color": colour, "size": 10},
                    hovertemplate="%{text}<br>%{x:.1f} h, $%{y:,.0f}<extra></extra>",
                )
            )
    layout = base_layout(title, height=400)
    layout.update(
        xaxis={"title": {"text": "time to train (hours)"}, "gridcolor": "#eee", "rangemode": "tozero"},
        yaxis={
            "title": {"text": "cost per run (USD)"},
            "tickformat": "$,.0f",
            "gridcolor": "#eee",
            "rangemode": "tozero",
        },
    )
    fig.update_layout(layout)
    return fig
