"""Memory and time of the fine-tuning stacks' mechanisms (issue 29), one formula each, at the mechanism: what a
kernel saves for backward, its transient, what goes to the host and over PCIe, the optimizers' states and
Muon's Newton-Schulz work. Plain numbers in, bytes / FLOPs out, so the training model (memory, activations,
timing, host RAM) can call them wherever it lives.

Sources (file @ commit, as read):

- Hugging Face ``ForCausalLMLoss`` (``src/transformers/loss/loss_utils.py``): the full logits upcast to fp32;
  cross-entropy keeps fp32 log-probabilities; 10 bytes per logit at the forward peak, 12 in backward
  (:mod:`estimator.activations`, measured on the H200).
- Chunked loss: torchtune ``CEWithChunkedOutputLoss`` (``torchtune/modules/loss/ce_chunked_output_loss.py``,
  ``num_output_chunks=8``): the model returns the bf16 logits in chunks, the loss upcasts "one chunk at a time";
  in eager mode each chunk's fp32 log-softmax output stays saved for backward (``log_softmax`` saves its result),
  so the bf16 logits (2 bytes) and the fp32 log-probabilities (4) of every chunk remain, plus one fp32 chunk in
  flight. TRL's ``loss_type="chunked_nll"`` (``trl/trainer/sft_config.py`` @016013e8) also drops the ignored
  tokens before the LM head: sized here with every token trained (pre-training style packing; a completion-only
  dataset saves more).
- TRL's chunked loss: ``ChunkedLogProbFunction`` (huggingface/trl ``trl/kernels/chunked_logprob.py`` @483dc652), see
  :func:`loss_bytes`.
- Fused loss: Liger ``fused_linear_cross_entropy_forward`` (linkedin/Liger-Kernel
  ``src/liger_kernel/ops/fused_linear_cross_entropy.py`` @00eba634): ``chunk_size`` = next power of two of
  ``BT / ceil(V / H)`` so the transient logits chunk is about ``BT x H`` elements in the input dtype; the input
  gradient ``grad_input`` (``zeros_like(_input)``, BT x H) is computed in forward and kept for backward; the LM
  head's ``grad_weight`` only when the head trains; ``loss_1d`` fp32 per token. Apple's Cut Cross-Entropy
  (apple/ml-cross-entropy ``cut_cross_entropy/cce.py``) keeps only the log-sum-exp per token and recomputes
  blocks in backward: at most Liger's bytes, sized as Liger's.
- Liger SwiGLU (``src/liger_kernel/ops/swiglu.py`` @06e2af7d, ``LigerSiLUMulFunction``): ``save_for_backward(a, b)``
  and the backward recomputes ``silu(a)``: two ffn-wide tensors instead of Hugging Face's three (gate, up,
  silu(gate)). Liger RMSNorm (``src/liger_kernel/ops/rms_norm.py``): saves the input in its own dtype and the fp32
  ``rstd`` per row, not the fp32 upcast nor the normalised tensor. Liger RoPE: saves cos / sin only, as Hugging
  Face's ``apply_rotary_pos_emb`` (multiplications by non-trainable tensors save no token-sized operand): no
  memory change.
- Offloading: torchtune ``OffloadActivations`` (``torchtune/training/_activation_offloading.py``:
  ``saved_tensors_hooks``, pinned host memory, a side stream, the next layer's tensors prefetched in backward);
  Unsloth ``Unsloth_Offloaded_Gradient_Checkpointer`` (``unsloth/models/llama.py`` @015bdef0;
  axolotl ``src/axolotl/utils/gradient_checkpointing/unsloth.py``): each checkpointed layer's input
  ``.to("cpu", non_blocking=True)`` in forward and back in backward.
- Optimizers: :mod:`estimator.training.optimizers` (their rows); Muon ``torch/optim/_muon.py`` @098e03f9
  (``_zeropower_via_newtonschulz``: bf16 copy, transposed to the short side, ``ns_steps=5`` of
  ``A = X X^T; B = bA + cA^2; X = aX + BX``).
- torchao low-bit AdamW (``AdamW4bit`` / ``AdamW8bit``; pytorch/ao tag v0.18.0, the wheel measured:
  ``torchao/optim/adam.py``, ``subclass_4bit.py``, ``subclass_8bit.py``, ``quant_utils.py``): see
  :func:`torchao_adamw_step_bytes`.
"""

