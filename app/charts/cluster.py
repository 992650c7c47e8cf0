"""The scaling curve chart: tokens/s and scaling efficiency against the node count."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from app.charts.style import base_layout
from app.core.i18n import gettext as _
from estimator.cluster.contract import ScalingPoint

__all__ = ["scaling_figure"]


def scaling_figure(points: Sequence[ScalingPoint], threshold: float) -> go.Figure:
    """Tokens/s (bars, left axis) and scaling efficiency (line, right axis) per node count; the threshold dashed."""
    nodes = [str(p.nodes) for p in points]
    fig = go.Figure()
    fig.add_trace(go.Bar(x=nodes, y=[p.tokens_per_s for p in points], name=_("tokens/s"), marker_color="#9dc3e6",
                         hovertemplate="%{x} nodes: %{y:,.0f} tokens/s<extra></extra>"))
    fig.add_trace(go.Scatter(x=nodes, y=[p.scaling_efficiency * 100 for p in points], name=_("scaling efficiency %"),
                             yaxis="y2", mode="lines+markers", line={"color": "#c55a11"},
                             hovertemplate="%{x} nodes: %{y:.1f} %<extra></extra>"))
    fig.add_trace(go.Scatter(x=nodes, y=[threshold * 100] * len(nodes), name=_("threshold"), yaxis="y2",
                             mode="lines", line={"color": "#a5a5a5", "dash": "dash"}, hoverinfo="skip"))
    layout = base_layout(_("Scaling from one node to the cluster"), 380)
    layout.update(xaxis={"title": _("nodes"), "type": "category"},
                  yaxis={"title": _("tokens/s"), "rangemode": "tozero"},
                  yaxis2={"title": _("efficiency %"), "overlaying": "y", "side": "right", "range": [0, 105]})
    fig.update_layout(**layout)
    return fig
