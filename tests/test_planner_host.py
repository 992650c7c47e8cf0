"""The planner and the rest of the node: host RAM limits plans, explanations name the binding constraint,
ties are called ties, and the front falls back to time when nothing has a price."""

from __future__ import annotations

from typing import Any

from estimator.host.sizing import ram_limit
from estimator.model.spec import CachedShape, resolve_model
from estimator.planner.contract import PlanRequest, PlanResponse
from estimator.planner.hardware import HwOption, World
from estimator.planner.plan import plan
from estimator.planner.reverse import fewest_gpus, largest_model
from estimator.planner.search import SearchContext
from hardware_catalog import load_catalog

CATALOG = load_catalog()
GIB = 2**30


def _plan(payload: dict[str, Any]) -> PlanResponse:
    return plan(PlanRequest.model_validate(payload), CATALOG)


def test_405b_full_fine_tune_on_l40s_is_refused_for_host_ram() -> None:
    """Audit case: 405B full fine-tune on up to 8 L40S only fits the GPUs with ZeRO-3 / FSDP CPU offload, whose
    offloaded states (~16 B per parameter, 405e9 x 16 B = 6.5 TB) cannot sit in one node: the catalog does not
    know the L40S servers' maximum, so the 4 TiB default ceiling applies. Before the fix: 7 plans needing
    6.5-26 TiB."""
    resp = _plan({"model": "llama-3.1-405b", "training": {"method": "full", "train_tokens": 1e9},
                  "constraints": {"gpus": ["l40s-48gb"], "max_nodes": 1}})
    assert resp.plans == []
    assert resp.explanation[0].startswith("Host RAM binds")
    assert any("need more host RAM than the node holds" in n and "4,096 GiB" in n for n in resp.notes)


