"""Achieved throughput of one GPU: GEMMs, attention, memory-bound kernels, the CPU that issues them.

Every constant of the step-time model lives in :class:`Constants` (defaults = :data:`H200_FIT`, one place,
each with its source). They were measured or fitted on one NVIDIA H200 SXM and carry to the other GPUs
through their catalog datasheet figures -- dense FLOP/s per precision and HBM bandwidth -- because they are
*fractions of the datasheet peak*: an A100 gets the H200's GEMM fraction of its own 312 TFLOP/s and the
H200's copy fraction of its own 2.0 TB/s.

Two kinds of constants (``docs/accuracy-time.md`` has the data behind each):

- measured by micro-benchmarks on the H200 (PyTorch 2.11, CUDA 13): the GEMM saturation sizes, attention
  efficiency curves, fp8 GEMM ratio, HBM copy fraction, AdamW bytes per parameter, elementwise bytes of the
  Hugging Face layer code, kernel-launch cost;
- fitted (least squares on log step time) on the 55 single-GPU H200 calibration steps in
  ``tests/data/calibration_h200.json``: ``gemm_eff``, ``elem_scale``, ``autocast_extra``,
  ``cpu_layer_fwd_s``, ``lora_bytes``; and ``fsdp_scale`` on its 13 fake-process-group FSDP2 steps;
  ``cpu_moe_block_fwd_s`` on its one mixture-of-experts step (Mixtral 8x7B; checked on the H100 Qwen3-MoE steps).
  Five-fold cross-validation of the first five: held-out median |error| 2.3%, p90 5.8%.
- fitted on the H100 80GB HBM3 (issue 33, ``tests/data/stacks_h100_raw``, its 18 "fit" plain steps):
  ``onchip_share``, the part of the eager elementwise chain that does not scale with HBM bandwidth (it does not
  move the H200); held-out median |error| 2.4% over its 5 "held_out" steps.

Formulas:

- GEMM ``[m, k] x [k, n]`` (roofline with a saturating efficiency, cf. Calculon's size-dependent matrix
  efficiency, Isaev et al. SC23): ``t = max(2mkn / (peak gemm_eff e), bytes / (hbm hbm_eff))``,
  ``e = k / (k + gemm_k0 i) * r / (r + gemm_r0 i)``, ``r = sqrt(m n)``, ``bytes = 2 (mk + kn + mn)``; ``i`` is
  the GPU's FLOP-per-byte ratio over the H200's (the roofline knee moves with it). The curve's shape was fitted
  on 153 bf16 GEMMs of transformer shapes (forward, input- and weight-gradient layouts): median |error| 7%.
- Attention (FlashAttention, Dao 2023, arXiv 2307.08691): the forward at
  ``attn_fwd_eff s / (s + attn_s0)`` of peak, the backward (2.5x the forward FLOPs: it recomputes ``QK^T``)
  at ``attn_bwd_eff s / (s + attn_bwd_s0)``, head dims below 128 scaled by ``(d/128)^attn_dim_exp``; measured
  with PyTorch SDPA on the H200 for s = 1k..16k.
- Memory-bound kernels (norms, activations, casts, the optimizer): ``bytes / (hbm hbm_eff)``; the decoder
  layer's elementwise chain on Hopper GPUs other than the H200: ``bytes ((1 - f) / (hbm hbm_eff) + f /
  (4.8 TB/s hbm_eff sms / 132))``, ``f = onchip_share`` (its on-chip, SM-bound part; fitted on the H100).
- CPU-bound steps: eager PyTorch issues every kernel from Python; a micro-batch costs
  ``max(GPU time, CPU time)`` (the CPU runs ahead of the GPU until it is the slower of the two).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Protocol

from estimator.memo import ObjectMemo

__all__ = ["ACHIEVABLE_GEMM_FRACTION", "H200_FIT", "Constants", "GpuSpec", "Rates", "gemm_fraction_scale",
           "has_gemm_measurement", "rates_for"]


class GpuSpec(Protocol):
    """The catalog GPU fields the step-time model reads (``hardware_catalog`` ``Gpu``)."""

    @property
    def bf16_tflops_dense(self) -> float: ...

    @property
    def fp8_tflops_dense(self) -> float | None: ...

    @property
    def tf32_tflops_dense(self) -> float | None: ...

    @property
    def fp32_tflops(self) -> float | None: ...

    @property
    def hbm_bandwidth_gbps(self) -> float: ...

    @property
    def tdp_w(self) -> float: ...


@dataclass(frozen=True)
class Constants:
    """The step-time model's constants. Defaults: ``H200_FIT`` below; each field names its source."""

    # bf16 GEMM: peak fraction and saturation constants (H200 micro-benchmark fit, form above).
    gemm_eff: float = 0.767
    gemm_k0: float = 178.0
    gemm_r0: float = 234.0
    # fp8 GEMM (torch._scaled_mm, e4m3, H200): 1336-1435 TFLOP/s of 1979 on m,k,n >= 4096 -> 0.72 of peak,
    # i.e. 0.89 of the bf16 fraction; casts/amax per element (copy-equivalent bytes, fused as torch.compile does).
    fp8_gemm_ratio: float = 0.89
    fp8_cast_bytes: float = 6.0
    # Transformer Engine fp8 (framework megatron): the casts are fused. ``LayerNormLinear`` / ``LayerNormMLP``
    # emit the norm's output in fp8, so the QKV and FC1 inputs cost nothing extra; the attention output and
    # the activation output go through TE's fused cast-transpose (bf16 read 2 B, fp8 row-wise and column-wise
    # copies written 1 + 1 B = 4 B per element); each GEMM's output gradient is cast-transposed the same way in
    # backward; weights are cast once per optimizer step, not per micro-batch (TE ``is_first_microbatch``
    # caches the fp8 weight copies: ``transformer_engine/pytorch/module/linear.py``): 2 + 1 + 1 B per weight.
    te_cast_bytes: float = 4.0
    # Flash attention (SDPA flash backend, H200, head dim 128, GQA 4:1): forward 459..650 TFLOP/s for
    # s = 1k..16k; backward (2.5x forward FLOPs) 255..560 TFLOP/s.
    attn_fwd_eff: float = 0.70
    attn_s0: float = 520.0
    attn_bwd_eff: float = 0.62
    attn_bwd_s0: float = 1400.0
    attn_dim_exp: float = 0.62
    # Head dims above 128 (Gemma 2's 256): cuDNN's Hopper SDPA kernels (what transformers' "sdpa" runs on the H200,
    # ``cudnn_generated_fort_native_sdpa_sm90_flash_{fprop,bprop}_wgmma_f16_knob_*_64x{128,64}x256``) reach this
    # fraction of their head-dim-128 rate per head-dim doubling: the same-FLOP attention of Gemma 2 9B (16 heads x
    # 256) and Llama 3.1 8B (32 x 128) at s = 4096 took 5.10 vs 2.02 ms forward and 17.2 vs 5.55 ms backward over 8
    # layers (kernel times of the profiled steps, tests/data/families_h200_raw, 2026-12-04).
    attn_wide_fwd_ratio: float = 0.40
    attn_wide_bwd_ratio: float = 0.32
    # The flash-attn library's FlashAttention-2 kernels predate Hopper's wgmma/TMA: 35% utilisation on an H100
    # against 75% for FlashAttention-3 (Shah et al. 2024, arXiv 2407.08608, abstract), i.e. 0.47 of the
    # Hopper-native kernel that PyTorch SDPA runs on the H200 (measured above). Applied to ``attention: flash``
    # on Hopper and Blackwell; on Ampere FlashAttention-2 is the native kernel (Dao 2023: 50-73% of peak).
    fa2_hopper_ratio: float = 0.47
    # Eager attention's memory-bound kernels on the s x s scores, copy-equivalent bytes per score (read +
    # write, counted from transformers' ``eager_attention_forward`` under bf16 autocast): forward ``* scaling``
    # 2+2, ``+ mask`` (fp32 mask, promotes) 2+4+4, softmax in fp32 4+4, ``.to(bf16)`` 4+2 = 28; backward the
    # cast's gradient 2+4, PyTorch's CUDA softmax backward (``tmp = grad * output`` 4+4+4, then tmp and output
    # read, gradient written 4+4+4), the add's gradient cast to bf16 4+2, the scaling's 2+2 = 40. The GEMMs
    # around them (Q K^T, P V and their gradients) go through the GEMM roofline. ``eager_bytes_scale`` is
    # fitted on the four eager H200 steps of device call 4 (these kernels run below the copy bandwidth).
    eager_fwd_bytes: float = 28.0
    eager_bwd_bytes: float = 40.0
    eager_bytes_scale: float = 1.58
    # Gemma 2's attention soft-capping on the bf16 scores (``w / cap``, ``tanh``, ``* cap``): forward 3 x (2+2) = 12
    # bytes per score; backward the three gradients (2+2, tanh's 2+2+2 with its saved output, 2+2) = 14. Counted
    # from the code, not fitted (no eager Gemma 2 step in the calibration set).
    softcap_fwd_bytes: float = 12.0
    softcap_bwd_bytes: float = 14.0
    # Megatron-LM's fused scale-mask-softmax + dropout on 2-byte scores: forward softmax 2+2, dropout 2+2+1
    # (mask); backward dropout 2+1+2, softmax 2+2+2 (``megatron/core/fusions/fused_softmax.py``).
    eager_fused_fwd_bytes: float = 9.0
    eager_fused_bwd_bytes: float = 11.0
    # HBM: 4.23-4.41 TB/s copy / cast / add on the H200 (of 4.8 datasheet).
    hbm_eff: float = 0.90
    # The share of the decoder layer's elementwise time (norms, activations, rotary, residual adds, casts: the
    # ``elem_*`` bytes below) that does not scale with the HBM bandwidth. Those kernels chain on tensors of one
    # layer (``[b s h]`` bf16: 16-64 MiB at the measured shapes) that one kernel writes and the next reads, and
    # the 50 MB L2 of GH100 (NVIDIA Hopper architecture in-depth, 2022; Hopper tuning guide 1.4.2.2: the L2
    # serves the whole chip, access-policy windows aside) keeps a large part of that producer-consumer traffic
    # on chip, where its rate is set by the SMs and clocks (Chips and Cheese, "Nvidia's H100: Funny L2, and Tons
    # of Bandwidth", 2023: L2 bandwidth far above HBM, bound by SM count and clock); the rest of such a kernel's
    # time (launch tail, the partial last wave) is SM-bound too. The H200's per-byte cost (``hbm_eff`` above, the
    # fitted ``elem_scale``) is split into (1 - share) that scales with the GPU's HBM bandwidth and ``share``
    # that scales with its SM count, for GPUs of the H200's memory hierarchy (Hopper: the same GH100 die, L2 and
    # clocks); other architectures keep the whole per-byte cost on HBM (no measurement of their L2). Fitted
    # (least squares on log step time) on the 14 "fit" single-GPU baseline steps of the first H100 80GB HBM3
    # measurements (tests/data/stacks_h100_raw, issue 33 item 3), the H200 calibration unchanged by
    # construction; docs/accuracy-time.md, "H100".
    onchip_share: float = 0.69
    # AdamW, copy-equivalent bytes per parameter (839M params in 100 tensors, H200, PyTorch 2.11):
    # fused fp32 6.83 ms, foreach fp32 18.6 ms, fused bf16 4.36 ms, foreach bf16 11.1 ms.
    adam_fused_fp32_bytes: float = 35.2
    adam_foreach_fp32_bytes: float = 95.6
    adam_fused_bf16_bytes: float = 22.4
    adam_foreach_bf16_bytes: float = 57.3
    # Per parameter tensor (launch-bound, 500 tensors of 4096): fused 4 us, foreach 13 us, for-loop 93 us.
    adam_tensor_fused_s: float = 4.0e-6
    adam_tensor_foreach_s: float = 13.0e-6
    adam_tensor_forloop_s: float = 93.0e-6
    # bitsandbytes AdamW8bit / PagedAdamW8bit (0.50.2, block-wise). The update kernel
    # (``kOptimizerStatic8bit2StateBlockwise``, csrc/kernels.cu) is bound by the CUDA cores, not by HBM: it quantises
    # each new state against the 256-entry dynamic code book per element, so it runs about 5x longer than its 16
    # bytes per parameter would take, takes the same time with bf16 as with fp32 parameters, and runs as fast on the
    # H100 as on the H200 (one GH100 die, the same clocks; the HBM bandwidth differs by 1.43x). Seconds per element on
    # a GH100 (67 fp32 TFLOP/s, catalog), the kernel's CUDA time under torch.profiler on the H100
    # (benchmarks/calibration/optimizer_kernels.py over tests/data/optimizer_kernels_h100: 27.9-28.6 ps on Llama 3.2
    # 1B's tensors in fp32 and bf16, 100 x 8.4M and 4 x 268M elements); other GPUs scale by their catalog fp32
    # (CUDA-core) TFLOP/s (``Rates.cuda_core_scale``). Each tensor then costs its Python path, launch and the
    # ``torch.cuda.synchronize()`` bitsandbytes runs after it (``Optimizer8bit.step``: ``sync_gpu(p)``): 45 us on the
    # H100's host for AdamW8bit, 28 us more for PagedAdamW8bit (``prefetch_state``: a ``cudaMemPrefetchAsync`` per
    # paged state before each update). The H200 calibration's host took longer: see docs/accuracy-time.md.
    adam8bit_elem_s: float = 28.3e-12
    adam8bit_tensor_s: float = 45.0e-6
    paged_tensor_s: float = 28.0e-6
    # bitsandbytes PagedAdamW32bit: its kernel (``kOptimizer32bit2State``) is bound by HBM (65 % of the H100's peak);
    # copy-equivalent bytes per parameter at this model's HBM rate, from its CUDA time on the H100 (12.9 ps per fp32
    # element, median of four parameter sets; 11.5 ps with bf16 parameters; third profile session,
    # tests/data/optimizer_kernels_h100/kernels_session3.jsonl; it reads and writes 28 / 22 bytes, counted), and what
    # each tensor adds (its Python loop with the prefetch of both paged states and the synchronisation), 105 us.
    bnb32_fp32_bytes: float = 38.8
    bnb32_bf16_bytes: float = 34.7
    bnb32_tensor_s: float = 105.0e-6
    # torch.optim.Muon on FSDP2 shards: each Newton-Schulz operator is a DTensor operator, which the host dispatches
    # (sharding propagation, redistribution, the local call) in about 127 us on the H100's host (median of one
    # decoder layer's step, 200 operators, 3 models x W = 4, 8: benchmarks/calibration/optimizer_kernels.py), while
    # the local GEMMs take a fraction of that: the step is host-bound (``timing.muon_parts``).
    dtensor_op_s: float = 127.0e-6
    # torchao 0.18 AdamW8bit / AdamW4bit: ``_AdamBase.step`` calls ``torch.compile(single_param_adam,
    # fullgraph=True, dynamic=False)`` once per parameter from Python (torchao/optim/adam.py @ v0.18.0), so each
    # tensor pays the compiled function's guard evaluation and its generated kernels' launches (4-bit: the qmap
    # quantisation, int64 codes and their packing, more kernels). Measured on the H100 (issue 29), Llama 3.2 1B full,
    # 147 parameter tensors, against 0.0911 s with fused AdamW, in two machine sessions (tests/data/stacks_h100_raw
    # call 1 / 3 at 05:21-07:54 UTC and call 6 at 08:40): 8-bit 0.1342 s and 0.1377 s (293 and 317 us per tensor),
    # 4-bit 0.2384 s and 0.1399 s (1002 and 333 us: the same case, 1.7x apart between sessions, each steady within
    # its own steps: a host-side cost this model does not explain). The constants are the means of the sessions
    # (305 us, 667 us); the 4-bit spread is what its error bar carries. Qwen2.5 1.5B (339 tensors) held out.
    torchao_adamw8_tensor_s: float = 305.0e-6
    torchao_adamw4_tensor_s: float = 667.0e-6
    # Hugging Face Adafactor (factored second moment, no first moment, no weight decay), copy-equivalent bytes
    # per parameter counted from ``transformers/optimization.py``: RMS of the parameter 4, grad**2 4+4, + eps
    # 4+4, row and column means 4+4, the outer product of the factors 4, update *= grad 4+4+4, RMS of the
    # update 4, its clipping division 4+4, * lr 4+4, the negation 4+4, the add to the parameter 4+4+4 = 84;
    # bf16 parameters add the fp32 copies of gradient and parameter and the copy back (2+4, 2+4, 4+2 = 18).
    adafactor_bytes: float = 84.0
    adafactor_upcast_bytes: float = 18.0
    # CPU side of eager PyTorch: Python + dispatcher time of one decoder layer's forward (HF modules under
    # autocast; fitted; the backward costs ``cpu_bwd_ratio`` forwards; Megatron's fused layer: assumption).
    # The GPU waits when this exceeds its own work
    # (short sequences, small models). 1000 tiny in-place adds from Python cost 9.2 us each on the H200 host
    # (``launch_s``, used for the LoRA adapters' extra ops).
    launch_s: float = 9.2e-6
    # Measured, not priced (it only classifies host-bound steps for the error bar, ``timing.Pass.host_bound``):
    # peft's Python path per LoRA adapter and forward on the measuring host, 0.14-0.19 ms (families call,
    # ``tests/data/families_h200_raw``: ``phases_median.cpu_fwd_s`` of each LoRA case minus its full-fine-tuning
    # twin, over the adapters of its layers; peft ``tuners/lora/layer.py`` ``Linear.forward``: the active-adapter
    # loop, dropout, ``lora_A``, ``lora_B``, scaling and the add, each an eager op through the dispatcher),
    # against the 5 x ``launch_s`` = 46 us the model prices. The lower end, so a step is flagged only when even
    # the cheapest measured adapter path leaves the GPU waiting.
    peft_adapter_fwd_s: float = 0.14e-3
    cpu_layer_fwd_s: float = 1.20e-3
    cpu_bwd_ratio: float = 2.0
    cpu_fused_layer_fwd_s: float = 0.25e-3
    # QLoRA: the Python path of one 4-bit linear's forward (PEFT ``lora.bnb.Linear4bit`` around bitsandbytes'
    # ``Linear4bit`` -> ``matmul_4bit`` -> ``MatMul4Bit`` autograd function -> nested ``dequantize_blockwise`` +
    # ``dequantize_4bit`` custom ops called through ctypes -> ``F.linear``), seconds per adapted linear on top of
    # the layer's (its backward costs ``cpu_bwd_ratio`` of it, like the layer's). Fitted on device call 4.
    cpu_qlora_linear_s: float = 0.97e-3
    # Elementwise traffic of one eager decoder layer, copy-equivalent bytes per token per element of the
    # tensor it runs on (H200 micro-benchmarks of the HF code paths): RMSNorm 57 per hidden element
    # forward (189 forward + backward), SwiGLU 10.4 per intermediate element, rotary embedding ~26 per q/k
    # element (five kernels), residual adds 6 each; ``torch.nn.LayerNorm`` is one kernel (2 + 2 B, fp32
    # stats). ``elem_scale`` (fitted) scales the sum; the backward
    # costs ``elem_bwd_ratio`` forwards; autocast (fp32 residual stream, a bf16 cast of each linear input)
    # adds ``autocast_extra`` of it. Fused kernels (Megatron, Transformer Engine) move ``fused_ratio`` as much:
    # fitted on the 56 published Megatron-LM / Megatron-Core / NeMo / Megatron-Bridge rows (least squares on log
    # tokens/s, ``benchmarks/calibration/fit_framework.py``; it was an assumed 0.25 before); fitted with one source
    # left out it lands at 0.45-0.70 and the held-out source's median |error| at 5.0-12.6%.
    norm_bytes: float = 57.0
    layernorm_bytes: float = 6.0
    resid_bytes: float = 12.0
    rope_bytes: float = 26.0
    act_bytes_gated: float = 10.4
    act_bytes_plain: float = 4.0
    elem_scale: float = 1.18
    elem_bwd_ratio: float = 2.5
    autocast_extra: float = 0.174
    fused_ratio: float = 0.50
    # LoRA (PEFT lora.Linear): the adapter path's casts, scale and add, bytes per token per (in + out)
    # element of each adapted linear, forward; backward twice that. Fitted.
    lora_bytes: float = 8.94
    # The same path inside Megatron-Core / Transformer Engine layers (NeMo, Megatron-Bridge LoRA: the adapter
    # GEMMs read the layer input the fused norm already wrote, dropout 0 is skipped, the scaled output is added
    # in one kernel): ``lora_fused_ratio`` of the eager bytes. Fitted on the three NeMo 24.07 LoRA rows
    # (DGX-H100, fp8; the fit lands on the bound: 0 gives -5.3, -3.8, -4.9%, 0.1 already -11..-9%) and checked on
    # the held-out Megatron-Bridge 70B LoRA row (-5.2%; ``docs/accuracy-time.md``).
    lora_fused_ratio: float = 0.0
    # FSDP2's copies around its collectives (all-gather copy-out, gradient cast and copy-in: bytes in
    # ``timing._weight_bytes``) scale by ``fsdp_scale``, fitted on fake-process-group runs.
    fsdp_scale: float = 0.758
    # Eager mixture of experts (transformers >= 5, ``grouped_mm`` experts: ``timing._cpu_moe_fwd``): the host's
    # issue time of one MoE block's forward beyond a dense MLP's (the router, the sort and gathers, the offsets,
    # the masks, two grouped GEMMs, the gate, the weighting, the inverse permutation and the top-k sum: ~37 more
    # eager ops than a dense MLP, several of them heavier than an add -- sort, histc, advanced indexing, the
    # CUTLASS grouped GEMM's host-side setup). Fitted on the one single-GPU MoE calibration step (Mixtral 8x7B
    # LoRA, H200, transformers 5.17, ``tests/data/calibration_h200.json``: -1.5 % -> -1.0 %) and checked on the
    # three H100 Qwen3-30B-A3B steps (``tests/test_moe_time.py``), which did not set it. It replaces a per-expert
    # host sync (0.25 ms x local experts, added to the GPU time: transformers 4's Python loop over the experts
    # with a ``torch.where`` per expert), which transformers 5's ``grouped_mm`` default no longer has. And
    # gather/scatter bytes per routed token x hidden element (Megatron's dispatch).
    cpu_moe_block_fwd_s: float = 2.4e-3
    moe_dispatch_bytes: float = 16.0
    # transformers 5.17 ``integrations/moe.py`` ``grouped_mm_experts_forward``, counted from the code (bf16):
    # per routed token and hidden element the gather ``hidden_states[perm // top_k]`` 2+2, its in-place
    # ``masked_fill_`` 2+2, the down output's ``masked_fill`` 2+2, ``* sample_weights`` 2+2, the inverse
    # permutation gather 2+2, the top-k ``sum`` read 2 = 22; per routed intermediate element the gate-up output's
    # ``masked_fill`` (2 x intermediate wide) 2 x (2+2) = 8 (the gate itself is ``act_bytes_gated``).
    moe_grouped_dispatch_bytes: float = 22.0
    moe_grouped_mask_bytes: float = 8.0
    # Loss over the vocabulary, bytes per logit (forward + backward): HF upcasts the bf16 logits to fp32,
    # log-softmax, its gradient and the cast back (2+4, 4+4, 4+4, 4+2 ~ 30); Megatron's fused vocab-parallel
    # cross-entropy reads bf16 logits and writes their gradient (~12).
    loss_bytes_eager: float = 30.0
    loss_bytes_fused: float = 12.0
    # Multiplier on the compute time for what no term above sees.
    compute_overhead: float = 1.0


