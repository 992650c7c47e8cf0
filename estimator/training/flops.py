"""FLOPs of one training step: the GEMMs and attention of each layer on the busiest GPU, and model FLOPs.

Counting (one multiply-add = 2 FLOPs):

- A linear ``[tokens, in] x [in, out]`` costs ``2 T in out`` forward; its backward is the input gradient
  (the same again) plus the weight gradient (the same again) -- the "6 N T" of Kaplan et al. 2020
  (arXiv 2001.08361, Sec. 2.1) and Narayanan et al. 2021 (arXiv 2104.04473, Sec. 5.1). A frozen weight (the
  LoRA/QLoRA base, Hu et al. 2021, arXiv 2106.09685) needs no weight gradient, so its backward is 1x forward.
- Tensor parallelism splits column-parallel projections by output and row-parallel ones (``o_proj``,
  ``down_proj``) by input (Shoeybi et al. 2019, arXiv 1909.08053); context parallelism splits the tokens.
- A mixture of experts routes each token to ``experts_per_token`` experts (Fedus et al. 2021,
  arXiv 2101.03961): with ``ep`` expert-parallel ranks each GPU runs ``E/ep`` experts on
  ``T k ep / E`` tokens each (balanced routing), i.e. the FLOPs of ``k`` dense MLPs.
- Causal self-attention: ``QK^T`` and ``AV`` cost ``2 s^2 (d_qk + d_v)`` per head and sequence, halved by a
  causal mask when flash attention skips the masked blocks (Dao 2023, arXiv 2307.08691); a sliding window
  ``w`` keeps ``s w - w^2 / 2`` pairs. Eager attention computes the full ``s x s`` scores.
- Recomputation (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 5): full = one more forward of every
  decoder layer; selective = core attention again (Megatron), or every second matmul of a layer
  (torchtitan's op-level selective checkpointing, ``_custom_policy`` in ``activation_checkpoint.py``).
- Model FLOPs (for MFU, Chowdhery et al. 2022, arXiv 2204.02311, App. B) are the FLOPs of forward and
  backward without recomputation, attention backward counted as 2x its forward.
"""

from __future__ import annotations

import math
from typing import Final

from estimator.job import Job
from estimator.memo import BoundedMemo
from estimator.model.spec import Linear, ModelShape
from estimator.training.layout import Layout

__all__ = ["Gemm", "LayerWork", "Workload", "grouped_gemm_rows", "lora_fused", "model_flops_per_step", "workload"]

_ROW_PARALLEL: Final = {"o_proj", "down_proj"}
_REPLICATED: Final = {"q_a_proj", "kv_a_proj_with_mqa"}


class Gemm:
    """One forward GEMM ``[m, k] x [k, n]``, ``count`` copies; ``trainable``: its weight gets a gradient.
    ``rows``: the rows the kernel computes when they differ from ``m`` (a grouped GEMM's tile-padded rows per
    group, :func:`grouped_gemm_rows`); the FLOPs stay ``m``'s."""

    m: Final[float]
    k: Final[float]
    n: Final[float]
    count: Final[float]
    trainable: Final[bool]
    fp8: Final[bool]
    rows: Final[float]

    def __init__(self, m: float, k: float, n: float, count: float = 1.0, trainable: bool = True,
                 fp8: bool = False, rows: float = 0.0) -> None:
        self.m = m
        self.k = k
        self.n = n
        self.count = count
        self.trainable = trainable
        self.fp8 = fp8
        self.rows = rows if rows > 0.0 else m

    @property
    def flops(self) -> float:
        return 2.0 * self.m * self.k * self.n * self.count


