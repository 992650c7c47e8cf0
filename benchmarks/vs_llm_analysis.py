"""Per configuration: ``estimate()`` and the planner's per-layout path against llm-analysis 0.2.2's ``training()``.

Issue 19's estimator goals: the public ``estimate()`` at most 0.5x llm-analysis's time per configuration and the
planner path (no suggestions: what :class:`estimator.planner.search.SearchContext` needs per layout, i.e.
``build_layout`` + ``resolve_hardware`` + ``peak_memory`` + ``step_time_model``, the step time without the
response's pydantic ``TimeResult``) at most 0.1x, measured side by side in one process. The column "+result" is
the same path through ``step_time``, which builds that ``TimeResult`` as well (what ``SearchContext.time`` called
until 2026-12-05; the search now builds it only for the layouts a plan returns).

How: for each 70B layout, ``--n`` configurations per runner and pass, each runner with its own sequence lengths
(``1024 + 4 P i + P j + p`` for configuration ``i``, runner ``j`` and pass ``p`` of ``P``): no configuration is
evaluated twice in the run, so nothing that depends on the sequence length is memoised from another call -- not
from another runner either (until 2026-12-05 the four runners shared each configuration, so the planner path and
"+result", run after ``estimate()`` on the same request, found its memory peak and activation rates memoised and
looked about a third faster than they are). The requests are validated beforehand (as the API and the planner
hand ``estimate()`` validated requests). The four run interleaved, configuration index ``i`` in the order of the
``i mod 24``-th permutation of the four, so that machine load from other work hits all of them alike and each
runs right after each of the others about equally often: what ran just before warms or evicts the caches (until
2026-12-05 a rotating order put each runner always after the same one: the planner path after ``estimate()``,
which runs the same code, and ``estimate()`` after llm-analysis). Each figure is the median per configuration
over the pass; ``--passes`` passes, each with fresh sequence lengths, and the pass with the lowest llm-analysis
median is not preferred: the ratio is computed per pass and its median printed with the spread.

llm-analysis pins old huggingface-hub/transformers it does not use for this, so it lives in its own venv::

    python3 -m venv /tmp/llma && /tmp/llma/bin/pip install --no-deps llm-analysis==0.2.2 fire termcolor
    PYTHONPATH=$PWD:/tmp/llma/lib/python3.11/site-packages .venv/bin/python -m benchmarks.vs_llm_analysis
"""

from __future__ import annotations

import argparse
import gc
import itertools
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

from estimator import native
from estimator.estimate import estimate, resolve_hardware
from estimator.job import job_of
from estimator.model.spec import preset, shape_for
from estimator.request import EstimateRequest
from estimator.training.layout import build_layout
from estimator.training.memory import peak_memory
from estimator.training.timing import step_time, step_time_model
from hardware_catalog import Catalog, load_catalog