from __future__ import annotations

import math
from typing import Final

__all__ = [
    "CHUNKED_LOSS_CHUNKS",
    "LIGER_BYTES_SCALE",
    "LIGER_NORM_RATIO",
    "LIGER_ROPE_RATIO",
    "LIGER_SWIGLU_RATIO",
    "NS_STEPS",
    "OFFLOAD_KEEP_LAYERS",
    "PINNED_BYTES_PER_S",
    "cce_head_bytes",
    "liger_flce_head_bytes",
    "liger_norm_bytes",
    "liger_swiglu_saving",
    "loss_bytes",
    "loss_transient_fp32_bytes",
    "muon_dtensor_ops",
    "muon_gather_bytes",
    "muon_local_gemms",
    "muon_newton_schulz_flops",
    "muon_newton_schulz_local_flops",
    "muon_split_long_side",
    "offload_hook_pinned_bytes",
    "offload_split",
    "offload_transfer_seconds",
    "torchao_adamw_step_bytes",
]

#: torchtune CEWithChunkedOutputLoss(num_output_chunks=8)
CHUNKED_LOSS_CHUNKS: Final = 8
#: activation offloading: the layers whose stored tensors are on the GPU at once (the one computed and the one
#: copied / prefetched on the side stream: torchtune OffloadActivations, Unsloth's checkpointer)
OFFLOAD_KEEP_LAYERS: Final = 2
#: TRL trl/kernels/chunked_logprob.py tiles
TRL_TOKEN_CHUNK: Final = 4096
TRL_VOCAB_CHUNK: Final = 32768
#: torch.optim.Muon ns_steps default (DEFAULT_NS_STEPS)
NS_STEPS: Final = 5


