"""Step time of one training layout: compute, communication and its overlap, pipeline bubble, optimizer, offload.

One optimizer step on the busiest GPU (the last pipeline stage, which also holds the LM head):

``step = m (F + B + R) + bubble + exposed communication + optimizer + offload``

- ``F``, ``B``, ``R``: forward, backward and recomputation of one micro-batch (``m`` =
  ``gradient_accumulation_steps`` micro-batches per step), each layer pass priced by
  :mod:`estimator.training.efficiency` (GEMM roofline, flash attention, memory-bound kernels, kernel launches).
- Pipeline bubble ``(p - 1) / v`` micro-batch times, i.e. the fraction ``(p - 1) / (m v)`` of the ideal step
  (Narayanan et al. 2021, arXiv 2104.04473, Sec. 2.2): ``v`` = ``virtual_stages`` under interleaved 1F1B only;
  1F1B and GPipe have ``v = 1`` (GPipe's bubble is the same ``(p - 1) / m``, Huang et al. 2019).
- Tensor-parallel all-reduces (or all-gather + reduce-scatter with sequence parallelism), 2 per layer forward
  and 2 backward (Korthikanti et al. 2022, arXiv 2205.05198, Sec. 4.2.2), are on the critical path; so are
  expert-parallel all-to-alls (dispatch + combine, forward and backward) and pipeline send/recv.
- Context parallelism (ring attention, Liu et al. 2023, arXiv 2310.01889): ``cp - 1`` key/value block
  exchanges per layer forward (twice that backward) overlap the attention blocks they feed; all of it counts
  in ``communication_s``, the part the attention does not cover in ``exposed_communication_s`` (as for FSDP).
  Full recomputation repeats the forward's exchanges, and the expert-parallel all-to-alls, in backward.
- Data parallelism: DDP's bucketed all-reduce overlaps the last micro-batch's backward (Li et al. 2020,
  arXiv 2006.15704); ZeRO-1/2 reduce-scatter gradients and all-gather parameters (Rajbhandari et al. 2020);
  FSDP/ZeRO-3 all-gathers parameters before each layer's forward and backward and reduce-scatters gradients,
  prefetching one layer ahead (Zhao et al. 2023, arXiv 2304.11277): the exposed part is what exceeds the
  compute it overlaps plus the first gather / last reduce that nothing hides. HSDP adds an all-reduce across
  replicas. Hidden communication still costs ``comm_overlap_penalty`` of its time in slower compute (its
  kernels take SMs: Calculon's ``processor_usage``).
- Optimizer: memory-bound (measured AdamW bytes per parameter on the H200, :mod:`estimator.training.efficiency`).
- Fine-tuning stacks' mechanisms (issue 29, :mod:`estimator.training.mechanisms`, docs/stacks.md): Liger's RMSNorm,
  SwiGLU and RoPE move fewer elementwise bytes; the fused loss is priced as Liger's fused linear cross-entropy (with
  Liger's kernels) or Cut Cross-Entropy; activation offloading's copies enter the step but for the share of the
  compute that hides them; bitsandbytes' paged 32-bit AdamW runs its per-tensor loop.
- CPU offload: gradients down and parameters up over PCIe, and the CPU optimizer (DeepSpeed's CPU-Adam is
  5-7x ``torch.optim`` on the CPU, deepspeed.ai ZeRO-Offload tutorial) on the host's memory bandwidth.
"""

from __future__ import annotations

from typing import Final

from estimator.construct import trusted
from estimator.job import Job
from estimator.memo import BoundedMemo, ObjectMemo
from estimator.messages import Num, Text
from estimator.model.spec import ModelShape
from estimator.response import TimeResult
from estimator.rules.stacks import liger_patches
from estimator.training.accuracy import job_time_mechanism_bar_pct, time_error_bar_pct, time_kind_measured
from estimator.training.activations import offload_loss_pinned_bytes, pinned_offload_bytes
from estimator.training.comm import Fabric, collective_time, fabric_for, place_group
from estimator.training.efficiency import H200_FIT, Constants, GpuSpec, Rates, rates_for
from estimator.training.flops import Gemm, LayerWork, Workload, lora_fused, model_flops_per_step, workload
from estimator.training.layout import Layout
from estimator.training.mechanisms import (
    LIGER_NORM_RATIO,
    LIGER_ROPE_RATIO,
    LIGER_SWIGLU_RATIO,
    NS_STEPS,
    PINNED_BYTES_PER_S,
    cce_head_bytes,
    liger_flce_head_bytes,
    muon_dtensor_ops,
    muon_local_gemms,
    offload_transfer_seconds,
)
from estimator.training.optimizers import optimizer_spec
from estimator.training.params import ParamPlacement, place_params
from estimator.training.params import adapted_linears as _adapted_linears
from hardware_catalog import Catalog, Gpu, Server

__all__ = ["HOST_BOUND_SHARE", "StepTime", "Style", "host_issue_ratio", "step_time", "step_time_model", "style_for",
           "time_assumptions", "virtual_stages", "without_collectives_s"]

# Host side of CPU offload: effective memory bandwidth of a 2-socket DDR5 server for CPU-Adam (assumption:
# ~half of 2 x 8 channels x DDR5-4800 = 614 GB/s theoretical), bytes moved per parameter (fp32 p, g, m, v
# read; p, m, v written; bf16 copy), and torch.optim on the CPU being ~6x slower (DeepSpeed: CPU-Adam 5-7x).
HOST_MEM_BYTES_PER_S: Final = 300e9
CPU_ADAM_BYTES_PER_PARAM: Final = 30.0
TORCH_CPU_ADAM_SLOWDOWN: Final = 6.0
PCIE_EFF: Final = 0.80
COMM_OVERLAP_PENALTY: Final = 0.10
DDP_BUCKET_BYTES: Final = 25 * 1024**2
# a forward the host takes at least this share of its GPU time to issue is launch-bound (``Pass.host_bound``)
HOST_BOUND_SHARE: Final = 1.0


class Style:
    """How the framework runs the layer: kernel fusion, autocast casts, gradient dtypes."""

    fused: Final[bool]  # Megatron / Transformer Engine kernels instead of eager PyTorch modules
    autocast: Final[bool]  # fp32 weights cast to bf16 at every forward (torch.autocast without FSDP)
    grad_bytes: Final[float]  # dtype of the gradients that are reduced
    param_bytes: Final[float]  # dtype of all-gathered parameters
    master_copy: Final[bool]  # optimizer keeps an fp32 master and writes a bf16 copy (DeepSpeed, Megatron)
    fused_lora: Final[bool]  # LoRA adapter path in fused kernels (:func:`estimator.training.flops.lora_fused`)

    def __init__(self, fused: bool, autocast: bool, grad_bytes: float, param_bytes: float, master_copy: bool,
                 fused_lora: bool = False) -> None:
        self.fused = fused
        self.autocast = autocast
        self.grad_bytes = grad_bytes
        self.param_bytes = param_bytes
        self.master_copy = master_copy
        self.fused_lora = fused_lora


def style_for(job: Job, layout: Layout) -> Style:
    rv = job
    t, p = rv.training, rv.parallelism
    fp32 = t.precision == "fp32"
    autocast = (p.framework == "pytorch" and t.precision in ("bf16-mixed", "fp8-mixed")
                and layout.sharding in ("none", "zero1") and t.method == "full")
    if fp32:
        grad = 4.0
    elif p.framework == "deepspeed" or t.precision == "bf16-true":
        grad = 2.0
    else:
        grad = 4.0
    master = p.framework in ("deepspeed", "megatron") and not fp32
    return Style(fused=p.framework == "megatron", autocast=autocast, grad_bytes=grad,
                 param_bytes=4.0 if fp32 else 2.0, master_copy=master, fused_lora=lora_fused(job))


class Pass:
    """Seconds of one micro-batch on the busiest GPU."""

    fwd: Final[float]
    bwd: Final[float]
    recompute: Final[float]
    layer_fwd: Final[float]  # one layer's forward (the FSDP gather nothing hides)
    attn_fwd: Final[float]  # all layers' attention forward (what context-parallel exchanges overlap)
    hw_flops: Final[float]
    gemm_fwd: Final[float]  # all layers' GEMM seconds forward (what overlapped TP collectives hide behind)
    gemm_bwd: Final[float]
    # the forward's CPU issue time with LoRA adapters at their measured peft cost, and its GPU time (unstretched):
    # what :attr:`host_bound` compares (the error-bar class only; the step time does not use them)
    host_fwd: Final[float]
    gpu_fwd: Final[float]

    def __init__(self, fwd: float, bwd: float, recompute: float, layer_fwd: float, attn_fwd: float,
                 hw_flops: float, gemm_fwd: float = 0.0, gemm_bwd: float = 0.0, host_fwd: float = 0.0,
                 gpu_fwd: float = 0.0) -> None:
        self.fwd = fwd
        self.bwd = bwd
        self.recompute = recompute
        self.layer_fwd = layer_fwd
        self.attn_fwd = attn_fwd
        self.hw_flops = hw_flops
        self.gemm_fwd = gemm_fwd
        self.gemm_bwd = gemm_bwd
        self.host_fwd = host_fwd
        self.gpu_fwd = gpu_fwd

    @property
    def total(self) -> float:
        return self.fwd + self.bwd + self.recompute

    @property
    def host_bound(self) -> bool:
        """Whether the host, not the GPU, paces the forward: issuing it from Python (the eager layer's
        ``cpu_layer_fwd_s``, each LoRA adapter at peft's measured ``peft_adapter_fwd_s``, QLoRA's 4-bit path)
        takes at least ``HOST_BOUND_SHARE`` of the GPU time it issues. The measured steps split there
        (``phases_median`` of ``tests/data/families_h200_raw``: the launch-bound ones return from forward after
        0.90-1.00 of its GPU time, every other one after 0.50 or less; ``docs/accuracy-time.md``)."""
        return self.gpu_fwd > 0.0 and self.host_fwd >= HOST_BOUND_SHARE * self.gpu_fwd