H200_FIT: Final = Constants()
# The calibration GPU's datasheet figures (hardware_catalog h200-sxm-141gb): the reference for intensity_scale.
H200_PEAK_BF16: Final = 989.5e12
H200_HBM: Final = 4800e9
H200_SM_COUNT: Final = 132  # hardware_catalog h200-sxm-141gb sm_count (the H100 SXM5's too: the same GH100 die)
GH100_FP32_TFLOPS: Final = 67.0  # hardware_catalog h200-sxm-141gb / h100-sxm5-80gb fp32_tflops (CUDA cores)

# Maximum achievable bf16 matmul FLOP/s as a fraction of the datasheet dense peak, per GPU. GPUs do not reach
# the same fraction of their own peak: the fitted GEMM efficiency is the H200's and carries to another GPU
# scaled by that GPU's fraction over the H200's. Source: stas00/ml-engineering, compute/accelerator/README.md,
# "Maximum Achievable Matmul FLOPS comparison table" (v2, mean of 100 iterations after 50 warm-up, best shape
# of a search, PyTorch 2.5-2.7): A100 SXM 271.2 of 312 TFLOP/s (86.9%), A100 PCIe 252.9 (81.1%), H100 SXM 794.5
# of 989 (80.3%), MI300X 668.4 of 1300 (51.4%, ROCm 6.3, TunableOp). The H100 SXM's fp8 figure (70.9%) is 0.98
# of the H200's measured fp8 fraction below, as its bf16 one is, so one ratio serves both precisions.
# The H200 reference is our own micro-benchmark (tests/data/micro_h200.json): its best bf16 GEMMs reach
# 815-817 TFLOP/s (0.825 of 989.5; cf. GH200 at 900 W in the same table, 83.6%). The A100 SXM 40GB is the same
# chip at the same 400 W as the 80GB part (assumption: same fraction). GPUs not listed get the H200's fraction.
H200_GEMM_FRACTION: Final = 0.825
ACHIEVABLE_GEMM_FRACTION: Final[dict[str, float]] = {
    "h200-sxm-141gb": H200_GEMM_FRACTION,
    "a100-sxm4-80gb": 0.869,
    "a100-sxm4-40gb": 0.869,
    "a100-pcie-80gb": 0.811,
    "a100-pcie-40gb": 0.811,
    "h100-sxm5-80gb": 0.803,
    "mi300x-192gb": 0.514,
}


