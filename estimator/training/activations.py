"""Activation memory: bytes saved for backward per token and layer, and the logits/loss buffers.

The counting follows Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
Models", arXiv 2205.05198, Sec. 4, Table 2): every tensor the autograd graph saves, with tensor-parallel
(/t) and sequence-parallel (/t) splits. It is refined for the code that actually runs:

- Hugging Face ``modeling_llama.py``: RMSNorm upcasts to fp32 (saves the fp32 input and, when its weight is
  trained, the normalised bf16 tensor); SDPA/flash attention saves q, k, v, the output and the log-sum-exp
  (Dao 2023, FlashAttention-2, arXiv 2307.08691) instead of the s x s score matrix; the attention output is
  made contiguous before ``o_proj``; SwiGLU saves gate, up, silu(gate) and their product.
- ``torch.autocast`` casts the input of every linear separately (q, k and v each save their own bf16 copy)
  and keeps the residual stream in the fp32 parameter dtype (PyTorch AMP docs, "CUDA ops that can autocast").
- PyTorch autograd saves an operand only when the other operand needs a gradient (``derivatives.yaml``), so
  a frozen base (LoRA) saves fewer tensors; PEFT's ``lora.Linear`` saves its own cast of the input.
- Eager attention (Hugging Face ``eager_attention_forward``) adds fp32 softmax probabilities and their bf16 copy
  (6 bytes per score); with Gemma 2's soft-capping also the ``tanh`` output (2 more), over the whole sequence on
  sliding-window layers too (the window is a mask, the S x S matrix is computed); K and V are saved as
  ``repeat_kv``'s copies at the query heads (:func:`_eager_attention_bytes`). Its backward holds
  16 bytes per score at once: the fp32 probabilities, the fp32 cast of their gradient, the ``grad * output``
  temporary that PyTorch's CUDA softmax backward allocates (``aten/src/ATen/native/cuda/SoftMax.cu``,
  ``softmax_backward_cuda_out``: ``Tensor tmp = grad * output;``) and the fp32 input gradient; the bf16 copy is
  freed by then (the ``AV`` matmul's backward ran first). Measured on the H200 (Llama 3.2 1B, eager, full
  checkpointing, 2k and 4k tokens): the backward peak sits 15.7 bytes per score above the states.
- QLoRA (bitsandbytes ``Linear4bit`` + PEFT ``lora.bnb.Linear4bit``): ``MatMul4Bit.forward`` keeps only the
  packed weight for backward (``ctx.tensors = (None, B)``, ``bitsandbytes/autograd/_functions.py``), and
  under autocast PEFT does not cast the input to the adapter dtype (``requires_conversion = not
  torch.is_autocast_enabled()``, ``peft/tuners/lora/bnb.py``), so every adapter of a layer saves the same
  bf16 input tensor instead of its own cast.
- Logits: HF ``ForCausalLMLoss`` upcasts the logits to fp32; cross-entropy saves fp32 log-probabilities and
  its backward holds the gradient and the log-probabilities at once (12 bytes per logit at the peak).
  Megatron's vocab-parallel cross-entropy keeps bf16 logits and an fp32 softmax sharded by t. PyTorch's
  vocab-parallel loss (``loss_parallel()``, ``torch/distributed/tensor/parallel/loss.py``) decomposes the
  log-softmax: ``_log_softmax`` holds ``shifted = x - x_max`` and ``exp(shifted)`` next to the fp32 input
  (14 bytes per local logit with the bf16 logits), and ``_nll_loss_and_log_softmax_backward`` computes
  ``(grad_input + torch.exp(x)) * grad_output`` with a zero-filled ``grad_input`` beside the saved
  log-probabilities (16 bytes): 4 bytes per logit more than the fused kernel, each way. Measured on the H200
  (Llama 3.2 1B, tp=2, 8k tokens; tests/data/calibration_h200_raw/call5_tp.jsonl).
- Sequence parallelism: Megatron's linear layers save the sequence-sharded input and all-gather it again in
  backward (``megatron/core/tensor_parallel/layers.py``, ``LinearWithGradAccumulationAndAsyncCommunication``),
  so the projection inputs are split by t (Korthikanti Table 2). PyTorch's DTensor plan (torchtitan:
  ``SequenceParallel`` norms, ``PrepareModuleInput(desired_input_layouts=Replicate())`` before attention and
  MLP, ``torch/distributed/tensor/parallel/style.py``) all-gathers first, and autograd saves the gathered,
  full-sequence input of q/k/v and gate/up (each its own autocast copy): only the norms and the residual
  stream are split by t. Measured on the H200 (Llama 3.1 8B, tp=2/4/8).
- The fine-tuning stacks' mechanisms (issue 29; formulas and sources in :mod:`estimator.training.mechanisms`): the loss
  kernel (``training.loss_kernel``: chunked or fused instead of the materialised logits), Liger's RMSNorm and
  SwiGLU (``training.fused_kernels``), and activation offloading (``training.activation_offloading``: the stored
  layers' tensors in host memory but the ones in flight, :data:`estimator.training.mechanisms.OFFLOAD_KEEP_LAYERS`).
"""

from __future__ import annotations

from typing import Final

from estimator.job import Job
from estimator.memo import BoundedMemo
from estimator.model.spec import ModelShape
from estimator.training.layout import Layout
from estimator.training.mechanisms import (
    OFFLOAD_KEEP_LAYERS,
    liger_norm_bytes,
    liger_swiglu_saving,
    loss_bytes,
    offload_hook_pinned_bytes,
    offload_split,
)

