"""The cluster fabric drawn as SVG on the server (no script, no CDN): cores, spines, leaves grouped by scalable
unit, and the nodes under them, with the link counts between the layers. Large fabrics draw the first boxes of a
layer and one "+ N more" box, so the drawing stays readable and small for 4,096 nodes."""

from __future__ import annotations

from html import escape

from estimator.cluster.contract import ClusterDesign

__all__ = ["topology_svg"]

WIDTH = 960
BOX_H = 34
MAX_BOXES = 12
COLOURS = {"core": "#7030a0", "spine": "#1f4e79", "leaf": "#2e75b6", "node": "#548235", "more": "#a5a5a5"}


def _layer(labels: list[str], total: int, noun: str) -> list[str]:
    if total <= MAX_BOXES:
        return labels[:total]
    return [*labels[:MAX_BOXES - 1], f"+ {total - (MAX_BOXES - 1):,}"]


def _boxes(items: list[str], y: int, kind: str) -> tuple[list[str], list[float]]:
    n = max(1, len(items))
    gap = 8
    width = min(150.0, (WIDTH - 40 - gap * (n - 1)) / n)
    start = (WIDTH - (n * width + gap * (n - 1))) / 2
    out, centres = [], []
    for i, text in enumerate(items):
        x = start + i * (width + gap)
        colour = COLOURS["more"] if text.startswith("+ ") else COLOURS[kind]
        out.append(f'<g class="sw {kind}"><rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{BOX_H}" rx="4" '
                   f'fill="{colour}"/><text x="{x + width / 2:.1f}" y="{y + 21}" text-anchor="middle" '
                   f'font-size="{11 if width >= 100 else 9}" fill="#fff">{escape(text)}</text></g>')
        centres.append(x + width / 2)
    return out, centres


def _links(top: list[float], y_top: int, bottom: list[float], y_bottom: int) -> list[str]:
    out = []
    for a in top:
        for b in bottom:
            out.append(f'<line x1="{a:.1f}" y1="{y_top + BOX_H}" x2="{b:.1f}" y2="{y_bottom}" stroke="#8497b0" '
                       'stroke-width="0.6" stroke-opacity="0.55"/>')
    return out


def _pairs(top: list[float], y_top: int, bottom: list[float], y_bottom: int) -> list[str]:
    """One line from each box to the box under it (a unit's leaves to its own nodes)."""
    return [f'<line x1="{a:.1f}" y1="{y_top + BOX_H}" x2="{b:.1f}" y2="{y_bottom}" stroke="#548235" '
            'stroke-width="2"/>' for a, b in zip(top, bottom, strict=False)]


def _caption(x: int, y: int, text: str) -> str:
    return f'<text x="{x}" y="{y}" font-size="11" fill="#444">{escape(text)}</text>'


def topology_svg(d: ClusterDesign, node_name: str, nodes: int) -> str:
    """An ``<svg>`` element (a string) of design ``d`` for ``nodes`` nodes of ``node_name``."""
    rows: list[tuple[str, list[str], str]] = []
    if d.cores:
        rows.append(("core", _layer([f"core {i + 1}" for i in range(min(d.cores, MAX_BOXES))], d.cores, "cores"),
                     f"{d.cores:,} core switches · {d.spine_core_links:,} spine-core links"))
    if d.spines:
        spines = _layer([f"spine {i + 1}" for i in range(min(d.spines, MAX_BOXES))], d.spines, "spines")
        rows.append(("spine", spines, f"{d.spines:,} spine switches · {d.leaf_spine_links:,} leaf-spine links"))
    per_unit = d.leaves // max(1, d.scalable_units)
    crowded = d.scalable_units > 6
    unit_label = "SU {}" if crowded else "SU {}: " + f"{per_unit} leaves"
    rails_a_leaf = d.rails // max(1, per_unit)
    if d.leaves == 1:
        unit_label, shape = "one switch", f"1 switch, all {d.rails} rails, no spine tier"
    elif rails_a_leaf > 1:
        shape = f"{d.leaves:,} leaf switches ({rails_a_leaf} rails each, sized by the ports)"
    else:
        shape = f"{d.leaves:,} leaf switches ({per_unit} per unit, one per rail)"
    rows.append(("leaf", _layer([unit_label.format(i + 1) for i in range(min(d.scalable_units, MAX_BOXES))],
                                d.scalable_units, "units"),
                 f"{shape} · {d.node_links + d.ufm_links:,} node and UFM links"))
    node_labels = []
    left = nodes
    for i in range(min(d.scalable_units, MAX_BOXES)):
        in_unit = max(0, min(d.slots_per_unit - (1 if i == 0 and d.ufm_links else 0), left))
        left -= in_unit
        ufm = " + UFM" if i == 0 and d.ufm_links else ""
        noun = "" if crowded else (" node" if in_unit == 1 else " nodes")
        node_labels.append(f"{in_unit}{noun}{ufm}")
    rows.append(("node", _layer(node_labels, d.scalable_units, "units"),
                 f"{nodes:,} x {node_name} · {d.rails} rails · {d.gpus:,} GPUs"))
    height = 50 + len(rows) * 100
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="100%" '
             f'role="img" aria-labelledby="topo-title" class="topology"><title id="topo-title">'
             f'{escape(d.fabric_name)}: {d.tiers}-tier rail-optimised fabric</title>',
             f'<rect width="{WIDTH}" height="{height}" fill="#fbfcfe"/>']
    previous: list[float] = []
    y_prev = 0
    for i, (kind, labels, caption) in enumerate(rows):
        y = 30 + i * 100
        boxes, centres = _boxes(labels, y, kind)
        if previous:
            draw = _pairs if kind == "node" else _links
            parts.extend(draw(previous, y_prev, centres, y))
        parts.extend(boxes)
        parts.append(_caption(20, y + BOX_H + 16, caption))
        previous, y_prev = centres, y
    tiers = "1 tier" if d.tiers == 1 else f"{d.tiers} tiers"
    parts.append(_caption(20, height - 14, f"{d.fabric_name} · {tiers} · non-blocking"
                          if d.oversubscription == 1 else f"{d.fabric_name} · {tiers} · "
                          f"{d.oversubscription:g}:1 at the leaves"))
    parts.append("</svg>")
    return "".join(parts)
