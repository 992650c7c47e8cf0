"""Per-GPU memory of a serving engine at start-up: the budget, the profile-run peak, the KV pool, and whether
the engine starts (see :mod:`estimator.inference.engines` for each engine's rule and its source).

Activation peak of vLLM's profile run (``GPUModelRunner.profile_run``): a dummy forward of
``max_num_batched_tokens`` = T tokens, whose peak is in the MLP of one layer (the residual and hidden stream,
the gate-up output of 2 x ffn / tp and its SiLU-and-mul product of ffn / tp, bf16; vLLM runs no autograd, so
nothing else is held), then a dummy sampler run over ``min(max_num_seqs, T)`` rows of fp32 logits with top-k /
top-p on (logits, probabilities, sorted values and int64 indices: 20 bytes a vocabulary entry). Non-torch
memory that grows during the profile (cuBLAS workspaces, NCCL/custom all-reduce buffers) is 0.2 GiB per GPU
(vLLM's own start-up lines: "non_torch_memory takes 0.20GiB", vllm-project/vllm PR 14447). The CUDA context
(0.55 GB on the H200, tests/data/serving_h200_raw/8b.json ``mem_start.device_used``) is taken before vLLM's
first snapshot, so it lives in the 1 - gpu_memory_utilization headroom, with the CUDA graphs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from estimator.inference.engines import EngineProfile, GiB, sglang_fraction
from estimator.inference.kv import KvLayout
from estimator.inference.weights import WeightBytes
from estimator.messages import Text
from estimator.model.spec import ModelShape

if TYPE_CHECKING:
    from hardware_catalog import Gpu

__all__ = ["CUDA_CONTEXT_BYTES", "MemoryPlan", "activation_peak_bytes", "cuda_graph_bytes", "plan_memory",
           "usable_total_bytes"]

CUDA_CONTEXT_BYTES: Final = 552_402_944  # measured: torch.cuda.mem_get_info() used before any allocation (H200)
NON_TORCH_INCREASE_BYTES: Final = int(0.2 * GiB)
SAMPLER_BYTES_PER_VOCAB_ENTRY: Final = 20
DEFAULT_RESERVED_FRACTION: Final = 0.005  # what the driver keeps back when the catalog has no measured figure
CUDA_GRAPH_SIZES: Final = 67  # vLLM's default capture list up to 512: 1, 2, 4, then every 8 (compilation.py)
CUDA_GRAPH_FIXED_BYTES: Final = 2 * 1024**2  # per captured graph (its private pool's bookkeeping and workspaces)


def usable_total_bytes(gpu: Gpu) -> int:
    """What ``torch.cuda.mem_get_info()`` calls total: the card's memory less what the driver reserves
    (catalog ``memory_reserved_bytes``, measured on the H200; else 0.5 %)."""
    mem = int(gpu.memory_bytes)
    reserved = getattr(gpu, "memory_reserved_bytes", None)
    return mem - (int(reserved) if reserved is not None else int(mem * DEFAULT_RESERVED_FRACTION))


def _forward_peak(shape: ModelShape, tokens: int, tp: int) -> int:
    a = shape.dims
    h = a.hidden_size
    if shape.is_moe:
        ffn = math.ceil(shape.expert_ffn * a.experts_per_token / tp) + math.ceil(
            shape.expert_ffn * a.num_shared_experts / tp)
    else:
        ffn = math.ceil(a.ffn_hidden_size / tp)
    q = a.num_attention_heads * shape.head_dim // tp
    kv = 2 * max(1, shape.kv_heads // tp) * shape.head_dim
    mlp = 2 * ffn + ffn
    attn = q + kv + q
    return 2 * tokens * (2 * h + max(mlp, attn))


def activation_peak_bytes(shape: ModelShape, tokens: int, seqs: int, tp: int) -> int:
    """Torch peak increase of vLLM's profile run (module docstring)."""
    rows = min(seqs, tokens)
    sampler = rows * shape.dims.vocab_size * SAMPLER_BYTES_PER_VOCAB_ENTRY
    return _forward_peak(shape, tokens, tp) + sampler


def cuda_graph_bytes(shape: ModelShape, max_capture: int, tp: int) -> int:
    """CUDA-graph pool: the largest captured batch's forward activations plus a fixed amount per graph."""
    return _forward_peak(shape, max_capture, tp) + CUDA_GRAPH_SIZES * CUDA_GRAPH_FIXED_BYTES


@dataclass(frozen=True)
class MemoryPlan:
    total: int
    budget: int
    fraction: float
    weights: int
    activation_peak: int
    non_torch: int
    cuda_graphs: int
    cuda_context: int
    kv_pool: int
    num_blocks: int
    block_size: int
    kv_tokens: int
    headroom: int
    errors: tuple[str, ...]
    warnings: tuple[str, ...]


def _gib(b: float) -> str:
    return f"{b / GiB:.2f}"