class LayerWork:
    """One decoder layer, one micro-batch, on one GPU."""

    gemms: Final[tuple[Gemm, ...]]
    attn_flops: Final[float]  # forward attention core (causal-aware)
    attn_seq: Final[float]  # key length that sets flash-attention efficiency
    eager_attention: Final[bool]
    flash_library: Final[bool]  # flash-attn (FlashAttention-2), not SDPA / Transformer Engine's cuDNN kernel
    base_linear_params: Final[float]  # local weights of the layer's linears (casts, dequantisation, FSDP copies)
    ffn_local: Final[float]  # widest MLP intermediate per token (elementwise work)
    qk_local: Final[float]  # q + k widths per token (rotary embedding)
    norms: Final[int]  # norms per layer
    layernorm: Final[bool]  # nn.LayerNorm (one fused kernel) rather than an eager RMSNorm module
    rotary: Final[bool]  # rotary position embedding applied to q and k
    gated: Final[bool]  # gated MLP (SwiGLU/GeGLU)
    lora_elems: Final[float]  # sum of (in + out) over the adapted linears, local (adapter-path elementwise work)
    experts_local: Final[float]  # routed experts on this GPU (0 for a dense layer)
    topk: Final[int]  # experts per token (0 for a dense layer)
    attn_batch_heads: Final[float]  # sequences x local heads: the batch of eager attention's per-head GEMMs
    attn_query_len: Final[float]  # query positions per sequence on this GPU (eager attention's GEMM rows)
    qk_norm: Final[bool]  # an RMSNorm on each query and key head (Qwen3's q_norm / k_norm) over ``qk_local``

    def __init__(self, gemms: tuple[Gemm, ...], attn_flops: float, attn_seq: float, eager_attention: bool,
                 flash_library: bool, base_linear_params: float, ffn_local: float, qk_local: float, norms: int,
                 layernorm: bool, rotary: bool, gated: bool, lora_elems: float, experts_local: float, topk: int,
                 attn_batch_heads: float = 0.0, attn_query_len: float = 0.0, qk_norm: bool = False) -> None:
        self.gemms = gemms
        self.attn_flops = attn_flops
        self.attn_seq = attn_seq
        self.eager_attention = eager_attention
        self.flash_library = flash_library
        self.base_linear_params = base_linear_params
        self.ffn_local = ffn_local
        self.qk_local = qk_local
        self.norms = norms
        self.layernorm = layernorm
        self.rotary = rotary
        self.gated = gated
        self.lora_elems = lora_elems
        self.experts_local = experts_local
        self.topk = topk
        self.attn_batch_heads = attn_batch_heads
        self.attn_query_len = attn_query_len
        self.qk_norm = qk_norm

    @property
    def gemm_flops(self) -> float:
        return sum(g.flops for g in self.gemms)


class Workload:
    """What one micro-batch costs the busiest GPU: layers by kind, the LM head and the embedding."""

    dense: Final[LayerWork | None]
    moe: Final[LayerWork | None]
    dense_layers: Final[int]  # on the busiest pipeline stage
    moe_layers: Final[int]
    head: Final[Gemm]  # LM head on the last stage
    tokens: Final[float]  # tokens per micro-batch on this GPU
    hidden: Final[int]
    vocab_local: Final[float]

    def __init__(self, dense: LayerWork | None, moe: LayerWork | None, dense_layers: int, moe_layers: int, head: Gemm,
                 tokens: float, hidden: int, vocab_local: float) -> None:
        self.dense = dense
        self.moe = moe
        self.dense_layers = dense_layers
        self.moe_layers = moe_layers
        self.head = head
        self.tokens = tokens
        self.hidden = hidden
        self.vocab_local = vocab_local


def _split(lin: Linear, tp: int) -> tuple[float, float]:
    if lin.name in _REPLICATED:
        return lin.in_features, lin.out_features
    if lin.name in _ROW_PARALLEL:
        return lin.in_features / tp, lin.out_features
    return lin.in_features, lin.out_features / tp


# One GEMM of a layer without its rows: (routed, k, n, count, trainable, fp8). Its rows ``m`` are the micro-batch's
# tokens on this GPU, or for a routed expert's GEMM (``routed``) the tokens routed to one expert (:func:`_layer`).
_GemmShape = tuple[bool, float, float, float, bool, bool]


def _linear_shapes(lins: list[Linear], tp: int, frozen: bool, fp8: bool) -> list[_GemmShape]:
    out = []
    for lin in lins:
        k, n = _split(lin, tp)
        out.append((False, k, n, float(lin.count), not frozen, fp8))
    return out


_FUSED_INPUTS: Final = {"q_proj": "linear_qkv", "k_proj": "linear_qkv", "v_proj": "linear_qkv",
                        "gate_proj": "linear_fc1", "up_proj": "linear_fc1"}


def fused_linears(lins: list[Linear]) -> list[Linear]:
    """Megatron-Core's linears: Q, K and V are one column-parallel ``linear_qkv``, the gate and up projections one
    ``linear_fc1`` (``megatron/core/transformer/attention.py``, ``mlp.py``), so a LoRA adapter on them is one
    ``A`` reading the shared input and one ``B`` writing the concatenated output (Megatron-Bridge
    ``peft/lora.py`` adapts ``linear_qkv``, ``linear_proj``, ``linear_fc1``, ``linear_fc2``)."""
    out: list[Linear] = []
    merged: dict[tuple[str, int, int], Linear] = {}
    for lin in lins:
        name = _FUSED_INPUTS.get(lin.name)
        if name is None:
            out.append(lin)
            continue
        key = (name, lin.in_features, lin.count)
        prev = merged.get(key)
        merged[key] = Linear(name, lin.in_features, lin.out_features + (prev.out_features if prev else 0),
                             lin.count, lin.kind)
    return list(merged.values()) + out