def gemm_fraction_scale(gpu: object) -> float:
    """This GPU's achievable GEMM fraction over the H200's (1.0 for GPUs without a published figure)."""
    frac = ACHIEVABLE_GEMM_FRACTION.get(str(getattr(gpu, "id", "") or ""))
    return frac / H200_GEMM_FRACTION if frac else 1.0


def has_gemm_measurement(gpu: object) -> bool:
    """Whether the GPU's achievable GEMM fraction is a published measurement (not the H200's, assumed)."""
    return str(getattr(gpu, "id", "") or "") in ACHIEVABLE_GEMM_FRACTION


@dataclass(frozen=True)
class Rates:
    """One GPU's achievable rates under :class:`Constants`: FLOP/s at full GEMM size, bytes/s."""

    gemm_flops: float
    fp8_flops: float
    hbm_bytes: float
    peak_bf16: float
    k: Constants
    fa2_ratio: float = 1.0  # FlashAttention-2 (flash-attn) speed relative to the native kernel on this GPU
    intensity_scale: float = 1.0  # this GPU's FLOP per HBM byte over the H200's (GEMM saturation sizes)
    elem_bytes: float = 0.0  # the layer elementwise kernels' copy-equivalent bytes/s (0: ``hbm_bytes``)
    cuda_core_scale: float = 1.0  # a CUDA-core-bound kernel's time here over a GH100's (its fp32 TFLOP/s over this)

    def gemm_time(self, m: float, k: float, n: float, fp8: bool = False) -> float:
        """Roofline GEMM time in seconds (formula in the module docstring)."""
        if m <= 0 or k <= 0 or n <= 0:
            return 0.0
        c = self.k
        r = math.sqrt(m * n)
        k0, r0 = c.gemm_k0 * self.intensity_scale, c.gemm_r0 * self.intensity_scale
        eff = k / (k + k0) * r / (r + r0)
        peak = self.fp8_flops if fp8 else self.gemm_flops
        elem = 1.0 if fp8 else 2.0
        compute = 2.0 * m * k * n / (peak * eff)
        memory = elem * (m * k + k * n) + 2.0 * m * n
        return max(compute, memory / self.hbm_bytes)

    def attn_fwd_time(self, flops: float, seq: float, head_dim: int, fa2: bool = False) -> float:
        c = self.k
        eff = (c.attn_fwd_eff * seq / max(seq + c.attn_s0, 1e-9)
               * _dim_factor(head_dim, c.attn_dim_exp, c.attn_wide_fwd_ratio))
        return flops / max(self.peak_bf16 * eff * (self.fa2_ratio if fa2 else 1.0), 1e-9)

    def attn_bwd_time(self, fwd_flops: float, seq: float, head_dim: int, fa2: bool = False) -> float:
        c = self.k
        eff = (c.attn_bwd_eff * seq / max(seq + c.attn_bwd_s0, 1e-9)
               * _dim_factor(head_dim, c.attn_dim_exp, c.attn_wide_bwd_ratio))
        return 2.5 * fwd_flops / max(self.peak_bf16 * eff * (self.fa2_ratio if fa2 else 1.0), 1e-9)

    def mem_time(self, nbytes: float) -> float:
        """Seconds of a memory-bound kernel that streams ``nbytes`` through HBM (optimizer, weights, loss)."""
        return nbytes / self.hbm_bytes

    def elem_time(self, nbytes: float) -> float:
        """Seconds of the decoder layer's elementwise kernels moving ``nbytes`` copy-equivalent bytes: part of
        it served on chip (:attr:`Constants.onchip_share`), at ``elem_bytes``; ``mem_time`` on the H200."""
        return nbytes / self.elem_bytes if self.elem_bytes > 0.0 else nbytes / self.hbm_bytes


