"""Why the winner beats the runner-up, in plain words, from the two estimates' step-time breakdowns.

The step time splits into compute (forward, backward, recomputation), exposed communication by kind (tensor,
data, pipeline, context, expert parallel), the pipeline bubble, the optimizer and CPU offload
(:mod:`estimator.timing`). Both plans train the same tokens per step, so seconds per step compare directly;
the parts where they differ most, named with the layout choice that causes them, are the explanation.

Plans within ``TIE_SHARE`` of the winner on both time and cost (e.g. the same layout with another offload
flavour) are named as ties, and the winner is compared with the first materially different plan.

When nothing is left, :func:`explain_empty` names the binding constraint: the budget or the deadline (with the
nearest miss: the cheapest cost or the fastest time that was possible), host RAM (with the smallest need and
the node's limit), or GPU memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from estimator.planner.contract import Plan, PlanLayout, PlanRequest

__all__ = ["explain", "explain_empty", "host_notes", "step_parts"]

GIB = 2**30
TIE_SHARE = 0.005  # plans within 0.5% on time and cost are a tie (below the step-time model's resolution)
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


def _key_time(p: Plan) -> float:
    return p.time_to_train_s or p.step_time_s


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= TIE_SHARE * max(abs(a), abs(b), 1e-12)


def _ties(win: Plan, other: Plan) -> bool:
    if not _close(_key_time(win), _key_time(other)):
        return False
    if (win.cost is None) != (other.cost is None):
        return False
    return win.cost is None or other.cost is None or _close(win.cost.usd_per_million_tokens,
                                                          other.cost.usd_per_million_tokens)


_LAYOUT_WORDS: tuple[tuple[str, str], ...] = (
    ("gpu", "GPU"), ("server", "server"), ("num_nodes", "nodes"), ("gpus_per_node", "GPUs per node"),
    ("framework", "framework"), ("sharding", "sharding"), ("offload", "offload"), ("tp", "TP"), ("pp", "PP"),
    ("virtual_stages", "virtual stages"), ("cp", "CP"), ("ep", "EP"), ("micro_batch_size", "micro-batch"),
    ("activation_checkpointing", "checkpointing"),
)


def layout_difference(a: PlanLayout, b: PlanLayout) -> str:
    """What differs between two layouts, in words (``"offload optimizer+params vs optimizer"``)."""
    parts = [f"{words} {getattr(b, name)} vs {getattr(a, name)}" for name, words in _LAYOUT_WORDS
             if getattr(a, name) != getattr(b, name)]
    return ", ".join(parts) or "nothing that the layout shows"


def _fit_sentence(win: Plan) -> str:
    mem = win.estimate.memory
    need = win.memory_need_bytes or mem.peak_allocated_bytes
    text = (f"It fits: it needs {need / GIB:.1f} of the {mem.capacity_bytes / GIB:.1f} GiB of the busiest GPU "
            "(allocated at the peak plus the overhead the allocator cannot give back).")
    host = win.estimate.host
    if host is not None and win.host_ram_bytes_per_node:
        text += f" The node needs {win.host_ram_bytes_per_node / GIB:,.0f} GiB of host RAM."
    return text


def _margin(win: Plan, run: Plan, objective: str) -> str:
    tw, tr = win.time_to_train_s or win.step_time_s, run.time_to_train_s or run.step_time_s
    faster = f"{(tr - tw) / tr:.0%} faster" if tr > tw else f"{(tw - tr) / tr:.0%} slower"
    if win.cost is None or run.cost is None:
        return f"The winner is {faster}."
    cw, cr = win.cost.usd_per_million_tokens, run.cost.usd_per_million_tokens
    cheaper = f"{(cr - cw) / cr:.0%} cheaper" if cr > cw else f"{(cw - cr) / cr:.0%} dearer"
    first, second = (cheaper, faster) if objective == "cost" else (faster, cheaper)
    return f"The winner is {first} and {second} than the runner-up."


def _tie_sentence(win: Plan, ties: list[Plan]) -> str:
    which = "; ".join(f"plan {p.rank} ({layout_difference(win.layout, p.layout)})" for p in ties[:3])
    more = f" and {len(ties) - 3} more" if len(ties) > 3 else ""
    return (f"Tied with the winner (within {TIE_SHARE:.1%} on time and cost): {which}{more}; pick either, the "
            "comparison below is with the first plan that differs materially.")


def explain(plans: list[Plan], objective: str) -> list[str]:
    """Sentences comparing plan 1 with the first materially different plan (or describing plan 1 alone)."""
    if not plans:
        return ["No layout fits the constraints: allow more nodes or GPUs with more memory, LoRA/QLoRA, "
                "or a shorter sequence."]
    win = plans[0]
    ties = [p for p in plans[1:] if _ties(win, p)]
    rest = [p for p in plans[1:] if not _ties(win, p)]
    out = [f"Winner: {_summary(win)}."]
    if ties:
        out.append(_tie_sentence(win, ties) if rest else _tie_sentence(win, ties).split("; pick")[0]
                   + "; pick either.")
    if rest:
        run = rest[0]
        out += [f"Runner-up: {_summary(run)}.", _margin(win, run, objective), *_hardware(win, run),
                *_differences(win, run)]
    return [*out, _fit_sentence(win)]


# ------------------------------------------------------------------------------------------- nothing left
def _days(seconds: float) -> str:
    return _duration(seconds)


def _label(s: Any) -> str:
    f = s.found
    w = f.world
    return f"{w.num_nodes}x{w.gpus_per_node} {w.hw.name}"


def _budget_and_deadline(req: PlanRequest, scored: list[Any]) -> list[str]:
    c = req.constraints
    out: list[str] = []
    deadline_s = c.deadline_days * 86400 if c.deadline_days is not None else None
    timed = [s for s in scored if s.time_to_train_s is not None]
    priced = [s for s in scored if s.cost_usd is not None]
    fastest = min(timed, key=lambda s: s.time_to_train_s) if timed else None
    cheapest = min(priced, key=lambda s: s.cost_usd) if priced else None
    deadline_binds = deadline_s is not None and (fastest is None or fastest.time_to_train_s > deadline_s)
    budget_binds = c.budget_usd is not None and (cheapest is None or cheapest.cost_usd > c.budget_usd)
    if deadline_binds and c.deadline_days is not None:
        near = (f"the fastest layout that fits, on {_label(fastest)}, takes {_days(fastest.time_to_train_s)}"
                if fastest is not None else "no layout has a time to train")
        out.append(f"The deadline binds: nothing trains {req.training.train_tokens:,.0f} tokens within "
                   f"{c.deadline_days:g} days; {near}. Allow more nodes or a later deadline, or train on fewer "
                   "tokens.")
    if budget_binds and c.budget_usd is not None:
        near = (f"the cheapest layout that fits, on {_label(cheapest)}, costs ${cheapest.cost_usd:,.0f}"
                if cheapest is not None else "no layout that fits has a price for this pricing")
        out.append(f"The budget binds: nothing trains {req.training.train_tokens:,.0f} tokens for "
                   f"${c.budget_usd:,.0f}; {near}. Raise the budget, choose cheaper GPUs or pricing, or train on "
                   "fewer tokens.")
    if not out and deadline_s is not None and c.budget_usd is not None:
        in_time = [s for s in priced if s.time_to_train_s is not None and s.time_to_train_s <= deadline_s]
        in_budget = [s for s in timed if s.cost_usd is not None and s.cost_usd <= c.budget_usd]
        parts = ["The budget and the deadline bind together: each alone can be met, not both"]
        if in_time:
            best = min(in_time, key=lambda s: s.cost_usd)
            parts.append(f"within the deadline the cheapest costs ${best.cost_usd:,.0f} ({_label(best)})")
        if in_budget:
            best = min(in_budget, key=lambda s: s.time_to_train_s)
            parts.append(f"within the budget the fastest takes {_days(best.time_to_train_s)} ({_label(best)})")
        out.append("; ".join(parts) + ".")
    return out


def host_notes(misses: dict[Any, Any], empty_worlds: Iterable[tuple[Any, str]] = ()) -> list[str]:
    """Per hardware option: the layouts that fit the GPUs but not the node's host RAM (smallest need)."""
    emptied = {(w.hw.key, w.num_nodes, w.gpus_per_node) for w, reason in empty_worlds if reason == "host ram"}
    by_option: dict[str, list[Any]] = {}
    for key, miss in misses.items():
        by_option.setdefault(miss.world.hw.key, []).append((key, miss))
    out = []
    for items in by_option.values():
        least = min((m for _, m in items), key=lambda m: m.need_bytes)
        worlds = ", ".join(f"{m.world.num_nodes}x{m.world.gpus_per_node}" for _, m in items)
        empty = [k for k, _ in items if k in emptied]
        left = (" Nothing is left there." if len(empty) == len(items) else
                f" Nothing is left on {len(empty)} of them." if empty else "")
        out.append(f"{least.world.hw.name}: layouts that fit in GPU memory on {worlds} nodes x GPUs need more host "
                   f"RAM than the node holds (at least {least.need_bytes / GIB:,.0f} GiB per node; "
                   f"{least.limit.describe()}).{left}")
    return out


def explain_empty(req: PlanRequest, scored: list[Any], misses: dict[Any, Any]) -> list[str]:
    """Why no plan is left, naming the binding constraint and the nearest miss."""
    if scored:
        out = _budget_and_deadline(req, scored)
        return out or ["No layout meets the constraints."]
    if misses:
        least = min(misses.values(), key=lambda m: m.need_bytes)
        return [f"Host RAM binds: layouts fit in GPU memory only with CPU offload, and the lightest needs "
                f"{least.need_bytes / GIB:,.0f} GiB of host RAM per node on {least.world.num_nodes}x"
                f"{least.world.gpus_per_node} {least.world.hw.name}, more than the node holds "
                f"({least.limit.describe()}). Allow more nodes (offloaded states shard over them), GPUs with more "
                "memory, LoRA/QLoRA, or a shorter sequence."]
    return ["GPU memory binds: no layout fits the GPUs: allow more nodes or GPUs with more memory, LoRA/QLoRA, "
            "or a shorter sequence."]