# (label, estimator request, llm-analysis GPU name): the 70B Megatron layouts of benchmarks/estimate_speed.py and
# benchmarks/planner_bench.py (llm-analysis has no LoRA, and its full fine-tune of the 70B LoRA case's FSDP on 8
# GPUs does not fit, which its training() refuses with an AssertionError)
CONFIGS: list[tuple[str, dict[str, Any], str]] = [
    ("70B Megatron TP8 PP4 SP, 64x H100",
     {"model": "llama-3.1-70b",
      "training": {"gradient_accumulation_steps": 16, "activation_checkpointing": "selective"},
      "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 8, "pp": 4, "sequence_parallel": True},
      "hardware": {"num_nodes": 8}}, "h100-sxm-80gb"),
    ("70B full, 32x H100, TP8 PP2 DP2 ZeRO-1",
     {"model": "llama-3.1-70b", "training": {"micro_batch_size": 1, "gradient_accumulation_steps": 128,
                                             "activation_checkpointing": "selective", "train_tokens": 2e10},
      "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 8, "pp": 2, "sequence_parallel": True},
      "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 4}}, "h100-sxm-80gb"),
    ("70B full, 64x A100, TP8 PP2 DP4 ZeRO-1",
     {"model": "llama-3.1-70b", "training": {"micro_batch_size": 1, "gradient_accumulation_steps": 64,
                                             "activation_checkpointing": "full", "train_tokens": 2e10},
      "parallelism": {"framework": "megatron", "sharding": "zero1", "tp": 8, "pp": 2, "sequence_parallel": True},
      "hardware": {"gpu": "a100-sxm4-80gb", "num_nodes": 8}}, "a100-sxm-80gb"),
]


def llm_analysis_training(req: EstimateRequest, gpu_name: str) -> Callable[[int], Any]:
    """llm-analysis's ``training()`` for the request's model, GPU, layout and batch, at a given sequence length."""
    from llm_analysis.analysis import ActivationRecomputation, DSZeRO, LLMAnalysis
    from llm_analysis.config import ModelConfig, ParallelismConfig, get_dtype_config_by_name, get_gpu_config_by_name

    a = preset(str(req.model))
    model = ModelConfig(name=a.name, num_layers=a.num_layers, n_head=a.num_attention_heads, hidden_dim=a.hidden_size,
                        vocab_size=a.vocab_size, max_seq_len=32768, num_key_value_heads=a.num_kv_heads,
                        ffn_embed_dim=a.ffn_hidden_size, expansion_ratio=a.ffn_hidden_size / a.hidden_size,
                        model_type="llama")
    p, t = req.parallelism, req.training
    analysis = LLMAnalysis(model, get_gpu_config_by_name(gpu_name), get_dtype_config_by_name("w16a16e16"),
                           ParallelismConfig(tp_size=p.tp, pp_size=p.pp, dp_size=req.dp), flops_efficiency=0.5,
                           hbm_memory_efficiency=0.9)
    zero = {"none": DSZeRO.NONE, "zero1": DSZeRO.STAGE_1, "zero2": DSZeRO.STAGE_2, "zero3": DSZeRO.STAGE_3}
    recompute = {"none": ActivationRecomputation.NONE, "selective": ActivationRecomputation.SELECTIVE,
                 "full": ActivationRecomputation.FULL}

    def run(seq_len: int) -> Any:
        return analysis.training(
            batch_size_per_gpu=t.micro_batch_size, gradient_accumulation_steps=t.gradient_accumulation_steps,
            seq_len=seq_len, total_num_tokens=int(t.train_tokens or 1e9),
            activation_recomputation=recompute[t.activation_checkpointing],
            ds_zero=zero.get(p.normalized_sharding, DSZeRO.NONE), mlp_gated_linear_units=True)

    return run


def planner_path(req: EstimateRequest, catalog: Catalog) -> object:
    """What the planner evaluates per layout: the layout, the memory peak and the step time (no suggestions, no
    response, no host sizing)."""
    job = job_of(req)
    shape = shape_for(req.model)
    layout = build_layout(job, shape)
    hw = resolve_hardware(job, catalog)
    peak_memory(job, shape, layout, int(hw.gpu.memory_bytes))
    return step_time_model(job, shape, layout, hw.gpu, hw.server)


def planner_path_result(req: EstimateRequest, catalog: Catalog) -> object:
    """:func:`planner_path` with the step time as the response's ``TimeResult`` (``step_time``)."""
    job = job_of(req)
    shape = shape_for(req.model)
    layout = build_layout(job, shape)
    hw = resolve_hardware(job, catalog)
    peak_memory(job, shape, layout, int(hw.gpu.memory_bytes))
    return step_time(job, shape, layout, hw.gpu, hw.server, catalog)


RUNNERS = 4  # estimate, planner path, +result, llm-analysis
ORDERS = list(itertools.permutations(range(RUNNERS)))  # one per configuration index, in turn


def _requests(body: dict[str, Any], seq_lens: list[int]) -> list[EstimateRequest]:
    training = body.get("training", {})
    return [EstimateRequest.model_validate({**body, "training": {**training, "seq_len": s}}) for s in seq_lens]


def seq_lens(n: int, runner: int, pass_index: int, passes: int) -> list[int]:
    """The sequence lengths of one runner in one pass: ``1024 + 4 P i + P j + p``, none shared with another
    runner or pass of the run."""
    return [1024 + RUNNERS * passes * i + passes * runner + pass_index for i in range(n)]


def one_pass(body: dict[str, Any], gpu_name: str, catalog: Catalog, n: int, pass_index: int,
             passes: int) -> tuple[float, float, float, float]:
    """Median ms per configuration of (estimate, planner path, planner path with the TimeResult, llm-analysis) over
    ``n`` configurations each, no two the same (:func:`seq_lens`)."""
    own = [_requests(body, seq_lens(n, j, pass_index, passes)) for j in range(RUNNERS)]
    theirs = llm_analysis_training(own[0][0], gpu_name)
    runs: list[Callable[[EstimateRequest], object]] = [
        lambda r: estimate(r, catalog), lambda r: planner_path(r, catalog), lambda r: planner_path_result(r, catalog),
        lambda r: theirs(r.training.seq_len)]
    times: list[list[float]] = [[] for _ in runs]
    for i in range(n):
        for k in ORDERS[i % len(ORDERS)]:
            req = own[k][i]
            t0 = time.perf_counter()
            runs[k](req)
            times[k].append(time.perf_counter() - t0)
    return tuple(1000 * statistics.median(t) for t in times)  # type: ignore[return-value]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="distinct configurations per layout and pass")
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # llm-analysis logs warnings per call (Chinchilla ratio, latency check)
    catalog = load_catalog()
    print(f"estimator: {native.describe()}")
    print(f"median ms per configuration, {args.n} configurations per runner and pass (no sequence length twice in "
          f"the run), {args.passes} passes, interleaved; ratio = ours / llm-analysis per pass (median [min-max])")
    print(f"{'layout':40} {'estimate':>9} {'planner':>8} {'+result':>8} {'llm-an.':>8}   {'estimate/llm-an.':>22}  "
          f"{'planner/llm-an.':>22}  {'+result/llm-an.':>22}")
    for label, body, gpu_name in CONFIGS:
        warm = _requests(body, [1000])[0]  # below every measured sequence length
        estimate(warm, catalog)
        llm_analysis_training(warm, gpu_name)(warm.training.seq_len)
        passes = []
        for p in range(args.passes):
            gc.collect()
            passes.append(one_pass(body, gpu_name, catalog, args.n, p, args.passes))
        est, pln, res, llm = (statistics.median(x[i] for x in passes) for i in range(4))
        r_est = [x[0] / x[3] for x in passes]
        r_pln = [x[1] / x[3] for x in passes]
        r_res = [x[2] / x[3] for x in passes]
        print(f"{label:40} {est:9.3f} {pln:8.3f} {res:8.3f} {llm:8.3f}   "
              f"{statistics.median(r_est):5.2f} [{min(r_est):.2f}-{max(r_est):.2f}]      "
              f"{statistics.median(r_pln):5.3f} [{min(r_pln):.3f}-{max(r_pln):.3f}]  "
              f"{statistics.median(r_res):5.3f} [{min(r_res):.3f}-{max(r_res):.3f}]", flush=True)


if __name__ == "__main__":
    main()