__all__ = ["ActivationModel", "ActivationRates", "activation_model", "activation_rates", "offload_loss_pinned_bytes",
           "offloaded_activation_bytes",
           "pinned_offload_bytes"]


class ActivationModel:
    """Per-rank activation bytes for one micro-batch."""

    per_layer_bytes: Final[int]  # saved by one decoder layer without recomputation
    stored_per_layer_bytes: Final[int]  # what one layer keeps between forward and backward under the chosen policy
    recompute_layer_bytes: Final[int]  # transient: one layer's activations rebuilt during backward (0 if none)
    logits_forward_bytes: Final[int]
    logits_backward_bytes: Final[int]
    residual_bytes: Final[int]  # one residual-stream tensor (a layer's input)
    tokens: Final[int]
    attention_backward_bytes: Final[int]  # transient of one layer's attention-core backward beyond what it stored
    offload_keep_layers: Final[int]  # activation offloading: layers' stored tensors left on the GPU (0: no offload)
    head_saved_bytes: Final[int]  # saved by the final norm and the LM head (:func:`_head_saved_per_token`)

    def __init__(self, per_layer_bytes: int, stored_per_layer_bytes: int, recompute_layer_bytes: int,
                 logits_forward_bytes: int, logits_backward_bytes: int, residual_bytes: int, tokens: int,
                 attention_backward_bytes: int = 0, offload_keep_layers: int = 0, head_saved_bytes: int = 0) -> None:
        self.per_layer_bytes = per_layer_bytes
        self.stored_per_layer_bytes = stored_per_layer_bytes
        self.recompute_layer_bytes = recompute_layer_bytes
        self.logits_forward_bytes = logits_forward_bytes
        self.logits_backward_bytes = logits_backward_bytes
        self.residual_bytes = residual_bytes
        self.tokens = tokens
        self.attention_backward_bytes = attention_backward_bytes
        self.offload_keep_layers = offload_keep_layers
        self.head_saved_bytes = head_saved_bytes


def _regime(job: Job, layout: Layout) -> tuple[int, bool]:
    """(bytes of the residual stream, whether autocast casts each linear input).

    Autocast runs for bf16-mixed without parameter sharding; FSDP's MixedPrecisionPolicy instead hands the
    layers bf16 parameters, so nothing is cast per op. A LoRA/QLoRA base is stored in bf16, so its residual
    stream is bf16 even when the fp32 adapters run under autocast."""
    rv = job
    t, p = rv.training, rv.parallelism
    if t.precision == "fp32":
        return 4, False
    autocast = (p.framework == "pytorch" and t.precision in ("bf16-mixed", "fp8-mixed")
                and layout.sharding in ("none", "zero1"))
    frozen_bf16 = t.method in ("lora", "qlora")
    return (4 if autocast and not frozen_bf16 else 2), autocast


def _norm_bytes(h: int, residual: int, trainable: bool, fp32_scale: bool = False) -> float:
    """RMSNorm: the fp32 input (pow/mul save it) and, if its weight is trained, the normalised tensor: cast back
    to the input's dtype before the weight multiplies it (``LlamaRMSNorm``), or kept in fp32 where the norm
    scales by ``1 + weight`` in fp32 (``GemmaRMSNorm``: ``output * (1.0 + self.weight.float())``, transformers 5.24
    ``models/gemma2/modeling_gemma2.py``; traced: 14,336 B a token of fp32 ``MulBackward0`` input at Gemma 2 9B
    widths, ``tests/data/cpu_trace_eager_attention.json``)."""
    saved_input = 4 * h
    normalised = (4 if fp32_scale else residual if residual == 4 else 2) * h if trainable else 0
    return saved_input + normalised


def _layer_norms_bytes(shape: ModelShape, residual: int, autocast: bool, trainable: bool) -> float:
    """The two norms of a layer, per token.

    RMSNorm as :func:`_norm_bytes`. ``torch.nn.LayerNorm`` (GPT-NeoX, GPT-2, OPT, Falcon: ``aten::native_layer_norm``)
    saves its input and the fp32 mean and rstd (8 bytes a token); its backward recomputes the normalised tensor,
    so a trained weight saves nothing more (``tools/autograd/derivatives.yaml``, ``native_layer_norm``). CUDA
    autocast runs ``layer_norm`` in fp32 (its fp32 op list, ``aten/src/ATen/autocast_mode.cpp``): a bf16 input is
    cast to a new fp32 tensor for each norm, and that copy is what is saved; an fp32 input (the bf16-mixed residual
    stream) and any input without autocast are saved as they are. With a parallel residual (GPT-NeoX
    ``use_parallel_residual``: ``mlp(post_attention_layernorm(hidden_states))`` beside the attention of
    ``input_layernorm(hidden_states)``, ``modeling_gpt_neox.py``) both norms then save the same storage, once.
    Traced per module with ``saved_tensors_hooks`` (Pythia 1.4B, LoRA and bf16 full fine-tune, issue 33:
    ``tests/data/fidelity_h100_raw/cpu_trace_pythia.json``)."""
    a = shape.dims
    h = a.hidden_size
    if a.norm != "layernorm":
        # every norm of the layer: Gemma 2 / 3 have four (``input_layernorm``, ``post_attention_layernorm``,
        # ``pre_feedforward_layernorm``, ``post_feedforward_layernorm``, transformers 5.24
        # ``models/gemma2/modeling_gemma2.py``, ``Gemma2DecoderLayer``), each saving its own fp32 input (traced
        # on the CPU: 4 x 14,336 B a token at Gemma 2 9B widths, LoRA)
        return a.norms_per_layer * _norm_bytes(h, residual, trainable, a.norm_fp32_scale)
    cast = autocast and residual != 4
    one = (4 if cast else residual) * h + 8
    if a.parallel_residual and not cast:
        return one + 8
    return 2 * one