# ----------------------------------------------------------------------------------------------- compute
def _gemm_times(gemms: tuple[Gemm, ...], r: Rates) -> tuple[float, float]:
    fwd = bwd = 0.0
    for g in gemms:
        fwd += g.count * r.gemm_time(g.rows, g.k, g.n, g.fp8)
        dgrad = r.gemm_time(g.rows, g.n, g.k, g.fp8)
        # a grouped GEMM's weight gradient reduces over each group's rows (no output tile to pad)
        wgrad = r.gemm_time(g.k, g.m, g.n, g.fp8) if g.trainable else 0.0
        bwd += g.count * (dgrad + wgrad)
    return fwd, bwd


def _eager_attention_times(w: LayerWork, r: Rates, head_dim: int, fused: bool,
                           softcap: bool = False) -> tuple[float, float]:
    """Eager attention (Hugging Face ``eager_attention_forward``): per sequence and head the GEMMs ``Q K^T``
    ``[s, d] x [d, s]`` and ``P V`` ``[s, s] x [s, d]`` through the GEMM roofline (backward: the input and weight
    gradient of each), plus the memory-bound kernels on the ``s x s`` scores, copy-equivalent bytes per score
    (``efficiency.Constants.eager_fwd_bytes`` / ``eager_bwd_bytes``: the scaling, the mask add, the fp32 softmax,
    the bf16 cast; backward: the cast back, PyTorch's softmax backward with its ``grad * output`` temporary,
    the mask add's and the scaling's gradients), scaled by the fitted ``eager_bytes_scale``. Megatron's fused
    scale-mask-softmax and dropout (Korthikanti et al. 2022, Table 2: 2-byte probabilities, a 1-byte dropout mask,
    the 2-byte dropout output) move ``eager_fused_fwd_bytes`` / ``eager_fused_bwd_bytes`` per score instead."""
    k, bh, sq = r.k, max(w.attn_batch_heads, 1e-9), max(w.attn_query_len, 1e-9)
    sk = w.attn_flops / (2.0 * bh * sq * 2.0 * head_dim)
    d = float(head_dim)
    scores = bh * sq * sk
    fwd = bh * (r.gemm_time(sq, d, sk) + r.gemm_time(sq, sk, d))
    bwd = bh * (r.gemm_time(sq, sk, d) + r.gemm_time(sk, sq, d) + r.gemm_time(sq, d, sk) + r.gemm_time(sk, sq, d))
    if fused:
        return (fwd + r.mem_time(k.eager_fused_fwd_bytes * scores), bwd + r.mem_time(k.eager_fused_bwd_bytes * scores))
    # Gemma 2's attention soft-capping (``transformers`` ``gemma2`` ``eager_attention_forward``: ``w / cap``,
    # ``tanh``, ``* cap`` on the bf16 scores before the mask): three more kernels on every score
    fwd_bytes = k.eager_fwd_bytes + (k.softcap_fwd_bytes if softcap else 0.0)
    bwd_bytes = k.eager_bwd_bytes + (k.softcap_bwd_bytes if softcap else 0.0)
    fwd += r.mem_time(fwd_bytes * k.eager_bytes_scale * scores)
    bwd += r.mem_time(bwd_bytes * k.eager_bytes_scale * scores)
    return fwd, bwd


def _attention_times(w: LayerWork, r: Rates, head_dim: int, fused: bool = False,
                     softcap: bool = False) -> tuple[float, float]:
    """Flash attention at its measured efficiency; eager attention by :func:`_eager_attention_times`."""
    if w.eager_attention:
        return _eager_attention_times(w, r, head_dim, fused, softcap)
    fa2 = w.flash_library
    return (r.attn_fwd_time(w.attn_flops, w.attn_seq, head_dim, fa2),
            r.attn_bwd_time(w.attn_flops, w.attn_seq, head_dim, fa2))


def _elementwise_bytes(w: LayerWork, work: Workload, style: Style, k: Constants, layout: Layout,
                       liger: bool = False) -> float:
    """Forward bytes of one layer's non-GEMM kernels: norms, residual adds, rotary embedding, activation,
    the LoRA adapter path and MoE token dispatch (constants in :mod:`estimator.training.efficiency`). ``liger``
    (issue 29, ``training.fused_kernels: liger`` on a model Liger patches): its RMSNorm, SwiGLU and RoPE kernels
    move the counted share of the eager chains' bytes (:data:`estimator.training.mechanisms.LIGER_NORM_RATIO` and
    the others); the residual adds, the adapters and the dispatch stay eager."""
    act = k.act_bytes_gated if w.gated else k.act_bytes_plain
    norm = k.layernorm_bytes if w.layernorm else k.norm_bytes
    rope = k.rope_bytes
    if liger:
        act *= LIGER_SWIGLU_RATIO if w.gated else 1.0
        norm *= 1.0 if w.layernorm else LIGER_NORM_RATIO
        rope *= LIGER_ROPE_RATIO
    # sequence parallelism runs the norms and the residual adds (and dropout) on s / tp tokens (Korthikanti et al.
    # 2022, arXiv 2205.05198, Sec. 4.2.2; torchtitan's ``SequenceParallel`` norms)
    seq_share = 1.0 / layout.tp if layout.sequence_parallel else 1.0
    per_token = (w.norms * norm + k.resid_bytes) * work.hidden * seq_share + act * w.ffn_local
    per_token += rope * w.qk_local if w.rotary else 0.0
    # Qwen3-style q_norm / k_norm: the same eager RMSNorm on every query and key head (transformers
    # ``Qwen3RMSNorm`` over head_dim), i.e. ``norm_bytes`` per q and k element
    per_token += norm * w.qk_local if w.qk_norm else 0.0
    per_token *= k.elem_scale * (k.fused_ratio if style.fused else 1.0)
    if style.autocast:
        per_token *= 1.0 + k.autocast_extra
    # fused LoRA adapters (Megatron-Bridge / NeMo inside the TE layer, AutoModel's triton kernels) move
    # ``lora_fused_ratio`` of the eager PEFT bytes
    per_token += k.lora_bytes * w.lora_elems * (k.lora_fused_ratio if style.fused_lora else 1.0)
    if w.topk and not style.fused:
        # transformers' ``grouped_mm`` experts (``_cpu_moe_fwd``): the dispatch and combine copies per routed token
        # and hidden element, and the masks on the gate-up output per routed intermediate element
        per_token += k.moe_grouped_dispatch_bytes * work.hidden * w.topk + k.moe_grouped_mask_bytes * w.ffn_local
    else:
        per_token += k.moe_dispatch_bytes * work.hidden * w.topk
    return per_token * work.tokens


def _fp8_cast_bytes(gemms: tuple[Gemm, ...], k: Constants) -> tuple[float, float]:
    fwd = sum(g.count * (g.m * g.k + g.k * g.n) for g in gemms if g.fp8) * k.fp8_cast_bytes
    bwd = sum(g.count * (g.m * g.n + g.m * g.k + g.k * g.n) for g in gemms if g.fp8) * k.fp8_cast_bytes
    return fwd, bwd


def _te_fp8_cast_bytes(w: LayerWork, shape: ModelShape, layout: Layout, job: Job,
                       k: Constants) -> tuple[float, float]:
    """Transformer Engine's fp8 casts of one layer per micro-batch (:attr:`Constants.te_cast_bytes`): the
    attention output and the MLP activation cast-transposed in forward (the norm-fed QKV and FC1 inputs come out
    of the fused norm in fp8), every GEMM's output gradient in backward, the weights once per step."""
    fp8 = [g for g in w.gemms if g.fp8]
    if not fp8:
        return 0.0, 0.0
    tokens = fp8[0].m
    attn_out = shape.dims.num_attention_heads * shape.head_dim / layout.tp
    fwd = k.te_cast_bytes * tokens * (attn_out + w.ffn_local)
    fwd += k.te_cast_bytes * sum(g.count * g.k * g.n for g in fp8) / job.training.gradient_accumulation_steps
    bwd = k.te_cast_bytes * sum(g.count * g.m * g.n for g in fp8)
    return fwd, bwd