def lora_fused(job: Job) -> bool:
    """Whether the LoRA adapters run fused (``training.lora_kernel``; Megatron's always are): one adapter per combined
    QKV / gate-up projection (:func:`fused_linears`) and the adapter path's elementwise work inside its kernels
    (NeMo AutoModel ``PeftConfig(use_triton=True)``: ``components/_peft/lora_kernel.py`` fuses ``x A``, ``B``,
    the scale and the add into the base output, forward and backward; its Llama / Qwen2 models combine
    ``qkv_proj`` and ``gate_up_proj``, ``components/models/common/combined_projection.py``)."""
    rv = job
    if rv.parallelism.framework == "megatron":
        return True
    return rv.training.lora_kernel == "fused"


def _lora_shapes(lins: list[Linear], tp: int, rank: int) -> list[_GemmShape]:
    """Adapter ``B(A x)``: ``[T, in] x [in, r]`` then ``[T, r] x [r, out]`` (PEFT ``lora.Linear``; Megatron's fused
    linears get one adapter each, :func:`fused_linears`)."""
    out: list[_GemmShape] = []
    for lin in lins:
        k, n = _split(lin, tp)
        out += [(False, k, rank, float(lin.count), True, False), (False, rank, n, float(lin.count), True, False)]
    return out


def attention_flops(shape: ModelShape, job: Job, layout: Layout) -> tuple[float, float]:
    """Forward attention-core FLOPs of one layer and micro-batch on one GPU, and the effective key length."""
    a, t = shape.dims, job.training
    s = float(t.seq_len)
    if shape.is_mla:
        d_qk = float((a.qk_nope_head_dim or 128) + (a.qk_rope_head_dim or 64))
        d_v = float(a.v_head_dim or 128)
    else:
        d_qk = d_v = float(shape.head_dim)
    doc = min(s, float(t.packed_document_tokens or s))
    if t.attention == "eager":
        pairs = s * s
    else:
        # packed sequences (``training.packed_document_tokens``): variable-length attention (FlashAttention
        # ``cu_seqlens``, Transformer Engine THD) attends within each of the s / d documents only
        w = min(doc, float(a.sliding_window or s))
        pairs = s / doc * (doc * w - w * w / 2.0)
    heads = a.num_attention_heads / layout.tp
    flops = 2.0 * t.micro_batch_size * heads * pairs * (d_qk + d_v) / layout.cp
    if t.attention == "eager":
        return flops, s
    # context parallelism runs attention as 2 cp blocks of s / (2 cp) queries against s / cp keys per ring step
    # (load-balanced causal ring, Megatron-Core / Transformer Engine ``attn_forward_func_with_cp``): the kernel's
    # efficiency is that of the block length, not of the whole sequence
    return flops, min(min(doc, float(a.sliding_window or s)), s / layout.cp)  # two-argument min()s compile


def _adapted(shape: ModelShape, targets: str, moe: bool) -> list[Linear]:
    attn = shape.attention_linears()
    if targets == "qkv":
        return [lin for lin in attn if lin.name != "o_proj"]
    if targets == "attention":
        return attn
    if moe:
        shared = shape.mlp_linears(shape.expert_ffn, shape.dims.num_shared_experts)
        return attn + [s for s in shared if s.count]
    return attn + shape.mlp_linears(shape.dims.ffn_hidden_size)


def _mlp_shapes(shape: ModelShape, layout: Layout, moe: bool, frozen: bool, fp8: bool) -> list[_GemmShape]:
    a, tp = shape.dims, layout.tp
    if not moe:
        return _linear_shapes(shape.mlp_linears(a.ffn_hidden_size), tp, frozen, fp8)
    routed = [(True, k, n, a.num_experts / layout.ep, trainable, f8)
              for _, k, n, _, trainable, f8 in _linear_shapes(shape.mlp_linears(shape.expert_ffn), tp, frozen, fp8)]
    shared = _linear_shapes([s for s in shape.mlp_linears(shape.expert_ffn, a.num_shared_experts) if s.count],
                            tp, frozen, fp8)
    router = (False, a.hidden_size, a.num_experts, 1.0, not frozen, False)
    return [*routed, *shared, router]