def loss_bytes(kernel: str, tokens: int, vocab_local: float, hidden: int, softcap: bool, *,
               impl: str = "torchtune", head_trainable: bool = False, head_grad_bytes: int = 0) -> tuple[int, int]:
    """(forward peak, backward peak) bytes of the loss on one rank beyond the LM head's input, for ``tokens``
    tokens and ``vocab_local`` vocabulary entries per rank.

    ``materialized``: Hugging Face's 10 / 12 bytes per logit (+2 for a softcap's saved tanh).

    ``chunked``, ``impl="torchtune"`` (``CEWithChunkedOutputLoss``, eager): the bf16 logits and the fp32
    log-probabilities of every chunk kept (6 bytes per logit), one fp32 chunk (its upcast and softmax, 8 bytes per
    logit of one chunk) in flight each way. A logit soft-cap (``softcap``) applied in such a loss acts on the
    upcast chunk, so ``tanh`` keeps its fp32 output: 4 bytes per logit (H100, Gemma 2 2B LoRA at 4k tokens, the
    soft-cap in the loss after ``.float()``: measured 1.63 GiB over the bf16 2 bytes, 4,096 x 256,000 x 2 bytes =
    1.95 GiB). torchtune's own Gemma 2 caps no logit (``Gemma2FinalNorm`` soft-caps the normed hidden state
    before the output projection: pytorch/torchtune ``torchtune/models/gemma2/_component_builders.py``), so
    the caller passes ``softcap=False`` for that stack.

    ``chunked``, ``impl="trl"`` (TRL's ``ChunkedLogProbFunction``, huggingface/trl
    ``trl/kernels/chunked_logprob.py`` @483dc652, what ``loss_type="chunked_nll"`` runs): the projection on
    ``[TOKEN_CHUNK_SIZE=4096, VOCAB_CHUNK_SIZE=32768]`` tiles in the compute dtype, five fp32 statistics per token,
    ``log_z`` and the entropy (fp32) kept; with a frozen head (LoRA) the forward also builds the per-token
    Jacobian (hidden-sized, input dtype) kept for backward, whose backward is ``grad_logprobs * jacobian.float()``
    (fp32) cast back; with a trained head the backward recomputes the tiles into an fp32 ``grad_hidden`` and an
    fp32 ``grad_weight`` (``head_grad_bytes`` x 2 for bf16 weights: the fp32 accumulator, then its cast).

    ``fused`` (Liger ``fused_linear_cross_entropy_forward``; Cut Cross-Entropy sized the same, at most): no logits
    kept; the bf16 input gradient (2 x tokens x hidden) made in forward and kept for backward, the transient
    logits chunk (about tokens x hidden elements, bf16) and the fp32 per-token loss in forward; with a trained
    head its gradient (``head_grad_bytes``, the parameter dtype) is also made in forward (from backward on it is
    the head's gradient, counted with the gradients).
    """
    logits = tokens * vocab_local
    cap = 2 * logits if softcap else 0
    if kernel == "materialized":
        return int(10 * logits + cap), int(12 * logits + cap)
    if kernel == "chunked" and impl == "trl":
        tile = 2 * min(tokens, TRL_TOKEN_CHUNK) * min(vocab_local, TRL_VOCAB_CHUNK)
        stats, kept = 20 * tokens, 8 * tokens
        if not head_trainable:
            jacobian = 2 * tokens * hidden
            expected_w = 4 * min(tokens, TRL_TOKEN_CHUNK) * hidden
            return (int(kept + jacobian + stats + tile + expected_w),
                    int(kept + jacobian + 4 * tokens * hidden + 2 * tokens * hidden))
        return int(kept + stats + tile), int(kept + tile + 4 * tokens * hidden + 2 * head_grad_bytes)
    if kernel == "chunked":
        chunk = logits / CHUNKED_LOSS_CHUNKS
        kept_logits = 6 * logits + (4 * logits if softcap else 0)
        return int(kept_logits + 8 * chunk), int(kept_logits + 8 * chunk)
    grad_input = 2 * tokens * hidden
    chunk_logits = 2 * tokens * hidden
    per_token = 4 * tokens
    head = head_grad_bytes if head_trainable else 0  # made in forward; in backward it is the head's gradient
    return int(grad_input + chunk_logits + per_token + head), int(grad_input + per_token)


def loss_transient_fp32_bytes(kernel: str, tokens: int, vocab: int, vocab_div: int, hidden: int, *,
                              impl: str = "torchtune") -> int:
    """The largest short-lived block the loss allocates and frees on one rank (``vocab / vocab_div`` entries of the
    vocabulary each): what the caching allocator must
    find room for again at every step (:mod:`estimator.training.overhead`'s reserve, whose ``0.77 x`` term was
    fitted on materialised losses, where this block is the fp32 logits).

    ``materialized``: the fp32 upcast of the whole logits (``ForCausalLMLoss``: ``logits.float()``);
    ``chunked`` (torchtune): the fp32 upcast of one of ``CHUNKED_LOSS_CHUNKS`` chunks; ``chunked``
    (``impl="trl"``): one ``[TOKEN_CHUNK_SIZE, VOCAB_CHUNK_SIZE]`` fp32 tile; ``fused`` (Liger
    ``fused_linear_cross_entropy_forward``: chunks of about ``tokens x hidden / vocab`` rows, so about
    ``tokens x hidden`` logits, upcast to fp32 in the kernel): ``4 x tokens x hidden``.
    Measured on the H100 (tests/data/stacks_h100_raw, issue 29): a fused or chunked loss leaves 0.4-1.5 GiB
    reserved-but-free where the materialised loss of the same run leaves 3-6 GiB.
    """
    if kernel == "materialized":
        return 4 * tokens * vocab // vocab_div
    vocab_local = vocab / vocab_div
    if kernel == "chunked" and impl == "trl":
        return int(4 * min(tokens, TRL_TOKEN_CHUNK) * min(vocab_local, TRL_VOCAB_CHUNK))
    if kernel == "chunked":
        return int(4 * tokens * vocab_local / CHUNKED_LOSS_CHUNKS)
    return int(4 * tokens * hidden)


