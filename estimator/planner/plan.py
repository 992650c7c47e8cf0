"""The planner: the fastest and the cheapest training layouts that fit, ranked, with their exports.

``plan(req)`` searches every valid layout of the request's model on every allowed hardware option and node
count (:mod:`estimator.planner.space`), prunes with bounds, memory and dominance
(:mod:`estimator.planner.search`), prices the survivors (:mod:`estimator.planner.hardware`, ``estimator.tco``),
keeps what meets the constraints, ranks by the objective (then the other one), marks the time-vs-cost Pareto
front, runs the full :func:`estimator.estimate.estimate` for every returned plan and explains why the winner
beats the runner-up. Within one world the cost is proportional to the time (same GPUs, same price), so the
fastest layouts of each world are the only candidates either ranking or the front can need.

Reverse questions (fewest GPUs, largest model, longest sequence) live in :mod:`estimator.planner.reverse`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from estimator.construct import replaced
from estimator.errors import EstimatorError
from estimator.estimate import estimate
from estimator.messages import Num, Text
from estimator.model.spec import resolve_model, shape_for
from estimator.planner import budget, gcpause
from estimator.planner.contract import (
    Constraints,
    Plan,
    PlanCost,
    PlanLayout,
    PlanMechanisms,
    PlanRequest,
    PlanResponse,
    SearchStats,
)
from estimator.planner.explain import explain, explain_empty, host_notes
from estimator.planner.exports.launch import build_exports
from estimator.planner.hardware import HourlyPrice, PriceBook, World, cost_choice, hardware_options, worlds_for
from estimator.planner.mechanisms import (
    changes_of,
    export_notes,
    fewest_changes,
    mechanism_words,
    relabel,
    restored,
    runnable,
)
from estimator.planner.mechanisms import variant as mechanism_variant
from estimator.planner.mechanisms import variants as mechanism_variants
from estimator.planner.search import Found, SearchContext
from estimator.tco.run_cost import CostResult
from estimator.training.comm import scale_up_gpus
from estimator.training.suggest import cost_summary, measure_request, mechanism_cost
from hardware_catalog import Catalog

__all__ = ["Constraints", "Plan", "PlanRequest", "PlanResponse", "Progress", "plan", "plans_for"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Scored:
    """A found layout with its price, time to train and cost."""

    found: Found
    price: HourlyPrice | None
    time_to_train_s: float | None
    cost_usd: float | None
    usd_per_million_tokens: float | None

    @property
    def time_key(self) -> float:
        return self.time_to_train_s if self.time_to_train_s is not None else self.found.step_time_s

    @property
    def cost_key(self) -> float:
        return self.usd_per_million_tokens if self.usd_per_million_tokens is not None else math.inf


def default_catalog() -> Any:
    from hardware_catalog import load_catalog

    return load_catalog()


def score(req: PlanRequest, found: Found, prices: PriceBook) -> Scored:
    t = req.training
    tokens_per_step = float(req.tokens_per_step)
    step = found.step_time_s
    ttt = math.ceil(t.train_tokens / tokens_per_step) * step if t.train_tokens else None
    price = prices.price(found.world)
    if price is None:
        return Scored(found, None, ttt, None, None)
    per_hour = price.usd_per_gpu_hour * found.world.size
    per_mtok = per_hour * step / 3600.0 / (tokens_per_step / 1e6)
    cost = per_hour * ttt / 3600.0 if ttt is not None else None
    return Scored(found, price, ttt, cost, per_mtok)


def _meets(req: PlanRequest, s: Scored) -> bool:
    c = req.constraints
    if c.deadline_days is not None and (s.time_to_train_s is None or s.time_to_train_s > c.deadline_days * 86400):
        return False
    return c.budget_usd is None or (s.cost_usd is not None and s.cost_usd <= c.budget_usd)


def rank_key(req: PlanRequest) -> Callable[[Scored], tuple[float, float]]:
    if req.objective == "cost":
        return lambda s: (s.cost_key, s.time_key)
    return lambda s: (s.time_key, s.cost_key)


def pareto_front(items: list[Scored]) -> list[Scored]:
    """The points no other point beats on both time and cost (ties on both: the first), fastest first. Without
    any price the front is by time alone: the fastest point."""
    if items and all(math.isinf(s.cost_key) for s in items):
        return [min(items, key=lambda s: s.time_key)]
    front: list[Scored] = []
    best_cost = math.inf
    for s in sorted(items, key=lambda s: (s.time_key, s.cost_key)):
        if s.cost_key < best_cost:
            front.append(s)
            best_cost = s.cost_key
    return front


def _layout_id(f: Found) -> str:
    s, w = f.structure, f.world
    return (f"{w.hw.key}|{w.num_nodes}x{w.gpus_per_node}|{s.framework}-{s.sharding}-{s.offload}"
            f"|tp{s.tp}-pp{s.pp}-vp{s.vp}-cp{s.cp}-ep{s.ep}|mbs{f.micro_batch_size}-ga{f.accumulation}|{f.ckpt}")


def plan_id(f: Found, requested: Any = None) -> str:
    """The layout's key; with the request's training section (``requested``), the mechanisms the plan changed
    from it are part of the key (``|loss_kernel=fused``), so the same layout with other mechanisms is another
    plan."""
    changes = changes_of(requested, f.request.training) if requested is not None else {}
    suffix = "".join(f"|{k.removeprefix('training.')}={v}" for k, v in changes.items())
    return _layout_id(f) + suffix


def plan_layout(f: Found, gbs: int, seq_len: int) -> PlanLayout:
    s, w = f.structure, f.world
    return PlanLayout(gpu=w.hw.gpu.id, server=w.hw.server.id if w.hw.server is not None else None,
                      num_nodes=w.num_nodes, gpus_per_node=w.gpus_per_node, world_size=w.size,
                      framework=s.framework, sharding="zero3" if s.sharding == "fsdp" else s.sharding,
                      offload=s.offload, dp=f.dp, tp=s.tp, pp=s.pp, virtual_stages=s.vp, cp=s.cp, ep=s.ep,
                      sequence_parallel=s.sequence_parallel, hsdp_shard_size=s.hsdp_shard,
                      activation_checkpointing=f.ckpt, micro_batch_size=f.micro_batch_size,
                      gradient_accumulation_steps=f.accumulation, global_batch_size=gbs, seq_len=seq_len,
                      tp_plan=f.request.parallelism.resolved_tp_plan if s.tp > 1 else None,
                      nvlink_domain_gpus=scale_up_gpus(w.hw.server, w.gpus_per_node))


def _plan_cost(s: Scored, world: World, step_s: float, ttt: float | None, tokens_per_step: float,
               cost: CostResult | None) -> PlanCost | None:
    """The plan's cost; with the estimate's cost basis (the same one), its total is the estimate's to the cent."""
    if s.price is None:
        return None
    per_hour = s.price.usd_per_gpu_hour * world.size
    total = per_hour * ttt / 3600.0 if ttt is not None else None
    same = cost is not None and cost.usd_per_gpu_hour == s.price.usd_per_gpu_hour
    if same and cost is not None and cost.total_usd is not None:
        total = cost.total_usd
    return PlanCost(pricing=s.price.pricing, source=s.price.source, usd_per_gpu_hour=s.price.usd_per_gpu_hour,
                    usd_per_hour=per_hour, cost_usd=total,
                    usd_per_million_tokens=per_hour * step_s / 3600.0 / (tokens_per_step / 1e6),
                    price_date=s.price.date, basis=cost.basis if same and cost else None,
                    label=s.price.source, confidence=cost.confidence if same and cost else None,
                    gpu_hours=cost.gpu_hours if same and cost else None, total_usd=total,
                    assumptions=list(cost.assumptions) if same and cost else [],
                    flags=list(cost.flags) if same and cost else [])


