"""Per-GPU memory: a stacked bar of what fills the busiest GPU, against its capacity."""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from app.charts.style import GIB, MEMORY_COLORS, base_layout
from app.core.i18n import N_
from app.core.i18n import gettext as _
from estimator.response import MemoryResult

__all__ = ["MEMORY_LABELS", "memory_figure", "memory_parts"]

MEMORY_LABELS: dict[str, str] = {
    "parameters": N_("Parameters"),
    "gradients": N_("Gradients"),
    "optimizer_states": N_("Optimizer states"),
    "activations": N_("Activations"),
    "logits": N_("Logits"),
    "temporary": N_("Temporary buffers"),
    "overhead": N_("CUDA / NCCL overhead"),
}


def memory_parts(memory: MemoryResult) -> list[tuple[str, int]]:
    """``(kind, bytes)`` in stacking order; they add up to ``memory.total_bytes``."""
    breakdown = memory.breakdown_bytes.model_dump()
    return [(kind, int(breakdown[kind])) for kind in MEMORY_LABELS]


def _part_trace(kind: str, labels: list[str], results: Sequence[MemoryResult]) -> go.Bar:
    values = [dict(memory_parts(m))[kind] / GIB for m in results]
    return go.Bar(
        name=_(MEMORY_LABELS[kind]),
        y=labels,
        x=values,
        orientation="h",
        marker={"color": MEMORY_COLORS[kind]},
        hovertemplate=f"{_(MEMORY_LABELS[kind])}: %{{x:.1f}} GiB<extra></extra>",
        meta={"kind": kind},
    )


def _capacity_trace(labels: list[str], results: Sequence[MemoryResult]) -> go.Scatter:
    return go.Scatter(
        name=_("GPU capacity"),
        y=labels,
        x=[m.capacity_bytes / GIB for m in results],
        mode="markers",
        marker={"symbol": "line-ns", "size": 46, "line": {"width": 3, "color": "#c00000"}},
        hovertemplate=_("Capacity") + ": %{x:.1f} GiB<extra></extra>",
        meta={"kind": "capacity"},
    )


def _total_trace(labels: list[str], results: Sequence[MemoryResult]) -> go.Scatter:
    return go.Scatter(
        name=_("Estimated total ± error"),
        y=labels,
        x=[m.total_bytes / GIB for m in results],
        mode="markers",
        marker={"symbol": "diamond", "size": 9, "color": "#222"},
        error_x={"type": "percent", "value": max((m.error_bar_pct for m in results), default=0.0),
                 "color": "#222", "thickness": 1.5, "width": 6},
        hovertemplate=_("Total") + ": %{x:.1f} GiB<extra></extra>",
        meta={"kind": "total"},
    )


def memory_figure(
    results: Sequence[tuple[str, MemoryResult]], title: str | None = None
) -> go.Figure:
    """One horizontal stacked bar per ``(label, result)``, in GiB, with each GPU's capacity marked."""
    labels = [label for label, _ in results]
    memories = [m for _, m in results]
    fig = go.Figure([_part_trace(kind, labels, memories) for kind in MEMORY_LABELS])
    fig.add_trace(_capacity_trace(labels, memories))
    fig.add_trace(_total_trace(labels, memories))
    top = max((max(m.capacity_bytes, m.total_bytes) for m in memories), default=GIB) / GIB
    layout = base_layout(title or _("Memory on the busiest GPU"), height=200 + 52 * len(labels))
    layout.update(
        barmode="stack",
        bargap=0.45,
        xaxis={"title": {"text": _("GiB per GPU")}, "range": [0, top * 1.12], "gridcolor": "#eee", "zeroline": False},
        yaxis={"autorange": "reversed", "automargin": True},
    )
    fig.update_layout(layout)
    return fig
