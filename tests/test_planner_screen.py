"""The planner's vectorised screen (estimator/planner/screen.py): its memory floor stays below the exact memory
need on many random layouts, and the planner's whole answer is the same with and without it."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from estimator.model.spec import CachedShape, resolve_model
from estimator.planner import screen as scr
from estimator.planner.contract import PlanRequest
from estimator.planner.hardware import hardware_options, worlds_for
from estimator.planner.plan import plan
from estimator.planner.search import SearchContext
from estimator.training.memory import memory_floor
from hardware_catalog import load_catalog
from tests.planner_screen_cases import CASES

CATALOG = load_catalog()

#: how much exact work was done (the screen's whole point is to change these) and the wall clock
WORK = frozenset({"memory_checks", "pruned_by_bound", "pruned_by_dominance", "time_evaluations",
                  "layouts_screened", "screened_out", "elapsed_s", "candidates_per_s"})


def _answer(body: dict[str, Any], screen: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    out = plan(PlanRequest.model_validate(body), CATALOG, screen=screen).model_dump(mode="json")
    stats = out.pop("search")
    return out, stats


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(CASES)))
def test_the_screen_never_changes_the_planners_answer(index: int) -> None:
    body = CASES[index]
    screened, s_stats = _answer(body, screen=True)
    exact, e_stats = _answer(body, screen=False)
    assert screened == exact  # plans (with their full estimates and exports), front, explanation, notes
    assert {k: v for k, v in s_stats.items() if k not in WORK} == {k: v for k, v in e_stats.items() if k not in WORK}
    assert e_stats["layouts_screened"] == 0 and s_stats["layouts_screened"] > 0
    assert s_stats["memory_checks"] <= e_stats["memory_checks"]


@pytest.mark.slow
def test_the_screen_drops_work_on_a_large_model() -> None:
    body = next(c for c in CASES if c["model"] == "deepseek-v3")
    _, s_stats = _answer(body, screen=True)
    _, e_stats = _answer(body, screen=False)
    assert s_stats["screened_out"] > 0
    assert s_stats["memory_checks"] < e_stats["memory_checks"]


RANDOM_MODELS = [
    ("llama-3.1-70b", {"method": "full", "seq_len": 4096}),
    ("llama-3.1-8b", {"method": "lora", "seq_len": 8192}),
    ("mixtral-8x7b", {"method": "qlora"}),
    ("deepseek-v3", {"seq_len": 4096}),
    ("qwen2.5-72b", {"precision": "fp8-mixed", "seq_len": 16384}),
    ("gpt-3-175b", {"precision": "bf16-true", "optimizer": "adafactor"}),
    ("gemma-2-27b", {"precision": "fp32"}),
]


@pytest.mark.parametrize(("model", "training"), RANDOM_MODELS)
def test_the_memory_floor_never_exceeds_the_exact_need(model: str, training: dict[str, Any]) -> None:
    """Random layouts of random worlds, at every checkpointing level: the floor <= the exact need. This is the
    test that fails if the memory model changes so that the screen would wrongly rule a layout out."""
    rng = random.Random(f"{model}-{sorted(training.items())}")
    req = PlanRequest.model_validate({"model": model, "training": training,
                                      "constraints": {"gpus": ["h100-sxm5-80gb", "b200-sxm-180gb"],
                                                      "max_nodes": 32}})
    shape = CachedShape(resolve_model(req.model))
    ctx = SearchContext(req, CATALOG, shape, screen=False)
    worlds = [w for hw in hardware_options(req, CATALOG) for w in worlds_for(req, hw)]
    checked = 0
    for world in rng.sample(worlds, min(8, len(worlds))):
        structs = [s for s in ctx.structures(world) if ctx.variants(world, s) and ctx.layout(world, s) is not None]
        for s in rng.sample(structs, min(12, len(structs))):
            layout = ctx.layout(world, s)
            assert layout is not None
            floor = memory_floor(ctx.job(world, s, "none", 1, 1), shape, layout)
            floors = scr.Floors.of([floor], [0.0])
            for mbs, gas in rng.sample(ctx.variants(world, s), min(3, len(ctx.variants(world, s)))):
                bound = int(scr.need_floor(floors, np.zeros(1, dtype=np.int64), np.array([mbs], dtype=np.int64),
                                           req.training.seq_len)[0])
                for ckpt in ctx.ckpts:
                    need = ctx.memory_need(world, s, ckpt, mbs, gas)
                    assert 0 < bound <= need, (world, s, ckpt, mbs, gas, bound, need)
                    checked += 1
    assert checked > 100


def test_may_fit_applies_the_margin_and_the_usable_memory() -> None:
    from estimator.training.memory import MemoryFloor

    f = scr.Floors.of([MemoryFloor(states=60, grads=10, residual_bytes_per_token=2, residual_div=1, layers=1, cp=1)],
                      [0.5])
    rows, micro = np.zeros(3, dtype=np.int64), np.array([1, 5, 20], dtype=np.int64)
    # need floors: 60 + max(10, 2 * mbs * 4): 70, 100, 220; with the 50 % margin: 105, 150, 330
    assert scr.need_floor(f, rows, micro, 4).tolist() == [70, 100, 220]
    assert scr.may_fit(f, rows, micro, 4, 150.0).tolist() == [True, True, False]
