"""TCO charts: stacked cost per option, cumulative own-vs-cloud spend, and cost against time to train.

Pure functions: :mod:`estimator.tco` results in, :class:`plotly.graph_objects.Figure` out. Tests read the figure
data (trace names, values), never pixels. Money is plotted in the reader's currency, hovered and labelled as the
tables write it (:mod:`app.charts.style`: ``money_values``, ``money_labels``, ``money_axis``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import plotly.graph_objects as go

from app.charts.style import base_layout, money_axis, money_code, money_labels, money_values
from app.core.i18n import N_, localize_number, translate
from app.core.i18n import gettext as _
from estimator.tco import CumulativeCost, RunCost, TcoOption, UpgradeAnswer

__all__ = [
    "COMPONENTS",
    "cost_vs_time_figure",
    "cumulative_cost_figure",
    "tco_stacked_bar_figure",
    "upgrade_payback_figure",
]

#: colours of the options when each has its own trace (one per server), in order
SERIES_COLOURS = ("#1f4e79", "#c55a11", "#548235", "#7030a0", "#bf9000", "#2e75b6", "#7f7f7f", "#c00000")

#: (TcoOption field, legend name, colour) in stacking order
COMPONENTS: tuple[tuple[str, str, str], ...] = (
    ("capex_usd", N_("Capex"), "#1f4e79"),
    ("power_usd", N_("Power"), "#c55a11"),
    ("colocation_usd", N_("Colocation"), "#bf9000"),
    ("maintenance_usd", N_("Maintenance"), "#7f7f7f"),
    ("staff_usd", N_("Staff"), "#9dc3e6"),
    ("cloud_usd", N_("Cloud"), "#2e75b6"),
)

KIND_STYLE: dict[str, tuple[str, str]] = {
    "own": (N_("Own"), "#1f4e79"),
    "cloud-on-demand": (N_("Cloud on-demand"), "#2e75b6"),
    "cloud-reserved": (N_("Cloud reserved"), "#9dc3e6"),
    "cloud-capacity-block": (N_("Cloud capacity block"), "#bf9000"),
}


def tco_stacked_bar_figure(options: Sequence[TcoOption], title: str = N_("Total cost of ownership")) -> go.Figure:
    """One stacked bar per option; each stack sums to the option's ``total_usd``."""
    labels = [translate(o.label) for o in options]
    fig = go.Figure()
    for field, name, colour in COMPONENTS:
        values = [float(getattr(o, field)) for o in options]
        if any(values):
            fig.add_trace(
                go.Bar(
                    name=_(name),
                    x=labels,
                    y=money_values(values),
                    customdata=money_labels(values),
                    marker={"color": colour},
                    hovertemplate=f"{_(name)}: %{{customdata}}<extra>%{{x}}</extra>",
                )
            )
    years = options[0].years if options else 0
    heading = _("%(title)s over %(years)s years") % {"title": _(title), "years": localize_number(f"{years:g}")}
    layout = base_layout(heading, height=420)
    layout.update(
        barmode="stack",
        yaxis={"title": {"text": money_code()}, **money_axis("$,.0f"), "gridcolor": "#eee"},
        xaxis={"automargin": True},
    )
    fig.update_layout(layout)
    return fig


def cumulative_cost_figure(
    cumulative: CumulativeCost,
    own_label: str = N_("Own"),
    cloud_label: str = N_("Cloud"),
    title: str = N_("Cumulative cost: own vs cloud"),
) -> go.Figure:
    """Cumulative spend by month for owning and renting, with the break-even month marked."""
    months = list(cumulative.months)
    hover = _("month %(month)s") % {"month": "%{x}"} + ": %{customdata}<extra>%{fullData.name}</extra>"
    fig = go.Figure(
        [
            go.Scatter(name=_(own_label), x=months, y=money_values(cumulative.own_usd),
                       customdata=money_labels(cumulative.own_usd), mode="lines", line={"color": "#1f4e79"},
                       hovertemplate=hover),
            go.Scatter(name=_(cloud_label), x=months, y=money_values(cumulative.cloud_usd),
                       customdata=money_labels(cumulative.cloud_usd), mode="lines", line={"color": "#2e75b6"},
                       hovertemplate=hover),
        ]
    )
    layout = base_layout(_(title), height=380)
    layout.update(
        xaxis={"title": {"text": _("months")}, "gridcolor": "#eee"},
        yaxis={"title": {"text": money_code()}, **money_axis("$,.0f"), "gridcolor": "#eee"},
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
            name=_("Break-even (month %(month)s)") % {"month": month},
            x=[month],
            y=money_values([value]),
            customdata=money_labels([value]),
            hovertemplate="%{customdata}<extra>%{fullData.name}</extra>",
            mode="markers",
            marker={"color": "#c00000", "size": 10, "symbol": "diamond"},
        )
    )
    fig.add_vline(x=month, line={"color": "#c00000", "dash": "dot", "width": 1})


