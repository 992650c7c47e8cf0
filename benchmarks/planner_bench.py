"""Planner speed, the screen's rate, and the cost of one estimate against one llm-analysis training analysis.

Run: ``.venv/bin/python benchmarks/planner_bench.py [--runs 7]``. Prints figures only (no pass/fail):

1. Three searches (issue 19's planner goals), each with the vectorised screen (``plan()``, the default) and
   without it (``plan(..., screen=False)``: the exact per-layout path, the baseline), alternating in one run:
   Llama 3.1 70B full fine-tune (bf16-mixed AdamW, 4k tokens, 2**20-token batch, 20B-token budget) over 4 GPU
   types (A100 80GB, H100, H200, B200) on 1 to 16 nodes; Llama 3.1 405B (8k tokens) and DeepSeek-V3 (4k tokens)
   over the same 4 GPU types on 1 to 128 nodes, every axis searched (TP, PP with virtual stages, CP, EP for the
   MoE, sharding and offload, checkpointing, micro-batch). Median wall time of ``--runs`` searches each (one
   warm-up of each first: imports and the catalog load are not counted), the speed-up, the search-space size,
   what the screen removed and what was left to the memory and step-time models; the two answers (plans,
   front, explanation, notes) are compared and must be the same.
2. The screen's rate: :func:`estimator.planner.screen.may_fit` over the (structure, micro-batch) rows of the
   405B search, tiled to about 2 million rows (median of ``--runs``), in rows per second and in layouts per
   second (a row decides a layout at every checkpointing level); next to it, the exact path's layouts per
   second (section 1) and one exact memory estimate (``estimator.training.memory._peak_memory``, past its memo) per
   second.
3. Per configuration: the median time of one ``estimator.estimate`` (memory, step time, time to train) against
   one ``llm_analysis.analysis.LLMAnalysis.training`` for the same model, GPU, layout and batch (PyPI
   ``llm-analysis``). Their step time and peak memory are printed beside ours for context. Without
   llm-analysis this section prints our times only and says how to install it.
4. Issue 29: the fine-tuning stack mechanisms as a planner axis (``vary_mechanisms``): the issue's one-GPU case,
   an 8B LoRA over every GPU type and the 70B search of section 1, each with the axis off, with the fused loss,
   with the three memory mechanisms and with the 8-bit optimizer too (median wall time, warm and memos cleared;
   the space counts every variant's layouts). ``--only mechanisms`` runs this section alone.

llm-analysis pins huggingface-hub < 0.15 and transformers, which its training analysis does not use, so keep it
out of ``.venv``: install it with its two import-time dependencies into a separate venv and put that venv's
site-packages on the path (docs/planner.md)::

    python3 -m venv /tmp/llma && /tmp/llma/bin/pip install --no-deps llm-analysis==0.2.2 fire termcolor
    PYTHONPATH=/tmp/llma/lib/python3.11/site-packages .venv/bin/python benchmarks/planner_bench.py
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from estimator import memo, native
from estimator.estimate import estimate
from estimator.model.spec import ModelShape, clear_shapes, preset
from estimator.planner import screen as scr
from estimator.planner.contract import PlanRequest, PlanResponse
from estimator.planner.plan import plan
from estimator.request import EstimateRequest
from hardware_catalog import load_catalog

FOUR_GPUS = ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb"]
SEARCH = {
    "model": "llama-3.1-70b",
    "training": {"method": "full", "precision": "bf16-mixed", "seq_len": 4096, "train_tokens": 2e10},
    "constraints": {"gpus": FOUR_GPUS, "max_nodes": 16},
}
SEARCHES: list[tuple[str, dict[str, Any]]] = [
    ("Llama 3.1 70B full, 4 GPU types x 1..16 nodes", SEARCH),
    ("Llama 3.1 405B full, 8k, 4 GPU types x 1..128 nodes",
     {"model": "llama-3.1-405b", "training": {"method": "full", "precision": "bf16-mixed", "seq_len": 8192,
                                              "train_tokens": 2e11},
      "constraints": {"gpus": FOUR_GPUS, "max_nodes": 128}}),
    ("DeepSeek-V3 full, 4k, 4 GPU types x 1..128 nodes",
     {"model": "deepseek-v3", "training": {"method": "full", "precision": "bf16-mixed", "seq_len": 4096,
                                           "train_tokens": 2e11},
      "constraints": {"gpus": FOUR_GPUS, "max_nodes": 128}}),
]

# (label, estimator request, llm-analysis GPU config name)
CONFIGS: list[tuple[str, dict[str, Any], str]] = [
    ("70B full, 32x H100, TP8 PP2 DP2 ZeRO-1 (Megatron)",
     {"model": "llama-3.1-70b", "training": {"micro_batch_size": 1, "gradient_accumulation_steps": 128,
                                             "activation_checkpointing": "selective", "train_tokens": 2e10},
      "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 8, "pp": 2, "sequence_parallel": True},
      "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 4}}, "h100-sxm-80gb"),
    ("70B full, 64x A100 80GB, TP8 PP2 DP4 ZeRO-1",
     {"model": "llama-3.1-70b", "training": {"micro_batch_size": 1, "gradient_accumulation_steps": 64,
                                             "activation_checkpointing": "full", "train_tokens": 2e10},
      "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 8, "pp": 2, "sequence_parallel": True},
      "hardware": {"gpu": "a100-sxm4-80gb", "num_nodes": 8}}, "a100-sxm-80gb"),
    ("8B full, 8x H100, ZeRO-3 (DeepSpeed)",
     {"model": "llama-3.1-8b", "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 16,
                                            "activation_checkpointing": "full", "train_tokens": 2e10},
      "parallelism": {"framework": "deepspeed", "sharding": "zero3"},
      "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1}}, "h100-sxm-80gb"),
]

GIB = 2**30
INSTALL = ("python3 -m venv /tmp/llma && /tmp/llma/bin/pip install --no-deps llm-analysis==0.2.2 fire termcolor; "
           "then PYTHONPATH=/tmp/llma/lib/python3.11/site-packages .venv/bin/python benchmarks/planner_bench.py")


def _median_s(fn: Callable[[], Any], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _answer(resp: PlanResponse) -> dict[str, Any]:
    out = resp.model_dump(mode="json")
    out.pop("search")
    return out


def bench_search(runs: int) -> None:
    catalog = load_catalog()
    print("== searches: with the screen (plan()) and without it (the exact path), alternating ==")
    for label, body in SEARCHES:
        req = PlanRequest.model_validate(body)
        plan(req, catalog)  # warm-up (and the memos of both paths)
        plan(req, catalog, screen=False)
        walls: dict[bool, list[float]] = {True: [], False: []}
        cpus: dict[bool, list[float]] = {True: [], False: []}
        last: dict[bool, PlanResponse] = {}
        for _ in range(runs):
            for screen in (True, False):
                t0, c0 = time.perf_counter(), time.process_time()
                last[screen] = plan(req, catalog, screen=screen)
                walls[screen].append(time.perf_counter() - t0)
                cpus[screen].append(time.process_time() - c0)
        fast, slow = statistics.median(walls[True]), statistics.median(walls[False])
        fast_cpu, slow_cpu = statistics.median(cpus[True]), statistics.median(cpus[False])
        s, e = last[True].search, last[False].search
        same = _answer(last[True]) == _answer(last[False])
        print(f"\n-- {label} --")
        print(f"wall s, median of {runs}: screen {fast:.3f} (min {min(walls[True]):.3f}), exact path {slow:.3f} "
              f"(min {min(walls[False]):.3f}); speed-up {slow / fast:.2f}x; same answer: {same}")
        print(f"CPU s of this process, median (less sensitive to a shared machine): screen {fast_cpu:.3f}, exact "
              f"path {slow_cpu:.3f}; speed-up {slow_cpu / fast_cpu:.2f}x")
        print(f"search space: {s.space_size:,} layouts ({s.structures:,} parallel structures over {s.worlds} "
              f"hardware x node-count groups); layouts covered per second: {s.space_size / fast:,.0f} "
              f"(exact path {s.space_size / slow:,.0f})")
        print(f"screen: {s.layouts_screened:,} layouts screened, {s.screened_out:,} structures ruled out")
        for name, st in (("screen", s), ("exact", e)):
            print(f"  {name:6} {st.structures_evaluated} structures priced, {st.memory_checks} memory estimates, "
                  f"{st.time_evaluations} step-time estimates, {st.full_estimates} full estimates; "
                  f"{st.pruned_by_bound} cut by the lower bound, {st.pruned_by_dominance} by dominance")
        print(f"winner: {last[True].plans[0].label}" if last[True].plans else "no plan")
        cold, cold_cpu = _cold_search(req, catalog, runs)
        print(f"memos cleared before each search (what a model's first search in a process pays; the figures above "
              f"reuse what the warm-up and earlier runs memoised): median wall {cold:.3f} s, CPU {cold_cpu:.3f} s")


def _cold_search(req: PlanRequest, catalog: Any, runs: int) -> tuple[float, float]:
    """Median wall and CPU seconds of ``plan(req)`` with every estimator memo and shared shape emptied first."""
    walls, cpus = [], []
    for _ in range(runs):
        memo.clear_all()
        clear_shapes()
        t0, c0 = time.perf_counter(), time.process_time()
        plan(req, catalog)
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def bench_screen(runs: int) -> None:
    """``screen.may_fit`` over real rows (the 405B search's), tiled; and one exact memory estimate, for scale."""
    from estimator.model.spec import CachedShape, resolve_model
    from estimator.planner.hardware import hardware_options, worlds_for
    from estimator.planner.search import SearchContext
    from estimator.training.memory import _peak_memory

    catalog = load_catalog()
    req = PlanRequest.model_validate(SEARCHES[1][1])
    shape = CachedShape(resolve_model(req.model))
    ctx = SearchContext(req, catalog, shape)
    worlds = [w for hw in hardware_options(req, catalog) for w in worlds_for(req, hw)]
    parts = [ctx._screen_rows(w) for w in worlds[: len(worlds) // 4]]  # one GPU type's groups
    rows = [p for p in parts if len(p.micro)]
    floors = scr.Floors(*(np.concatenate([getattr(p.floors, f.name) for p in rows])
                          for f in dataclasses.fields(scr.Floors)))
    offsets = np.cumsum([0] + [len(p.floors) for p in rows[:-1]])
    floor_row = np.concatenate([p.floor_row + o for p, o in zip(rows, offsets, strict=True)])
    micro = np.concatenate([p.micro for p in rows])
    tiles = max(1, 2_000_000 // len(micro))
    floor_row, micro = np.tile(floor_row, tiles), np.tile(micro, tiles)
    usable = 80e9
    kept = scr.may_fit(floors, floor_row, micro, req.training.seq_len, usable)
    t = _median_s(lambda: scr.may_fit(floors, floor_row, micro, req.training.seq_len, usable), runs)
    levels = len(ctx.ckpts)
    print("\n== the screen: estimator.planner.screen.may_fit over the 405B search's rows ==")
    print(f"{len(micro):,} rows ({tiles} x the {len(micro) // tiles:,} (structure, micro-batch) rows of one GPU "
          f"type's 128 node counts; {kept.mean():.0%} may fit at 80 GB): median {t * 1e3:.1f} ms, "
          f"{len(micro) / t:,.0f} rows/s = {len(micro) * levels / t:,.0f} layouts/s ({levels} checkpointing "
          "levels a row)")
    # the peer figure: one exact memory estimate at a time, memo cleared
    world = next(w for w in worlds if w.num_nodes == 16)
    s = next(s for s in ctx.structures(world) if ctx.variants(world, s) and ctx.layout(world, s) is not None)
    exact_job = ctx.job(world, s, "selective", *ctx.variants(world, s)[0])
    layout = ctx.layout(world, s)
    assert layout is not None

    per = _median_s(lambda: _peak_memory(exact_job, shape, layout, world.hw.capacity_bytes), runs * 50)
    print(f"peer: one exact memory estimate (memory._peak_memory, its own memo bypassed) {per * 1e6:.0f} us = "
          f"{1 / per:,.0f} "
          f"layouts/s; the screen is {len(micro) * levels / t * per:,.0f}x that per layout")


def _llm_analysis(req: EstimateRequest, gpu_name: str) -> Callable[[], dict[str, Any]]:
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
    from llm_analysis.config import (
        DtypeConfig,
        ModelConfig,
        ParallelismConfig,
        get_dtype_config_by_name,
        get_gpu_config_by_name,
    )

    a = preset(str(req.model))
    model = ModelConfig(name=a.name, num_layers=a.num_layers, n_head=a.num_attention_heads, hidden_dim=a.hidden_size,
                        vocab_size=a.vocab_size, max_seq_len=req.training.seq_len,
                        num_key_value_heads=a.num_kv_heads, ffn_embed_dim=a.ffn_hidden_size,
                        expansion_ratio=a.ffn_hidden_size / a.hidden_size, model_type="llama")
    p, t = req.parallelism, req.training
    par = ParallelismConfig(tp_size=p.tp, pp_size=p.pp, dp_size=req.dp)
    dtype: DtypeConfig = get_dtype_config_by_name("w16a16e16")
    analysis = LLMAnalysis(model, get_gpu_config_by_name(gpu_name), dtype, par, flops_efficiency=0.5,
                           hbm_memory_efficiency=0.9)
    zero = {"none": DSZeRO.NONE, "zero1": DSZeRO.STAGE_1, "zero2": DSZeRO.STAGE_2, "zero3": DSZeRO.STAGE_3}
    recompute = {"none": ActivationRecomputation.NONE, "selective": ActivationRecomputation.SELECTIVE,
                 "full": ActivationRecomputation.FULL}

    def run() -> dict[str, Any]:
        out: dict[str, Any] = analysis.training(
            batch_size_per_gpu=t.micro_batch_size, gradient_accumulation_steps=t.gradient_accumulation_steps,
            seq_len=t.seq_len, total_num_tokens=int(t.train_tokens or 1e9),
            activation_recomputation=recompute[t.activation_checkpointing],
            ds_zero=zero.get(p.normalized_sharding, DSZeRO.NONE),
            mlp_gated_linear_units=True)
        return out

    return run


def _have_llm_analysis() -> str | None:
    """``None`` when llm-analysis imports, else why not (one line)."""
    try:
        import llm_analysis.analysis  # noqa: F401
    except ImportError as exc:  # ModuleNotFoundError, or one of its own dependencies missing
        return f"{type(exc).__name__}: {exc}"
    return None


def bench_configs(runs: int) -> None:
    logging.getLogger("llm_analysis").setLevel(logging.ERROR)
    logging.disable(logging.WARNING)  # its per-call warnings (Chinchilla ratio, latency cross-check)
    catalog = load_catalog()
    missing = _have_llm_analysis()
    if missing is not None:
        print(f"\n== one estimate per configuration, median of {runs * 20} (llm-analysis not available: {missing};"
              " its comparison is skipped) ==")
        print(f"to compare, install it apart from .venv: {INSTALL}")
        for label, payload, _ in CONFIGS:
            req = EstimateRequest.model_validate(payload)
            print(f"{label:48} {_median_s(lambda req=req: estimate(req, catalog), runs * 20) * 1e3:8.2f} ms")
        return
    print("\n== one estimate vs one llm-analysis training analysis (same config), median of", runs * 20, "==")
    print(f"{'configuration':48} {'ours ms':>8} {'theirs ms':>9} {'ratio':>6}   step s ours/theirs   "
          "peak GiB ours/theirs")
    for label, payload, gpu_name in CONFIGS:
        req = EstimateRequest.model_validate(payload)
        ours = estimate(req, catalog)
        theirs_fn = _llm_analysis(req, gpu_name)
        theirs = theirs_fn()
        t_ours = _median_s(lambda req=req: estimate(req, catalog), runs * 20)
        t_theirs = _median_s(theirs_fn, runs * 20)
        step = ours.time.step_time_s if ours.time else float("nan")
        their_step = float(theirs.get("latency_per_iter", float("nan")))
        their_mem = float(theirs.get("(weight+op_state+grad+act)_memory_per_gpu", float("nan"))) / GIB
        print(f"{label:48} {t_ours * 1e3:8.2f} {t_theirs * 1e3:9.2f} {t_ours / t_theirs:6.2f}   "
              f"{step:7.2f} / {their_step:7.2f}    {ours.memory.total_bytes / GIB:6.1f} / {their_mem:6.1f}")
    print("ratio = our estimate's time / llm-analysis's; ours also builds the full response (time to train, "
          "energy, checkpoint, warnings) and bisects the largest micro-batch that fits.")
    print("llm-analysis runs at flops_efficiency 0.5 (its users' usual setting); ours uses its fitted GEMM model.")
    print(f"(Llama 3.1 70B: {ModelShape(preset('llama-3.1-70b')).total_params() / 1e9:.1f}B parameters)")


#: issue 29: the searches of section 1 (and the issue's one-GPU case) with the fine-tuning stack mechanisms as an
#: axis (``vary_mechanisms``: every variant of the request searched, then merged)
MECHANISM_SEARCHES: list[tuple[str, dict[str, Any]]] = [
    ("Llama 3.1 8B LoRA, 16k, one A100 40GB (the issue's case)",
     {"model": "llama-3.1-8b", "training": {"method": "lora", "seq_len": 16384, "activation_checkpointing": "full"},
      "hardware": {"gpu": "a100-sxm4-40gb", "num_nodes": 1, "gpus_per_node": 1}, "global_batch_size": 8}),
    ("Llama 3.1 8B LoRA, 8k, every GPU type x 1..2 nodes",
     {"model": "llama-3.1-8b", "training": {"method": "lora", "seq_len": 8192}, "constraints": {"max_nodes": 2}}),
    SEARCHES[0],
]
ALL_MECHANISMS = ["loss_kernel", "fused_kernels", "activation_offloading"]


def bench_mechanisms(runs: int) -> None:
    """Section 4: each search with the axis off, with the fused loss only, with the three memory mechanisms and with
    the optimizer too (median wall time of ``runs``, warm and with the memos cleared before each), the space (every
    variant's layouts) and how many of the returned plans change a mechanism."""
    catalog = load_catalog()
    print("\n== the fine-tuning stack mechanisms as a planner axis (vary_mechanisms) ==")
    for label, body in MECHANISM_SEARCHES:
        print(f"\n-- {label} --")
        base = None
        for vary in ([], ["loss_kernel"], ALL_MECHANISMS, [*ALL_MECHANISMS, "optimizer"]):
            req = PlanRequest.model_validate({**body, "vary_mechanisms": vary})
            resp = plan(req, catalog)  # warm-up
            wall = _median_s(lambda req=req: plan(req, catalog), runs)
            cold, _ = _cold_search(req, catalog, runs)
            base = base or (wall, cold)
            changed = sum(p.mechanism_changes is not None for p in resp.plans)
            print(f"vary {','.join(vary) or '(off)':50} warm {wall:6.3f} s ({wall / base[0]:4.1f}x off), memos "
                  f"cleared {cold:6.3f} s ({cold / base[1]:4.1f}x off); space {resp.search.space_size:>9,}; "
                  f"{len(resp.plans)} plans, {changed} changing a mechanism; "
                  f"winner: {resp.plans[0].label if resp.plans else 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed searches (>= 5)")
    parser.add_argument("--only", choices=["search", "screen", "configs", "mechanisms"], default=None,
                        help="run one section")
    args = parser.parse_args()
    print(f"estimator: {native.describe()}")
    runs = max(5, args.runs)
    sections: list[tuple[str, Callable[[int], None]]] = [
        ("search", bench_search), ("screen", bench_screen), ("configs", bench_configs),
        ("mechanisms", bench_mechanisms)]
    for name, fn in sections:
        if args.only in (None, name):
            fn(runs)


if __name__ == "__main__":
    main()
