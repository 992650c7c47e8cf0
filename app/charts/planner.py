"""Planner chart: time against cost of every ranked plan, the Pareto front drawn as a line, the winner starred.

Pure functions: :class:`estimator.planner.contract.Plan` objects in, :class:`plotly.graph_objects.Figure` out.
Tests read the figure data (trace names, points), never pixels.

With ``training.train_tokens`` the axes are time to train (hours) and cost of the run; without it, step time
(seconds) and cost per million tokens. Plans without a price are left out (they have no cost to plot). Points are
kept in USD (:class:`PlanPoint`) and plotted, hovered and labelled in the reader's currency as the tables write it
(:mod:`app.charts.style`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

from app.charts.style import base_layout, money_axis, money_code, money_labels, money_values
from app.core.i18n import N_
from app.core.i18n import gettext as _
from estimator.planner.contract import Plan

__all__ = ["GPU_COLORS", "Axes", "PlanPoint", "axes_for", "plan_points", "time_cost_figure"]

GPU_COLORS = ("#2e75b6", "#c55a11", "#548235", "#7030a0", "#bf9000", "#1f4e79", "#a5a5a5", "#c00000")
FRONT_COLOR = "#c00000"


@dataclass(frozen=True)
class Axes:
    per_run: bool  # time to train and cost per run (else step time and USD per million tokens)

    @property
    def x_title(self) -> str:
        return _("time to train (hours)") if self.per_run else _("step time (s)")

    @property
    def y_title(self) -> str:
        code = {"currency": money_code()}
        return _("cost of the run (%(currency)s)") % code if self.per_run else \
            _("%(currency)s per million tokens") % code


@dataclass(frozen=True)
class PlanPoint:
    """One plan as a point of the chart."""

    id: str
    rank: int
    label: str
    gpu: str
    x: float
    y: float  # USD
    pareto: bool


def axes_for(plans: Sequence[Plan]) -> Axes:
    """Per run when every priced plan has a time to train and a cost of the run."""
    priced = [(p, p.cost) for p in plans if p.cost is not None]
    per_run = bool(priced) and all(p.time_to_train_s is not None and c.cost_usd is not None for p, c in priced)
    return Axes(per_run=per_run)


def plan_points(plans: Sequence[Plan], axes: Axes | None = None) -> list[PlanPoint]:
    """The plans that have a cost, as (x, y) points in the units of ``axes``, in rank order."""
    axes = axes or axes_for(plans)
    points = []
    for p in sorted(plans, key=lambda p: p.rank):
        if p.cost is None:
            continue
        if axes.per_run:
            if p.time_to_train_s is None or p.cost.cost_usd is None:
                continue
            x, y = p.time_to_train_s / 3600.0, p.cost.cost_usd
        else:
            x, y = p.step_time_s, p.cost.usd_per_million_tokens
        points.append(PlanPoint(p.id, p.rank, p.label, p.layout.gpu, x, y, p.pareto))
    return points


def time_cost_figure(
    plans: Sequence[Plan], gpu_names: dict[str, str] | None = None, objective: str = "time",
    title: str = N_("Time vs cost of the ranked plans"),
) -> go.Figure | None:
    """One marker trace per GPU type, the Pareto front as a line through its points (fastest first) and the
    winner (rank 1) as a star; ``None`` when no plan has a cost."""
    axes = axes_for(plans)
    points = plan_points(plans, axes)
    if not points:
        return None
    names = gpu_names or {}
    hover = "#%{customdata} %{text}<br>%{x:.3g} " + ("h" if axes.per_run else "s") + ", %{hovertext}<extra></extra>"

    def data(group: Sequence[PlanPoint]) -> dict[str, object]:  # plotted in the reader's currency, as the tables
        return {"y": money_values(pt.y for pt in group), "hovertext": money_labels(pt.y for pt in group),
                "customdata": [pt.rank for pt in group]}

    fig = go.Figure()
    gpus = list(dict.fromkeys(pt.gpu for pt in points))
    for i, gpu in enumerate(gpus):
        group = [pt for pt in points if pt.gpu == gpu]
        fig.add_trace(go.Scatter(
            name=names.get(gpu, gpu), x=[pt.x for pt in group], **data(group),
            text=[pt.label for pt in group], mode="markers",
            marker={"color": GPU_COLORS[i % len(GPU_COLORS)], "size": 9, "opacity": 0.85},
            hovertemplate=hover,
        ))
    front = sorted((pt for pt in points if pt.pareto), key=lambda pt: (pt.x, pt.y))
    if front:
        fig.add_trace(go.Scatter(
            name=_("Pareto front"), x=[pt.x for pt in front], **data(front),
            text=[pt.label for pt in front], mode="lines+markers",
            line={"color": FRONT_COLOR, "width": 2, "shape": "hv"},
            marker={"color": FRONT_COLOR, "size": 12, "symbol": "circle-open", "line": {"width": 2}},
            hovertemplate=hover,
        ))
    best = min(points, key=lambda pt: pt.rank)
    if best.rank == 1:
        fig.add_trace(go.Scatter(
            name=_("Best (fastest)") if objective == "time" else _("Best (cheapest)"), x=[best.x], **data([best]),
            text=[best.label], mode="markers",
            marker={"color": "#ffc000", "size": 18, "symbol": "star", "line": {"color": "#1d2430", "width": 1}},
            hovertemplate=hover,
        ))
    layout = base_layout(_(title), height=420)
    layout.update(
        xaxis={"title": {"text": axes.x_title}, "gridcolor": "#eee", "rangemode": "tozero"},
        yaxis={"title": {"text": axes.y_title}, **money_axis("$,.2f" if not axes.per_run else "$,.0f"),
               "gridcolor": "#eee", "rangemode": "tozero"},
    )
    fig.update_layout(layout)
    return fig