def _linear_inputs(shape: ModelShape, job: Job, residual: int, autocast: bool) -> tuple[float, float]:
    """Inputs saved by the projections, per token: (hidden-sized, replicated under TP without SP;
    q- or ffn-sized, split by TP)."""
    a, t = shape.dims, job.training
    h, qd, f = a.hidden_size, a.num_attention_heads * shape.head_dim, a.ffn_hidden_size
    # one fused qkv (and gate_up) linear: one autocast cast of its input, one LoRA adapter (GPT-NeoX
    # ``query_key_value``, Phi-3 ``qkv_proj`` / ``gate_up_proj``)
    fused = a.fused_projections
    n_up = 2 if a.gated_mlp and not fused else 1
    n_qkv = 1 if fused else 3
    # o_proj's input is the attention output, which SDPA/flash already saved for its backward (counted in
    # :func:`_attention_core`): HF's ``sdpa_attention_forward`` returns ``attn_output.transpose(1, 2)
    # .contiguous()``, a no-op on the flash kernel's (batch, seq, heads, dim) output, and the reshape before
    # ``o_proj`` is a view, so nothing new is saved unless the input is cast (each LoRA adapter's own copy) or
    # the attention core is recomputed (selective checkpointing keeps its output, not its insides). Eager
    # attention keeps no output of its own (its ``P V`` matmul saves the probabilities and v): o_proj's input
    # is saved by o_proj, or by its adapter's own copy, alone (traced: ``tests/data/cpu_trace_eager_attention.json``).
    o_shared = t.activation_checkpointing != "selective" and _effective_attention(shape, job) != "eager"
    if t.method == "full":
        attn_in = n_qkv * 2 * h if autocast else residual * h
        mlp_in = n_up * 2 * h if autocast else residual * h
        return attn_in + mlp_in, (0 if o_shared else 2 * qd) + 2 * f
    n_attn, n_mlp = n_qkv, n_up
    x_bytes, adapter_bytes, separate, mask = _adapter_input_regime(job, autocast)

    def group(count: int, width: int) -> float:
        """Bytes per token the adapters of ``count`` linears sharing one input of ``width`` save."""
        return count * (adapter_bytes + mask) * width if separate else x_bytes * width

    # lora_B saves lora_A's rank-r output, in the adapters' compute dtype
    n_adapters = n_attn + 1 + (n_mlp + 1 if t.lora_targets == "all-linear" else 0)
    rank_inputs = n_adapters * t.lora_rank * adapter_bytes
    attn_h = group(n_attn, h)
    o_in = 0.0 if (o_shared and not separate) else group(1, qd)
    if t.lora_targets == "all-linear":
        return attn_h + group(n_mlp, h) + rank_inputs, o_in + group(1, f)
    return attn_h + rank_inputs, o_in


def _adapter_input_regime(job: Job, autocast: bool) -> tuple[int, int, bool, int]:
    """(bytes of a layer's input, bytes of what each adapter saves, whether each adapter saves its own tensor,
    dropout-mask bytes) per element, for PEFT's ``lora.Linear`` / ``lora.bnb.Linear4bit`` forward
    (``peft/tuners/lora/layer.py`` and ``bnb.py``: ``result = self.base_layer(x)``, then
    ``x = self._cast_input_dtype(x, lora_A.weight.dtype)`` and ``result + lora_B(lora_A(dropout(x))) * scaling``).
    Measured per layer with ``torch.autograd.graph.saved_tensors_hooks`` on the H200 (device call 7,
    ``tests/data/calibration_h200_raw/call7_lora.jsonl``, ``saved_tensors``): the dropout adds exactly one bool
    byte per element of every adapted input, bf16-true LoRA saves a 4-byte copy per adapter.

    The frozen base layer saves no input (autograd keeps an operand only for the other's gradient,
    ``tools/autograd/derivatives.yaml``); ``lora_A`` saves its input, in the dtype its matmul runs in:

    - PEFT keeps the adapters in fp32 (``get_peft_model(autocast_adapter_dtype=True)``) and
      ``_cast_input_dtype`` makes each adapter its own fp32 copy of a bf16 input. Under ``torch.autocast``
      ``lora_A`` then casts that copy back to bf16: each adapter saves its own 2-byte tensor. Without autocast
      (bf16-true, plain PyTorch) the fp32 copy itself is saved: 4 bytes per adapter.
    - QLoRA under autocast skips the cast (``requires_conversion = not torch.is_autocast_enabled()``): the
      adapters of q/k/v (and of gate/up) share the layer's bf16 input.
    - FSDP2's ``MixedPrecisionPolicy`` and DeepSpeed hand the adapters bf16 weights: no cast, shared input.
    - ``lora_dropout`` > 0: ``nn.Dropout`` runs once per adapter (PEFT keeps one per adapted linear), so each
      saves its own output, and the dropout keeps its mask: ``native_dropout`` on CUDA returns a bool mask,
      1 byte per element (``aten/src/ATen/native/cuda/Dropout.cu``), saved for ``native_dropout_backward``.
    """
    rv = job
    t, p = rv.training, rv.parallelism
    x_bytes = 4 if t.precision == "fp32" else 2
    if autocast:
        adapter = 2
    elif p.framework == "pytorch" and p.normalized_sharding in ("none", "zero1") and t.precision == "bf16-true":
        adapter = 4
    else:
        adapter = x_bytes
    dropout = t.lora_dropout > 0
    separate = dropout or adapter != x_bytes or (autocast and t.method == "lora")
    return x_bytes, adapter, separate, 1 if dropout else 0