def _weight_bytes(w: LayerWork, job: Job, layout: Layout, style: Style,
                  k: Constants) -> tuple[float, float]:
    """Per-pass bytes on the weights: autocast casts (fp32 -> bf16: 6 B) and gradient casts / accumulation,
    QLoRA NF4 dequantisation (0.5 B read + 2 B written per weight, forward and backward), FSDP2's
    all-gather copy-out (2 + 2 B, forward and backward; forward only for shard-grad-op, which keeps the
    gathered parameters until backward) and gradient copy-in (bf16 -> fp32 cast and chunk: 6 + 8 + 4 B),
    scaled by ``fsdp_scale``."""
    rv = job
    t = rv.training
    m = t.gradient_accumulation_steps
    fwd = bwd = 0.0
    if t.method == "qlora":
        fwd, bwd = 2.5 * w.base_linear_params, 2.5 * w.base_linear_params
    elif t.method == "full":
        accumulate = (m - 1) / m
        if style.autocast:
            fwd, bwd = 6.0 * w.base_linear_params, (6.0 + 12.0 * accumulate) * w.base_linear_params
        elif not style.fused and layout.sharding in ("none", "zero1"):
            bwd = 6.0 * accumulate * w.base_linear_params
    if layout.sharding in ("zero2", "zero3", "hsdp") and rv.parallelism.framework == "pytorch":
        trainable = w.base_linear_params if t.method == "full" else 0.0
        # FSDP2 shard-grad-op (PyTorch "zero2", reshard_after_forward=False) gathers once, in forward
        regather = 0.0 if layout.sharding == "zero2" else 4.0 * w.base_linear_params
        fwd += k.fsdp_scale * 4.0 * w.base_linear_params
        bwd += k.fsdp_scale * (regather + 18.0 * trainable)
    return fwd, bwd


def _cpu_fwd(w: LayerWork, job: Job, style: Style, k: Constants) -> float:
    """CPU seconds to issue one layer's forward: the eager layer, each LoRA adapter (5 ops), each expert."""
    if style.fused:
        return k.cpu_fused_layer_fwd_s
    adapters = sum(1 for g in w.gemms if g.trainable) / 2.0 if job.training.method != "full" else 0.0
    return k.cpu_layer_fwd_s + 5.0 * k.launch_s * adapters + _cpu_moe_fwd(w, k)


def _cpu_moe_fwd(w: LayerWork, k: Constants) -> float:
    """CPU seconds to issue one eager mixture-of-experts block's forward beyond a dense MLP's (0 for a dense layer).

    transformers >= 5 runs the routed experts of its MoE models (``@use_experts_implementation``: Mixtral,
    Qwen2/3-MoE, ...) through ``grouped_mm`` by default (transformers 5.17.0 ``modeling_utils.py``
    ``get_correct_experts_implementation``: ``"grouped_mm" if requested_experts is None``;
    ``integrations/moe.py`` ``grouped_mm_experts_forward``): no Python loop over the experts and, on SM90 in bf16,
    ``torch._grouped_mm``'s CUTLASS kernel with "no d2h sync" (PyTorch ``GroupedBlas.cpp`` ``_grouped_mm_cuda``),
    so the host never waits on the GPU there: the block's issue time (the router's linear, softmax, top-k and
    renormalisation, the sort by expert, the gathers, ``histc`` / ``cumsum`` offsets, the masks, the two grouped
    GEMMs, the gate, the routing-weight product, the inverse permutation and the top-k sum; its backward
    ``cpu_bwd_ratio`` of it, like the layer's) counts against the CPU budget of the step, independent of the
    number of experts (:attr:`Constants.cpu_moe_block_fwd_s`)."""
    return k.cpu_moe_block_fwd_s if w.experts_local else 0.0


def _host_fwd(w: LayerWork, job: Job, style: Style, k: Constants) -> float:
    """CPU seconds to issue one layer's forward with each LoRA adapter at peft's measured Python cost
    (:attr:`Constants.peft_adapter_fwd_s`) instead of the priced ``5 x launch_s``: for :attr:`Pass.host_bound`."""
    if style.fused or job.training.method == "full":
        return _cpu_fwd(w, job, style, k) + _cpu_qlora_fwd(w, job, k)
    adapters = sum(1 for g in w.gemms if g.trainable) / 2.0
    return k.cpu_layer_fwd_s + k.peft_adapter_fwd_s * adapters + _cpu_qlora_fwd(w, job, k) + _cpu_moe_fwd(w, k)


def _cpu_qlora_fwd(w: LayerWork, job: Job, k: Constants) -> float:
    """CPU seconds of the 4-bit linears' Python path in one layer's forward (:attr:`Constants.cpu_qlora_linear_s`
    per adapted linear; their backward, bitsandbytes' ``MatMul4Bit.backward``, is a short function: not counted)."""
    if job.training.method != "qlora":
        return 0.0
    return sum(1 for g in w.gemms if g.trainable) / 2.0 * k.cpu_qlora_linear_s


class _LayerTimes:
    fwd: Final[float]
    bwd: Final[float]
    recompute: Final[float]
    cpu: Final[float]  # CPU seconds for forward + backward + recomputation
    attn_fwd: Final[float]
    hw_flops: Final[float]
    gemm_fwd: Final[float]
    gemm_bwd: Final[float]
    host_fwd: Final[float]

    def __init__(self, fwd: float, bwd: float, recompute: float, cpu: float, attn_fwd: float,
                 hw_flops: float, gemm_fwd: float = 0.0, gemm_bwd: float = 0.0, host_fwd: float = 0.0) -> None:
        self.fwd = fwd
        self.bwd = bwd
        self.recompute = recompute
        self.cpu = cpu
        self.attn_fwd = attn_fwd
        self.hw_flops = hw_flops
        self.gemm_fwd = gemm_fwd
        self.gemm_bwd = gemm_bwd
        self.host_fwd = host_fwd


def _layer_times(w: LayerWork, job: Job, layout: Layout, shape: ModelShape, work: Workload,
                 r: Rates, style: Style) -> _LayerTimes:
    k = r.k
    g_fwd, g_bwd = _gemm_times(w.gemms, r)
    a_fwd, a_bwd = _attention_times(w, r, shape.head_dim, style.fused, bool(shape.dims.attn_logit_softcapping))
    liger = job.training.fused_kernels == "liger" and not style.fused and liger_patches(shape.dims)
    e_fwd = _elementwise_bytes(w, work, style, k, layout, liger)
    c_fwd, c_bwd = (_te_fp8_cast_bytes(w, shape, layout, job, k) if style.fused else _fp8_cast_bytes(w.gemms, k))
    wt_fwd, wt_bwd = _weight_bytes(w, job, layout, style, k)
    # the elementwise chain on activation-sized tensors (partly L2-served: ``Rates.elem_time``); the weights' and
    # the fp8 casts' bytes stream through HBM
    # (eager kernels only: fused ones -- Megatron, Transformer Engine -- keep those intermediates in registers and
    # shared memory already, ``fused_ratio``, and what they move is the compulsory HBM traffic)
    eager = not style.fused
    fwd = g_fwd + a_fwd + _elem_and_hbm(r, eager, e_fwd, c_fwd, wt_fwd)
    bwd = g_bwd + a_bwd + _elem_and_hbm(r, eager, e_fwd * k.elem_bwd_ratio, c_bwd, wt_bwd)
    recompute, re_flops, re_cpu = _recompute(job, w, fwd, g_fwd, a_fwd, _elem_and_hbm(r, eager, e_fwd))
    cpu = _cpu_fwd(w, job, style, k)
    cpu_q = _cpu_qlora_fwd(w, job, k)
    bwd_flops = sum(g.flops * (2.0 if g.trainable else 1.0) for g in w.gemms)
    flops = w.gemm_flops + bwd_flops + 3.5 * w.attn_flops + re_flops
    return _LayerTimes(fwd, bwd, recompute, cpu * (1.0 + k.cpu_bwd_ratio + re_cpu) + cpu_q * (1.0 + re_cpu), a_fwd,
                       flops, g_fwd, g_bwd, _host_fwd(w, job, style, k))


def _elem_and_hbm(r: Rates, eager: bool, elem: float, *hbm: float) -> float:
    """Seconds of the layer's eager elementwise bytes ``elem`` (``Rates.elem_time``) plus the ``hbm`` bytes streamed
    through HBM; one ``mem_time`` of the sum, added in the same order, where both rates are the same (the H200,
    non-Hopper GPUs: unchanged to the last bit) or for fused kernels (``eager`` false)."""
    if not eager or r.elem_bytes in (0.0, r.hbm_bytes):
        total = elem
        for x in hbm:
            total += x
        return r.mem_time(total)
    return r.elem_time(elem) + r.mem_time(sum(hbm))


def _recompute(job: Job, w: LayerWork, fwd: float, g_fwd: float, a_fwd: float,
               e_fwd: float) -> tuple[float, float, float]:
    """(seconds, FLOPs, CPU forwards) recomputed in backward: full = the forward again; selective = core
    attention (Megatron) or every second matmul plus the elementwise ops (torchtitan op-level SAC)."""
    rv = job
    ckpt = rv.training.activation_checkpointing
    if ckpt == "full":
        return fwd, w.gemm_flops + w.attn_flops, 1.0
    if ckpt == "selective":
        if rv.parallelism.framework == "megatron":
            return a_fwd, w.attn_flops, 0.1
        return 0.5 * g_fwd + e_fwd, 0.5 * w.gemm_flops, 0.5
    return 0.0, 0.0, 0.0