class _LayerParts:
    """What :func:`_layer` builds that does not depend on the micro-batch or the sequence length: the GEMMs without
    their rows and the layer's sizes (the fields of :class:`LayerWork` of the same names)."""

    gemms: Final[tuple[_GemmShape, ...]]
    base_linear_params: Final[float]
    ffn_local: Final[float]
    qk_local: Final[float]
    lora_elems: Final[float]
    experts_local: Final[float]
    flash_library: Final[bool]

    def __init__(self, gemms: tuple[_GemmShape, ...], base_linear_params: float, ffn_local: float, qk_local: float,
                 lora_elems: float, experts_local: float, flash_library: bool) -> None:
        self.gemms = gemms
        self.base_linear_params = base_linear_params
        self.ffn_local = ffn_local
        self.qk_local = qk_local
        self.lora_elems = lora_elems
        self.experts_local = experts_local
        self.flash_library = flash_library


def _layer_parts(job: Job, shape: ModelShape, layout: Layout, moe: bool) -> _LayerParts:
    rv = job
    t, a = rv.training, shape.dims
    frozen, fp8 = t.method != "full", t.precision == "fp8-mixed"
    gemms = _linear_shapes(shape.attention_linears(), layout.tp, frozen, fp8)
    gemms += _mlp_shapes(shape, layout, moe, frozen, fp8)
    if frozen:
        adapted = _adapted(shape, t.lora_targets, moe)
        if lora_fused(job) or a.fused_projections:
            adapted = fused_linears(adapted)
        gemms += _lora_shapes(adapted, layout.tp, t.lora_rank)
    base = sum(k * n * count for _, k, n, count, trainable, _ in gemms if not (frozen and trainable))
    ffn = float(shape.expert_ffn * a.experts_per_token if moe else a.ffn_hidden_size) / layout.tp
    qk = (a.num_attention_heads + shape.kv_heads) * shape.head_dim / layout.tp
    lora = 0.0
    if frozen:
        lora = sum((k + n) * lin.count for lin in _adapted(shape, t.lora_targets, moe)
                   for k, n in [_split(lin, layout.tp)])
    experts = a.num_experts / layout.ep if moe else 0.0
    fa2 = t.attention == "flash" and rv.parallelism.framework != "megatron"
    return _LayerParts(tuple(gemms), base, ffn, qk, lora, experts, fa2)


_PARTS: Final[BoundedMemo[tuple[object, ...], _LayerParts]] = BoundedMemo(4096)


def _memo_layer_parts(job: Job, shape: ModelShape, layout: Layout, moe: bool) -> _LayerParts:
    """:func:`_layer_parts`, memoised on what it reads: not the micro-batch or the sequence length, and of the
    layout only the tensor and expert degrees (the planner's node counts and strategies share one answer)."""
    t = job.training
    key = (shape, layout.tp, layout.ep, moe, t.method, t.precision, t.lora_targets, t.lora_rank, t.lora_kernel,
           t.attention, job.parallelism.framework)
    found = _PARTS.get(key)
    if found is None:
        found = _PARTS.remember(key, _layer_parts(job, shape, layout, moe))
    return found


def grouped_gemm_rows(tokens: float, share: float, n: float) -> float:
    """Expected rows one expert's GEMM computes in ``torch._grouped_mm`` (what transformers >= 5's default
    ``grouped_mm`` experts and torchtitan run): its CUTLASS kernel (PyTorch ``aten/src/ATen/native/cuda/GroupMM.cu``,
    ``dispatch_bf16_grouped_kernel_on_tile_size``) tiles each group's rows by 128 (by 64 when the average rows per
    group or ``n`` is at most 128, the "small" tile on SM90), and a group's last, partial tile costs a whole one.
    Each of ``tokens`` tokens picks a given expert with probability ``share`` (``experts_per_token / num_experts``,
    balanced routing), so its rows are binomial (normal approximation, mean ``tokens share``, variance
    ``tokens share (1 - share)``): ``E[ceil(X / tile)] tile = tile sum_j P(X > j tile)``."""
    mean = tokens * share
    if mean <= 0.0:
        return 0.0
    tile = 64.0 if (mean <= 128.0 or n <= 128.0) else 128.0
    sd = math.sqrt(max(tokens * share * (1.0 - share), 0.0))
    if sd <= 0.0:
        return math.ceil(mean / tile) * tile
    # P(X > j tile) is 1 to double precision below mean - 9 sd and 0 above mean + 9 sd: count the first terms
    # and sum the ~18 sd / tile in between
    certain = max(math.floor((mean - 9.0 * sd - 0.5) / tile) + 1, 0)
    total = float(certain)
    j = certain
    scale = sd * math.sqrt(2.0)
    while True:
        edge = j * tile + 0.5  # X > j tile for integer X
        if edge > mean + 9.0 * sd:
            break
        total += 0.5 * math.erfc((edge - mean) / scale)
        j += 1
    return total * tile