def make_plan(req: PlanRequest, s: Scored, rank: int, pareto: bool, catalog: Catalog) -> Plan:
    """The full estimate, cost and exports of one scored layout."""
    budget.check_time()
    f = s.found
    request = f.request.model_copy(update={"cost": cost_choice(req.pricing, req.cost)})
    resp = estimate(request, catalog)
    if resp.time is None:  # the step-time model is optional in estimate(); the planner always has it
        resp = resp.model_copy(update={"time": f.time})
    assert resp.time is not None
    step = resp.time.step_time_s
    ttt = resp.train.time_to_train_s if resp.train is not None else s.time_to_train_s
    layout = plan_layout(f, req.sequences_per_step, req.training.seq_len)
    tokens = float(req.tokens_per_step)
    exports = build_exports(layout, f.request.training, resolve_model(req.model), f.world.hw.gpu, f.world.hw.server)
    extra = export_notes(changes_of(req.training, f.request.training))
    if extra:
        exports = exports.model_copy(update={"notes": [*exports.notes, *extra]})
    return Plan(rank=rank, id=plan_id(f, req.training), layout=layout, label=layout.label, request=request,
                estimate=resp, cost=_plan_cost(s, f.world, step, ttt, tokens, resp.cost), step_time_s=step,
                time_to_train_s=ttt, pareto=pareto, memory_need_bytes=f.memory_need_bytes,
                host_ram_bytes_per_node=f.host_ram_bytes, exports=exports,
                mechanism_changes=_mechanism_changes(req, f))