def _head_times(job: Job, layout: Layout, work: Workload, r: Rates, style: Style) -> tuple[float, float]:
    """LM head GEMMs and the loss over the vocabulary (last stage); the embedding (first stage)."""
    k, h = r.k, work.head
    fwd = r.gemm_time(h.m, h.k, h.n)
    bwd = r.gemm_time(h.m, h.n, h.k) + (r.gemm_time(h.k, h.m, h.n) if h.trainable else 0.0)
    if job.training.loss_kernel == "fused" and not style.fused:
        # issue 29: with Liger's kernels the fused loss is Liger's fused linear cross-entropy (its patched
        # forward); without them the stacks' fused loss is Cut Cross-Entropy (axolotl's plugin) or Unsloth's
        # (estimator.training.mechanisms.liger_flce_head_bytes, cce_head_bytes)
        if job.training.fused_kernels == "liger":
            l_fwd, l_bwd = liger_flce_head_bytes(work.tokens, work.vocab_local, work.hidden, h.trainable,
                                                 int(style.grad_bytes))
        else:
            l_fwd, l_bwd = cce_head_bytes(work.tokens, work.vocab_local, work.hidden)
            bwd += r.gemm_time(h.m, h.k, h.n)  # the logits recomputed block by block in backward
        fwd += r.mem_time(l_fwd)
        bwd += r.mem_time(l_bwd)
    else:
        loss_bytes = (k.loss_bytes_fused if style.fused else k.loss_bytes_eager) * work.tokens * work.vocab_local
        fwd += r.mem_time(loss_bytes / 3.0)
        bwd += r.mem_time(loss_bytes * 2.0 / 3.0)
    if layout.pp == 1:
        fwd += r.mem_time(4.0 * work.tokens * work.hidden)
        if job.training.method == "full":
            bwd += r.mem_time(4.0 * work.vocab_local * work.hidden + 8.0 * work.tokens * work.hidden)
    return fwd, bwd


def micro_batch(job: Job, shape: ModelShape, layout: Layout, work: Workload, r: Rates,
                style: Style) -> Pass:
    """Forward, backward and recomputation seconds of one micro-batch on the busiest stage. When issuing the
    kernels takes the CPU longer than the GPU needs to run them, the CPU time sets the pace."""
    fwd = bwd = rec = attn = flops = cpu = host = 0.0
    layer_fwd = g_fwd = g_bwd = 0.0
    for w, n in ((work.dense, work.dense_layers), (work.moe, work.moe_layers)):
        if w is None or n == 0:
            continue
        lt = _layer_times(w, job, layout, shape, work, r, style)
        fwd, bwd, rec = fwd + n * lt.fwd, bwd + n * lt.bwd, rec + n * lt.recompute
        attn, flops, layer_fwd = attn + n * lt.attn_fwd, flops + n * lt.hw_flops, max(layer_fwd, lt.fwd)
        cpu, host = cpu + n * lt.cpu, host + n * lt.host_fwd
        g_fwd, g_bwd = g_fwd + n * lt.gemm_fwd, g_bwd + n * lt.gemm_bwd
    h_fwd, h_bwd = _head_times(job, layout, work, r, style)
    h = work.head
    flops += h.flops * (3.0 if h.trainable else 2.0)
    fwd, bwd = fwd + h_fwd, bwd + h_bwd
    gpu = fwd + bwd + rec
    stretch = max(1.0, cpu / gpu) * r.k.compute_overhead if gpu > 0 else 1.0
    return Pass(fwd=fwd * stretch, bwd=bwd * stretch, recompute=rec * stretch, layer_fwd=layer_fwd * stretch,
                attn_fwd=attn * stretch, hw_flops=flops, gemm_fwd=g_fwd, gemm_bwd=g_bwd, host_fwd=host, gpu_fwd=fwd)


# ----------------------------------------------------------------------------------------- communication
class CommTimes:
    """Seconds per step: total communication and the part that is not hidden behind compute."""

    total: Final[float]
    exposed: Final[float]
    hidden: Final[float]
    parts: Final[dict[str, float]]

    def __init__(self, total: float, exposed: float, hidden: float, parts: dict[str, float]) -> None:
        self.total = total
        self.exposed = exposed
        self.hidden = hidden
        self.parts = parts


def tp_comm_overlap(job: Job, layout: Layout) -> bool:
    """Whether the tensor-parallel collectives overlap their GEMMs: ``parallelism.tp_comm_overlap``, by default
    on for Megatron-Core with sequence parallelism (``--tp-comm-overlap``, Transformer Engine userbuffers: the
    NeMo / Megatron-Bridge performance recipes turn it on with TP > 1), which it needs."""
    p = job.parallelism
    if layout.tp <= 1 or not layout.sequence_parallel:
        return False
    return p.framework == "megatron" if p.tp_comm_overlap == "auto" else p.tp_comm_overlap == "on"


def _overlapped(comm: float, gemm: float, tp: int) -> float:
    """Exposed seconds of a collective split into ``tp`` chunks pipelined with the GEMM it feeds (Transformer
    Engine userbuffers' split all-gather / reduce-scatter GEMM overlap; Calculon's tiled ``pipe`` overlap,
    ``calculon/llm/layers.py`` ``compute_processing_time``, Isaev et al. SC23): the first chunk is exposed, each
    later one only by what it exceeds its GEMM chunk."""
    return comm / tp + (tp - 1) / tp * max(0.0, comm - gemm)


def _tp_per_mb(job: Job, layout: Layout, work: Workload, fabric: Fabric,
               mb: Pass | None = None) -> tuple[float, float]:
    """(total, exposed) tensor-parallel seconds of one micro-batch: per layer two all-reduces forward and two
    backward (all-gather + reduce-scatter pairs with sequence parallelism), two more in a fully recomputed
    forward, and two around the embedding / LM head. With :func:`tp_comm_overlap` each phase's collectives hide
    behind that phase's GEMMs (:func:`_overlapped`)."""
    if layout.tp <= 1:
        return 0.0, 0.0
    group = place_group(layout.tp, 1, fabric.scale_up)
    nbytes = 2.0 * work.tokens * work.hidden
    if layout.sequence_parallel:
        one = collective_time("allgather", nbytes, group, fabric) + collective_time("reducescatter", nbytes,
                                                                                   group, fabric)
    else:
        one = collective_time("allreduce", nbytes, group, fabric)
    full = job.training.activation_checkpointing == "full"
    per_layer = 4 + (2 if full else 0)
    layers = work.dense_layers + work.moe_layers
    total = one * (per_layer * layers + 2)
    if mb is None or not tp_comm_overlap(job, layout):
        return total, total
    phase = 2.0 * one * layers
    exposed = _overlapped(phase, mb.gemm_fwd, layout.tp) + _overlapped(phase, mb.gemm_bwd, layout.tp) + 2.0 * one
    if full:
        exposed += _overlapped(phase, mb.gemm_fwd, layout.tp)
    return total, exposed


def _forward_passes(job: Job) -> int:
    """Forward passes per micro-batch: full recomputation runs the forward a second time in backward."""
    return 2 if job.training.activation_checkpointing == "full" else 1


def _cp_per_mb(job: Job, shape: ModelShape, layout: Layout, work: Workload, fabric: Fabric,
               attn_fwd: float) -> tuple[float, float]:
    """(total, exposed) ring-attention exchange of one micro-batch: ``cp - 1`` K/V blocks per layer forward
    (again in a fully recomputed forward), K/V and dK/dV backward (twice the forward's volume). Each
    exchange overlaps the attention block it feeds; what exceeds that attention is exposed."""
    if layout.cp <= 1:
        return 0.0, 0.0
    group = place_group(2, layout.tp, fabric.scale_up)
    kv_local = max(1.0, shape.kv_heads / layout.tp)
    block = 2.0 * 2.0 * work.tokens * kv_local * shape.head_dim
    one = collective_time("sendrecv", block, group if layout.cp * layout.tp <= fabric.scale_up
                          else place_group(2, fabric.scale_up, fabric.scale_up), fabric)
    layers = work.dense_layers + work.moe_layers
    fwd = (layout.cp - 1) * one * layers
    passes = _forward_passes(job)
    total = passes * fwd + 2.0 * fwd
    exposed = passes * max(0.0, fwd - attn_fwd) + max(0.0, 2.0 * fwd - 2.0 * attn_fwd)
    return total, exposed


def _ep_per_mb(job: Job, shape: ModelShape, layout: Layout, work: Workload, fabric: Fabric) -> float:
    """Expert-parallel all-to-alls of one micro-batch: dispatch and combine in every forward (the recomputed
    one too) and in the backward."""
    if layout.ep <= 1 or work.moe_layers == 0:
        return 0.0
    group = place_group(layout.ep, 1, fabric.scale_up)
    nbytes = 2.0 * work.tokens * shape.dims.experts_per_token * work.hidden
    per_layer = 2.0 * _forward_passes(job) + 2.0
    return per_layer * collective_time("alltoall", nbytes, group, fabric) * work.moe_layers


def virtual_stages(job: Job, layout: Layout) -> int:
    """Model chunks per pipeline rank: ``virtual_stages`` under the interleaved 1F1B schedule, else 1 (1F1B and
    GPipe run one chunk per rank whatever ``virtual_stages`` says)."""
    return layout.vp if job.training.pipeline_schedule == "interleaved" and layout.pp > 1 else 1