def test_every_plan_fits_its_node_ram() -> None:
    """70B full fine-tune on H100 (the plain GPU stands for the DGX H100 that estimate() suggests, 2 TiB):
    the search's host RAM is the estimate's, and it is within the limit."""
    resp = _plan({"model": "llama-3.1-70b", "training": {"method": "full", "train_tokens": 1e9},
                  "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 4}, "top_k": 20})
    assert resp.plans
    for p in resp.plans:
        host = p.estimate.host
        assert host is not None and p.host_ram_bytes_per_node == host.ram_bytes_per_node
        assert p.host_ram_bytes_per_node <= 2048 * GIB


def test_fewest_gpus_respects_a_small_server_ram() -> None:
    """DGX A100 320 GB ships with 1 TiB. A 70B full fine-tune fits its GPUs with ZeRO-3 offload on one node,
    but 70.6e9 x 16 B of offloaded states alone are 1.05 TiB: the answer needs a second node."""
    req = PlanRequest.model_validate({"model": "llama-3.1-70b", "training": {"method": "full"},
                                      "constraints": {"servers": ["nvidia-dgx-a100-320gb"], "max_nodes": 16}})
    (answer,) = fewest_gpus(req, CATALOG)
    assert answer.num_nodes is not None and answer.num_nodes >= 2 and answer.plan is not None
    assert answer.plan.host_ram_bytes_per_node <= 1024 * GIB
    ctx = SearchContext(req, CATALOG, CachedShape(resolve_model(req.model)))
    server = CATALOG.servers["nvidia-dgx-a100-320gb"]
    one_node = World(HwOption(CATALOG.gpus[server.gpu_id], server, 8), 1, 8)
    assert ctx.any_fit(one_node) is None
    assert ctx.stats.host_misses  # it did fit the GPUs: host RAM refused it


def test_largest_model_on_a_dgx_h100_is_not_deepseek_v3() -> None:
    """Audit case: full fine-tuning DeepSeek-V3 (671B) offloads ~10 TB; a DGX H100 holds 2 TiB."""
    req = PlanRequest.model_validate({"model": "llama-3.1-8b", "training": {"method": "full"},
                                      "hardware": {"server": "nvidia-dgx-h100", "num_nodes": 1}})
    (answer,) = largest_model(req, CATALOG, family=False)
    sizes = {p.model: p.total_params for p in answer.presets}
    assert answer.largest_preset is not None and sizes[answer.largest_preset] < 130e9
    assert not next(p for p in answer.presets if p.model == "deepseek-v3").fits


def test_unknown_server_ram_uses_the_default_ceiling_and_says_so() -> None:
    limit = ram_limit(CATALOG.servers["dell-r760xa-l40s"])
    assert not limit.known and limit.bytes == 4096 * GIB and "default ceiling" in limit.describe()
    dgx = ram_limit(CATALOG.servers["nvidia-dgx-a100-640gb"])
    assert dgx.known and dgx.fixed and dgx.memory_type == "DDR4" and dgx.bytes == 2048 * GIB


def test_deadline_too_tight_names_the_deadline_and_the_fastest_possible() -> None:
    """Audit case: 70B on H100, max 4 nodes, 0.5 days: the deadline binds, not memory."""
    resp = _plan({"model": "llama-3.1-70b", "training": {"method": "full", "train_tokens": 1e10},
                  "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 4, "deadline_days": 0.5}})
    assert resp.plans == []
    (line,) = resp.explanation
    assert line.startswith("The deadline binds") and "the fastest layout that fits" in line and "days" in line
    assert "GPUs with more memory" not in line


def test_budget_and_deadline_that_bind_only_together() -> None:
    base = {"model": "llama-3.1-8b", "training": {"method": "full", "train_tokens": 1e10},
            "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 4}, "top_k": 50}
    free = _plan(base)
    fastest = min(free.plans, key=lambda p: p.time_to_train_s or 0)
    cheapest = min(free.plans, key=lambda p: p.cost.cost_usd if p.cost and p.cost.cost_usd else 1e18)
    assert fastest.cost is not None and fastest.cost.cost_usd is not None
    assert cheapest.cost is not None and cheapest.cost.cost_usd is not None and cheapest.time_to_train_s
    assert fastest.id != cheapest.id  # 4 nodes are fastest, 1 node a little cheaper
    both = _plan({**base, "constraints": {**base["constraints"],
                                          "deadline_days": (fastest.time_to_train_s or 0) * 1.0001 / 86400,
                                          "budget_usd": cheapest.cost.cost_usd * 1.0001}})
    assert both.plans == [] and both.explanation[0].startswith("The budget and the deadline bind together")


def test_front_falls_back_to_time_without_prices() -> None:
    """An owned server with no catalog price and no GPU price to estimate one from: no plan has a cost, so the
    front is the fastest plan (before: an empty front)."""
    resp = _plan({"model": "llama-3.1-8b", "training": {"method": "lora", "train_tokens": 1e9},
                  "constraints": {"servers": ["dell-r760xa-h100-nvl"], "max_nodes": 2}, "pricing": "owned"})
    assert resp.plans and all(p.cost is None for p in resp.plans)
    fastest = min(resp.plans, key=lambda p: p.time_to_train_s or 0)
    assert resp.pareto_front == [fastest.id]
    assert any("time alone" in n for n in resp.notes)


def test_fit_sentence_uses_the_memory_that_must_fit() -> None:
    """Not nvidia-smi's total (the caching allocator fills the card: "79.6 of 79.6 GiB"), but allocated at the
    peak plus the hard overhead, which is below the capacity when it fits."""
    resp = _plan({"model": "llama-3.1-8b", "training": {"method": "full", "train_tokens": 1e9},
                  "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8}})
    win = resp.plans[0]
    mem = win.estimate.memory
    assert mem.peak_allocated_bytes < win.memory_need_bytes <= mem.capacity_bytes
    line = resp.explanation[-1]
    assert f"{win.memory_need_bytes / GIB:.1f} of the {mem.capacity_bytes / GIB:.1f} GiB" in line
