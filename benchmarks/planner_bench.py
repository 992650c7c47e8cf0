"""Planner speed, and the cost of one estimate against one llm-analysis training analysis.

Run: ``.venv/bin/python benchmarks/planner_bench.py [--runs 7]``. Prints figures only (no pass/fail):

1. The full search of issue 6: Llama 3.1 70B full fine-tune (bf16-mixed AdamW, 4k tokens, 2**20-token batch,
   20B-token budget) over 4 GPU types (A100 80GB, H100, H200, B200) on 1 to 16 nodes: median wall time of
   ``--runs`` searches (one warm-up first: imports and the catalog load are not counted), the search-space size
   and layouts per second, and what the pruning left to the memory and step-time models.
2. Per configuration: the median time of one ``estimator.estimate`` (memory, step time, time to train) against
   one ``llm_analysis.analysis.LLMAnalysis.training`` for the same model, GPU, layout and batch (PyPI
   ``llm-analysis``). Their step time and peak memory are printed beside ours for context. Without
   llm-analysis this section prints our times only and says how to install it.

llm-analysis pins huggingface-hub < 0.15 and transformers, which its training analysis does not use, so keep it
out of ``.venv``: install it with its two import-time dependencies into a separate venv and put that venv's
site-packages on the path (docs/planner.md)::

    python3 -m venv /tmp/llma && /tmp/llma/bin/pip install --no-deps llm-analysis==0.2.2 fire termcolor
    PYTHONPATH=/tmp/llma/lib/python3.11/site-packages .venv/bin/python benchmarks/planner_bench.py
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from estimator.estimate import estimate
from estimator.modelspec import ModelShape, preset
from estimator.planner.contract import PlanRequest
from estimator.planner.plan import plan
from estimator.request import EstimateRequest
from hardware_catalog import load_catalog

SEARCH = {
    "model": "llama-3.1-70b",
    "training": {"method": "full", "precision": "bf16-mixed", "seq_len": 4096, "train_tokens": 2e10},
    "constraints": {"gpus": ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb"],
                    "max_nodes": 16},
}

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


def bench_search(runs: int) -> None:
    catalog = load_catalog()
    req = PlanRequest.model_validate(SEARCH)
    plan(req, catalog)  # warm-up
    walls, last = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        last = plan(req, catalog)
        walls.append(time.perf_counter() - t0)
    assert last is not None
    s = last.search
    median = statistics.median(walls)
    print("== full search: Llama 3.1 70B full fine-tune, 4 GPU types x 1..16 nodes ==")
    print(f"runs: {runs}; wall s: median {median:.3f}, min {min(walls):.3f}, max {max(walls):.3f}")
    print(f"search space: {s.space_size} layouts ({s.structures} parallel structures over {s.worlds} "
          f"hardware x node-count groups)")
    print(f"candidates evaluated per second: {s.space_size / median:,.0f} (layouts covered / median wall time)")
    print(f"work left after pruning: {s.structures_evaluated} structures priced, {s.memory_checks} memory "
          f"estimates, {s.time_evaluations} step-time estimates, {s.full_estimates} full estimates; "
          f"{s.pruned_by_bound} structures cut by the lower bound, {s.pruned_by_dominance} by dominance")
    print(f"winner: {last.plans[0].label}" if last.plans else "no plan")


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="timed searches (>= 5)")
    args = parser.parse_args()
    bench_search(max(5, args.runs))
    bench_configs(max(5, args.runs))


if __name__ == "__main__":
    main()