def _pp_per_mb(job: Job, layout: Layout, work: Workload, fabric: Fabric) -> float:
    """Activation send and gradient receive at each of the rank's ``v`` chunk boundaries per micro-batch.
    Megatron-Core's interleaved schedule overlaps them with the next chunk's compute (``overlap_p2p_comm``,
    Megatron-LM's default ``--overlap-p2p-communication``; ``pipeline_parallel/schedules.py``): see
    :func:`communication`."""
    if layout.pp <= 1:
        return 0.0
    stride = layout.tp * layout.cp * layout.dp
    group = place_group(2, stride, fabric.scale_up)
    nbytes = 2.0 * work.tokens * work.hidden / (layout.tp if layout.sequence_parallel else 1)
    return 2.0 * virtual_stages(job, layout) * collective_time("sendrecv", nbytes, group, fabric)


class _DpSizes:
    grad_bytes: Final[float]  # trainable gradients on this GPU before sharding, in the reduce dtype
    update_bytes: Final[float]  # trainable parameters re-gathered after a ZeRO-1/2 step, in the compute dtype
    param_bytes: Final[float]  # all parameters on this GPU before sharding (what FSDP gathers)

    def __init__(self, grad_bytes: float, update_bytes: float, param_bytes: float) -> None:
        self.grad_bytes = grad_bytes
        self.update_bytes = update_bytes
        self.param_bytes = param_bytes


def _dp_sizes(job: Job, pl: ParamPlacement, style: Style) -> _DpSizes:
    trainable = float(pl.trainable_local)
    everything = float(pl.total_local if job.training.method == "full" else pl.total_local - pl.trainable_local)
    return _DpSizes(trainable * style.grad_bytes, trainable * style.param_bytes, everything * style.param_bytes)


class _DpCollectives:
    """Seconds of each data-parallel collective of one step on the stage's GPU, before any overlap: what does not
    depend on the batch shape (:func:`_dp_collectives`; :func:`_dp_comm` adds the overlap with the micro-batch)."""

    reduce: Final[float]  # DDP all-reduce (no sharding); gradient reduce-scatter (ZeRO / FSDP)
    gather: Final[float]  # ZeRO-1/2 updated-parameter all-gather; FSDP / ZeRO-3 parameter all-gather
    tail: Final[float]  # DDP: the last bucket's all-reduce, which nothing hides
    replicas: Final[float]  # HSDP: the gradient all-reduce across replicas

    def __init__(self, reduce: float = 0.0, gather: float = 0.0, tail: float = 0.0, replicas: float = 0.0) -> None:
        self.reduce = reduce
        self.gather = gather
        self.tail = tail
        self.replicas = replicas


_NO_DP: Final = _DpCollectives()


def _dp_collectives(job: Job, pl: ParamPlacement, layout: Layout, fabric: Fabric,
                    style: Style) -> _DpCollectives:
    """The data-parallel collectives of one step, by sharding stage (none below two data-parallel ranks)."""
    n = layout.dp * layout.cp
    if n <= 1:
        return _NO_DP
    sizes = _dp_sizes(job, pl, style)
    group = place_group(n if layout.sharding != "hsdp" else layout.shard_group, layout.tp, fabric.scale_up)
    if layout.sharding == "none":
        return _DpCollectives(reduce=collective_time("allreduce", sizes.grad_bytes, group, fabric),
                              tail=collective_time("allreduce", min(sizes.grad_bytes, DDP_BUCKET_BYTES), group,
                                                   fabric))
    if layout.sharding in ("zero1", "zero2"):
        return _DpCollectives(reduce=collective_time("reducescatter", sizes.grad_bytes, group, fabric),
                              gather=collective_time("allgather", sizes.update_bytes, group, fabric))
    gather = collective_time("allgather", sizes.param_bytes, group, fabric)
    reduce = collective_time("reducescatter", sizes.grad_bytes, group, fabric)
    if layout.sharding != "hsdp":
        return _DpCollectives(reduce=reduce, gather=gather)
    replicas = layout.dp * layout.cp // max(1, layout.shard_group)
    rgroup = place_group(replicas, layout.tp * layout.shard_group, fabric.scale_up)
    return _DpCollectives(reduce=reduce, gather=gather, replicas=collective_time(
        "allreduce", sizes.grad_bytes / layout.shard_group, rgroup, fabric))


def _dp_comm(job: Job, dp: _DpCollectives, layout: Layout, mb: Pass) -> tuple[float, float]:
    """(total, exposed) data-parallel seconds per step, by sharding stage: the collectives of
    :func:`_dp_collectives` and what of them the micro-batches' compute does not hide."""
    if layout.dp * layout.cp <= 1:
        return 0.0, 0.0
    m = job.training.gradient_accumulation_steps
    if layout.sharding == "none":
        t = dp.reduce
        return t, max(0.0, t - mb.bwd) + dp.tail
    if layout.sharding in ("zero1", "zero2"):
        return _zero12(job, layout, dp, mb, m)
    return _zero3(layout, dp, mb, m)


def _zero12(job: Job, layout: Layout, dp: _DpCollectives, mb: Pass, m: int) -> tuple[float, float]:
    rs, ag = dp.reduce, dp.gather
    rs_count = m if layout.sharding == "zero2" else 1
    rs_exposed = rs_count * max(0.0, rs - mb.bwd)
    ag_exposed = max(0.0, ag - mb.fwd) if job.parallelism.framework == "megatron" else ag
    return rs_count * rs + ag, rs_exposed + ag_exposed


def _zero3(layout: Layout, dp: _DpCollectives, mb: Pass, m: int) -> tuple[float, float]:
    ag, rs = dp.gather, dp.reduce
    units = layout.layers_per_stage + 1
    fwd_exposed = max(0.0, ag - mb.fwd) + ag / units
    bwd_exposed = max(0.0, ag + rs - mb.bwd - mb.recompute) + rs / units
    total, exposed = m * (2.0 * ag + rs), m * (fwd_exposed + bwd_exposed)
    if layout.sharding == "hsdp":
        ar = dp.replicas
        total, exposed = total + ar, exposed + max(0.0, ar - mb.bwd)
    return total, exposed


def communication(job: Job, shape: ModelShape, layout: Layout, work: Workload, fabric: Fabric,
                  mb: Pass, dp: _DpCollectives) -> CommTimes:
    rv = job
    m = rv.training.gradient_accumulation_steps
    tp_one, tp_exposed_one = _tp_per_mb(job, layout, work, fabric, mb)
    tp, tp_exposed = m * tp_one, m * tp_exposed_one
    cp_one, cp_exposed_one = _cp_per_mb(job, shape, layout, work, fabric, mb.attn_fwd)
    cp, cp_exposed = m * cp_one, m * cp_exposed_one
    ep = m * _ep_per_mb(job, shape, layout, work, fabric)
    pp = m * _pp_per_mb(job, layout, work, fabric)
    overlap_p2p = rv.parallelism.framework == "megatron" and virtual_stages(job, layout) > 1
    pp_exposed = max(0.0, pp - m * mb.total) if overlap_p2p else pp
    dp_total, dp_exposed = _dp_comm(job, dp, layout, mb)
    exposed = tp_exposed + cp_exposed + ep + pp_exposed + dp_exposed
    total = tp + cp + ep + pp + dp_total
    parts = {"tensor_parallel_s": tp, "tensor_parallel_exposed_s": tp_exposed, "pipeline_p2p_exposed_s": pp_exposed,
             "context_parallel_s": cp, "context_parallel_exposed_s": cp_exposed,
             "expert_parallel_s": ep, "pipeline_p2p_s": pp, "data_parallel_s": dp_total,
             "data_parallel_exposed_s": dp_exposed}
    return CommTimes(total=total, exposed=exposed, hidden=max(0.0, total - exposed), parts=parts)


def ddp_bucket_time(job: Job, layout: Layout, r: Rates, style: Style, pl: ParamPlacement) -> float:
    """PyTorch DDP's reducer copies each gradient into its flat bucket, scaled by 1/world size on the way
    (``Reducer::mark_variable_ready_dense``: ``at::mul_out(bucket_view, grad, 1/div_factor)``), and, with the
    default ``gradient_as_bucket_view=False``, copies the reduced bucket back into ``.grad``
    (``Reducer::finalize_bucket_dense`` -> ``copy_bucket_to_grad``): two read-and-write passes over the
    gradients per optimizer step (``no_sync`` skips them on accumulating micro-batches)."""
    p = job.parallelism
    if p.framework != "pytorch" or layout.sharding not in ("none", "zero1") or layout.dp * layout.cp <= 1:
        return 0.0
    return r.mem_time(2.0 * 2.0 * style.grad_bytes * pl.trainable_local)


# ------------------------------------------------------------------------------------- optimizer, offload