def _layer(job: Job, shape: ModelShape, layout: Layout, moe: bool) -> LayerWork:
    t, a = job.training, shape.dims
    m = float(t.micro_batch_size * t.seq_len) / layout.cp
    per_expert = m * a.experts_per_token * layout.ep / a.num_experts if moe else m
    parts = _memo_layer_parts(job, shape, layout, moe)
    # eager frameworks run the routed experts as one torch grouped GEMM (tile-padded rows per expert); Megatron's
    # Transformer Engine grouped linears keep the balanced rows
    grouped = moe and job.parallelism.framework != "megatron"
    share = float(a.experts_per_token) / a.num_experts if moe else 1.0
    gemms = tuple([Gemm(per_expert if routed else m, k, n, count, trainable, fp8,
                        grouped_gemm_rows(m * layout.ep, share, n) if routed and grouped else 0.0)
                   for routed, k, n, count, trainable, fp8 in parts.gemms])
    attn, seq = attention_flops(shape, job, layout)
    return LayerWork(gemms, attn, seq, t.attention == "eager", parts.flash_library, parts.base_linear_params,
                     parts.ffn_local, parts.qk_local, a.norms_per_layer, a.norm == "layernorm",
                     a.learned_position_embeddings == 0, a.gated_mlp, parts.lora_elems, parts.experts_local,
                     a.experts_per_token if moe else 0,
                     attn_batch_heads=float(t.micro_batch_size) * a.num_attention_heads / layout.tp,
                     attn_query_len=float(t.seq_len) / layout.cp, qk_norm=a.qk_norm)


def _stage_layers(shape: ModelShape, layout: Layout, stage: str) -> tuple[int, int]:
    per_stage = layout.layers_on(stage)
    moe = round(per_stage * shape.moe_layers / shape.dims.num_layers)
    return per_stage - moe, moe


def workload(job: Job, shape: ModelShape, layout: Layout, stage: str = "last") -> Workload:
    """Per-micro-batch work of one pipeline stage's GPU: by default the last stage, which holds the LM head
    (all of the model without pipeline parallelism). ``first`` and ``middle`` stages carry no LM head
    (``head`` and ``vocab_local`` are zero); :meth:`Layout.layers_on` gives each stage's decoder layers."""
    t, a = job.training, shape.dims
    dense_n, moe_n = _stage_layers(shape, layout, stage)
    tokens = float(t.micro_batch_size * t.seq_len) / layout.cp
    has_head = stage in ("last", "only") or layout.pp == 1
    head = Gemm(tokens if has_head else 0.0, a.hidden_size, a.vocab_size / layout.tp, 1.0, t.method == "full",
                False)
    return Workload(dense=_layer(job, shape, layout, False) if shape.dense_layers else None,
                    moe=_layer(job, shape, layout, True) if shape.moe_layers else None,
                    dense_layers=dense_n, moe_layers=moe_n, head=head, tokens=tokens,
                    hidden=a.hidden_size, vocab_local=a.vocab_size / layout.tp if has_head else 0.0)


def _layer_model_flops(work: LayerWork) -> float:
    """Forward + backward FLOPs of one layer without recomputation."""
    bwd = sum(g.flops * (2.0 if g.trainable else 1.0) for g in work.gemms)
    return work.gemm_flops + bwd + 3.0 * work.attn_flops


def model_flops_per_step(job: Job, shape: ModelShape, layout: Layout, work: Workload) -> float:
    """Model FLOPs of one optimizer step over all GPUs (no recomputation): every layer, the LM head."""
    t = job.training
    per_mb = 0.0
    if work.dense is not None:
        per_mb += _layer_model_flops(work.dense) * shape.dense_layers
    if work.moe is not None:
        per_mb += _layer_model_flops(work.moe) * shape.moe_layers
    head_passes = 3.0 if work.head.trainable else 2.0
    per_mb += work.head.flops * head_passes
    # per_mb is one GPU's share of one micro-batch across its tp x cp group.
    replicas = layout.dp * t.gradient_accumulation_steps * layout.tp * layout.cp
    return per_mb * replicas
