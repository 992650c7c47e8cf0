"""Weight bytes per GPU as a serving engine loads them.

Quantized formats (what vLLM's kernels keep in memory, ``vllm/model_executor/layers/quantization``):

* ``bf16`` / ``fp16``: 2 bytes a parameter.
* ``fp8`` (``fp8.py``, W8A8 per-tensor): 1 byte a linear-layer parameter plus one fp32 weight scale and one
  input scale per matrix; embeddings, norms and the LM head stay 16-bit.
* ``int8`` (``compressed_tensors`` W8A8, per-channel): 1 byte a parameter plus an fp32 scale per output
  channel.
* ``int4-awq`` (``awq.py``): ``qweight`` int32 [in, out/8] = in x out / 2 bytes, ``scales`` fp16
  [in/group, out] and, with zero points, ``qzeros`` int32 [in/group, out/8].
* ``int4-gptq`` (``gptq.py``): ``qweight`` int32 [in/8, out], ``scales`` fp16 [in/group, out], ``qzeros`` int32
  [in/group, out/8] (always stored; symmetric checkpoints hold a constant), and ``g_idx`` int32 [in].

Sharding (vLLM ``ColumnParallelLinear`` / ``RowParallelLinear`` / ``VocabParallelEmbedding``): every linear
is split over the TP ranks; K/V projections are replicated when there are fewer KV heads than ranks
(``QKVParallelLinear``: each rank keeps max(1, kv_heads / tp) heads); the vocabulary is padded to a multiple
of 64 x tp (``DEFAULT_VOCAB_PADDING_SIZE``) and split; norms are replicated. Pipeline stages take
ceil(layers / pp) layers, the first stage the embedding and the last the LM head (the larger is reported).
Experts of a mixture split over the TP (or, with expert parallelism, the EP = TP) ranks either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from estimator.model.spec import Linear, ModelShape

__all__ = ["WeightBytes", "linear_bytes", "weight_bytes_per_gpu"]

VOCAB_PADDING: Final = 64


@dataclass(frozen=True)
class WeightBytes:
    """Bytes on the busiest GPU; ``linear`` (attention + MLP + experts), ``embedding`` (+ LM head),
    ``norms``; ``read_per_step`` is what one decode step of one token reads (its ``experts_per_token`` routed
    experts only). ``routed_expert_bytes`` is all routed experts' bytes on the GPU, ``routed_experts`` /
    ``experts_per_token`` their count and how many a token picks (0 for a dense model)."""

    linear: int
    embedding: int
    norms: int
    total: int
    read_per_step: int
    layers_on_gpu: int
    routed_expert_bytes: int = 0
    routed_experts: int = 0
    experts_per_token: int = 0

    def read_for_batch(self, tokens: int) -> int:
        """Bytes a step of ``tokens`` tokens reads: the dense part once, and of the routed experts the expected
        share that at least one token picks, E x (1 - (1 - k / E)^tokens) under uniform routing (each token
        picks k of E experts; DeepSeek-V3 and Mixtral balance their routers towards uniform load)."""
        if not self.routed_experts:
            return self.read_per_step
        e, k = self.routed_experts, self.experts_per_token
        one = self.routed_expert_bytes * k // e
        touched = 1 - (1 - k / e) ** max(1, tokens)
        return self.read_per_step - one + int(self.routed_expert_bytes * touched)


def linear_bytes(in_f: int, out_f: int, fmt: str, group: int, zero_points: bool) -> int:
    """Bytes of one ``[in_f, out_f]`` matrix in ``fmt`` (module docstring)."""
    n = in_f * out_f
    if fmt in ("bf16", "fp16"):
        return 2 * n
    if fmt == "fp8":
        return n + 8
    if fmt == "int8":
        return n + 4 * out_f
    groups = math.ceil(in_f / group)
    packed = n // 2
    scales = 2 * groups * out_f
    if fmt == "int4-awq":
        return packed + scales + (groups * out_f // 2 if zero_points else 0)
    if fmt == "int4-gptq":
        return packed + scales + groups * out_f // 2 + 4 * in_f
    raise ValueError(f"unknown weights format {fmt!r}")


def _sharded(lin: Linear, tp: int, kv_heads: int, head_dim: int) -> tuple[int, int]:
    """(in, out) of one rank's shard: q/gate/up column-split, o/down row-split, k/v per kept head."""
    if lin.name in ("k_proj", "v_proj"):
        return lin.in_features, max(1, kv_heads // tp) * head_dim
    if lin.name in ("o_proj", "down_proj", "kv_b_proj_rows"):
        return math.ceil(lin.in_features / tp), lin.out_features
    if lin.name in ("q_a_proj", "kv_a_proj_with_mqa"):
        return lin.in_features, lin.out_features  # replicated (vLLM ReplicatedLinear for MLA's down-projections)
    return lin.in_features, math.ceil(lin.out_features / tp)


def _layer_bytes(shape: ModelShape, moe: bool, fmt: str, group: int, zp: bool, tp: int) -> tuple[int, int]:
    """(stored, read per step) bytes of one layer's linears on one rank."""
    kv, hd = shape.kv_heads, shape.head_dim
    stored = read = 0
    for lin in shape.attention_linears():
        i, o = _sharded(lin, tp, kv, hd)
        b = lin.count * linear_bytes(i, o, fmt, group, zp)
        stored += b
        read += b
    if moe:
        a = shape.dims
        ffn = shape.expert_ffn
        per_expert = sum(linear_bytes(*_sharded(lin, tp, kv, hd), fmt, group, zp)
                         for lin in shape.mlp_linears(ffn))
        stored += (a.num_experts + a.num_shared_experts) * per_expert
        read += (min(a.num_experts, a.experts_per_token) + a.num_shared_experts) * per_expert
        router = 2 * a.hidden_size * a.num_experts
        stored += router
        read += router
    else:
        mlp = sum(linear_bytes(*_sharded(lin, tp, kv, hd), fmt, group, zp)
                  for lin in shape.mlp_linears(shape.dims.ffn_hidden_size))
        stored += mlp
        read += mlp
    return stored, read


def weight_bytes_per_gpu(shape: ModelShape, fmt: str, group: int, zero_points: bool, tp: int,
                         pp: int = 1) -> WeightBytes:
    a = shape.dims
    per_stage = math.ceil(a.num_layers / pp)
    dense_layers = shape.dense_layers
    moe_layers = shape.moe_layers
    # the worst stage holds the first dense layers first (DeepSeek's dense layers lead the stack)
    dense_here = min(dense_layers, per_stage) if pp > 1 else dense_layers
    moe_here = per_stage - dense_here if pp > 1 else moe_layers
    d_st, d_rd = _layer_bytes(shape, False, fmt, group, zero_points, tp)
    m_st, m_rd = _layer_bytes(shape, True, fmt, group, zero_points, tp) if moe_layers else (0, 0)
    linear = dense_here * d_st + moe_here * m_st
    read = dense_here * d_rd + moe_here * m_rd
    vocab = math.ceil(a.vocab_size / (VOCAB_PADDING * tp)) * VOCAB_PADDING * tp
    emb_one = 2 * vocab // tp * a.hidden_size
    head = 0 if a.tied_embeddings else emb_one
    embedding = emb_one + head if pp == 1 else max(emb_one, head or emb_one)
    bias = 0
    norms = 2 * (per_stage * shape.norm_params_per_layer() + shape.final_norm_params()) + bias
    mla_norms = 2 * per_stage * ((a.q_lora_rank or 0) + (a.kv_lora_rank or 0)) if shape.is_mla else 0
    total = linear + embedding + norms + mla_norms
    # a decode step reads every layer's weights and the LM head (the embedding is a gather of B rows)
    read_step = read + norms + mla_norms + (head if head else emb_one)
    routed = 0
    if moe_here:
        ffn = shape.expert_ffn
        kv, hd = shape.kv_heads, shape.head_dim
        per_expert = sum(linear_bytes(*_sharded(lin, tp, kv, hd), fmt, group, zero_points)
                         for lin in shape.mlp_linears(ffn))
        routed = moe_here * a.num_experts * per_expert
    return WeightBytes(linear=linear, embedding=embedding, norms=norms + mla_norms, total=total,
                       read_per_step=read_step, layers_on_gpu=per_stage, routed_expert_bytes=routed,
                       routed_experts=a.num_experts if moe_here else 0,
                       experts_per_token=min(a.num_experts, a.experts_per_token) if moe_here else 0)
