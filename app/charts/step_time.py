"""Where one optimizer step's time goes."""

from __future__ import annotations

import plotly.graph_objects as go

from app.charts.style import base_layout
from estimator.response import TimeResult

__all__ = ["step_time_figure", "step_time_parts"]

_PART_LABELS: dict[str, str] = {
    "compute_s": "Compute",
    "exposed_communication_s": "Communication (not overlapped)",
    "bubble_s": "Pipeline bubble",
    "optimizer_s": "Optimizer step",
    "offload_s": "CPU offload transfers",
}


def _label(key: str) -> str:
    return _PART_LABELS.get(key, key.removesuffix("_s").replace("_", " ").capitalize())


def step_time_parts(time: TimeResult) -> list[tuple[str, float]]:
    """``(label, seconds)`` per part of a step: the estimator's own breakdown when it gives one."""
    if time.breakdown_s:
        return [(_label(k), float(v)) for k, v in time.breakdown_s.items()]
    return [(label, float(getattr(time, key))) for key, label in _PART_LABELS.items()]


def step_time_figure(time: TimeResult, title: str | None = None) -> go.Figure:
    parts = step_time_parts(time)
    labels = [label for label, _ in parts]
    seconds = [s for _, s in parts]
    fig = go.Figure(
        go.Bar(
            y=labels,
            x=seconds,
            orientation="h",
            marker={"color": "#2e75b6"},
            text=[f"{s:.3g} s" for s in seconds],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.3g} s<extra></extra>",
            name="Step time",
        )
    )
    layout = base_layout(title or f"Step time {time.step_time_s:.3g} s", height=110 + 34 * len(parts))
    layout.update(
        showlegend=False,
        xaxis={"title": {"text": "seconds per step"}, "gridcolor": "#eee", "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True},
        margin={"l": 10, "r": 50, "t": 44, "b": 40},
    )
    fig.update_layout(layout)
    return fig