def _effective_attention(shape: ModelShape, job: Job) -> str:
    """The attention implementation that runs: the request's (``training.attention``), as the step-time model
    reads it. Gemma 2's score soft-capping does not force eager attention: transformers 5.17 ran Gemma 2 with
    ``attn_implementation="sdpa"`` (the soft-cap left out), and its H200 memory is SDPA's
    (``tests/data/families_h200_raw``: 26.1 GiB with SDPA, 41.9 GiB with eager, 8 layers at 4k tokens, LoRA), and
    flash-attn >= 2.6 takes a ``softcap``. Newer transformers (5.24) refuse SDPA for Gemma 2 (its
    ``_supports_sdpa = False``): a request for what runs there says ``"attention": "eager"``."""
    return job.training.attention


def _eager_attention_bytes(shape: ModelShape, job: Job) -> tuple[float, float]:
    """(q, k, v; scores) bytes per token that Hugging Face's ``eager_attention_forward`` saves for backward.

    The code (transformers 5.24, ``models/gemma2/modeling_gemma2.py`` and ``models/llama/modeling_llama.py``,
    ``eager_attention_forward``): ``key_states = repeat_kv(key, n_rep)`` (and ``value``),
    ``attn_weights = torch.matmul(query, key_states.transpose(2, 3)) * scaling``; Gemma 2 then
    ``attn_weights / softcap``, ``torch.tanh``, ``* softcap``; ``+ attention_mask``;
    ``softmax(attn_weights, dim=-1, dtype=torch.float32).to(query.dtype)``; ``dropout(p)``;
    ``torch.matmul(attn_weights, value_states)``. What autograd keeps (``tools/autograd/derivatives.yaml``):

    - ``Q K^T`` keeps q and the repeated k; ``P V`` the bf16 probabilities and the repeated v. With grouped
      K/V (``n_rep`` > 1) ``repeat_kv`` (``expand`` + ``reshape``) copies K and V to the query heads, and
      those copies are what is saved: q, k and v at 2 bytes x the query width each, and a fused projection's
      output (Phi-3 ``qkv_proj``) is then no longer kept alive by the v view (the first element of the pair,
      0 without grouping: ``repeat_kv`` then returns its input and the SDPA count stands).
    - the scalings (``* scaling``, ``/ softcap``, ``* softcap``) and the mask add keep nothing; ``tanh`` keeps its
      output (its backward is ``grad * (1 - y^2)``) in the compute dtype; the softmax keeps its fp32 output, and
      the cast back to the compute dtype makes the probabilities ``P V`` keeps (in fp32 the cast returns the
      softmax output itself: one tensor).
    - ``dropout`` at p = 0 returns its input (``aten/src/ATen/native/Dropout.cpp``, ``_dropout_impl``: ``if (p
      == 0 || !train ...) return input``): nothing; the attention dropout of these models is 0.
    - the scores span the whole key length on every layer: a sliding window (Gemma 2's ``sliding_attention``
      layers) is a mask on the full S x S matrix in eager attention, not a smaller matrix.

    Traced with ``saved_tensors_hooks`` on the CPU (transformers 5.24, torch 2.13; Gemma 2 9B widths, 16 heads of
    256, 8 K/V heads, LoRA and bf16: per score 2 bytes bf16 ``TanhBackward0``, 4 fp32 ``SoftmaxBackward0``, 2
    bf16 probabilities; q, k and v each 16 heads x 256 x 2 bytes a token; a 128-token window at 480 tokens saves
    the same as a 4096-token one; Llama 3.2 1B widths under autocast: 4 + 2 per score, q / k / v 32 x 64 x 2
    bytes a token). On the H200 (transformers 5.17, torch 2.11; ``tests/data/families_h200_raw``) Gemma 2 9B with
    8 layers at 4k tokens, LoRA, no checkpointing, peaks 15.75 GiB higher with eager attention than with SDPA:
    7.9 bytes per score of its 8 layers."""
    rv = job
    a, t = shape.dims, rv.training
    x = 4 if t.precision == "fp32" else 2  # the compute dtype of the scores
    qd = a.num_attention_heads * shape.head_dim
    qkv = 3 * 2 * qd if shape.kv_heads < a.num_attention_heads else 0.0
    per_score = 4 + (x if x != 4 else 0)  # the fp32 softmax output and its cast (none when already fp32)
    if a.attn_logit_softcapping:
        per_score += x
    return qkv, per_score * a.num_attention_heads * t.seq_len