# ---------------------------------------------------------------------------------------------- step time
# Liger's kernels against Hugging Face's eager op chains, bytes per element of the tensor each runs on, forward,
# counted (bf16 activations, fp32 where the eager code upcasts); the ratio scales the measured eager constants of
# :class:`estimator.training.efficiency.Constants` (``norm_bytes``, ``act_bytes_gated``, ``rope_bytes``), and the
# backward keeps the eager model's ``elem_bwd_ratio`` of the forward.
#
# - RMSNorm: transformers ``LlamaRMSNorm.forward`` (``models/llama/modeling_llama.py``) runs ``.to(float32)``
#   (2 read + 4 written), ``pow(2)`` (4 + 4), ``mean`` (4), ``* rsqrt`` (4 + 4), ``.to(input_dtype)`` (4 + 2) and
#   ``weight *`` (2 + 2): 36 bytes. Liger ``_rms_norm_forward_kernel`` (linkedin/Liger-Kernel
#   ``src/liger_kernel/ops/rms_norm.py`` @00eba634): one pass, X read and Y written (2 + 2) and a 4-byte ``rstd`` per
#   row: 4 bytes, 4 / 36 of the eager chain.
# - SwiGLU: ``act_fn(gate_proj(x)) * up_proj(x)``: ``silu`` (2 + 2) and the product (4 + 2): 10 bytes; Liger
#   ``_swiglu_forward_kernel`` (``src/liger_kernel/ops/swiglu.py`` @00eba634) reads a and b and writes c: 6.
# - RoPE: ``apply_rotary_pos_emb`` ``q * cos`` (2 + 2), ``rotate_half`` (the negated half 1 + 1, ``cat`` 2 + 2),
#   ``* sin`` (2 + 2) and the sum (4 + 2): 20 bytes per q / k element (cos / sin broadcast, not counted); Liger
#   ``_triton_rope`` (``src/liger_kernel/ops/rope.py`` @00eba634) rotates q and k in place: 2 + 2, 4 / 20.
#: the one fitted number of Liger's kernels: the measured Triton kernels move this many times their counted bytes
#: (reductions, masked tails and launch gaps the count leaves out; fitted on the "fit" H100 cases,
#: tests/test_stacks_time.py)
LIGER_BYTES_SCALE: Final = 1.7
LIGER_NORM_RATIO: Final = LIGER_BYTES_SCALE * 4.0 / 36.0
LIGER_SWIGLU_RATIO: Final = LIGER_BYTES_SCALE * 6.0 / 10.0
LIGER_ROPE_RATIO: Final = LIGER_BYTES_SCALE * 4.0 / 20.0


def liger_flce_head_bytes(tokens: float, vocab_local: float, hidden: int, head_trainable: bool,
                          weight_bytes: int = 2) -> tuple[float, float]:
    """(forward, backward) copy-equivalent bytes of Liger's fused linear cross-entropy beyond the LM head's GEMMs
    (``fused_linear_cross_entropy_forward``, ``src/liger_kernel/ops/fused_linear_cross_entropy.py`` @00eba634).

    The logits are made chunk by chunk (``chunk_size`` = next power of two of ``BT / ceil(V / H)``, so about
    ``V / H`` chunks whatever the length); ``liger_cross_entropy_kernel`` reads each bf16 logits chunk once and
    writes its gradient in place (2 + 2 bytes per logit, against the materialised loss's ``loss_bytes_eager``
    30), and the input gradient is computed in forward (the same GEMM, moved). With a trained head each chunk
    adds its ``grad_logits^T @ input`` into ``grad_weight`` (``grad_weight.add_(grad_logits_chunk.t() @
    input_chunk)`` without ``accum_dtype``): the ``V x H`` product written and read in the compute dtype (2 + 2)
    and the accumulator read and written in the weight's dtype (``weight_bytes``: fp32 under mixed precision),
    once per chunk, the term that makes the fused
    loss of a short full fine-tune slower than the materialised one. Backward: ``grad_input`` scaled by the
    loss's gradient (2 + 2 per input element). Cut Cross-Entropy (``loss_kernel: fused`` too) is sized the same:
    it writes no logits but recomputes them in backward; measured on the H100 within 3 % of the materialised loss
    either way (docs/stacks.md)."""
    inc = max(1, math.ceil(vocab_local / hidden)) if hidden else 1
    rows = 1 << max(0, math.ceil(tokens / inc) - 1).bit_length()  # triton.next_power_of_2
    chunks = math.ceil(tokens / rows) if tokens else 1
    fwd = 4.0 * tokens * vocab_local
    if head_trainable:
        fwd += chunks * (4.0 + 2.0 * weight_bytes) * vocab_local * hidden
    return fwd, 4.0 * tokens * hidden


