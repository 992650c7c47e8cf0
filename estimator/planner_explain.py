"""Why the winner beats the runner-up, in plain words, from the two estimates' step-time breakdowns.

The step time splits into compute (forward, backward, recomputation), exposed communication by kind (tensor,
data, pipeline, context, expert parallel), the pipeline bubble, the optimizer and CPU offload
(:mod:`estimator.timing`). Both plans train the same tokens per step, so seconds per step compare directly;
the parts where they differ most, named with the layout choice that causes them, are the explanation.
"""

from __future__ import annotations

from collections.abc import Callable

from estimator.planner_models import Plan, PlanLayout

__all__ = ["explain", "step_parts"]

GIB = 2**30
SHARDING = {"none": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3/FSDP", "hsdp": "HSDP"}


def step_parts(p: Plan) -> dict[str, float]:
    """Seconds per step by cause."""
    t = p.estimate.time
    if t is None:
        return {}
    b = t.breakdown_s
    return {
        "compute": b.get("forward_s", 0.0) + b.get("backward_s", 0.0),
        "recompute": b.get("recompute_s", 0.0),
        "tensor_parallel": b.get("tensor_parallel_s", 0.0),
        "data_parallel": b.get("data_parallel_exposed_s", 0.0),
        "pipeline": t.bubble_s + b.get("pipeline_p2p_s", 0.0),
        "context_parallel": b.get("context_parallel_s", 0.0),
        "expert_parallel": b.get("expert_parallel_s", 0.0),
        "optimizer": t.optimizer_s,
        "offload": t.offload_s,
    }


def _duration(seconds: float) -> str:
    if seconds >= 2 * 86400:
        return f"{seconds / 86400:.1f} days"
    if seconds >= 2 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds:.2f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _summary(p: Plan) -> str:
    t = p.estimate.time
    mfu = f", {t.mfu:.0%} MFU" if t is not None else ""
    if p.time_to_train_s is not None:
        money = f" for ${p.cost.cost_usd:,.0f}" if p.cost is not None and p.cost.cost_usd is not None else ""
        return f"{p.label}: trains in {_duration(p.time_to_train_s)}{money}{mfu}"
    money = f", ${p.cost.usd_per_million_tokens:.2f} per million tokens" if p.cost is not None else ""
    return f"{p.label}: {p.step_time_s:.2f} s per step{money}{mfu}"


def _span(layout: PlanLayout, group: int) -> str:
    """The link a group of ``group`` consecutive-stride ranks uses."""
    return "the network (InfiniBand/RoCE)" if group > layout.gpus_per_node else "NVLink/PCIe inside the node"


def _dp_words(layout: PlanLayout) -> str:
    group = layout.dp * layout.tp * layout.cp if layout.sharding != "hsdp" else layout.gpus_per_node
    return f"{SHARDING.get(layout.sharding, layout.sharding)} over {_span(layout, group)}"


_WORDS: dict[str, Callable[[PlanLayout], str]] = {
    "compute": lambda lay: f"compute (micro-batch {lay.micro_batch_size} on {lay.world_size} {lay.gpu})",
    "recompute": lambda lay: f"recomputation ({lay.activation_checkpointing} activation checkpointing)",
    "tensor_parallel": lambda lay: f"TP={lay.tp} collectives over {_span(lay, lay.tp)}",
    "data_parallel": lambda lay: f"exposed data-parallel traffic of {_dp_words(lay)}",
    "pipeline": lambda lay: f"the PP={lay.pp} pipeline bubble with {lay.gradient_accumulation_steps} micro-batches"
                            + (f" and {lay.virtual_stages} virtual stages" if lay.virtual_stages > 1 else ""),
    "context_parallel": lambda lay: f"CP={lay.cp} ring-attention exchanges",
    "expert_parallel": lambda lay: f"EP={lay.ep} all-to-alls",
    "optimizer": lambda lay: "the optimizer step",
    "offload": lambda lay: f"CPU offload ({lay.offload}) over PCIe",
}


def _differences(win: Plan, run: Plan) -> list[str]:
    a, b = step_parts(win), step_parts(run)
    diffs = sorted(((b[k] - a[k], k) for k in a), reverse=True)
    out = []
    for delta, key in diffs[:2]:
        if delta > 0.02 * max(win.step_time_s, 1e-9):
            out.append(f"The runner-up spends {b[key]:.2f} s per step on {_WORDS[key](run.layout)}, the winner "
                       f"{a[key]:.2f} s on {_WORDS[key](win.layout)}.")
    delta, key = diffs[-1]
    if delta < -0.02 * max(win.step_time_s, 1e-9):
        out.append(f"The winner pays {a[key] - b[key]:.2f} s per step more for {_WORDS[key](win.layout)}, "
                   "which the savings above more than cover.")
    return out


def _hardware(win: Plan, run: Plan) -> list[str]:
    w, r = win.layout, run.layout
    if (w.gpu, w.server, w.world_size) == (r.gpu, r.server, r.world_size):
        return []
    text = f"Hardware: {w.world_size}x {w.server or w.gpu} vs {r.world_size}x {r.server or r.gpu}"
    if win.cost is not None and run.cost is not None:
        text += f" (${win.cost.usd_per_hour:,.0f}/h vs ${run.cost.usd_per_hour:,.0f}/h)"
    return [text + "."]


def _margin(win: Plan, run: Plan, objective: str) -> str:
    tw, tr = win.time_to_train_s or win.step_time_s, run.time_to_train_s or run.step_time_s
    faster = f"{(tr - tw) / tr:.0%} faster" if tr > tw else f"{(tw - tr) / tr:.0%} slower"
    if win.cost is None or run.cost is None:
        return f"The winner is {faster}."
    cw, cr = win.cost.usd_per_million_tokens, run.cost.usd_per_million_tokens
    cheaper = f"{(cr - cw) / cr:.0%} cheaper" if cr > cw else f"{(cw - cr) / cr:.0%} dearer"
    first, second = (cheaper, faster) if objective == "cost" else (faster, cheaper)
    return f"The winner is {first} and {second} than the runner-up."


def explain(plans: list[Plan], objective: str) -> list[str]:
    """Sentences comparing plan 1 with plan 2 (or describing plan 1 alone)."""
    if not plans:
        return ["No layout fits the constraints: allow more nodes or GPUs with more memory, LoRA/QLoRA, "
                "or a shorter sequence."]
    win = plans[0]
    mem = win.estimate.memory
    fit = f"It fits: {mem.total_bytes / GIB:.1f} of {mem.capacity_bytes / GIB:.1f} GiB on the busiest GPU."
    if len(plans) == 1:
        return [f"Winner: {_summary(win)}.", fit]
    run = plans[1]
    return [f"Winner: {_summary(win)}.", f"Runner-up: {_summary(run)}.", _margin(win, run, objective),
            *_hardware(win, run), *_differences(win, run), fit]