def _dim_factor(head_dim: int, exp: float, wide_ratio: float = 1.0) -> float:
    """Attention efficiency against head dim 128: ``(d/128)^exp`` below, ``wide_ratio`` per doubling above."""
    d = max(head_dim, 1) / 128.0
    return math.pow(d, exp) if d <= 1.0 else math.pow(wide_ratio, math.log2(d))


def _peak_flops(gpu: GpuSpec, precision: str) -> float:
    tflops = gpu.bf16_tflops_dense
    if precision == "fp32":
        tflops = gpu.tf32_tflops_dense or gpu.fp32_tflops or gpu.bf16_tflops_dense / 2
    return float(tflops) * 1e12


# rates are a pure function of the catalog GPU object, the constants and the precision: once each
_RATES: Final[ObjectMemo[Rates]] = ObjectMemo(1024)


def rates_for(gpu: GpuSpec, precision: str, k: Constants = H200_FIT) -> Rates:
    """Rates of ``gpu`` for a training precision. fp32 training uses TF32 tensor cores (PyTorch's
    ``allow_tf32`` / Megatron default); fp8-mixed runs the linears at the fp8 peak, the rest in bf16. The GEMM
    efficiency is the H200's times :func:`gemm_fraction_scale` (published achievable-matmul fractions).
    Memoised per GPU and constants object and precision."""
    return _RATES.get_or_compute((gpu, k), (precision,), lambda: _rates_for(gpu, precision, k))