def cce_head_bytes(tokens: float, vocab_local: float, hidden: int) -> tuple[float, float]:
    """(forward, backward) bytes of Cut Cross-Entropy's loss beyond the LM head's GEMMs (apple/ml-cross-entropy
    ``cut_cross_entropy/cce.py``, ``cce_lse_forward_kernel`` / ``cce_backward_kernel``): the logits live in SRAM
    block by block, only the fp32 log-sum-exp per token is written (4 bytes per token), and the backward
    recomputes each block before its two gradient products (the head's forward GEMM once more, timed by the
    caller); the input gradient is written once (2 bytes per input element)."""
    del vocab_local
    return 4.0 * tokens, 4.0 * tokens + 2.0 * tokens * hidden


#: pinned host memory over PCIe, one direction, what ``non_blocking`` copies reach on a Gen5 x16 link
#: (64 GB/s per direction nominal, catalog ``pcie_gbps_per_direction``; ~50 GB/s achievable with pinned memory)
PINNED_BYTES_PER_S: Final = 50e9




def liger_swiglu_saving(ffn: int) -> int:
    """Bytes per token and layer Liger's SwiGLU saves less than Hugging Face's (silu(gate) not kept, bf16)."""
    return 2 * ffn


def liger_norm_bytes(hidden: int, input_bytes: int) -> int:
    """Bytes per token one Liger RMSNorm saves: its input in its own dtype and the fp32 ``rstd``."""
    return input_bytes * hidden + 4