def _mechanism_changes(req: PlanRequest, f: Found) -> PlanMechanisms | None:
    """What the plan changed of the request's mechanisms, with the GiB it saves and its step-time cost on this
    layout: the estimate's ways out's measure and sentence (:mod:`estimator.training.suggest`)."""
    changes = changes_of(req.training, f.request.training)
    if not changes:
        return None
    words = mechanism_words(changes)
    hw, shape = f.world.hw, shape_for(req.model)
    try:
        mine = replaced(f.request, {"training": restored(f.request.training, req.training)})
        before = measure_request(mine, shape, hw.gpu, hw.server, hw.capacity_bytes)
        after = measure_request(f.request, shape, hw.gpu, hw.server, hw.capacity_bytes)
    except (ValueError, EstimatorError):  # the request's own mechanisms are refused on this layout
        return PlanMechanisms(changes=changes, summary=words, saved_bytes=None, step_time_delta_s=None)
    saved, delta = mechanism_cost(before, after)
    return PlanMechanisms(changes=changes, summary=cost_summary(words, saved, delta), saved_bytes=saved,
                          step_time_delta_s=delta)


def plans_for(req: PlanRequest, scored: list[Scored], catalog: Catalog) -> tuple[list[Plan], list[str]]:
    """Ranked plans (top_k by the objective, plus the Pareto front) and the front's ids."""
    ranked = sorted(scored, key=rank_key(req))
    front = pareto_front(scored)
    front_ids = {id(s) for s in front}
    chosen = ranked[: req.top_k] + [s for s in front if s not in ranked[: req.top_k]]
    chosen.sort(key=rank_key(req))
    plans = [make_plan(req, s, i + 1, id(s) in front_ids, catalog) for i, s in enumerate(chosen)]
    plans = _roomy_first(plans)
    ids = [p.id for p in sorted((p for p in plans if p.pareto), key=lambda p: (p.time_to_train_s or p.step_time_s))]
    return plans, ids


def _roomy_first(plans: list[Plan]) -> list[Plan]:
    """No plan whose full estimate leaves no headroom (``headroom_bytes <= 0``: the caching allocator's reserve
    fills the GPU) ranks above one that leaves some; otherwise the ranking order stands. Ranks are renumbered."""
    ordered = sorted(plans, key=lambda p: p.estimate.memory.headroom_bytes <= 0)  # stable
    if ordered == plans:
        return plans
    return [p.model_copy(update={"rank": i + 1}) for i, p in enumerate(ordered)]


def _empty_notes(ctx: SearchContext, gbs: int) -> list[str]:
    by_reason: dict[tuple[str, str], list[str]] = {}
    for world, reason in ctx.stats.empty_worlds:
        by_reason.setdefault((world.hw.name, reason), []).append(f"{world.num_nodes}x{world.gpus_per_node}")
    out: list[str] = []
    for (name, reason), worlds in by_reason.items():
        if reason == "host ram":  # explained, with the numbers, by host_notes
            continue
        why = (Text("the global batch of %(gbs)s sequences does not split over their data-parallel degrees", gbs=gbs)
               if reason == "no valid layout" else Text("no layout fits in GPU memory"))
        out.append(Text("%(name)s: nothing on %(worlds)s nodes x GPUs (%(why)s).", name=name,
                        worlds=", ".join(worlds), why=why))
    return out