def _adam_bytes(job: Job, k: Constants) -> tuple[float, float]:
    rv = job
    t, p = rv.training, rv.parallelism
    impl = t.optimizer_impl if p.framework == "pytorch" else "fused"
    bf16 = t.precision == "bf16-true" and p.framework == "pytorch"
    if impl == "fused":
        per = k.adam_fused_bf16_bytes if bf16 else k.adam_fused_fp32_bytes
        return per, k.adam_tensor_fused_s
    per = k.adam_foreach_bf16_bytes if bf16 else k.adam_foreach_fp32_bytes
    return per, k.adam_tensor_foreach_s if impl == "foreach" else k.adam_tensor_forloop_s


def _optimizer_cost(job: Job, k: Constants) -> tuple[float, float]:
    """(copy-equivalent bytes per parameter, seconds per parameter tensor) of the optimizer step.

    - bitsandbytes ``AdamW8bit`` (``adamw-8bit``): block-wise 8-bit states; ``Optimizer8bit.step`` updates one
      parameter at a time from Python and calls ``torch.cuda.synchronize()`` after each
      (``bitsandbytes/optim/optimizer.py``: ``sync_gpu(p)``), so each tensor costs a serial launch-and-wait
      on top of the kernel (constants in :mod:`estimator.training.efficiency`, measured and fitted on the H200).
    - Hugging Face ``Adafactor`` (``adafactor``, always a per-tensor loop): its kernels counted from
      ``transformers/optimization.py`` (:attr:`Constants.adafactor_bytes`); bf16 parameters and gradients are
      upcast to fp32 and the result copied back (``adafactor_upcast_bytes`` more).
    - AdamW, SGD, Lion: the measured AdamW bytes of the implementation, by state count
      (:attr:`estimator.training.optimizers.OptimizerSpec.adam_ratio`).
    """
    rv = job
    t, p = rv.training, rv.parallelism
    spec = optimizer_spec(t.optimizer)
    bf16 = t.precision == "bf16-true" and p.framework == "pytorch"
    if spec.step_cost == "adam8bit":  # the kernel's time is per element on the CUDA cores (:func:`optimizer_time`)
        return 0.0, k.adam8bit_tensor_s + (k.paged_tensor_s if spec.paged else 0.0)
    if spec.step_cost == "bnb32":
        # issue 29: bitsandbytes PagedAdamW32bit runs ``Optimizer2State.update_step`` -> ``F.optimizer_update_32bit``
        # (``bitsandbytes/functional.py``; the CUDA ``kOptimizer32bit2State`` kernel) one tensor at a time from the
        # same Python loop as AdamW8bit (``sync_gpu(p)`` after each); the kernel reads the gradient, the parameter
        # and the two fp32 states and writes the parameter and the states (16 + 12 bytes per fp32 parameter, 12 + 10
        # per bf16 one, counted), at the copy-equivalent bytes its CUDA time gives (Constants.bnb32_*). The paged
        # states are read where they are (GPU-resident, as the memory assumes).
        return (k.bnb32_bf16_bytes if bf16 else k.bnb32_fp32_bytes), k.bnb32_tensor_s
    if spec.step_cost == "torchao":
        # the compiled per-parameter step (Constants.torchao_adamw*_tensor_s): fused AdamW's bytes plus the
        # per-tensor cost of calling it from Python once per parameter
        per, _ = _adam_bytes(job, k)
        return per, (k.torchao_adamw4_tensor_s if spec.block_bits == 4 else k.torchao_adamw8_tensor_s)
    if spec.step_cost == "adafactor":
        return k.adafactor_bytes + (k.adafactor_upcast_bytes if bf16 else 0.0), k.adam_tensor_forloop_s
    per, per_tensor = _adam_bytes(job, k)
    return per * spec.adam_ratio, per_tensor


def _full_tensors_per_layer(shape: ModelShape, attn: int) -> int:
    """Parameter tensors of one decoder layer, each a separate step for a per-tensor optimizer loop: the attention
    and MLP weights (fused ``query_key_value`` / ``gate_up_proj`` count once), their biases (q, k, v: three, or one
    fused; the output projection's; each MLP linear's) and the norms (a LayerNorm has a bias too)."""
    d = shape.dims
    fused = d.fused_projections
    mlp = 2 if (fused or not d.gated_mlp) else 3
    biases = (((1 if fused else 3) if d.qkv_bias else 0) + (1 if d.attention_bias else 0)
              + (mlp if d.mlp_bias else 0))
    norms = d.norms_per_layer * (2 if d.norm == "layernorm" else 1)
    return (2 if fused else attn) + mlp + biases + norms


def _optimizer_params(job: Job, shape: ModelShape, layout: Layout,
                      pl: ParamPlacement) -> tuple[float, float]:
    """(trainable parameters this GPU updates, parameter tensors it updates). Dense parameters are sharded over
    the dp x cp group, routed experts over the expert data-parallel group (:meth:`ParamPlacement.sharded_bytes`)."""
    rv = job
    params = float(pl.sharded_bytes(layout, 1.0, "optimizer"))
    attn = 5 if shape.is_mla else 4
    per_layer = _full_tensors_per_layer(shape, attn)
    if rv.training.method != "full":
        targets = rv.training.lora_targets
        per_layer = 2 * (attn + (3 if targets == "all-linear" else 0) - (1 if targets == "qkv" else 0))
    return params, float(per_layer * layout.layers_per_stage + 3)


def optimizer_time(job: Job, shape: ModelShape, layout: Layout, r: Rates, style: Style,
                   pl: ParamPlacement, muon_s: float = 0.0) -> float:
    """One optimizer step on this GPU: its elementwise bytes, 8-bit kernels, per-tensor loop and ``muon_s``, Muon's
    Newton-Schulz (the longer of :func:`muon_parts`)."""
    if job.parallelism.offload != "none":
        return 0.0
    params, tensors = _optimizer_params(job, shape, layout, pl)
    per, per_tensor = _optimizer_cost(job, r.k)
    per += 6.0 if style.master_copy else 0.0
    spec = optimizer_spec(job.training.optimizer)
    cores = params * r.k.adam8bit_elem_s * r.cuda_core_scale if spec.step_cost == "adam8bit" else 0.0
    return r.mem_time(params * per) + cores + tensors * per_tensor + muon_s


def muon_parts(job: Job, shape: ModelShape, layout: Layout, r: Rates) -> tuple[float, float]:
    """(GPU seconds, host seconds) of Muon's Newton-Schulz (issue 29): five steps of three bf16 GEMMs on every
    trainable 2-D matrix of the stage.

    On one GPU each matrix is whole (H100, Llama 3.2 1B and Qwen2.5 1.5B: +5.6 % / +4.9 %). Under FSDP2 the matrices
    are DTensor shards (``Shard(0)`` over the parameter shard group) and torch.optim.Muon's ``X @ X.T`` / ``addmm``
    (torch ``optim/_muon.py``, ``_zeropower_via_newtonschulz``) run as DTensor operators whose sharding propagation
    splits the two ``m x n`` products over the group and runs ``A @ A`` (``m x m x m``) whole on every rank
    (:func:`estimator.training.mechanisms.muon_local_gemms`, which also says when a small matrix is split by rows
    instead; the local GEMM shapes recorded on the H100, torch 2.11, and on the CPU, torch 2.13).
    Each operator also costs the host DTensor's dispatch
    (:attr:`Constants.dtensor_op_s` x :func:`estimator.training.mechanisms.muon_dtensor_ops`), which takes longer
    than the local GEMMs at every size measured: the optimizer step is the longer of the two. The collectives the
    redistributions issue are not timed (an assumption names them)."""
    t = job.training
    shards = layout.param_shard
    if t.method == "full":
        mats = [(lin.out_features, lin.in_features, lin.count) for lin in
                shape.attention_linears() + shape.mlp_linears(shape.dims.ffn_hidden_size)]
    else:
        rank = t.lora_rank
        mats = [m for lin in _adapted_linears(shape, t.lora_targets)
                for m in ((rank, lin.in_features, lin.count), (lin.out_features, rank, lin.count))]
    gpu = 0.0
    ops = 0
    for rows, cols, count in mats:
        gpu += count * NS_STEPS * sum((r.gemm_time(a, k, b) for a, k, b in muon_local_gemms(rows, cols, shards)), 0.0)
        ops += count * muon_dtensor_ops(rows, cols)
    gpu *= layout.layers_per_stage
    per_op = r.k.dtensor_op_s if shards > 1 else r.k.launch_s  # a DTensor operator's dispatch, or an eager launch
    return gpu, ops * layout.layers_per_stage * per_op


def _muon_step(job: Job, shape: ModelShape, layout: Layout, r: Rates) -> tuple[float, bool]:
    """(Muon's Newton-Schulz seconds, whether the host paces them): the longer of :func:`muon_parts`; a step whose
    Muon the host paces is launch-bound for its error bar (the host's speed moves it: the DTensor operator took
    103-190 us on four H100 machines). (0, False) for other optimizers or an offloaded one."""
    if not optimizer_spec(job.training.optimizer).matrix_only or job.parallelism.offload != "none":
        return 0.0, False
    gpu, host = muon_parts(job, shape, layout, r)
    return max(gpu, host), host > gpu