def _scatter(name: str, group: Sequence[RunCost], colour: str, symbol: str = "circle") -> go.Scatter:
    return go.Scatter(
        name=name,
        x=[r.time_to_train_h for r in group],
        y=money_values(r.cost_usd for r in group),
        text=[translate(r.label) for r in group],
        customdata=money_labels(r.cost_usd for r in group),
        mode="markers",
        marker={"color": colour, "size": 11, "symbol": symbol},
        hovertemplate="%{text}<br>%{x:.1f} h, %{customdata}<extra></extra>",
    )


def cost_vs_time_figure(
    runs: Sequence[RunCost], title: str = N_("Cost vs time to train"), by: Literal["kind", "label"] = "kind"
) -> go.Figure:
    """One point per option for the same job: time to train (hours) against cost per run (USD). ``by="kind"``
    groups the options into one trace per kind (own, on-demand, ...); ``by="label"`` gives each option (e.g. each
    server the job runs on) its own trace, so the legend compares them."""
    fig = go.Figure()
    if by == "label":
        for i, run in enumerate(runs):
            symbol = "circle" if run.kind == "own" else "diamond"
            fig.add_trace(_scatter(translate(run.label), [run], SERIES_COLOURS[i % len(SERIES_COLOURS)], symbol))
    else:
        for kind, (name, colour) in KIND_STYLE.items():
            group = [r for r in runs if r.kind == kind]
            if group:
                fig.add_trace(_scatter(_(name), group, colour))
    layout = base_layout(_(title), height=400)
    layout.update(
        xaxis={"title": {"text": _("time to train (hours)")}, "gridcolor": "#eee", "rangemode": "tozero"},
        yaxis={
            "title": {"text": _("cost per run (%(currency)s)") % {"currency": money_code()}},
            **money_axis("$,.0f"),
            "gridcolor": "#eee",
            "rangemode": "tozero",
        },
    )
    fig.update_layout(layout)
    return fig


def _runs_axis(u: UpgradeAnswer, points: int = 60) -> list[float]:
    """Runs from 0 to past the end of the life (and to the break-even when it comes within twice the life)."""
    life_runs = u.runs_per_year * u.life_years
    end = life_runs * 1.2
    if u.break_even_runs and u.break_even_runs <= 2 * life_runs:
        end = max(end, u.break_even_runs * 1.15)
    end = max(end, 1.0)
    return [end * i / points for i in range(points + 1)]


def upgrade_payback_figure(u: UpgradeAnswer, name_a: str, name_b: str, title: str | None = None) -> go.Figure:
    """Owned cost against runs of the job: capex + runs x opex per run for the current servers (A) and the
    candidate (B), the end of the depreciation life marked, and the break-even run when there is one."""
    runs = _runs_axis(u)
    cost_a = [u.capex_a_usd + n * u.opex_per_run_a_usd for n in runs]
    cost_b = [u.capex_b_usd + n * u.opex_per_run_b_usd for n in runs]
    hover = "%{x:,.0f} " + _("runs") + ": %{customdata}<extra>%{fullData.name}</extra>"
    fig = go.Figure(
        [
            go.Scatter(name=name_a, x=runs, y=money_values(cost_a), customdata=money_labels(cost_a),
                       hovertemplate=hover, mode="lines", line={"color": "#7f7f7f"}),
            go.Scatter(name=name_b, x=runs, y=money_values(cost_b), customdata=money_labels(cost_b),
                       hovertemplate=hover, mode="lines", line={"color": "#1f4e79"}),
        ]
    )
    life_runs = u.runs_per_year * u.life_years
    fig.add_vline(x=life_runs, line={"color": "#c55a11", "dash": "dash", "width": 1},
                  annotation_text=_("end of %(years)s-year life") % {"years": localize_number(f"{u.life_years:g}")},
                  annotation_position="top left")
    be = u.break_even_runs
    if be is not None and be > 0 and be <= runs[-1] and math.isfinite(be):
        cost = u.capex_b_usd + be * u.opex_per_run_b_usd
        name = _("Break-even (%(runs)s runs)") % {"runs": localize_number(f"{be:,.0f}")}
        fig.add_trace(go.Scatter(name=name, x=[be], y=money_values([cost]), customdata=money_labels([cost]),
                                 hovertemplate="%{customdata}<extra>%{fullData.name}</extra>", mode="markers",
                                 marker={"color": "#c00000", "size": 10, "symbol": "diamond"}))
    layout = base_layout(title or _("Owned cost against runs of this job"), height=380)
    layout.update(
        xaxis={"title": {"text": _("runs of this job")}, "gridcolor": "#eee", "rangemode": "tozero"},
        yaxis={"title": {"text": _("%(currency)s (capex + running cost)") % {"currency": money_code()}},
               **money_axis("$,.0f"), "gridcolor": "#eee"},
    )
    fig.update_layout(layout)
    return fig