def plan_memory(engine: EngineProfile, shape: ModelShape, weights: WeightBytes, kv: KvLayout, gpu: Gpu,
                *, tp: int, fraction: float | None, block_size: int | None, max_batched_tokens: int,
                max_num_seqs: int, max_model_len: int, enforce_eager: bool) -> MemoryPlan:
    total = usable_total_bytes(gpu)
    errors: list[str] = []
    warnings: list[str] = []
    bs = block_size or engine.block_size
    if fraction is None:
        fraction = sglang_fraction(tp) if engine.id == "sglang" else engine.memory_fraction_default
    act = activation_peak_bytes(shape, max_batched_tokens, max_num_seqs, tp)
    non_torch = NON_TORCH_INCREASE_BYTES
    graphs = 0 if enforce_eager else cuda_graph_bytes(shape, min(2 * max_num_seqs, 512), tp)
    if engine.fraction_of == "free-after-weights":
        budget = int((total - CUDA_CONTEXT_BYTES - weights.total - act - non_torch) * fraction)
        kv_pool = budget
        used_in_budget = 0
    elif engine.activations_in_budget:
        budget = int(total * fraction)
        used_in_budget = weights.total + act + non_torch
        kv_pool = budget - used_in_budget
    else:  # SGLang: the static fraction holds weights + KV pool; activations and graphs outside it
        budget = int(total * fraction)
        used_in_budget = weights.total
        kv_pool = budget - used_in_budget
    page = kv.bytes_per_token_layer * bs * (kv.full_layers + kv.sliding_layers)
    num_blocks = max(0, kv_pool) // page if page else 0
    kv_tokens = num_blocks * bs
    if engine.fraction_of == "free-after-weights":
        headroom = total - CUDA_CONTEXT_BYTES - weights.total - act - non_torch - max(0, kv_pool) - graphs
    elif engine.activations_in_budget:
        headroom = total - budget - CUDA_CONTEXT_BYTES - graphs
    else:
        headroom = total - budget - CUDA_CONTEXT_BYTES - act - non_torch - graphs
    if weights.total + CUDA_CONTEXT_BYTES > total:
        errors.append(f"torch.OutOfMemoryError: CUDA out of memory while loading the weights: "
                      f"{_gib(weights.total)} GiB of weights per GPU on {_gib(total)} GiB "
                      f"(raise tensor_parallel_size or quantize)")
    elif engine.id == "vllm" and total * fraction > total - CUDA_CONTEXT_BYTES:
        errors.append(f"ValueError: Free memory on device ({_gib(total - CUDA_CONTEXT_BYTES)}/{_gib(total)} GiB) "
                      f"on startup is less than desired GPU memory utilization ({fraction}, "
                      f"{_gib(total * fraction)} GiB). Decrease GPU memory utilization or reduce GPU memory "
                      f"used by other processes.")
    elif kv_pool <= 0 or num_blocks == 0:
        if engine.id == "vllm":
            errors.append("ValueError: No available memory for the cache blocks. Try increasing "
                          "`gpu_memory_utilization` when initializing the engine.")
        elif engine.id == "sglang":
            errors.append("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
        else:
            errors.append("RuntimeError: no memory left for the KV cache after the weights and activations "
                          "(raise kv_cache_free_gpu_memory_fraction or tp_size)")
    else:
        need = kv.request_bytes(max_model_len, bs)
        if need > kv_pool:
            est = longest_request(kv, kv_pool, bs)
            if engine.id == "vllm":
                errors.append(f"ValueError: To serve at least one request with the model's max seq len "
                              f"({max_model_len}), ({_gib(need)} GiB KV cache is needed, which is larger than the "
                              f"available KV cache memory ({_gib(kv_pool)} GiB). Based on the available memory, "
                              f"the estimated maximum model length is {est}. Try increasing "
                              f"`gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
                              f"engine.")
            elif engine.id == "sglang":
                warnings.append(Text("SGLang starts, but its pool holds %(tokens)s tokens, fewer than one request "
                                     "at context-length %(len)s: requests that long wait forever",
                                     tokens=kv_tokens, len=max_model_len))
            else:
                errors.append(f"RuntimeError: the KV cache holds {kv_tokens} tokens, fewer than max_seq_len "
                              f"{max_model_len}")
    if headroom < 0 and not errors:
        warnings.append(Text("the CUDA graphs (%(graphs)s GiB) and the CUDA context (%(context)s GiB) do not fit "
                             "in the memory left outside the budget (%(left)s GiB): expect an out-of-memory error "
                             "during graph capture; lower the memory fraction or use --enforce-eager",
                             graphs=_gib(graphs), context=_gib(CUDA_CONTEXT_BYTES), left=_gib(total - budget)))
    return MemoryPlan(total=total, budget=budget, fraction=fraction, weights=weights.total,
                      activation_peak=act, non_torch=non_torch, cuda_graphs=graphs,
                      cuda_context=CUDA_CONTEXT_BYTES, kv_pool=max(0, kv_pool), num_blocks=num_blocks,
                      block_size=bs, kv_tokens=kv_tokens, headroom=headroom, errors=tuple(errors),
                      warnings=tuple(warnings))


def longest_request(kv: KvLayout, pool: int, block_size: int) -> int:
    """Longest context one request can hold in ``pool`` bytes (whole blocks), by bisection."""
    if pool <= 0 or kv.request_bytes(1, block_size) > pool:
        return 0
    lo, hi = 1, 1
    while kv.request_bytes(hi, block_size) <= pool and hi < 10**9:
        lo, hi = hi, hi * 2
    if hi >= 10**9 and kv.request_bytes(hi, block_size) <= pool:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if kv.request_bytes(mid, block_size) <= pool:
            lo = mid
        else:
            hi = mid
    return lo
