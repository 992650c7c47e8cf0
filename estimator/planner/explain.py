"""Why the winner beats the runner-up, in plain words, from the two estimates' step-time breakdowns.

The step time splits into compute (forward, backward, recomputation), exposed communication by kind (tensor,
data, pipeline, context, expert parallel), the pipeline bubble, the optimizer and CPU offload
(:mod:`estimator.training.timing`). Both plans train the same tokens per step, so seconds per step compare directly;
the parts where they differ most, named with the layout choice that causes them, are the explanation.

Plans within ``TIE_SHARE`` of the winner on both time and cost (e.g. the same layout with another offload
flavour) are named as ties, and the winner is compared with the first materially different plan.

When nothing is left, :func:`explain_empty` names the binding constraint: the budget or the deadline (with the
nearest miss: the cheapest cost or the fastest time that was possible), host RAM (with the smallest need and
the node's limit), or GPU memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from estimator.messages import N_, Money, Num, Text, join
from estimator.planner.contract import Plan, PlanLayout, PlanRequest

__all__ = ["explain", "explain_empty", "host_notes", "step_parts"]

GIB: Final = 2**30
TIE_SHARE: Final = 0.005  # plans within 0.5% on time and cost are a tie (below the step-time model's resolution)
SHARDING: Final = {"none": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3/FSDP", "hsdp": "HSDP"}


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


def _duration(seconds: float) -> Text:
    if seconds >= 2 * 86400:
        return Text("%(n)s days", n=Num(seconds / 86400, ".1f"))
    if seconds >= 2 * 3600:
        return Text("%(n)s h", n=Num(seconds / 3600, ".1f"))
    if seconds < 120:
        return Text("%(n)s s", n=Num(seconds, ".2f"))
    return Text("%(n)s min", n=Num(seconds / 60, ".0f"))


def _summary(p: Plan) -> Text:
    t = p.estimate.time
    mfu = Text(", %(mfu)s MFU", mfu=Num(t.mfu, ".0%")) if t is not None else ""
    if p.time_to_train_s is not None:
        money = (Text(" for %(usd)s", usd=Money(p.cost.cost_usd)) if p.cost is not None
                 and p.cost.cost_usd is not None else "")
        return Text("%(plan)s: trains in %(time)s%(money)s%(mfu)s", plan=p.label, time=_duration(p.time_to_train_s),
                    money=money, mfu=mfu)
    money = (Text(", %(usd)s per million tokens", usd=Money(p.cost.usd_per_million_tokens, ".2f"))
             if p.cost is not None else "")
    return Text("%(plan)s: %(step)s s per step%(money)s%(mfu)s", plan=p.label, step=Num(p.step_time_s, ".2f"),
                money=money, mfu=mfu)


def _span(layout: PlanLayout, group: int) -> Text:
    """The link a group of ``group`` consecutive-stride ranks uses."""
    if group <= layout.gpus_per_node:
        return Text("NVLink/PCIe inside the node")
    return Text("the network (InfiniBand/RoCE)") if group > layout.scale_up_gpus else \
        Text("NVLink across the nodes of one NVLink domain")


def _dp_words(layout: PlanLayout) -> Text:
    group = layout.dp * layout.tp * layout.cp if layout.sharding != "hsdp" else layout.gpus_per_node
    return Text("%(sharding)s over %(span)s", sharding=SHARDING.get(layout.sharding, layout.sharding),
                span=_span(layout, group))


def _pipeline_words(lay: PlanLayout) -> Text:
    if lay.virtual_stages > 1:
        return Text("the PP=%(pp)s pipeline bubble with %(gas)s micro-batches and %(vp)s virtual stages", pp=lay.pp,
                    gas=lay.gradient_accumulation_steps, vp=lay.virtual_stages)
    return Text("the PP=%(pp)s pipeline bubble with %(gas)s micro-batches", pp=lay.pp,
                gas=lay.gradient_accumulation_steps)


_WORDS: Final[dict[str, Callable[[PlanLayout], str]]] = {
    "compute": lambda lay: Text("compute (micro-batch %(mbs)s on %(world)s %(gpu)s)", mbs=lay.micro_batch_size,
                                world=lay.world_size, gpu=lay.gpu),
    "recompute": lambda lay: Text("recomputation (%(ckpt)s activation checkpointing)",
                                  ckpt=lay.activation_checkpointing),
    "tensor_parallel": lambda lay: Text("TP=%(tp)s collectives over %(span)s", tp=lay.tp, span=_span(lay, lay.tp)),
    "data_parallel": lambda lay: Text("exposed data-parallel traffic of %(dp)s", dp=_dp_words(lay)),
    "pipeline": _pipeline_words,
    "context_parallel": lambda lay: Text("CP=%(cp)s ring-attention exchanges", cp=lay.cp),
    "expert_parallel": lambda lay: Text("EP=%(ep)s all-to-alls", ep=lay.ep),
    "optimizer": lambda lay: Text("the optimizer step"),
    "offload": lambda lay: Text("CPU offload (%(offload)s) over PCIe", offload=lay.offload),
}


def _differences(win: Plan, run: Plan) -> list[str]:
    a, b = step_parts(win), step_parts(run)
    diffs = sorted(((b[k] - a[k], k) for k in a), reverse=True)
    out: list[str] = []
    for delta, key in diffs[:2]:
        if delta > 0.02 * max(win.step_time_s, 1e-9):
            out.append(Text("The runner-up spends %(b)s s per step on %(run)s, the winner %(a)s s on %(win)s.",
                            b=Num(b[key], ".2f"), run=_WORDS[key](run.layout), a=Num(a[key], ".2f"),
                            win=_WORDS[key](win.layout)))
    delta, key = diffs[-1]
    if delta < -0.02 * max(win.step_time_s, 1e-9):
        out.append(Text("The winner pays %(s)s s per step more for %(what)s, which the savings above more than "
                        "cover.", s=Num(a[key] - b[key], ".2f"), what=_WORDS[key](win.layout)))
    return out


def _hardware(win: Plan, run: Plan) -> list[str]:
    w, r = win.layout, run.layout
    if (w.gpu, w.server, w.world_size) == (r.gpu, r.server, r.world_size):
        return []
    if win.cost is not None and run.cost is not None:
        return [Text("Hardware: %(wn)sx %(w)s vs %(rn)sx %(r)s (%(wc)s/h vs %(rc)s/h).", wn=w.world_size,
                     w=w.server or w.gpu, rn=r.world_size, r=r.server or r.gpu, wc=Money(win.cost.usd_per_hour),
                     rc=Money(run.cost.usd_per_hour))]
    return [Text("Hardware: %(wn)sx %(w)s vs %(rn)sx %(r)s.", wn=w.world_size, w=w.server or w.gpu,
                 rn=r.world_size, r=r.server or r.gpu)]


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


_LAYOUT_WORDS: Final[tuple[tuple[str, str], ...]] = (
    ("gpu", N_("GPU")), ("server", N_("server")), ("num_nodes", N_("nodes")),
    ("gpus_per_node", N_("GPUs per node")), ("framework", N_("framework")), ("sharding", N_("sharding")),
    ("offload", N_("offload")), ("tp", "TP"), ("pp", "PP"), ("virtual_stages", N_("virtual stages")), ("cp", "CP"),
    ("ep", "EP"), ("micro_batch_size", N_("micro-batch")), ("activation_checkpointing", N_("checkpointing")),
)


def layout_difference(a: PlanLayout, b: PlanLayout) -> str:
    """What differs between two layouts, in words (``"offload optimizer+params vs optimizer"``)."""
    parts = [Text("%(what)s %(b)s vs %(a)s", what=Text(words), b=getattr(b, name), a=getattr(a, name))
             for name, words in _LAYOUT_WORDS if getattr(a, name) != getattr(b, name)]
    return join(parts, ", ") if parts else Text("nothing that the layout shows")


def _fit_sentence(win: Plan) -> str:
    mem = win.estimate.memory
    need = win.memory_need_bytes or mem.peak_allocated_bytes
    text = Text("It fits: it needs %(need)s of the %(capacity)s GiB of the busiest GPU (allocated at the peak plus the "
                "overhead the allocator cannot give back).", need=Num(need / GIB, ".1f"),
                capacity=Num(mem.capacity_bytes / GIB, ".1f"))
    host = win.estimate.host
    if host is not None and win.host_ram_bytes_per_node:
        return join([text, Text("The node needs %(gib)s GiB of host RAM.",
                                gib=Num(win.host_ram_bytes_per_node / GIB, ",.0f"))])
    return text


def _margin(win: Plan, run: Plan, objective: str) -> str:
    tw, tr = win.time_to_train_s or win.step_time_s, run.time_to_train_s or run.step_time_s
    faster = Text("%(pct)s faster", pct=Num((tr - tw) / tr, ".0%")) if tr > tw else \
        Text("%(pct)s slower", pct=Num((tw - tr) / tr, ".0%"))
    if win.cost is None or run.cost is None:
        return Text("The winner is %(faster)s.", faster=faster)
    cw, cr = win.cost.usd_per_million_tokens, run.cost.usd_per_million_tokens
    cheaper = Text("%(pct)s cheaper", pct=Num((cr - cw) / cr, ".0%")) if cr > cw else \
        Text("%(pct)s dearer", pct=Num((cw - cr) / cr, ".0%"))
    first, second = (cheaper, faster) if objective == "cost" else (faster, cheaper)
    return Text("The winner is %(first)s and %(second)s than the runner-up.", first=first, second=second)


def _mechanisms(p: Plan) -> dict[str, str]:
    """The fine-tuning stack mechanisms of a plan (issue 29: the planner may change them, ``vary_mechanisms``)."""
    t = p.request.training
    return {"loss_kernel": str(t.loss_kernel), "fused_kernels": str(t.fused_kernels),
            "activation_offloading": str(t.activation_offloading), "optimizer": str(t.optimizer)}


def plan_difference(a: Plan, b: Plan) -> str:
    """What differs between two plans, in words: the layout (:func:`layout_difference`), then the fine-tuning stack
    mechanisms when they differ (``"fused_kernels none vs liger"``)."""
    ma, mb = _mechanisms(a), _mechanisms(b)
    mechanisms = [Text("%(what)s %(b)s vs %(a)s", what=k, b=mb[k], a=ma[k]) for k in ma if ma[k] != mb[k]]
    if not mechanisms:
        return layout_difference(a.layout, b.layout)
    same_layout = all(getattr(a.layout, name) == getattr(b.layout, name) for name, _ in _LAYOUT_WORDS)
    return join(mechanisms if same_layout else [layout_difference(a.layout, b.layout), *mechanisms], ", ")


def _tie_sentence(win: Plan, ties: list[Plan], short: bool = False) -> str:
    which = join((Text("plan %(rank)s (%(diff)s)", rank=p.rank, diff=plan_difference(win, p))
                  for p in ties[:3]), "; ")
    more = Text(" and %(n)s more", n=len(ties) - 3) if len(ties) > 3 else ""
    within = Num(TIE_SHARE, ".1%")
    if short:
        return Text("Tied with the winner (within %(within)s on time and cost): %(which)s%(more)s; pick either.",
                    within=within, which=which, more=more)
    return Text("Tied with the winner (within %(within)s on time and cost): %(which)s%(more)s; pick either, the "
                "comparison below is with the first plan that differs materially.", within=within, which=which,
                more=more)


def explain(plans: list[Plan], objective: str) -> list[str]:
    """Sentences comparing plan 1 with the first materially different plan (or describing plan 1 alone)."""
    if not plans:
        return [Text("No layout fits the constraints: allow more nodes or GPUs with more memory, LoRA/QLoRA, or a "
                     "shorter sequence.")]
    win = plans[0]
    ties = [p for p in plans[1:] if _ties(win, p)]
    rest = [p for p in plans[1:] if not _ties(win, p)]
    out: list[str] = [Text("Winner: %(summary)s.", summary=_summary(win))]
    if win.mechanism_changes is not None:
        out.append(Text("It changes the request's fine-tuning stack: %(summary)s.",
                        summary=win.mechanism_changes.summary))
    if ties:
        out.append(_tie_sentence(win, ties, short=not rest))
    if rest:
        run = rest[0]
        out += [Text("Runner-up: %(summary)s.", summary=_summary(run)), _margin(win, run, objective),
                *_hardware(win, run), *_differences(win, run)]
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
    tokens = Num(req.training.train_tokens or 0, ",.0f")
    if deadline_binds and c.deadline_days is not None:
        near = (Text("the fastest layout that fits, on %(on)s, takes %(time)s", on=_label(fastest),
                     time=_days(fastest.time_to_train_s))
                if fastest is not None else Text("no layout has a time to train"))
        out.append(Text("The deadline binds: nothing trains %(tokens)s tokens within %(days)s days; %(near)s. Allow "
                        "more nodes or a later deadline, or train on fewer tokens.", tokens=tokens,
                        days=Num(c.deadline_days, "g"), near=near))
    if budget_binds and c.budget_usd is not None:
        near = (Text("the cheapest layout that fits, on %(on)s, costs %(usd)s", on=_label(cheapest),
                     usd=Money(cheapest.cost_usd))
                if cheapest is not None else Text("no layout that fits has a price for this pricing"))
        out.append(Text("The budget binds: nothing trains %(tokens)s tokens for %(budget)s; %(near)s. Raise the "
                        "budget, choose cheaper GPUs or pricing, or train on fewer tokens.", tokens=tokens,
                        budget=Money(c.budget_usd), near=near))
    if not out and deadline_s is not None and c.budget_usd is not None:
        in_time = [s for s in priced if s.time_to_train_s is not None and s.time_to_train_s <= deadline_s]
        in_budget = [s for s in timed if s.cost_usd is not None and s.cost_usd <= c.budget_usd]
        parts: list[str] = [Text("The budget and the deadline bind together: each alone can be met, not both")]
        if in_time:
            best = min(in_time, key=lambda s: s.cost_usd)
            parts.append(Text("within the deadline the cheapest costs %(usd)s (%(on)s)", usd=Money(best.cost_usd),
                              on=_label(best)))
        if in_budget:
            best = min(in_budget, key=lambda s: s.time_to_train_s)
            parts.append(Text("within the budget the fastest takes %(time)s (%(on)s)",
                              time=_days(best.time_to_train_s), on=_label(best)))
        out.append(Text("%(parts)s.", parts=join(parts, "; ")))
    return out


def host_notes(misses: dict[Any, Any], empty_worlds: Iterable[tuple[Any, str]] = ()) -> list[str]:
    """Per hardware option: the layouts that fit the GPUs but not the node's host RAM (smallest need)."""
    emptied = {(w.hw.key, w.num_nodes, w.gpus_per_node) for w, reason in empty_worlds if reason == "host ram"}
    by_option: dict[str, list[Any]] = {}
    for key, miss in misses.items():
        by_option.setdefault(miss.world.hw.key, []).append((key, miss))
    out: list[str] = []
    for items in by_option.values():
        least = min((m for _, m in items), key=lambda m: m.need_bytes)
        worlds = ", ".join(f"{m.world.num_nodes}x{m.world.gpus_per_node}" for _, m in items)
        empty = [k for k, _ in items if k in emptied]
        left = (Text(" Nothing is left there.") if len(empty) == len(items) else
                Text(" Nothing is left on %(n)s of them.", n=len(empty)) if empty else "")
        out.append(Text("%(option)s: layouts that fit in GPU memory on %(worlds)s nodes x GPUs need more host RAM "
                        "than the node holds (at least %(gib)s GiB per node; %(limit)s).%(left)s",
                        option=least.world.hw.name, worlds=worlds, gib=Num(least.need_bytes / GIB, ",.0f"),
                        limit=least.limit.describe(), left=left))
    return out


def explain_empty(req: PlanRequest, scored: list[Any], misses: dict[Any, Any]) -> list[str]:
    """Why no plan is left, naming the binding constraint and the nearest miss."""
    if scored:
        out = _budget_and_deadline(req, scored)
        return out or [Text("No layout meets the constraints.")]
    if misses:
        least = min(misses.values(), key=lambda m: m.need_bytes)
        return [Text("Host RAM binds: layouts fit in GPU memory only with CPU offload, and the lightest needs %(gib)s "
                     "GiB of host RAM per node on %(nodes)sx%(gpus)s %(option)s, more than the node holds (%(limit)s). "
                     "Allow more nodes (offloaded states shard over them), GPUs with more memory, LoRA/QLoRA, or a "
                     "shorter sequence.", gib=Num(least.need_bytes / GIB, ",.0f"), nodes=least.world.num_nodes,
                     gpus=least.world.gpus_per_node, option=least.world.hw.name, limit=least.limit.describe())]
    return [Text("GPU memory binds: no layout fits the GPUs: allow more nodes or GPUs with more memory, LoRA/QLoRA, "
                 "or a shorter sequence.")]
