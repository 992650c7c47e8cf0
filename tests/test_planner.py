"""The planner: fitting, valid, ranked plans; a correct Pareto front; constraints and pins honoured."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from pydantic import ValidationError

from estimator.job import job_of
from estimator.model.spec import CachedShape, ModelShape, resolve_model
from estimator.planner.contract import Plan, PlanRequest, PlanResponse
from estimator.planner.hardware import hardware_options, worlds_for
from estimator.planner.plan import plan
from estimator.planner.search import SearchContext
from estimator.request import EstimateRequest
from estimator.training.layout import build_layout
from estimator.training.memory import peak_memory
from estimator.training.timing import step_time
from hardware_catalog import load_catalog

CATALOG = load_catalog()
LORA_70B_8XH100 = {"model": "llama-3.1-70b", "training": {"method": "lora", "train_tokens": 5e8},
                   "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8},
                   "global_batch_size": 64}
FOUR_GPUS_8B = {"model": "llama-3.1-8b", "training": {"method": "full", "train_tokens": 1e10},
                "constraints": {"gpus": ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "a100-sxm4-40gb"],
                                "max_nodes": 4}, "top_k": 12}


def _plan(payload: dict[str, Any]) -> PlanResponse:
    return plan(PlanRequest.model_validate(payload), CATALOG)


@pytest.fixture(scope="module")
def lora_70b() -> PlanResponse:
    return _plan(LORA_70B_8XH100)


@pytest.fixture(scope="module")
def four_gpus() -> PlanResponse:
    return _plan(FOUR_GPUS_8B)


@pytest.fixture(scope="module")
def four_gpus_by_cost() -> PlanResponse:
    return _plan({**FOUR_GPUS_8B, "objective": "cost"})


def _time(p: Plan) -> float:
    return p.time_to_train_s if p.time_to_train_s is not None else p.step_time_s


def _cost(p: Plan) -> float:
    return p.cost.usd_per_million_tokens if p.cost is not None else math.inf


def test_lora_70b_fits_on_8_h100(lora_70b: PlanResponse) -> None:
    assert lora_70b.plans, lora_70b.notes
    for p in lora_70b.plans:
        assert p.layout.world_size == 8 and p.layout.gpu == "h100-sxm5-80gb"
        assert p.estimate.memory.fits and p.estimate.memory.total_bytes <= p.estimate.memory.capacity_bytes


@pytest.mark.parametrize("fixture", ["lora_70b", "four_gpus"])
def test_every_plan_is_valid_and_fits(fixture: str, request: pytest.FixtureRequest) -> None:
    resp: PlanResponse = request.getfixturevalue(fixture)
    for p in resp.plans:
        req = EstimateRequest.model_validate(p.request.model_dump())  # the request re-validates as given
        layout = build_layout(job_of(req), ModelShape(resolve_model(req.model)))  # raises on an invalid layout
        assert (layout.tp, layout.pp, layout.cp, layout.dp) == (p.layout.tp, p.layout.pp, p.layout.cp, p.layout.dp)
        assert p.layout.dp * p.layout.micro_batch_size * p.layout.gradient_accumulation_steps == \
            p.layout.global_batch_size
        assert p.estimate.memory.fits
        assert p.estimate.time is not None and p.step_time_s == p.estimate.time.step_time_s


@pytest.mark.parametrize(("fixture", "key"), [("four_gpus", lambda p: (_time(p), _cost(p))),
                                              ("four_gpus_by_cost", lambda p: (_cost(p), _time(p)))])
def test_ranking_order(fixture: str, key: Any, request: pytest.FixtureRequest) -> None:
    resp: PlanResponse = request.getfixturevalue(fixture)
    keys = [key(p) for p in resp.plans]
    assert keys == sorted(keys)
    assert [p.rank for p in resp.plans] == list(range(1, len(resp.plans) + 1))


def test_cost_objective_finds_a_cheaper_winner(four_gpus: PlanResponse, four_gpus_by_cost: PlanResponse) -> None:
    assert _cost(four_gpus_by_cost.plans[0]) <= _cost(four_gpus.plans[0])
    assert _time(four_gpus.plans[0]) <= _time(four_gpus_by_cost.plans[0])


def _dominates(a: Plan, b: Plan) -> bool:
    return _time(a) <= _time(b) and _cost(a) <= _cost(b) and (_time(a) < _time(b) or _cost(a) < _cost(b))


def test_pareto_front_has_no_dominated_point(four_gpus: PlanResponse) -> None:
    front = [p for p in four_gpus.plans if p.pareto]
    assert len(front) >= 2 and [p.id for p in front] == sorted(four_gpus.pareto_front, key=lambda i: _time(
        next(p for p in front if p.id == i)))
    assert set(four_gpus.pareto_front) == {p.id for p in front}
    for a, b in itertools.permutations(front, 2):
        assert not _dominates(a, b)
    for p in four_gpus.plans:
        if not p.pareto:
            assert any(_time(f) <= _time(p) and _cost(f) <= _cost(p) for f in front)


@pytest.mark.parametrize(
    ("extra", "check"),
    [
        ({"constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 2}},
         lambda p, r: p.layout.num_nodes <= 2 and p.layout.gpu == "h100-sxm5-80gb"),
        ({"constraints": {"servers": ["dell-xe9680-a100", "nvidia-dgx-h100"], "max_nodes": 2}},
         lambda p, r: p.layout.server in ("dell-xe9680-a100", "nvidia-dgx-h100")),
        ({"constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 4, "deadline_days": 2.0}},
         lambda p, r: p.time_to_train_s is not None and p.time_to_train_s <= 2 * 86400),
        ({"constraints": {"gpus": ["h100-sxm5-80gb", "a100-sxm4-80gb"], "max_nodes": 4, "budget_usd": 6000}},
         lambda p, r: p.cost is not None and p.cost.cost_usd is not None and p.cost.cost_usd <= 6000),
        ({"constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 2}, "parallelism": {"tp": 4}},
         lambda p, r: p.layout.tp == 4),
        ({"constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 2}, "parallelism": {"sharding": "zero3"}},
         lambda p, r: p.layout.sharding == "zero3"),
        ({"constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 2},
          "training": {"method": "full", "train_tokens": 1e10, "activation_checkpointing": "full"}},
         lambda p, r: p.layout.activation_checkpointing == "full"),
        ({"hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 2}},
         lambda p, r: p.layout.num_nodes == 2 and p.layout.gpu == "h200-sxm-141gb"),
        ({"constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 1}, "global_batch_tokens": 2**19},
         lambda p, r: p.layout.global_batch_size * p.layout.seq_len == 2**19),
    ],
)
def test_constraints_and_pins_are_honoured(extra: dict[str, Any], check: Any) -> None:
    payload = {"model": "llama-3.1-8b", "training": {"method": "full", "train_tokens": 1e10}, **extra}
    resp = _plan(payload)
    assert resp.plans, resp.notes
    for p in resp.plans:
        assert check(p, resp), p.label


def test_budget_that_nothing_meets_gives_no_plan() -> None:
    resp = _plan({"model": "llama-3.1-70b", "training": {"method": "full", "train_tokens": 1e11},
                  "constraints": {"gpus": ["h100-sxm5-80gb"], "max_nodes": 2, "budget_usd": 1.0}})
    assert resp.plans == [] and resp.pareto_front == []
    assert any("budget" in n for n in resp.notes)
    # the binding constraint is named, with the nearest miss: the cheapest run that was possible
    assert resp.explanation[0].startswith("The budget binds") and "the cheapest layout that fits" in \
        resp.explanation[0] and "for $1;" in resp.explanation[0]


def test_model_that_fits_nowhere_gives_no_plan() -> None:
    resp = _plan({"model": "llama-3.1-405b", "hardware": {"gpu": "a100-sxm4-40gb", "num_nodes": 1,
                                                          "gpus_per_node": 1},
                  "parallelism": {"offload": "none"}})
    assert resp.plans == [] and any("no layout fits" in n for n in resp.notes)


def _tied(a: Plan, b: Plan) -> bool:
    return math.isclose(_time(a), _time(b), rel_tol=0.005) and math.isclose(_cost(a), _cost(b), rel_tol=0.005)


def test_explanation_compares_winner_and_the_first_different_plan(four_gpus: PlanResponse) -> None:
    text = " ".join(four_gpus.explanation)
    win = four_gpus.plans[0]
    runner = next(p for p in four_gpus.plans[1:] if not _tied(win, p))
    assert win.label in text and f"Runner-up: {runner.label}" in text
    assert "0% faster" not in text and "0% slower" not in text
    assert "faster" in text or "slower" in text
    if _tied(win, four_gpus.plans[1]):
        assert "Tied with the winner" in text and "plan 2 (" in text


def test_progress_reports_up_to_the_whole_space() -> None:
    calls: list[tuple[int, int]] = []
    resp = plan(PlanRequest.model_validate(LORA_70B_8XH100), CATALOG, progress=lambda d, t: calls.append((d, t)))
    done = [d for d, _ in calls]
    assert calls[0][0] == 0 and done == sorted(done)
    assert calls[-1] == (resp.search.space_size, resp.search.space_size)


def test_response_is_json_round_trippable(lora_70b: PlanResponse) -> None:
    assert PlanResponse.model_validate_json(lora_70b.model_dump_json()) == lora_70b
    stats = lora_70b.search
    assert stats.space_size > 0 and stats.time_evaluations > 0 and stats.full_estimates == len(lora_70b.plans)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"global_batch_size": 8, "global_batch_tokens": 65536}, "not both"),
        ({"constraints": {"budget_usd": 100}}, "train_tokens"),
        ({"constraints": {"deadline_days": 1}}, "train_tokens"),
        ({"constraints": {"max_gpus": 8}}, "max_gpus"),
        ({"objective": "speed"}, "objective"),
        ({"global_batch_tokens": 100}, "one sequence"),
    ],
)
def test_plan_request_validation_names_the_problem(payload: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        PlanRequest.model_validate(payload)


def test_default_global_batch_is_about_a_million_tokens() -> None:
    assert PlanRequest().sequences_per_step * PlanRequest().training.seq_len == 2**20
    assert PlanRequest.model_validate({"training": {"seq_len": 3000}}).sequences_per_step == 256


@pytest.mark.parametrize(
    "payload",
    [
        {"model": "llama-3.2-1b", "training": {"method": "full", "seq_len": 2048}, "global_batch_size": 32,
         "hardware": {"gpu": "a100-sxm4-40gb", "num_nodes": 1, "gpus_per_node": 4}},
        {"model": "llama-3.1-8b", "training": {"method": "full"}, "global_batch_size": 64,
         "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 8}},
        {"model": "llama-3.1-70b", "training": {"method": "lora"}, "global_batch_size": 32,
         "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 2, "gpus_per_node": 8}},
        # offload makes full recomputation at a 4x larger micro-batch the winner here
        {"model": "mixtral-8x7b", "training": {"method": "full"}, "global_batch_size": 64,
         "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 1, "gpus_per_node": 2}},
    ],
    ids=["1b-4xA100-40", "8b-8xH100", "70b-lora-16xH100", "mixtral-2xH200"],
)
def test_pruned_search_matches_brute_force(payload: dict[str, Any]) -> None:
    """Every variant of the space evaluated by brute force: the pruned search finds the same optimum (with no
    safety margin, so the brute force's ``MemoryPeak.fits`` is the search's criterion)."""
    req = PlanRequest.model_validate({**payload, "constraints": {"memory_margin_pct": 0}})
    ctx = SearchContext(req, CATALOG, CachedShape(resolve_model(req.model)))
    (world,) = worlds_for(req, hardware_options(req, CATALOG)[0])
    best = math.inf
    for s in ctx.structures(world):
        layout = ctx.layout(world, s)
        if layout is None:
            continue
        for (mbs, gas), ckpt in itertools.product(ctx.variants(world, s), ctx.ckpts):
            r = ctx.request(world, s, ckpt, mbs, gas)
            shape = ModelShape(resolve_model(r.model))
            if peak_memory(job_of(r), shape, layout, world.hw.capacity_bytes).fits:
                best = min(best, step_time(job_of(r), shape, layout, world.hw.gpu, None, CATALOG).step_time_s)
    found = ctx.search_world(world)
    assert found and found[0].step_time_s == pytest.approx(best, rel=0.01)
    assert ctx.stats.time_evaluations < sum(len(ctx.variants(world, s)) for s in ctx.structures(world)) * 3


def test_structures_compare_by_fields() -> None:
    """Structures of different node counts with the same fields are equal and key the same cache entries (their
    ``__eq__`` compares the field tuple kept at construction, compiled or not); any field tells them apart."""
    from estimator.planner.space import Structure

    fields: dict[str, Any] = {"framework": "megatron", "sharding": "zero1", "offload": "none", "tp": 8, "pp": 2,
                              "vp": 1, "cp": 1, "ep": 1, "sequence_parallel": True, "hsdp_shard": None, "saving": 1}
    s = Structure(**fields)
    same = Structure("megatron", "zero1", "none", 8, 2, 1, 1, 1, True, None, 1)
    assert s == same and hash(s) == hash(same) and {s: "x"}[same] == "x" and repr(s) == repr(same)
    for name, value in {"framework": "pytorch", "sharding": "zero3", "offload": "optimizer", "tp": 4, "pp": 4,
                        "vp": 2, "cp": 2, "ep": 2, "sequence_parallel": False, "hsdp_shard": 8, "saving": 2}.items():
        other = Structure(**{**fields, name: value})
        assert other != s and getattr(other, name) == value, name
    assert s != ("megatron", "zero1")


def test_layouts_compare_and_hash_by_fields() -> None:
    """A layout is a value (it keys most memos): equal fields make equal layouts with one hash, whichever way they
    were built, and survive pickling (process pools); any field tells two apart."""
    import pickle

    from estimator.training.layout import Layout

    fields: dict[str, Any] = {
        "world_size": 64, "dp": 2, "tp": 8, "pp": 4, "cp": 1, "ep": 1, "vp": 2, "sharding": "zero1", "shard_group": 2,
        "expert_shard_group": 2, "gpus_per_node": 8, "num_nodes": 8, "layers_per_stage": 20,
        "sequence_parallel": True, "tp_plan": "vocab-parallel", "stage_layers": (20, 20, 20, 20),
        "pipeline_split": "even"}
    layout = Layout(**fields)
    same = Layout(*fields.values())
    assert layout == same and hash(layout) == hash(same) and {layout: 1}[same] == 1
    assert pickle.loads(pickle.dumps(layout)) == layout and repr(layout).startswith("Layout(world_size=64, dp=2")
    changed = {"world_size": 32, "dp": 1, "tp": 4, "pp": 2, "cp": 2, "ep": 2, "vp": 1, "sharding": "zero3",
               "shard_group": 4, "expert_shard_group": 4, "gpus_per_node": 4, "num_nodes": 4, "layers_per_stage": 40,
               "sequence_parallel": False, "tp_plan": "replicated-embeddings", "stage_layers": (19, 21, 20, 20),
               "pipeline_split": "given"}
    assert set(changed) == set(fields)
    for name, value in changed.items():
        other = Layout(**{**fields, name: value})
        assert other != layout and getattr(other, name) == value, name
    assert Layout(**{**fields, "stage_layers": (19, 21, 20, 20)}).uneven and not layout.uneven
    assert Layout(8, 8, 1, 1, 1, 1, 1, "zero3", 8, 8, 8, 1, 80, False).stage_layers == ()
    assert layout.replace(vp=1, tp=4) == Layout(**{**fields, "vp": 1, "tp": 4}) and layout.fields() == fields
