"""Each serving engine's defaults and how it splits GPU memory, with the source of every number.

vLLM (V1 engine; ``vllm/v1/worker/gpu_worker.py`` ``Worker.determine_available_memory`` at vllm-project/vllm
35d5cda, ``vllm/utils`` ``memory_profiling``)::

    requested  = total_gpu_memory x gpu_memory_utilization          (0.9: vllm/config/cache.py CacheConfig)
    available  = requested - (weights + torch peak increase of the profile run + non-torch increase)
    num_blocks = available // (page bytes x layers)                  (vllm/v1/core/kv_cache_utils.py)

The profile run is a dummy forward of ``max_num_batched_tokens`` tokens plus a dummy sampler run over
``max_num_seqs`` rows of logits; CUDA graphs are captured *after* the KV cache is allocated, so their memory
comes out of the ``1 - gpu_memory_utilization`` headroom (gpu_worker.compile_or_warm_up_model logs it as
"CUDAGraph memory"). Defaults on a GPU of >= 70 GiB that is not an A100 (``EngineArgs.get_batch_defaults``,
vllm/engine/arg_utils.py): ``max_num_batched_tokens`` 8192 for ``vllm serve`` (2048 elsewhere),
``max_num_seqs`` 1024 (256 elsewhere); ``block_size`` 16 (CacheConfig).

SGLang (``python/sglang/srt/server_args.py``, ``mem_fraction_static``; ``model_executor/model_runner.py``
``profile_max_num_token``): the KV pool is ``total x mem_fraction_static - weights``; activations and CUDA
graphs live in the rest. Default fraction by TP size (server_args.py before the per-GPU-size table of 0.4.x):
0.88 (TP1), 0.87 (TP2), 0.85 (TP4), 0.81 (TP8). Page size 1 token (RadixAttention token-level pool).

TensorRT-LLM (``tensorrt_llm/llmapi/llm_args.py`` ``KvCacheConfig.free_gpu_memory_fraction`` = 0.9;
``tokens_per_block`` 32): the KV pool is 0.9 of the memory *free* after the weights and the engine's
activation workspace are allocated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = ["ENGINES", "EngineProfile", "engine_profile", "vllm_batch_defaults"]

GiB = 1024**3
GRAPH_KERNEL_S: Final = 0.925e-6  # one small kernel inside a CUDA graph on the H200 (kernels_launch.json)
# Kernels a Llama layer launches besides its GEMMs' own time: vLLM / SGLang ~12 (fused add + RMSNorm twice, rotary,
# KV-cache write, attention, SiLU-and-mul, fp8 activation quantization, the four GEMM launches); TensorRT-LLM ~8
# (its attention plugin fuses rotary and the cache write, its GEMM plugins the quantization).


@dataclass(frozen=True)
class EngineProfile:
    """How one engine budgets memory and runs a decode step.

    Speed constants: ``hbm_efficiency`` is achieved / datasheet HBM bandwidth for weight reads (the H200's
    device-to-device copy measured 4.28 of 4.8 TB/s, tests/data/serving_h200_raw/bench.json);
    ``attention_bandwidth_fraction`` the share of that a decode-attention kernel gets on the KV cache (1.0 for
    kernels that read GQA heads natively: SDPA with ``enable_gqa`` moved the KV cache at 0.83-0.94 of the
    datasheet bandwidth at batch >= 16 on the H200, kernels_attention.json, i.e. the copy rate);
    ``kv_read_amplification`` the KV bytes moved per KV byte stored, as a function of the GQA group size g
    (1 for paged attention kernels that read GQA heads natively); ``layer_overhead_s`` the fixed kernel time per
    layer and decode step that does not scale with bytes (launch floors of the unfused norms, rotary, activation
    kernels); ``step_overhead_s`` the scheduler / sampler time per step outside the graph.
    """

    id: str
    name: str
    memory_fraction_default: float
    memory_fraction_source: str
    fraction_of: str  # "total" | "free-after-weights"
    block_size: int
    activations_in_budget: bool
    hbm_efficiency: float
    attention_bandwidth_fraction: float
    kv_amplification_per_group: float  # moved bytes = (1 + this x g) x stored KV bytes
    layer_overhead_s: float
    step_overhead_s: float
    prefill_mfu: float | None
    source: str


ENGINES: Final[dict[str, EngineProfile]] = {
    "vllm": EngineProfile(
        id="vllm", name="vLLM (V1 engine)", memory_fraction_default=0.9,
        memory_fraction_source="vllm/config/cache.py CacheConfig.gpu_memory_utilization = 0.9",
        fraction_of="total", block_size=16, activations_in_budget=True,
        hbm_efficiency=0.891, attention_bandwidth_fraction=1.0, kv_amplification_per_group=0.0,
        layer_overhead_s=12 * GRAPH_KERNEL_S, step_overhead_s=1.0e-3, prefill_mfu=None,
        source="vllm-project/vllm v1/worker/gpu_worker.py determine_available_memory; CUDA-graph decode with "
               "fused RMSNorm / SiLU-and-mul / rotary kernels (vllm/model_executor/layers) and FlashAttention "
               "paged KV"),
    "sglang": EngineProfile(
        id="sglang", name="SGLang", memory_fraction_default=0.88,
        memory_fraction_source="sglang python/sglang/srt/server_args.py mem_fraction_static (0.88 at TP1, "
                               "0.87 TP2, 0.85 TP4, 0.81 TP8)",
        fraction_of="total", block_size=1, activations_in_budget=False,
        hbm_efficiency=0.891, attention_bandwidth_fraction=1.0, kv_amplification_per_group=0.0,
        layer_overhead_s=12 * GRAPH_KERNEL_S, step_overhead_s=0.8e-3, prefill_mfu=None,
        source="sgl-project/sglang srt/model_executor/model_runner.py profile_max_num_token"),
    "tensorrt-llm": EngineProfile(
        id="tensorrt-llm", name="TensorRT-LLM", memory_fraction_default=0.9,
        memory_fraction_source="tensorrt_llm/llmapi/llm_args.py KvCacheConfig.free_gpu_memory_fraction = 0.9",
        fraction_of="free-after-weights", block_size=32, activations_in_budget=True,
        hbm_efficiency=0.891, attention_bandwidth_fraction=1.0, kv_amplification_per_group=0.0,
        layer_overhead_s=8 * GRAPH_KERNEL_S, step_overhead_s=0.5e-3, prefill_mfu=None,
        source="NVIDIA/TensorRT-LLM llmapi/llm_args.py KvCacheConfig; fused XQA decode attention"),
    # The measured reference (not an engine choice in the API): HF transformers StaticCache + SDPA, decode step
    # captured in a CUDA graph (benchmarks/serving/measure_decode.py). HF's sdpa_attention_forward expands the
    # KV heads with repeat_kv (modeling_llama.py) before SDPA: the g-fold copy is written and read again, so a
    # step moves (1 + 2g) x the stored KV bytes; it attends over the whole max_cache_len. layer_overhead_s and
    # the attention fraction are the least-squares fit over the 8B sweep (9 points); the 70B-widths and 8k
    # sweeps are predictions (benchmarks/serving/fit_hf_static.py prints the fit; tests/test_inference_measured.py).
    "hf-static": EngineProfile(
        id="hf-static", name="HF transformers static cache + CUDA graph (measured reference)",
        memory_fraction_default=1.0, memory_fraction_source="no budget: tensors as allocated",
        fraction_of="total", block_size=1, activations_in_budget=True,
        hbm_efficiency=0.891, attention_bandwidth_fraction=0.416, kv_amplification_per_group=2.0,
        layer_overhead_s=141.3e-6, step_overhead_s=0.0, prefill_mfu=0.62,
        source="tests/data/serving_h200_raw (H200, torch 2.11, transformers 5.17)"),
}


def engine_profile(engine: str) -> EngineProfile:
    return ENGINES[engine]


def sglang_fraction(tp: int) -> float:
    """SGLang's default ``mem_fraction_static`` by TP size (server_args.py)."""
    if tp >= 8:
        return 0.81
    if tp >= 4:
        return 0.85
    if tp >= 2:
        return 0.87
    return 0.88


def vllm_batch_defaults(gpu_memory_bytes: int, gpu_id: str) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) that ``vllm serve`` picks (EngineArgs.get_batch_defaults):
    8192 / 1024 on a GPU of >= 70 GiB that is not an A100, else 2048 / 256."""
    if gpu_memory_bytes >= 70 * GiB and "a100" not in gpu_id:
        return 8192, 1024
    return 2048, 256