def _rates_for(gpu: GpuSpec, precision: str, k: Constants) -> Rates:
    peak = _peak_flops(gpu, precision)
    fp8 = float(gpu.fp8_tflops_dense or gpu.bf16_tflops_dense) * 1e12
    hbm = float(gpu.hbm_bandwidth_gbps) * 1e9 * k.hbm_eff
    fa2 = k.fa2_hopper_ratio if str(getattr(gpu, "arch", "")) in ("Hopper", "Blackwell") else 1.0
    intensity = (peak / hbm) / (H200_PEAK_BF16 / (H200_HBM * k.hbm_eff))
    gemm_eff = k.gemm_eff * gemm_fraction_scale(gpu)
    return Rates(gemm_flops=peak * gemm_eff, fp8_flops=fp8 * gemm_eff * k.fp8_gemm_ratio, hbm_bytes=hbm,
                 peak_bf16=float(gpu.bf16_tflops_dense) * 1e12 if precision != "fp32" else peak, k=k,
                 fa2_ratio=fa2, intensity_scale=intensity, elem_bytes=_elem_bytes(gpu, hbm, k),
                 cuda_core_scale=GH100_FP32_TFLOPS / float(getattr(gpu, "fp32_tflops", None) or GH100_FP32_TFLOPS))


def _elem_bytes(gpu: GpuSpec, hbm: float, k: Constants) -> float:
    """The layer elementwise kernels' bytes/s (:attr:`Constants.onchip_share`): per byte, ``1 - share`` of the
    H200's cost scaled by its HBM bandwidth over this GPU's, ``share`` by its SM count over this GPU's (L2 and SM
    bound), on GPUs of the H200's memory hierarchy (Hopper with a catalog SM count); ``hbm`` elsewhere. Equals
    ``hbm`` on the H200 itself."""
    sms = getattr(gpu, "sm_count", None)
    if str(getattr(gpu, "arch", "")) != "Hopper" or not sms:
        return hbm
    h200 = H200_HBM * k.hbm_eff
    onchip = h200 * float(sms) / H200_SM_COUNT
    if hbm == h200 and onchip == h200:
        return hbm
    return 1.0 / ((1.0 - k.onchip_share) / hbm + k.onchip_share / onchip)