def offload_time(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, mb: Pass,
                 style: Style, pl: ParamPlacement) -> float:
    """PCIe transfers and the CPU optimizer step (ZeRO-Offload, Ren et al. 2021, arXiv 2101.06840)."""
    rv = job
    p = rv.parallelism
    if p.offload == "none":
        return 0.0
    params, _ = _optimizer_params(job, shape, layout, pl)
    pcie = float(getattr(gpu, "pcie_gbps_per_direction", None) or 31.5) * 1e9 * PCIE_EFF
    transfers = params * (style.grad_bytes + 2.0) / pcie
    cpu_bw = HOST_MEM_BYTES_PER_S / layout.gpus_per_node
    if p.framework != "deepspeed":
        cpu_bw /= TORCH_CPU_ADAM_SLOWDOWN
    cpu = params * CPU_ADAM_BYTES_PER_PARAM / cpu_bw
    if p.offload == "optimizer+params":
        m = rv.training.gradient_accumulation_steps
        fetch = m * 2.0 * params * 2.0 / pcie
        transfers += max(0.0, fetch - m * mb.total)
    return transfers + cpu


def activation_offload_time(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, mb: Pass,
                            stage: str) -> float:
    """PCIe time of activation offloading not hidden behind one micro-batch's compute (issue 29,
    :func:`estimator.training.mechanisms.offload_transfer_seconds`): the offloaded bytes go to the host in forward and
    come back in backward on a side stream: every pinned byte, each way
    (:func:`estimator.training.activations.pinned_offload_bytes`, issue 33 item 4)."""
    where = "only" if layout.pp == 1 else stage
    host = pinned_offload_bytes(job, shape, layout, where)
    pcie = min(float(getattr(gpu, "pcie_gbps_per_direction", None) or 31.5) * 1e9 * PCIE_EFF, PINNED_BYTES_PER_S)
    return offload_transfer_seconds(host, pcie, mb.total, offload_loss_pinned_bytes(job, shape, layout, where))


# ----------------------------------------------------------------------------------------------- the step
def _placement(job: Job, shape: ModelShape, layout: Layout, stage: str = "last") -> ParamPlacement:
    """:func:`estimator.training.params.place_params` (memoised there) of one stage (``last`` by default)."""
    return place_params(job, shape, layout, "only" if layout.pp == 1 else stage)


def _time_stages(layout: Layout) -> tuple[str, ...]:
    """Stages whose step may be the slowest: the last (LM head and loss) when every rank holds the same layers;
    with an uneven split (:mod:`estimator.training.pipeline_split`) also the first and the fullest middle rank."""
    if layout.pp > 1 and layout.uneven:
        return ("first", "middle", "last") if layout.pp > 2 else ("first", "last")
    return ("last",)


def time_assumptions(job: Job, gpu: GpuSpec, layout: Layout | None = None,
                     host_ratio: float = 0.0) -> list[str]:
    """Plain-words notes on how the step time and its MFU are to be read; with ``layout``, a line when the
    set-up's kind was never checked against a measured step time (its error bar is the wide floor); with
    ``host_ratio`` (:func:`host_issue_ratio`) at ``HOST_BOUND_SHARE`` or more, a line that the host paces the
    step."""
    launch_bound = host_ratio >= HOST_BOUND_SHARE
    notes = _kind_notes(job, gpu, layout, launch_bound) if layout is not None else []
    if layout is not None and launch_bound:
        notes += _host_bound_notes(job, gpu, layout, host_ratio)
    return notes + _mfu_notes(job, gpu)


def _host_bound_notes(job: Job, gpu: GpuSpec, layout: Layout, ratio: float) -> list[str]:
    gid = str(getattr(gpu, "id", "") or "")
    v = job
    bar = time_error_bar_pct(layout.world_size > 1, time_kind_measured(job, layout, gid), v.parallelism.framework,
                             v.training.seq_len, True, job_time_mechanism_bar_pct(job, layout))
    return [Text("Step time: launch-bound. Issuing each forward from Python (eager PyTorch and Hugging Face "
                 "modules, one kernel launch at a time, and peft's per-adapter path) takes about %(ratio)sx the "
                 "GPU time of the work it issues, so the host CPU, not the GPU, sets the pace. The model prices "
                 "that CPU time only roughly and it varies from host to host, so the step time is uncertain: the "
                 "error bar is that of the measured launch-bound steps (+-%(bar)s%%). Longer sequences or larger "
                 "micro-batches make the step GPU-bound.", ratio=Num(ratio, ".1f"), bar=Num(bar, "g"))]


def _kind_notes(job: Job, gpu: GpuSpec, layout: Layout, launch_bound: bool = False) -> list[str]:
    rv = job
    gid = str(getattr(gpu, "id", "") or "")
    if time_kind_measured(job, layout, gid):
        return []
    p = rv.parallelism
    if p.framework == "deepspeed":
        what = Text("DeepSpeed's kernels and schedule")
    elif p.framework == "pytorch" and layout.pp > 1:
        what = Text("PyTorch pipeline parallelism (torch.distributed.pipelining)")
    else:
        what = Text("this combination (precision, optimizer, offload, parallelism, GPU or attention kernel)")
    bar = time_error_bar_pct(layout.world_size > 1, False, p.framework, rv.training.seq_len, launch_bound)
    return [Text("Step time: %(what)s was never checked against a measured or published step time; the efficiency "
                 "of its kernels is assumed from the calibrated ones, so the error bar is the wide unmeasured floor "
                 "(+-%(bar)s%%).", what=what, bar=Num(bar, "g"))]


_MFU_NOTES: Final[ObjectMemo[list[str]]] = ObjectMemo(1024)


def _mfu_notes(job: Job, gpu: GpuSpec) -> list[str]:
    """How to read the MFU, memoised per GPU object and precision."""
    precision = job.training.precision
    return list(_MFU_NOTES.get_or_compute((gpu,), (precision,), lambda: _mfu_notes_uncached(precision, gpu)))


def _mfu_notes_uncached(precision: str, gpu: GpuSpec) -> list[str]:
    peak = _gpu_peak(gpu, precision) / 1e12
    name = str(getattr(gpu, "name", "") or getattr(gpu, "id", "the GPU"))
    if precision == "fp8-mixed":
        return [Text("MFU (fp8-mixed) is model FLOPs over the %(gpu)s's dense fp8 peak (%(peak)s TFLOP/s), not its "
                     "bf16 peak: it reads about half the bf16-based MFU of the same step time.", gpu=name,
                     peak=Num(peak, ",.0f"))]
    kind = "TF32" if precision == "fp32" else "bf16"
    return [Text("MFU is model FLOPs (matmuls and attention, forward and backward, no recomputation) over the "
                 "%(gpu)s's dense %(kind)s peak (%(peak)s TFLOP/s).", gpu=name, kind=kind, peak=Num(peak, ",.0f"))]


def _gpu_peak(gpu: GpuSpec, precision: str) -> float:
    if precision == "fp8-mixed" and gpu.fp8_tflops_dense:
        return float(gpu.fp8_tflops_dense) * 1e12
    if precision == "fp32":
        return float(gpu.tf32_tflops_dense or gpu.bf16_tflops_dense / 2) * 1e12
    return float(gpu.bf16_tflops_dense) * 1e12


def step_time(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
              catalog: Catalog, constants: Constants = H200_FIT) -> TimeResult:
    """Seconds per optimizer step and throughput of ``job`` on ``gpu`` (and ``server``, if any).

    ``catalog`` is accepted for interface symmetry; the fabric figures come from this module's data.
    """
    del catalog
    return step_time_model(job, shape, layout, gpu, server, constants).result()


def step_time_model(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
                    constants: Constants = H200_FIT) -> StepTime:
    """The slowest stage's step (:class:`StepTime`), computed once: its seconds without the response's
    :class:`TimeResult` (the planner's search), that result (:meth:`StepTime.result`) and the host-issue ratio
    (:attr:`StepTime.host_ratio`) from the same stage."""
    last = workload(job, shape, layout)
    return StepTime(job, shape, layout, gpu, last, _slowest_stage(job, shape, layout, gpu, server, constants, last))


class _StageBasis:
    """What one stage's step reads that does not depend on the batch shape (micro-batch, sequence length,
    accumulation, checkpointing): its parameter placement, data-parallel collectives, DDP bucket copies and
    optimizer step."""

    stage: Final[str]
    pl: Final[ParamPlacement]
    dp: Final[_DpCollectives]
    ddp_bucket: Final[float]
    opt: Final[float]
    opt_host_paced: Final[bool]  # the optimizer step is paced by the host (:func:`_muon_step`)

    def __init__(self, stage: str, pl: ParamPlacement, dp: _DpCollectives, ddp_bucket: float, opt: float,
                 opt_host_paced: bool = False) -> None:
        self.stage = stage
        self.pl = pl
        self.dp = dp
        self.ddp_bucket = ddp_bucket
        self.opt = opt
        self.opt_host_paced = opt_host_paced


class _StepBasis:
    """The batch-shape-free part of a layout's step on one GPU and server (:func:`_step_basis`): the rates, the
    framework's style, the fabric and each timed stage's :class:`_StageBasis`. Keeps the GPU, server and
    constants objects it was made for: its memo key holds their ``id``, which no other object can take while
    they live."""

    gpu: Final[Gpu]
    server: Final[Server | None]
    constants: Final[Constants]
    r: Final[Rates]
    style: Final[Style]
    fabric: Final[Fabric]
    stages: Final[tuple[_StageBasis, ...]]

    def __init__(self, gpu: Gpu, server: Server | None, constants: Constants, r: Rates, style: Style,
                 fabric: Fabric, stages: tuple[_StageBasis, ...]) -> None:
        self.gpu = gpu
        self.server = server
        self.constants = constants
        self.r = r
        self.style = style
        self.fabric = fabric
        self.stages = stages