def _attention_core(shape: ModelShape, job: Job) -> tuple[float, float]:
    """(stored, recomputed) bytes per token of the attention core (q, k, v, output, log-sum-exp; eager: the
    fp32 softmax and its bf16 copy, 6 bytes per score).

    Selective recomputation (Korthikanti et al. 2022, Sec. 5) keeps q, k and v and recomputes the core in
    backward: the score matrices (eager) or the flash output and log-sum-exp are not stored; one layer's worth
    is rebuilt at a time."""
    rv = job
    a = shape.dims
    qd, kvd = a.num_attention_heads * shape.head_dim, shape.kv_heads * shape.head_dim
    qkv: float = float(2 * qd + 2 * 2 * kvd)
    if a.fused_projections:
        # v is a view into the fused qkv output, so attention keeps that whole output alive; the rotary embedding
        # makes new q and k (``apply_rotary_pos_emb`` concatenates the rotated and, with a partial rotary, the
        # passed-through dims): saved are the fused output plus the rotated q and k (GPT-NeoX ``query_key_value``,
        # Phi-3 ``qkv_proj``; traced, see ``_layer_norms_bytes``)
        qkv += 2 * qd + 2 * kvd
    rest: float = float(2 * qd + 4 * a.num_attention_heads)  # out, lse
    if _effective_attention(shape, job) == "eager":
        grouped_qkv, scores = _eager_attention_bytes(shape, job)
        rest = scores  # no log-sum-exp; the output is o_proj's input (:func:`_linear_inputs`)
        if grouped_qkv and rv.training.activation_checkpointing == "selective":
            rest += grouped_qkv - 2 * qd  # the K / V copies are made inside the recomputed core: transient
        elif grouped_qkv:
            qkv = grouped_qkv
    if rv.training.activation_checkpointing == "selective":
        return qkv, rest
    return qkv + rest, 0.0


# Eager attention backward: bytes per score held at once while the softmax backward runs (fp32
# probabilities, fp32 gradient, PyTorch's ``grad * output`` temporary, fp32 input gradient), against the 6
# bytes per score the layer stored (module docstring).
EAGER_BACKWARD_BYTES_PER_SCORE: Final = 16


def _attention_backward_per_token(shape: ModelShape, job: Job, layout: Layout) -> float:
    """Transient of one layer's eager attention-core backward beyond its stored scores, per token (split by
    t). Flash/SDPA recomputes score tiles on chip: nothing of size s x s."""
    rv = job
    if rv.parallelism.framework == "megatron" or _effective_attention(shape, job) != "eager":
        return 0.0
    a = shape.dims
    # every layer's scores span the whole sequence (:func:`_eager_attention_bytes`)
    return (EAGER_BACKWARD_BYTES_PER_SCORE - 6) * a.num_attention_heads * rv.training.seq_len / layout.tp


def _mlp_elementwise(shape: ModelShape, ffn: int, job: Job) -> float:
    """gate, silu(gate), up (gated) or the pre-activation (plain) tensors saved by the activation."""
    saved = 3 * 2 * ffn if shape.dims.gated_mlp else 2 * ffn
    return saved


def _moe_bytes(shape: ModelShape, job: Job) -> float:
    """Routed experts: router probabilities, dispatched copies, per-expert MLP tensors (top-k of them).

    Per routed token and expert (transformers 5's ``*Experts`` modules, e.g. ``Qwen3MoeExperts.forward``: a loop
    over the experts hit, ``F.linear`` on the gathered tokens with the 3-D expert weights): the gate_up output
    (gate and up are views of it), the activation's output, and the expert's output (kept for the routing weight's
    gradient, ``current * top_k_weights``). The gathered input and the down projection's input are saved only when
    the expert weights are trained (autograd keeps an operand only for the other's gradient): a LoRA/QLoRA run
    leaves them frozen -- the experts are 3-D parameters, not ``nn.Linear`` modules, so PEFT's ``target_modules``
    (also ``"all-linear"``) never adapts them. Traced for Qwen3-30B-A3B with LoRA on q/k/v/o (issue 33,
    ``tests/data/fidelity_h100_raw/cpu_trace_qwen3_moe.json``): 69,648 B per token for the experts' part of a
    layer = 8 x (2 x 2 x 768 + 2 x 768 + 2 x 2048), the router 548."""
    a = shape.dims
    k, h = a.experts_per_token, a.hidden_size
    trained = job.training.method == "full"
    per_expert = _mlp_elementwise(shape, shape.expert_ffn, job) + 2 * h
    dispatched = 0
    if trained:
        per_expert += 2 * shape.expert_ffn
        dispatched = 2 * h * k
    shared = a.num_shared_experts * (_mlp_elementwise(shape, shape.expert_ffn, job) + 2 * shape.expert_ffn)
    return 4 * a.num_experts + dispatched + k * per_expert + shared


def _qk_norm_bytes(shape: ModelShape, job: Job) -> float:
    """Per-head RMSNorms on q and k (Qwen3, Gemma 3, OLMo 2: ``q_norm`` / ``k_norm``), per token: as any HF RMSNorm
    they save their fp32 input (and, with a trained weight, the normalised tensor) plus the fp32 rstd of each head.
    Traced for Qwen3-30B-A3B: 16,512 + 2,064 B per token (32 query and 4 key heads of 128)."""
    a = shape.dims
    if not a.qk_norm:
        return 0.0
    qd, kvd = a.num_attention_heads * shape.head_dim, shape.kv_heads * shape.head_dim
    trainable = job.training.method == "full"
    return (_norm_bytes(qd, 4, trainable, a.norm_fp32_scale) + _norm_bytes(kvd, 4, trainable, a.norm_fp32_scale)
            + 4 * (a.num_attention_heads + shape.kv_heads))