def _budget_field(req: PlanRequest, worlds: int, options: int) -> str:
    """The field that drives a search's size: the node counts when several are searched, else the hardware."""
    return "constraints.max_nodes" if worlds > options and req.constraints.max_nodes > 1 else "constraints.gpus"


def search(req: PlanRequest, catalog: Catalog, progress: Progress | None = None, screen: bool = True,
           variants: list[PlanRequest] | None = None) -> tuple[SearchContext, list[Found], int]:
    """Every world's fastest layouts; the context (stats, caches) and the search-space size. ``screen=False``
    runs the exact path alone (:mod:`estimator.planner.screen`: the answer is the same). ``variants``: the
    request with other fine-tuning stack mechanisms (:func:`estimator.planner.mechanisms.variants`, ``req``
    first), each searched the same way; the layouts are merged (:func:`_merged`) and the first context carries the
    stats of all."""
    shape = shape_for(req.model)
    ctxs = [SearchContext(v, catalog, shape, screen=screen) for v in (variants or [req])]
    ctx = ctxs[0]
    options = hardware_options(req, catalog)
    ctx.stats.hardware_options = len(options)
    worlds = [w for hw in options for w in worlds_for(req, hw)]
    sizes = [[c.space_size(w) for w in worlds] for c in ctxs]
    total, done = sum(sum(row) for row in sizes), 0
    budget.charge(sum(sizes[0]), _budget_field(req, len(worlds), len(options)))
    if len(ctxs) > 1:  # the mechanism variants: each searches the same space again
        budget.charge(total - sum(sizes[0]), "vary_mechanisms", advice=(
            f"the {len(ctxs) - 1} mechanism variants each search the request's layouts again: allow fewer "
            "vary_mechanisms, narrow constraints.gpus, lower constraints.max_nodes, or pin hardware or parallelism "
            "fields"))
    for c in ctxs:
        c.prepaid = True
    # a callback with a ``detail(screened, exact)`` method also hears how much the screen did
    detail = getattr(progress, "detail", None)
    if progress is not None:
        progress(0, total)
    found: list[Found] = []
    screened = exact = 0
    for c, row in zip(ctxs, sizes, strict=True):
        for world, size in zip(worlds, row, strict=True):
            found += c.search_world(world)
            done += size
            if detail is not None:
                detail(screened + c.stats.layouts_screened,
                       exact + c.stats.memory_checks + c.stats.time_evaluations)
            if progress is not None:
                progress(done, total)
        screened += c.stats.layouts_screened
        exact += c.stats.memory_checks + c.stats.time_evaluations
    if len(ctxs) == 1:
        return ctx, found, total
    _merge_stats(ctxs)
    searched: dict[tuple[tuple[str, str], ...], SearchContext | None] = {
        tuple(sorted(changes_of(req.training, c.training).items())): c for c in ctxs}

    def context(changes: dict[str, str]) -> SearchContext | None:
        """The search context of the request with ``changes`` (made once; ``None``: refused)."""
        key = tuple(sorted((f"training.{k}", v) for k, v in changes.items()))
        if key not in searched:
            v = mechanism_variant(req, changes)
            searched[key] = None if v is None else SearchContext(v, catalog, shape, screen=False)
        return searched[key]

    fewest = [g for g in (fewest_changes(f, req.training, context) for f in found) if runnable(g, req.training)]
    return ctx, _merged(relabel(fewest, req.training), req.training), total


def _world_key(w: World) -> tuple[str, int, int]:
    return (w.hw.key, w.num_nodes, w.gpus_per_node)