_BASES: Final[BoundedMemo[tuple[object, ...], _StepBasis]] = BoundedMemo(4096)


def _basis_key(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
               constants: Constants) -> tuple[object, ...]:
    """Everything :func:`_make_basis` reads: of the request, what the style, the rates, the parameter placement
    and the optimizer step read (not the batch shape, which the planner and the micro-batch search vary); the
    GPU, server and constants objects by identity."""
    rv = job
    t, p = rv.training, rv.parallelism
    return (id(gpu), id(server), id(constants), shape, layout, t.method, t.lora_rank, t.lora_targets, t.precision,
            t.optimizer, t.optimizer_impl, t.lora_kernel, p.framework, p.offload)


def _step_basis(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
                constants: Constants) -> _StepBasis:
    """:func:`_make_basis`, memoised on :func:`_basis_key`."""
    key = _basis_key(job, shape, layout, gpu, server, constants)
    found = _BASES.get(key)
    if found is None:
        found = _BASES.remember(key, _make_basis(job, shape, layout, gpu, server, constants))
    return found


def _make_basis(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
                constants: Constants) -> _StepBasis:
    r = rates_for(gpu, job.training.precision, constants)
    style = style_for(job, layout)
    fabric = fabric_for(gpu, server, layout.gpus_per_node)
    muon_s, muon_host = _muon_step(job, shape, layout, r)  # the same on every stage (layers_per_stage)
    stages = []
    for stage in _time_stages(layout):
        pl = _placement(job, shape, layout, stage)
        stages.append(_StageBasis(stage, pl, _dp_collectives(job, pl, layout, fabric, style),
                                  ddp_bucket_time(job, layout, r, style, pl),
                                  optimizer_time(job, shape, layout, r, style, pl, muon_s), muon_host))
    return _StepBasis(gpu, server, constants, r, style, fabric, tuple(stages))


def _slowest_stage(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None,
                   constants: Constants, last: Workload) -> _StageStep:
    basis = _step_basis(job, shape, layout, gpu, server, constants)
    slowest: _StageStep | None = None
    for sb in basis.stages:
        s = _stage_step(job, shape, layout, gpu, basis, sb, last if sb.stage == "last" else None)
        if slowest is None or s.step > slowest.step:  # the first of the slowest, as max() picks it
            slowest = s
    assert slowest is not None
    return slowest


def host_issue_ratio(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, server: Server | None = None,
                     constants: Constants = H200_FIT) -> float:
    """How many times its forward's GPU time the host takes to issue it from Python, on the slowest stage: at
    ``HOST_BOUND_SHARE`` or more the step is launch-bound (:attr:`Pass.host_bound`)."""
    return step_time_model(job, shape, layout, gpu, server, constants).host_ratio


class _StageStep:
    """One pipeline stage's step: the slowest stage's is the step (the others wait on it)."""

    stage: Final[str]
    mb: Final[Pass]
    comm: Final[CommTimes]
    step: Final[float]
    compute: Final[float]
    bubble: Final[float]
    opt: Final[float]
    off: Final[float]
    opt_host_paced: Final[bool]

    def __init__(self, stage: str, mb: Pass, comm: CommTimes, step: float, compute: float, bubble: float,
                 opt: float, off: float, opt_host_paced: bool = False) -> None:
        self.stage = stage
        self.mb = mb
        self.comm = comm
        self.step = step
        self.compute = compute
        self.bubble = bubble
        self.opt = opt
        self.off = off
        self.opt_host_paced = opt_host_paced


def without_collectives_s(step_s: float, communication_s: float, exposed_communication_s: float) -> float:
    """The step with collectives that do no work: what one rank of a layout runs through PyTorch's fake process
    group (``torch.testing._internal.distributed.fake_pg``, the calibration's sharded cases), where each collective
    returns at once. The exposed communication goes, and so does the overlap penalty the hidden part puts on compute
    (``COMM_OVERLAP_PENALTY``); FSDP2's copy-in / copy-out and DDP's bucket copies stay (they are real work)."""
    hidden = communication_s - exposed_communication_s
    return step_s - exposed_communication_s - COMM_OVERLAP_PENALTY * hidden


class StepTime:
    """The step-time model's answer for one layout: the slowest stage's step (the others wait on it)."""

    job: Final[Job]
    shape: Final[ModelShape]
    layout: Final[Layout]
    gpu: Final[Gpu]
    work: Final[Workload]  # the last stage's (model FLOPs count every layer and the LM head)
    slowest: Final[_StageStep]

    def __init__(self, job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, work: Workload,
                 slowest: _StageStep) -> None:
        self.job = job
        self.shape = shape
        self.layout = layout
        self.gpu = gpu
        self.work = work
        self.slowest = slowest

    @property
    def step_time_s(self) -> float:
        return self.slowest.step

    @property
    def compute_s(self) -> float:
        return self.slowest.compute

    @property
    def communication_s(self) -> float:
        return self.slowest.comm.total

    @property
    def exposed_communication_s(self) -> float:
        return self.slowest.comm.exposed

    @property
    def bubble_s(self) -> float:
        return self.slowest.bubble

    @property
    def optimizer_s(self) -> float:
        return self.slowest.opt

    @property
    def offload_s(self) -> float:
        return self.slowest.off

    @property
    def host_ratio(self) -> float:
        """:func:`host_issue_ratio` of the slowest stage."""
        mb = self.slowest.mb
        return mb.host_fwd / mb.gpu_fwd if mb.gpu_fwd > 0.0 else 0.0

    def result(self) -> TimeResult:
        """The response's :class:`TimeResult`."""
        return _result(self.job, self.shape, self.layout, self.gpu, self.work, self.slowest)


def _stage_step(job: Job, shape: ModelShape, layout: Layout, gpu: Gpu, basis: _StepBasis,
                sb: _StageBasis, work: Workload | None = None) -> _StageStep:
    """The step of one stage's GPU: ``m`` micro-batches, the pipeline bubble of ``(p - 1) / v`` of its
    micro-batch times (with an uneven split the slowest stage paces every other, so its micro-batch time sets
    the bubble as well: Narayanan et al. 2021 Sec. 2.2 with the stage time of the slowest stage), exposed
    communication, optimizer and offload (the parts that do not depend on the batch shape from ``sb``)."""
    t = job.training
    stage = sb.stage
    work = work or workload(job, shape, layout, stage)
    mb = micro_batch(job, shape, layout, work, basis.r, basis.style)
    comm = communication(job, shape, layout, work, basis.fabric, mb, sb.dp)
    m = t.gradient_accumulation_steps
    compute = m * mb.total + COMM_OVERLAP_PENALTY * comm.hidden
    bubble = (layout.pp - 1) / virtual_stages(job, layout) * mb.total if layout.pp > 1 else 0.0
    compute += sb.ddp_bucket
    off = offload_time(job, shape, layout, gpu, mb, basis.style, sb.pl)
    if t.activation_offloading != "none":
        off += m * activation_offload_time(job, shape, layout, gpu, mb, stage)
    step = compute + bubble + comm.exposed + sb.opt + off
    return _StageStep(stage, mb, comm, step, compute, bubble, sb.opt, off, sb.opt_host_paced)


def _result(job: Job, shape: ModelShape, layout: Layout, gpu: GpuSpec, work: Workload,
            s: _StageStep) -> TimeResult:
    rv = job
    t = rv.training
    mb, comm, step, compute, bubble, opt, off = s.mb, s.comm, s.step, s.compute, s.bubble, s.opt, s.off
    tokens = float(layout.tokens_per_step(t))
    model_flops = model_flops_per_step(job, shape, layout, work)
    hw_per_gpu = mb.hw_flops * t.gradient_accumulation_steps
    peak = _gpu_peak(gpu, t.precision)
    breakdown = {"forward_s": mb.fwd * t.gradient_accumulation_steps,
                 "backward_s": mb.bwd * t.gradient_accumulation_steps,
                 "recompute_s": mb.recompute * t.gradient_accumulation_steps, **comm.parts}
    return trusted(TimeResult, step_time_s=step, compute_s=compute, communication_s=comm.total,
                      exposed_communication_s=comm.exposed, bubble_s=bubble, optimizer_s=opt, offload_s=off,
                      tokens_per_s=tokens / step, tokens_per_s_per_gpu=tokens / step / layout.world_size,
                      tflops_per_gpu=hw_per_gpu / step / 1e12,
                      mfu=model_flops / (step * layout.world_size * peak),
                      error_bar_pct=time_error_bar_pct(layout.world_size > 1, time_kind_measured(
                          job, layout, str(getattr(gpu, "id", "") or "")), rv.parallelism.framework, t.seq_len,
                          mb.host_bound or s.opt_host_paced, job_time_mechanism_bar_pct(job, layout)),
                      flops_per_step=model_flops, breakdown_s=breakdown)