def offload_split(mode: str, stored_bytes: int, layers: int, checkpoint_bytes: int) -> tuple[int, int]:
    """(bytes left on the GPU, bytes in pinned host memory) of ``stored_bytes`` saved activations over
    ``layers`` layers.

    ``all`` (torchtune OffloadActivations): every saved tensor to the host; the GPU holds the layer being
    computed and the one prefetched (two layers' worth). ``checkpoints`` (Unsloth): the checkpointed inputs
    (``checkpoint_bytes``, part of ``stored_bytes``) go to the host but two layers' inputs stay in flight; the
    rest stays. ``none``: everything on the GPU.
    """
    if mode == "none" or layers <= 0:
        return stored_bytes, 0
    if mode == "all":
        on_gpu = min(stored_bytes, 2 * stored_bytes // layers)
        return on_gpu, stored_bytes - on_gpu
    in_flight = min(checkpoint_bytes, 2 * checkpoint_bytes // layers)
    host = checkpoint_bytes - in_flight
    return stored_bytes - host, host


def offload_hook_pinned_bytes(layers: int, stored_per_layer: int, weight_casts: int, outside_layers: int) -> int:
    """Pinned host bytes one rank holds at the end of forward under a saved-tensors offloading hook
    (``training.activation_offloading="all"``: TRL ``get_act_offloading_ctx_manager`` / torchtune
    ``OffloadActivations``; huggingface/trl ``trl/models/activation_offloading.py`` @0167b7df, ported from
    pytorch/torchtune ``torchtune/training/_activation_offloading.py``).

    ``pack_tensor`` gives every saved tensor of at least ``min_offload_size`` = 1 KiB that is not a parameter
    (nor a parameter's storage) its own ``torch.empty_like(..., pin_memory=True)`` copy, once per storage
    (``storage_to_tensor_id`` deduplicates tensors saved twice), and ``unpack_tensor`` drops a copy only when
    backward reads it: at the end of forward the host holds a copy of everything saved, on *every* layer (the two
    layers the GPU keeps in flight are GPU copies beside their host copies). Summed:

    - ``layers x stored_per_layer``: what each layer keeps between forward and backward. Under
      non-reentrant checkpointing the layer's inner saves go to the checkpoint's own hooks (innermost hooks win)
      and only its inputs reach the offloading hook (``torch/utils/checkpoint.py`` ``_NoopSaveInputs``
      ``ctx.save_for_backward(*args)``, outside the checkpoint's ``saved_tensors_hooks``);
    - ``weight_casts``: under ``torch.autocast`` with fp32 weights each linear saves the bf16 *copy* of its weight
      (autocast's cast cache, not a parameter, so the hook offloads it) where the layer is not checkpointed;
    - ``outside_layers``: what is saved outside the decoder layers: the embedding's indices, the final norm's
      tensors and the loss's (the LM head itself runs under TRL's ``NoOpManager``: its input and weight stay).

    The caching host allocator rounds a *block* up to a power of two (``aten/src/ATen/core/CachingHostAllocator.h``
    ``allocate``: ``c10::llvm::PowerOf2Ceil(size)``) but the H100 measurements (torch 2.11,
    ``tests/data/stacks_h100_raw``) show neither the rounding in ``host_memory_stats()`` nor in the RSS (a
    3.9 GiB fp32 log-probability copy would pin 8 GiB): the figure is the requested bytes.
    """
    return max(0, layers * stored_per_layer + weight_casts + outside_layers)


def offload_transfer_seconds(host_bytes: int, pcie_bytes_per_s: float, compute_seconds: float,
                             boundary_bytes: int = 0) -> float:
    """Seconds of activation offloading's PCIe copies not hidden behind one micro-batch's compute. The hooks
    (torchtune ``OffloadActivations``, ``torchtune/training/_activation_offloading.py``; TRL's port in
    ``trl/models/activation_offloading.py``) copy each saved tensor to the host on a side stream as forward goes
    and prefetch it back one layer ahead in backward:

    - the layers' bytes (``host_bytes - boundary_bytes``) overlap the compute: only their excess over it shows;
    - the ``boundary_bytes`` saved at the loss (the materialised loss's fp32 log-probabilities) are copied out
      when forward ends and needed back first thing in backward, with no compute between to hide them: both
      directions are serial.

    No fitted constant. On the H100 (tests/data/stacks_h100_raw, tests/test_stacks_time.py) this gives the
    measured step ratios of the three offloaded cases: 8k tokens with checkpointing (the log-probabilities are
    most of the bytes and all the cost), 4k without (the layers' 10 GiB outrun the compute) and, held out, 16k."""
    if host_bytes <= 0:
        return 0.0
    boundary = min(max(boundary_bytes, 0), host_bytes)
    serial = 2 * boundary / pcie_bytes_per_s
    layers = 2 * (host_bytes - boundary) / pcie_bytes_per_s
    return serial + max(0.0, layers - compute_seconds)


def muon_newton_schulz_flops(rows: int, cols: int, steps: int = NS_STEPS) -> float:
    """FLOPs of Muon's Newton-Schulz on one ``rows`` x ``cols`` matrix: with ``m`` the short side and ``n`` the
    long one, each step is ``X X^T`` (2 m^2 n), ``A @ A`` (2 m^3) and ``B @ X`` (2 m^2 n)."""
    m, n = min(rows, cols), max(rows, cols)
    return steps * (4.0 * m * m * n + 2.0 * m ** 3)


#: Below this many elements (``m x n``) DTensor's cost-based sharding propagation keeps every Newton-Schulz product
#: of a wide or square ``Shard(0)`` matrix split over its rows (gathering the other operand); from it on it splits
#: the long side and runs ``A @ A`` whole (:func:`muon_newton_schulz_local_flops`). A tall matrix is transposed first,
#: so its shard already lies along the long side, which stays split at any size. Bracketed by probing torch 2.13 on
#: the CPU at W = 4 and 8 (benchmarks/check/muon_dtensor.py): rows split up to 393,216 elements (256 x 1536), long
#: side split from 524,288 (256 x 2048, 512 x 1024, 128 x 4096); 2^19, 1 MiB of bf16; tall from 256 x 128 up.
MUON_LONG_SPLIT_MIN_ELEMENTS: Final = 1 << 19


def muon_split_long_side(rows: int, cols: int) -> bool:
    """Whether DTensor splits the long side of this matrix's Newton-Schulz products rather than its rows
    (:data:`MUON_LONG_SPLIT_MIN_ELEMENTS`)."""
    return rows > cols or rows * cols >= MUON_LONG_SPLIT_MIN_ELEMENTS


def muon_local_gemms(rows: int, cols: int, shards: int) -> tuple[tuple[float, float, float], ...]:
    """The three GEMMs (``m x k`` by ``k x n``) one rank runs per Newton-Schulz step of Muon on a matrix FSDP2 shards
    over ``shards`` ranks (a DTensor ``Shard(0)``), as DTensor's sharding propagation (torch
    ``distributed/tensor/_ops/_matrix_ops.py``, chosen by redistribution cost) runs them; ``m`` is the short side,
    ``n`` the long one. Whole on one rank: ``X X^T`` (m x n x m), ``A @ A`` (m x m x m), ``B @ X`` (m x m x n). A
    tall matrix, or one of :data:`MUON_LONG_SPLIT_MIN_ELEMENTS` or more: the long side ``n`` of ``X X^T`` (a
    ``Partial`` sum, all-reduced) and of ``B @ X`` split over the ranks, ``A @ A`` whole. A smaller wide or square
    one: every product's rows (``m``) split. Recorded for Llama 3.1 8B's, Llama 3.2 3B's and Qwen2.5 1.5B's matrices
    at W = 4 and 8 (torch 2.11 on the H100, tests/data/optimizer_kernels_h100; torch 2.13 on the CPU,
    tests/test_muon_dtensor.py)."""
    m, n = float(min(rows, cols)), float(max(rows, cols))
    if shards > 1 and not muon_split_long_side(rows, cols):
        part = m / shards
        return (part, n, m), (part, m, m), (part, m, n)
    local = n / max(shards, 1)
    return (m, local, m), (m, m, m), (m, m, local)


def muon_newton_schulz_local_flops(rows: int, cols: int, shards: int, steps: int = NS_STEPS) -> float:
    """FLOPs one rank runs for Muon's Newton-Schulz on a matrix sharded over ``shards`` ranks
    (:func:`muon_local_gemms`): ``4 m^2 n / shards + 2 m^3`` per step when the long side is split, ``1 / shards`` of
    the whole when the rows are, :func:`muon_newton_schulz_flops` when ``shards`` is 1."""
    return steps * sum((2.0 * a * k * b for a, k, b in muon_local_gemms(rows, cols, shards)), 0.0)


def muon_dtensor_ops(rows: int, cols: int, steps: int = NS_STEPS) -> int:
    """Operators ``torch.optim.Muon`` dispatches per matrix and step (torch ``optim/_muon.py``,
    ``_single_tensor_muon`` and ``_zeropower_via_newtonschulz``): ``lerp_``, ``lerp`` (Nesterov), the bf16 copy,
    ``norm``, ``clamp``, ``div_``, ``mul_`` (decay) and ``add_``; per Newton-Schulz step the transpose, ``mm`` and
    two ``addmm``; a tall matrix (``rows > cols``) is transposed in and out. Counted on the H100 (200 for one Llama
    decoder layer's seven matrices, two of them tall)."""
    return 8 + 4 * steps + (2 if rows > cols else 0)


def muon_gather_bytes(rows: int, cols: int, shards: int, grad_bytes: int = 4) -> int:
    """Bytes one rank would receive to run Newton-Schulz on a matrix split over ``shards`` ranks (FSDP / TP) if
    the whole matrix were gathered once and the update scattered back: ``(shards - 1) / shards`` of it each way.
    Not what DTensor does (:func:`muon_newton_schulz_local_flops`: it redistributes operands at each Newton-Schulz
    step, for a long-split matrix two ``m x m`` all-reduces per step); nothing times either, an assumption says so."""
    if shards <= 1:
        return 0
    return int(2 * rows * cols * grad_bytes * (shards - 1) / shards)


#: torchao ``_AdamBase._new_buffer`` (``torchao/optim/adam.py``, v0.18.0): "follow bitsandbytes, only quantize tensors
#: >= 4096 values" (and a whole number of blocks); smaller tensors get ``torch.zeros_like`` states
TORCHAO_MIN_QUANT_NUMEL: Final = 4096


def torchao_adamw_step_bytes(numel: int, block_bits: int, block_size: int) -> int:
    """The transient of torchao's low-bit AdamW step for its largest parameter tensor (``numel`` local elements).

    ``_AdamBase.step`` (``torchao/optim/adam.py`` @v0.18.0) loops over the parameters and calls
    ``torch.compile(single_param_adam, fullgraph=True, dynamic=False)`` once per parameter, so only one
    parameter's intermediates exist at a time (freed when its compiled call returns): the peak is that of the
    largest quantised tensor (the embedding / LM head of a full fine-tune; one FSDP2 shard of it: ``_new_buffer``
    quantises ``p.to_local()``). Inside the compiled graph Inductor realises, per state (``exp_avg``,
    ``exp_avg_sq``):

    - the fp32 state after ``exp_avg.float().lerp(grad_f32, 1 - beta1)`` (the dequantised state, ``float()``
      through ``dequant_with_qmap``): read by the per-block ``amax`` of ``scale_tensor``, by the quantisation and
      by the parameter update, so it is materialised: 4 bytes per element;
    - the new fp32 ``scale``, one per ``block_size`` elements (``scale_tensor``), before ``copy_`` into the state;
    - 4-bit only: the codes of ``quantize_4bit_with_qmap`` (``quant_utils.py``): the branchless binary search
      builds them with ``torch.where(input >= qmap[8], 8, 0)``, an int64 tensor, materialised before the packing
      ``(codes[::2] << 4) | codes[1::2]`` (``subclass_4bit.py``, ``aten.copy_``): 8 bytes per element. The 8-bit
      state (``subclass_8bit.py``) writes ``quantize_8bit_with_qmap``'s uint8 codes straight into the state.

    So 2 x (4 + 8) + 2 x 4 / 128 = 24.0625 bytes per element for ``AdamW4bit``, 2 x 4 + 2 x 4 / 256 = 8.03125
    for ``AdamW8bit``. The parameter's and the gradient's own fp32 ``float()`` are fused away (no buffer). Checked
    two ways: Inductor's generated wrapper for ``single_param_adam`` (torch 2.13, CPU: exactly these buffers, plus
    the CPU backend's ``cat`` of the unpacked codes), and the H100 (torch 2.11, tests/data/stacks_h100_raw call 3):
    optimizer-phase peak minus the memory at backward end = 6,320,455,680 B for Llama 3.2 1B (24.0625 x its
    262,668,288-element embedding, to the byte), 5,616,125,952 B for Qwen2.5 1.5B (24.0625 x 233,373,696 =
    5,615,554,560, +0.01 %); AdamW8bit on Llama 3.2 1B: 2,109,644,800 B vs 8.03125 x 262,668,288 = 2,109,554,688.
    A tensor torchao does not quantise (fewer than 4096 elements or not a whole number of blocks) keeps fp32
    ``zeros_like`` states and a fully fused step: no transient. Measured with fp32 master parameters
    (bf16-mixed); bf16 parameters are assumed to give the same buffers (the upcasts are fused)."""
    if numel < TORCHAO_MIN_QUANT_NUMEL or block_size <= 0 or numel % block_size:
        return 0
    fp32_states = 2 * 4 * numel
    codes = 2 * 8 * numel if block_bits == 4 else 0
    scales = 2 * 4 * (numel // block_size)
    return fp32_states + codes + scales