def _merge_stats(ctxs: list[SearchContext]) -> None:
    """The first context's stats become those of the whole search over the mechanism variants: counters
    summed, a world empty only when every variant found nothing there, host-RAM misses of every variant."""
    st = ctxs[0].stats
    for c in ctxs[1:]:
        o = c.stats
        for name in ("worlds", "structures", "structures_evaluated", "pruned_by_bound", "pruned_by_dominance",
                     "memory_checks", "time_evaluations", "host_checks", "layouts_screened", "screened_out"):
            setattr(st, name, getattr(st, name) + getattr(o, name))
        for key, miss in o.host_misses.items():
            if key not in st.host_misses or miss.need_bytes < st.host_misses[key].need_bytes:
                st.host_misses[key] = miss
    empty = [{_world_key(w) for w, _ in c.stats.empty_worlds} for c in ctxs]
    everywhere = set.intersection(*empty)
    st.empty_worlds = [(w, reason) for w, reason in st.empty_worlds if _world_key(w) in everywhere]


def _merged(found: list[Found], requested: Any) -> list[Found]:
    """One candidate per layout (:func:`plan_id` without the mechanisms) over the mechanism variants: the fastest,
    on a tie the one that changes the fewest of the request's mechanisms (``requested``: its training section)."""
    best: dict[str, tuple[float, int, Found]] = {}
    for f in found:
        key = _layout_id(f)
        rank = (f.step_time_s, len(changes_of(requested, f.request.training)))
        if key not in best or rank < best[key][:2]:
            best[key] = (*rank, f)
    return [f for _, _, f in best.values()]


def plan(req: PlanRequest, catalog: Catalog | None = None, progress: Progress | None = None,
         screen: bool = True) -> PlanResponse:
    """Search, rank and explain. ``progress(evaluated, total)`` is called as the worlds are searched;
    ``screen=False`` skips the vectorised screen (same answer, slower: the benchmarks' baseline)."""
    t0 = time.perf_counter()
    with gcpause.paused():  # the search's caches hold no cycles (estimator.planner.gcpause); they are freed on return
        return _plan(req, catalog or default_catalog(), progress, screen, t0)


def _plan(req: PlanRequest, catalog: Catalog, progress: Progress | None, screen: bool, t0: float) -> PlanResponse:
    variants, mechanism_notes = mechanism_variants(req, shape_for(req.model).dims)
    ctx, found, total = search(req, catalog, progress, screen, variants)
    prices = PriceBook(req.pricing, catalog, req.cost)
    scored = [score(req, f, prices) for f in found]
    kept = [s for s in scored if _meets(req, s)]
    plans, front = plans_for(req, kept, catalog)
    notes = _empty_notes(ctx, req.sequences_per_step) + host_notes(ctx.stats.host_misses, ctx.stats.empty_worlds)
    if len(kept) < len(scored):
        notes.append(Text("%(missed)s of %(scored)s candidate layouts miss the budget or deadline.",
                          missed=Num(len(scored) - len(kept), "d"), scored=Num(len(scored), "d")))
    if any(p.cost is None for p in plans):
        notes.append(Text("Some hardware has no price in the catalog for this pricing: those plans have no cost."))
    if plans and all(p.cost is None for p in plans):
        notes.append(Text("No plan has a price, so the time-vs-cost front is by time alone: the fastest plan."))
    notes += mechanism_notes
    if req.vary_mechanisms:
        notes.append(Text("Fine-tuning stack mechanisms searched besides the layouts: %(searched)s variants of the "
                          "request; a plan that changes them says which, with the memory saved and the time cost "
                          "(mechanism_changes).", searched=Num(len(variants), "d")))
    elapsed = time.perf_counter() - t0
    st = ctx.stats
    stats = SearchStats(space_size=total, hardware_options=st.hardware_options, worlds=st.worlds,
                        structures=st.structures,
                        structures_evaluated=st.structures_evaluated, pruned_by_bound=st.pruned_by_bound,
                        pruned_by_dominance=st.pruned_by_dominance, memory_checks=st.memory_checks,
                        time_evaluations=st.time_evaluations, full_estimates=len(plans),
                        layouts_screened=st.layouts_screened, screened_out=st.screened_out,
                        candidates_per_s=total / elapsed if elapsed > 0 else 0.0, elapsed_s=elapsed)
    explanation = explain(plans, req.objective) if plans else explain_empty(req, scored, ctx.stats.host_misses)
    return PlanResponse(objective=req.objective, plans=plans, pareto_front=front, explanation=explanation,
                        notes=notes, search=stats)