def _head_saved_per_token(shape: ModelShape, job: Job, layout: Layout) -> float:
    """What the final norm and the LM head save for backward, per token, on the stage that holds the loss: alive
    from the end of the decoder stack through the loss and the start of its backward (the ``forward`` and
    ``backward`` phases; the head's and the norm's backward free them before the last layer's backward runs).

    - The final RMSNorm saves what a layer's norms save (:func:`_norm_bytes`: the fp32 input, and with a trained
      weight the normalised tensor) plus its fp32 ``rsqrt`` (4 bytes a token); Liger's RMSNorm (which patches the
      final norm's class too) :func:`~estimator.training.mechanisms.liger_norm_bytes`; a LayerNorm its input (the
      fp32 cast under autocast) and its fp32 mean and rstd (:func:`_layer_norms_bytes`).
    - A trained LM head (full fine-tune) saves its input for the weight's gradient: the norm's output in the
      compute dtype (the bf16 cast under autocast, the residual dtype otherwise); a frozen one (LoRA) saves none.
      Counted with the materialised loss only: the chunked and fused loss kernels' own accounting starts at the
      head's input (:func:`estimator.training.mechanisms.loss_bytes`).

    Measured: Llama 3.1 8B full fine-tunes under FSDP2 (``tests/data/calibration_h200.json``, 4,096 and 16,384
    tokens at W = 8): the forward's end grows 32,703 B a token beyond the layers' checkpoints and the fp32
    log-probabilities, 8 x 4,096 (fp32 input, bf16 normalised tensor, bf16 head input); traced for Qwen3-30B-A3B
    LoRA (``tests/data/fidelity_h100_raw/cpu_trace_qwen3_moe.json``, ``<outside>:norm``): 8,196 B a token = 4 x
    2,048 + 4. Before issue 33 only the residual stream (the norm's input in the residual dtype) was counted; the
    caller subtracts it where it still counts it (:func:`estimator.training.memory._head_extra`)."""
    rv = job
    t, a = rv.training, shape.dims
    if rv.parallelism.framework == "megatron":
        return 0.0  # Megatron's own accounting (Korthikanti's Table 2)
    residual, autocast = _regime(job, layout)
    h = a.hidden_size
    trained = t.method == "full"
    if a.norm == "layernorm":
        norm = (4 if autocast and residual != 4 else residual) * h + 8.0
    elif t.fused_kernels == "liger":
        norm = float(liger_norm_bytes(h, residual))
    else:
        norm = _norm_bytes(h, residual, trained, a.norm_fp32_scale) + 4.0
    head = 0
    if trained and t.loss_kernel == "materialized":
        head = (2 if autocast else residual) * h
    return (norm + head) / (layout.tp if layout.sequence_parallel else 1)


def _split(value: float, divisor: int) -> float:
    return value / divisor


def _layer_bytes_per_token(shape: ModelShape, job: Job, layout: Layout) -> float:
    """Bytes saved by one layer per token on one rank (dense layers; MoE layers averaged in)."""
    rv = job
    residual, autocast = _regime(job, layout)
    a, tp = shape.dims, layout.tp
    trainable_norm = rv.training.method == "full"
    liger = rv.training.fused_kernels == "liger"
    norms = (a.norms_per_layer * liger_norm_bytes(a.hidden_size, residual) if liger and a.norm == "rmsnorm"
             else _layer_norms_bytes(shape, residual, autocast, trainable_norm))
    h_inputs, split_inputs = _linear_inputs(shape, job, residual, autocast)
    replicated = norms + h_inputs
    sharded = split_inputs
    sharded += _attention_core(shape, job)[0] + _qk_norm_bytes(shape, job)
    dense_mlp = _mlp_elementwise(shape, a.ffn_hidden_size, job)
    if liger and a.gated_mlp:  # LigerSiLUMulFunction saves gate and up only (silu recomputed in backward)
        dense_mlp -= liger_swiglu_saving(a.ffn_hidden_size)
    if shape.is_moe:
        frac = shape.moe_layers / a.num_layers
        dense_mlp = (1 - frac) * dense_mlp + frac * _moe_bytes(shape, job)
    sharded += dense_mlp
    rep_div = tp if layout.sequence_parallel else 1
    if layout.sequence_parallel and rv.parallelism.framework == "pytorch":
        # PyTorch SP (DTensor): the all-gathered, full-sequence input is what the projections save
        return _split(norms, rep_div) + h_inputs + _split(sharded, tp)
    return _split(replicated, rep_div) + _split(sharded, tp)


def _megatron_layer_bytes_per_token(shape: ModelShape, job: Job, layout: Layout) -> float:
    """Korthikanti et al. 2022, Sec. 4.1 / Table 2, generalised to GQA and gated MLPs (fp16/bf16 Megatron-LM).

    Attention block 11sbh + 5as^2b (QKV input 2, Q and K 4, V 2, out-proj input 2, dropout mask 1, scores
    softmax 2 + mask 1 + dropout 2 per score), MLP 19sbh with a 4h MLP (input 2, two 8h tensors, mask 1),
    LayerNorms 4sbh. Without sequence parallelism the 10sbh of LayerNorm inputs, QKV/MLP inputs and dropout
    masks stay replicated across tensor-parallel ranks; everything else is split by t.
    """
    a, t = shape.dims, job.training
    h = a.hidden_size
    qd, kvd = a.num_attention_heads * shape.head_dim, shape.kv_heads * shape.head_dim
    ffn_tensors = (8 if a.gated_mlp else 4) * a.ffn_hidden_size
    if shape.is_moe:
        ffn_tensors = a.experts_per_token * (8 if a.gated_mlp else 4) * shape.expert_ffn + 2 * h * a.experts_per_token
    replicated = 10 * h
    sharded = 2 * qd + 2 * kvd + 2 * kvd + 2 * qd + ffn_tensors
    if t.attention == "eager" and t.activation_checkpointing != "selective":
        sharded += 5 * a.num_attention_heads * t.seq_len // layout.cp
    if t.activation_checkpointing == "selective" and t.attention != "eager":
        sharded -= 2 * qd  # core attention output not kept (FlashAttention recomputes it with the core)
    rep_div = layout.tp if layout.sequence_parallel else 1
    return replicated / rep_div + sharded / layout.tp


