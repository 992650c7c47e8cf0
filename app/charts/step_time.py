"""Where one optimizer step's time goes."""

from __future__ import annotations

import plotly.graph_objects as go

from app.charts.style import base_layout
from app.core.i18n import N_
from app.core.i18n import gettext as _
from estimator.response import TimeResult

__all__ = ["step_time_figure", "step_time_parts"]

_PART_LABELS: dict[str, str] = {
    "compute_s": N_("Compute"),
    "exposed_communication_s": N_("Communication (not overlapped)"),
    "bubble_s": N_("Pipeline bubble"),
    "optimizer_s": N_("Optimizer step"),
    "offload_s": N_("CPU offload transfers"),
    "forward_s": N_("Forward"),
    "backward_s": N_("Backward"),
    "recompute_s": N_("Recompute"),
}


def _label(key: str) -> str:
    return _(_PART_LABELS.get(key, key.removesuffix("_s").replace("_", " ").capitalize()))


_COMPUTE_KEYS = ("forward_s", "backward_s", "recompute_s")
_AFTER_COMPUTE = ("exposed_communication_s", "bubble_s", "optimizer_s", "offload_s")


def step_time_parts(time: TimeResult) -> list[tuple[str, float]]:
    """``(label, seconds)`` per part of a step, adding up to ``step_time_s``.

    The estimator's step is compute + pipeline bubble + communication not overlapped + optimizer step + CPU
    offload transfers (``estimator.training.timing.step_time``). Compute is split into forward, backward and recompute
    when the estimator gives that breakdown; what compute holds beyond them (the slow-down of overlapped
    communication, DDP gradient buckets) is its own bar, "Other compute". Parts of zero seconds are left out;
    whatever the named parts do not explain (a newer estimator's term) shows as "Other", so the bars always sum
    to the step.
    """
    parts: list[tuple[str, float]] = []
    breakdown = time.breakdown_s or {}
    split = [(k, float(breakdown[k])) for k in _COMPUTE_KEYS if breakdown.get(k, 0.0) > 0]
    if split:
        parts.extend((_label(k), v) for k, v in split)
        rest = float(time.compute_s) - sum(v for _, v in split)
        if rest > 1e-9 * max(time.step_time_s, 1e-12):
            parts.append((_("Other compute"), rest))
    elif time.compute_s > 0:
        parts.append((_("Compute"), float(time.compute_s)))
    parts.extend((_label(k), float(getattr(time, k))) for k in _AFTER_COMPUTE if getattr(time, k) > 0)
    residual = float(time.step_time_s) - sum(v for _, v in parts)
    if abs(residual) > 1e-6 * max(time.step_time_s, 1e-12):
        parts.append((_("Other"), residual))
    return parts


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
            text=[f"{s:.3g} s ({s / time.step_time_s:.0%})" if time.step_time_s > 0 else f"{s:.3g} s"
                  for s in seconds],
            textposition="outside",
            cliponaxis=False,
            hovertemplate="%{y}: %{x:.3g} s<extra></extra>",
            name="Step time",
        )
    )
    title = title or _("Step time %(s)s s") % {"s": f"{time.step_time_s:.3g}"}
    layout = base_layout(title, height=110 + 34 * len(parts))
    layout.update(
        showlegend=False,
        xaxis={"title": {"text": _("seconds per step")}, "gridcolor": "#eee", "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "automargin": True},
        margin={"l": 10, "r": 50, "t": 44, "b": 40},
    )
    fig.update_layout(layout)
    return fig
