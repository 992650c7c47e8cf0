"""The serving throughput-latency curve: output tokens/s per GPU against time per output token, one point per
concurrency."""

from __future__ import annotations

import plotly.graph_objects as go

from app.charts.style import base_layout
from app.core.i18n import gettext as _
from estimator.inference.response import SpeedResult

__all__ = ["serving_curve_figure"]


def serving_curve_figure(speed: SpeedResult, tpot_target_s: float | None = None) -> go.Figure:
    pts = speed.curve
    fig = go.Figure(go.Scatter(
        x=[p.tpot_s * 1e3 for p in pts], y=[p.output_tokens_per_s_per_gpu for p in pts], mode="lines+markers+text",
        text=[str(p.concurrency) for p in pts], textposition="top left", marker={"color": "#2e75b6", "size": 8},
        customdata=[[p.concurrency, p.ttft_s * 1e3, p.output_tokens_per_s_per_node] for p in pts],
        hovertemplate=(_("concurrency") + " %{customdata[0]}<br>TPOT %{x:.1f} ms<br>TTFT %{customdata[1]:.0f} ms<br>"
                       "%{y:,.0f} tok/s per GPU<br>%{customdata[2]:,.0f} tok/s per node<extra></extra>"),
        name=_("throughput vs latency")))
    if tpot_target_s is not None:
        fig.add_vline(x=tpot_target_s * 1e3, line={"dash": "dash", "color": "#c55a11"},
                      annotation_text=_("TPOT target"), annotation_position="top right")
    layout = base_layout(_("Throughput against latency (labels: requests in flight per replica)"), height=380)
    layout.update(showlegend=False,
                  xaxis={"title": {"text": _("time per output token (ms)")}, "gridcolor": "#eee",
                         "rangemode": "tozero"},
                  yaxis={"title": {"text": _("output tokens/s per GPU")}, "gridcolor": "#eee", "rangemode": "tozero"},
                  margin={"l": 10, "r": 20, "t": 44, "b": 50})
    fig.update_layout(layout)
    return fig