def _selective_recompute_per_token(shape: ModelShape, job: Job, layout: Layout) -> float:
    """Selective recomputation rebuilds one layer's attention core at a time in backward (split by t)."""
    rv = job
    if rv.training.activation_checkpointing != "selective":
        return 0.0
    if rv.parallelism.framework == "megatron":
        a, t = shape.dims, rv.training
        if t.attention == "eager":  # the 5as^2b of Korthikanti's Table 2
            return 5 * a.num_attention_heads * t.seq_len // layout.cp / layout.tp
        return 2 * a.num_attention_heads * shape.head_dim / layout.tp  # the flash output
    return _attention_core(shape, job)[1] / layout.tp


def _logits(job: Job, shape: ModelShape, layout: Layout, tokens: int) -> tuple[int, int]:
    rv = job
    vocab_local = shape.dims.vocab_size / layout.logits_tp
    logits = tokens * vocab_local
    if rv.parallelism.framework == "megatron":
        return int(10 * logits), int(6 * logits)
    t = rv.training
    if t.loss_kernel != "materialized":  # issue 29: the stack's loss kernel (estimator.training.mechanisms.loss_bytes)
        grad_bytes = 2 if t.precision == "bf16-true" else 4
        # torchtune's Gemma 2 soft-caps the normed hidden state, not the logits (mechanisms.loss_bytes)
        logit_softcap = bool(shape.dims.final_logit_softcapping) and t.stack != "torchtune"
        return loss_bytes(t.loss_kernel, tokens, vocab_local, shape.dims.hidden_size,
                          logit_softcap, impl="trl" if t.stack == "trl" else "torchtune",
                          head_trainable=t.method == "full",
                          head_grad_bytes=int(vocab_local * shape.dims.hidden_size * grad_bytes))
    softcap = 2 * logits if shape.dims.final_logit_softcapping else 0  # tanh output saved (bf16)
    loss_parallel = 4 * logits if rv.parallelism.framework == "pytorch" and layout.logits_tp > 1 else 0
    return int(10 * logits + softcap + loss_parallel), int(12 * logits + softcap + loss_parallel)


class ActivationRates:
    """What :func:`activation_model` scales by the micro-batch's tokens: the per-token parts of one request."""

    per_token: Final[float]  # one layer's saved bytes per token
    recompute_per_token: Final[float]  # selective recomputation's transient per token
    attention_backward_per_token: Final[float]  # eager attention-core backward transient per token
    residual_dtype: Final[int]
    residual_div: Final[int]
    tokens_per_sequence: Final[int]
    full_checkpointing: Final[bool]
    head_per_token: Final[float]  # saved by the final norm and the LM head per token

    def __init__(self, per_token: float, recompute_per_token: float, attention_backward_per_token: float,
                 residual_dtype: int, residual_div: int, tokens_per_sequence: int, full_checkpointing: bool,
                 head_per_token: float = 0.0) -> None:
        self.per_token = per_token
        self.recompute_per_token = recompute_per_token
        self.attention_backward_per_token = attention_backward_per_token
        self.residual_dtype = residual_dtype
        self.residual_div = residual_div
        self.tokens_per_sequence = tokens_per_sequence
        self.full_checkpointing = full_checkpointing
        self.head_per_token = head_per_token


def _rates_key(job: Job, shape: ModelShape, layout: Layout) -> tuple[object, ...]:
    """Everything :func:`_activation_rates` reads: from the request, and of the layout its tensor and context
    degrees, sequence parallelism and sharding (not the data-parallel degree: the planner's node counts share
    one answer)."""
    rv = job
    t = rv.training
    return (shape, layout.tp, layout.cp, layout.sequence_parallel, layout.sharding, t.method, t.lora_targets,
            t.lora_rank, t.lora_dropout, t.precision, t.attention, t.activation_checkpointing, t.seq_len,
            rv.parallelism.framework, t.fused_kernels, t.loss_kernel)


_RATES: Final[BoundedMemo[tuple[object, ...], ActivationRates]] = BoundedMemo(8192)


def activation_rates(job: Job, shape: ModelShape, layout: Layout) -> ActivationRates:
    """The per-token parts of ``job``'s activations, memoised on :func:`_rates_key` (the suggestions and the
    largest-micro-batch search ask again for requests that differ in the micro-batch or the model states)."""
    key = _rates_key(job, shape, layout)
    found = _RATES.get(key)
    if found is None:
        found = _RATES.remember(key, _activation_rates(job, shape, layout))
    return found


def _activation_rates(job: Job, shape: ModelShape, layout: Layout) -> ActivationRates:
    rv = job
    t = rv.training
    per_token = (_megatron_layer_bytes_per_token(shape, job, layout) if rv.parallelism.framework == "megatron"
                 else _layer_bytes_per_token(shape, job, layout))
    return ActivationRates(per_token=per_token,
                           recompute_per_token=_selective_recompute_per_token(shape, job, layout),
                           attention_backward_per_token=_attention_backward_per_token(shape, job, layout),
                           residual_dtype=_regime(job, layout)[0],
                           residual_div=layout.tp if layout.sequence_parallel else 1,
                           tokens_per_sequence=t.seq_len,
                           full_checkpointing=t.activation_checkpointing == "full",
                           head_per_token=_head_saved_per_token(shape, job, layout))


def activation_model(job: Job, shape: ModelShape, layout: Layout,
                     micro_batch_size: int | None = None, rates: ActivationRates | None = None) -> ActivationModel:
    """Per-rank activations of one micro-batch (of ``micro_batch_size`` sequences instead of the request's,
    when given, with ``rates`` computed once: the largest-micro-batch search)."""
    r = rates or activation_rates(job, shape, layout)
    tokens = (micro_batch_size or job.training.micro_batch_size) * r.tokens_per_sequence // layout.cp
    per_layer = int(r.per_token * tokens)
    residual = r.residual_dtype * shape.dims.hidden_size * tokens
    residual //= r.residual_div
    if r.full_checkpointing:
        stored, recompute = residual, per_layer
    else:
        stored, recompute = per_layer, int(r.recompute_per_token * tokens)
    fwd, bwd = _logits(job, shape, layout, tokens)
    keep = OFFLOAD_KEEP_LAYERS if job.training.activation_offloading != "none" else 0
    return ActivationModel(per_layer_bytes=per_layer, stored_per_layer_bytes=stored,
                           recompute_layer_bytes=recompute, logits_forward_bytes=fwd, logits_backward_bytes=bwd,
                           residual_bytes=residual, tokens=tokens,
                           attention_backward_bytes=int(r.attention_backward_per_token * tokens),
                           offload_keep_layers=keep, head_saved_bytes=int(r.head_per_token * tokens))


def offloaded_activation_bytes(job: Job, shape: ModelShape, layout: Layout, stage: str) -> int:
    """Pinned host bytes of one rank's offloaded activations (``training.activation_offloading``): its stage's
    stored layers but the ones kept on the GPU (:func:`estimator.training.mechanisms.offload_split`; torchtune
    ``OffloadActivations``, Unsloth's offloaded checkpointer). Host RAM and the step's PCIe time read it."""
    mode = job.training.activation_offloading
    if mode == "none":
        return 0
    act = activation_model(job, shape, layout)
    layers = layout.layers_on(stage)
    stored = act.stored_per_layer_bytes * layers
    return offload_split(mode, stored, layers, stored)[1]


def pinned_offload_bytes(job: Job, shape: ModelShape, layout: Layout, stage: str) -> int:
    """Pinned host bytes one rank holds for ``training.activation_offloading`` (the host panel's
    ``offloaded_activations`` and ``host.pinned_offload_bytes``).

    ``all`` (TRL / torchtune's saved-tensors hook, :func:`estimator.training.mechanisms.offload_hook_pinned_bytes`):
    every stored layer (not only the ones off the GPU: the host copy lives until backward reads it), the bf16
    weight copies autocast makes where the layers are not checkpointed (a full fine-tune's fp32 weights), and what
    is saved outside the layers: the embedding's int64 indices on the first stage; on the last the final norm's
    tensors (:func:`_norm_bytes` plus the fp32 ``rsqrt`` per token) and the materialized loss's fp32
    log-probabilities (``log_softmax`` saves its output, ``nll_loss`` the int64 targets; a softcap's tanh output
    too). Chunked and fused losses add only their targets here (what their kernels keep was not measured offloaded).
    ``checkpoints`` (Unsloth's offloaded checkpointer): :func:`offloaded_activation_bytes`. Measured on an H100
    (``tests/test_offload_host.py``): within 2 % of ``torch.cuda.host_memory_stats()``'s pinned peak."""
    mode = job.training.activation_offloading
    if mode != "all":
        return offloaded_activation_bytes(job, shape, layout, stage)
    t = job.training
    act = activation_model(job, shape, layout)
    layers = layout.layers_on(stage)
    tokens = act.tokens
    residual, autocast = _regime(job, layout)
    casts = 0
    if autocast and t.method == "full" and t.activation_checkpointing != "full" and shape.dims.num_layers > 0:
        d = shape.dims
        idle = shape.moe_layers * (d.num_experts - d.experts_per_token) * shape.mlp_params(shape.expert_ffn) \
            if shape.is_moe else 0
        linear = shape.layer_params_total() - idle - shape.dims.num_layers * shape.norm_params_per_layer()
        casts = int(2 * linear / shape.dims.num_layers * layers / layout.tp)
    outside = 0
    if stage in ("only", "first"):
        outside += 8 * tokens  # the embedding's indices
    if stage in ("only", "last"):
        h = shape.dims.hidden_size
        outside += int((_norm_bytes(h, residual, t.method == "full") + 4) * tokens)
        outside += 8 * tokens  # the loss's int64 targets
        outside += offload_loss_pinned_bytes(job, shape, layout, stage)
    return offload_hook_pinned_bytes(layers, act.stored_per_layer_bytes, casts, outside)


def offload_loss_pinned_bytes(job: Job, shape: ModelShape, layout: Layout, stage: str) -> int:
    """The part of :func:`pinned_offload_bytes` the materialised loss saves (``log_softmax``'s fp32 output, a
    softcap's tanh output) on the stage that holds the loss: copied out as forward ends and back as backward
    starts (:func:`estimator.training.mechanisms.offload_transfer_seconds`'s ``boundary_bytes``)."""
    t = job.training
    if (t.activation_offloading != "all" or stage not in ("only", "last") or t.loss_kernel != "materialized"
            or job.parallelism.framework == "megatron"):
        return 0
    logits = activation_model(job, shape, layout).tokens * shape.dims.vocab_size / layout.logits_tp
    return int(4 * logits + (2 * logits if shape.dims.final_logit_softcapping else 0))
