"""``capplan check --trace``: one training iteration of the request's model traced on any CPU, without a GPU and
without weights: the per-GPU peak of what PyTorch would allocate, and its parts.

How (torchtitan's ``scripts/estimate/estimation.py`` is the peer; its method, counted our own way):

1. The model is built with Hugging Face transformers from its config on the ``meta`` device (a pasted
   config.json as it is; a preset or an explicit shape mapped to the transformers class of its family,
   :func:`hf_config`); activation checkpointing as the request says; LoRA through peft, on the meta device (peft
   cannot move adapters under ``FakeTensorMode``).
2. Sharding (``fsdp`` / ``zero3`` / ``hsdp``): FSDP2 ``fully_shard`` on every decoder layer and the root, on a
   fake process group of the layout's shard-group size (``dist.init_process_group("fake")``); rank 0 is traced.
3. ``to_empty`` inside ``FakeTensorMode``: every tensor has its shape, dtype and storage size, and no memory.
4. The optimizer the request names, with its implementation (fused / foreach / for-loop); one untraced step
   creates its states (the steady state: a step's peak is highest from the second step on, calibration
   ``phase_peaks``), then forward, backward and optimizer step of one micro-batch are traced.
5. The count: PyTorch's ``MemTracker`` refuses frozen parameters (LoRA's base weights: it cannot register its
   gradient hook on them) and a second iteration, so every storage an operator returns is counted here, in a
   ``TorchDispatchMode`` (:class:`LiveCounter`), and uncounted when Python frees it (a weak reference), each
   rounded up to the CUDA caching allocator's 512-byte block. At each new peak the live storages are split into
   parameters (and buffers), gradients, optimizer states, what the forward made that is still alive
   (activations, logits) and the rest (backward and optimizer temporaries, FSDP's all-gathered parameters).

What the trace cannot represent is said, not counted (:func:`unrepresented`): CUDA context and allocator
caching (the estimate's ``overhead``), fused kernels' workspaces, TP / PP / CP / EP plans, CPU offload,
bitsandbytes 4-bit and 8-bit kernels, and CUDA's autocast op lists (CPU autocast runs instead).

Issue 29's mechanisms (:mod:`app.check.stacks`, one implementation with the GPU measurements): the plain-torch ones
are traced as the request says (torchtune's chunked loss, Muon); those fake tensors cannot run as the GPU runs them
(TRL's, Liger's and Cut Cross-Entropy's Triton kernels, bitsandbytes' and torchao's optimizers, offloading to pinned
host memory) are refused naming the field (:func:`mechanism_refusal`), never traced as another setup.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves

from app.check import stacks
from app.check.compare import PART_MAP
from app.check.random_init import materialize
from estimator import EstimateRequest, EstimateResponse
from estimator.model.spec import resolve_model

if TYPE_CHECKING:
    from estimator.request import ModelArch

__all__ = ["TRACED_PARTS", "LiveCounter", "TraceResult", "hf_config", "mechanism_refusal", "mechanisms", "trace",
           "unrepresented"]

#: the CUDA caching allocator rounds every block up to 512 bytes (c10/cuda/CUDACachingAllocator.cpp,
#: ``kMinBlockSize = 512``)
BLOCK = 512
#: the traced parts, and the estimate's parts each one is compared with
TRACED_PARTS = PART_MAP


class TraceUnsupported(ValueError):
    """The request asks for something the trace cannot build; the message says what (the CLI exits 2)."""


def _rounded(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def _storages(t: Any) -> list[Any]:
    if not isinstance(t, torch.Tensor):
        return []
    if is_traceable_wrapper_subclass(t):  # DTensor: its local shard
        inner, _ctx = t.__tensor_flatten__()
        return [s for name in inner for s in _storages(getattr(t, name))]
    try:
        return [t.untyped_storage()]
    except (RuntimeError, NotImplementedError):
        return []


class LiveCounter(TorchDispatchMode):
    """Counts the bytes of every live storage an operator returned (and of those registered with :meth:`add`),
    by the phase that made it; keeps the peak and its parts (see the module's docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.phase = "setup"
        self.stage = "setup"
        self._live: dict[int, tuple[int, str]] = {}
        self._refs: dict[int, Any] = {}
        self.by_phase: dict[str, int] = {}
        self.current = 0
        self.peak = 0
        self.peak_phase = ""
        self.peak_parts: dict[str, int] = {}
        self._snap_at = 0
        self.reclassify: Any = None  # () -> {storage key: part} for the live storages of params/grads/...

    def add(self, t: Any, phase: str | None = None) -> None:
        if not isinstance(t, torch.Tensor):
            return
        for st in _storages(t):
            key = id(st)
            if key in self._live:
                continue
            n = _rounded(int(st.nbytes()))
            ph = phase or self.phase
            self._live[key] = (n, ph)
            self._refs[key] = weakref.ref(st, lambda _r, k=key: self._free(k))
            self.by_phase[ph] = self.by_phase.get(ph, 0) + n
            self.current += n
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.stage
            if self.current > self._snap_at * 1.002:  # a fresh split every 0.2 %: the parts within 0.2 % of it
                self._snapshot()

    def _free(self, key: int) -> None:
        n, ph = self._live.pop(key, (0, ""))
        self._refs.pop(key, None)
        if n:
            self.by_phase[ph] -= n
            self.current -= n

    def relabel(self, keys: dict[int, str]) -> None:
        """Move live storages to another label for good (e.g. what the warm-up step left: optimizer states)."""
        for key, label in keys.items():
            if key in self._live:
                n, ph = self._live[key]
                self.by_phase[ph] -= n
                self.by_phase[label] = self.by_phase.get(label, 0) + n
                self._live[key] = (n, label)

    def _snapshot(self) -> None:
        self._snap_at = self.current
        parts = dict(self.by_phase)
        for key, label in (self.reclassify() if self.reclassify else {}).items():
            if key in self._live:
                n, ph = self._live[key]
                if ph != label:
                    parts[ph] -= n
                    parts[label] = parts.get(label, 0) + n
        self.peak_parts = parts

    def resized(self, st: Any) -> None:
        """A storage changed size in place (FSDP2 frees an all-gathered parameter with ``resize_(0)`` and
        re-allocates it with ``resize_(n)``, outside the dispatcher): count its new size."""
        key = id(st)
        n = _rounded(int(st.nbytes()))
        if key not in self._live:
            if n:
                self._live[key] = (0, self.phase)
                self._refs[key] = weakref.ref(st, lambda _r, k=key: self._free(k))
            else:
                return
        old, ph = self._live[key]
        self._live[key] = (n, ph)
        self.by_phase[ph] = self.by_phase.get(ph, 0) + n - old
        self.current += n - old
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.stage
            if self.current > self._snap_at * 1.002:
                self._snapshot()

    def __enter__(self) -> LiveCounter:
        original = torch.UntypedStorage.resize_
        counter = self

        def resize_(st: Any, size: int) -> Any:
            out = original(st, size)
            counter.resized(st)
            return out

        self._original_resize = original
        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        torch.UntypedStorage.resize_ = self._original_resize  # type: ignore[method-assign]

    def storage_keys(self, tensors: Any, label: str) -> dict[int, str]:
        return {id(st): label for t in tensors if isinstance(t, torch.Tensor) for st in _storages(t)}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            self.add(t)
        return out


# ------------------------------------------------------------------------------------------- the model config
def hf_config(request: EstimateRequest) -> Any:
    """The transformers config of the request's model: a pasted config.json as it is (``AutoConfig.for_model``);
    a preset or an explicit shape mapped to the transformers class of its family: MLA (DeepSeek) and
    LayerNorm / non-gated MLPs (GPT) are refused; MoE with q/k norms is Qwen3-MoE, other MoE Mixtral; soft-capped
    logits or four norms a layer Gemma 2; fused projections Phi-3; q/k norms Qwen3; q/k/v biases Qwen2; a
    sliding window Mistral; the rest Llama."""
    import transformers

    model = request.model
    hf = getattr(model, "hf_config", None)
    if hf is not None:
        cfg = dict(hf.get("text_config") or hf) if isinstance(hf.get("text_config"), dict) else dict(hf)
        model_type = cfg.pop("model_type", None)
        if not model_type:
            raise TraceUnsupported("model.hf_config: the trace needs config.json's model_type")
        cfg.pop("architectures", None)
        cfg.pop("transformers_version", None)
        try:
            return transformers.AutoConfig.for_model(model_type, **cfg)
        except (ValueError, KeyError) as exc:
            raise TraceUnsupported(f"model.hf_config: transformers cannot build {model_type!r}: {exc}") from exc
    arch = resolve_model(model)
    return _config_of(arch, transformers)


def _config_of(a: ModelArch, transformers: Any) -> Any:
    if a.kv_lora_rank is not None:
        raise TraceUnsupported("model: MLA attention (DeepSeek) is not built by the trace; paste the model's "
                               "config.json as model.hf_config instead")
    if a.norm != "rmsnorm" or not a.gated_mlp or a.learned_position_embeddings:
        raise TraceUnsupported("model: LayerNorm / non-gated (GPT-style) models are not built by the trace; paste "
                               "the model's config.json as model.hf_config instead")
    kw: dict[str, Any] = {
        "num_hidden_layers": a.num_layers, "hidden_size": a.hidden_size,
        "num_attention_heads": a.num_attention_heads, "num_key_value_heads": a.num_kv_heads or a.num_attention_heads,
        "intermediate_size": a.ffn_hidden_size, "vocab_size": a.vocab_size,
        "tie_word_embeddings": a.tied_embeddings, "use_cache": False,
    }
    if a.head_dim:
        kw["head_dim"] = a.head_dim
    if a.num_experts > 1:
        moe = {"num_experts_per_tok": a.experts_per_token}
        if a.qk_norm:
            return transformers.Qwen3MoeConfig(**kw, **moe, num_experts=a.num_experts,
                                               moe_intermediate_size=a.moe_ffn_hidden_size or a.ffn_hidden_size,
                                               mlp_only_layers=list(range(a.first_dense_layers)))
        return transformers.MixtralConfig(**kw, **moe, num_local_experts=a.num_experts)
    if a.final_logit_softcapping or a.norms_per_layer == 4:
        return transformers.Gemma2Config(**kw, sliding_window=a.sliding_window or 4096,
                                         final_logit_softcapping=a.final_logit_softcapping,
                                         attn_logit_softcapping=a.attn_logit_softcapping)
    if a.fused_projections:
        return transformers.Phi3Config(**kw)
    if a.qk_norm:
        return transformers.Qwen3Config(**kw)
    if a.qkv_bias:
        return transformers.Qwen2Config(**kw)
    if a.sliding_window:
        return transformers.MistralConfig(**kw, sliding_window=a.sliding_window)
    return transformers.LlamaConfig(**kw, attention_bias=a.attention_bias, mlp_bias=a.mlp_bias)


# ----------------------------------------------------------------------------------------- what is not traced
def unrepresented(request: EstimateRequest, result: EstimateResponse) -> dict[str, str]:
    """What the trace of ``request`` cannot show, each with why (shown instead of a number)."""
    tr, par, lay = request.training, request.parallelism, result.layout
    out = {"overhead": "CUDA context, NCCL buffers and the caching allocator's reserve and fragmentation: the trace "
                       "has no device and no allocator (compare with --run)"}
    if lay.tp > 1 or lay.pp > 1 or lay.cp > 1 or lay.ep > 1:
        out["model_parallel"] = (f"TP {lay.tp} / PP {lay.pp} / CP {lay.cp} / EP {lay.ep}: the trace does not apply "
                                 "tensor, pipeline, context or expert parallel plans; it traces one GPU's share "
                                 "of data-parallel sharding only")
    if par.offload != "none":
        out["offload"] = f"CPU offload ({par.offload}): not traced; the traced states stay on the GPU"
    if tr.method == "qlora":
        out["quantized_weights"] = "QLoRA's 4-bit bitsandbytes weights need CUDA kernels: not traced"
    if tr.optimizer == "adamw-8bit":
        out["optimizer_states"] = "bitsandbytes' 8-bit AdamW needs CUDA kernels: not traced"
    if tr.optimizer == "lion":
        out["optimizer_states"] = "Lion is not in torch.optim: not traced"
    if tr.precision == "fp8-mixed":
        out["fp8"] = "FP8 (Transformer Engine / torchao) needs CUDA kernels: not traced"
    if par.framework != "pytorch":
        out["framework"] = f"{par.framework}'s own buffers (DeepSpeed / Megatron) are not traced: PyTorch FSDP2 runs"
    if tr.packed_document_tokens:
        out["packed_documents"] = "documents packed into a sequence (varlen attention): traced as one document"
    if tr.lora_kernel == "fused":
        out["fused_kernels"] = "fused LoRA kernels are not traced (peft's modules run)"
    if lay.dp > 1 and par.sharding == "none":
        out["ddp_buckets"] = ("DDP's gradient buckets: the trace runs one data-parallel rank without DDP "
                              "(a fake process group cannot complete DDP's all-reduce)")
    if par.sharding in ("zero1", "zero2"):
        out["sharding"] = (f"{par.sharding} shards optimizer states (and gradients) only; the trace shards all "
                           "of them with FSDP2 or none")
    return out


def _refusal(request: EstimateRequest, result: EstimateResponse, *, tensor_parallel: bool = False) -> str | None:
    """Why the trace cannot run this request at all (its figures would mean nothing), or ``None``.
    ``tensor_parallel``: for ``--run``, which runs TP layouts (:func:`app.check.run.tp_refusal`) but not
    pipeline, context or expert parallelism (each refused naming its field), and bitsandbytes' 8-bit AdamW."""
    run = tensor_parallel
    tr, lay = request.training, result.layout
    if tr.method == "qlora":
        return "training.method: QLoRA's 4-bit weights need bitsandbytes' CUDA kernels; use --run on a GPU"
    if tr.optimizer == "lion" and run:
        return "training.optimizer: lion is not in torch.optim: not run by capplan check --run"
    if tr.optimizer in ("adamw-8bit", "lion") and not run:
        return f"training.optimizer: {tr.optimizer} is not traced (no CPU implementation); use --run on a GPU"
    if tr.precision == "fp8-mixed":
        return ("training.precision: fp8-mixed is not run by capplan check --run yet" if run else
                "training.precision: fp8-mixed needs CUDA kernels; use --run on a GPU")
    if tensor_parallel:
        for name in ("pp", "cp", "ep"):
            if getattr(lay, name) > 1:
                return (f"parallelism.{name}: --run runs data-parallel and tensor-parallel layouts only, not "
                        f"{name.upper()} {getattr(lay, name)}")
        return None
    if lay.pp > 1 or lay.tp > 1 or lay.cp > 1 or lay.ep > 1:
        return (f"parallelism: the trace follows data-parallel sharding only, not TP {lay.tp} / PP {lay.pp} / "
                f"CP {lay.cp} / EP {lay.ep}")
    return None


# ------------------------------------------------------------------------------------ issue 29's mechanisms
def mechanisms(request: EstimateRequest) -> tuple[dict[str, Any], dict[str, str]]:
    """(the stack dict of :mod:`app.check.stacks`, request field -> what runs for it) of the request's resolved
    training fields (its stack's defaults filled in). Raises :class:`TraceUnsupported` naming the field for a
    value no implementation here applies."""
    tr = request.training
    try:
        return stacks.stack_of(stack=tr.stack, loss_kernel=tr.loss_kernel or "materialized",
                               fused_kernels=tr.fused_kernels or "none",
                               activation_offloading=tr.activation_offloading or "none", optimizer=tr.optimizer,
                               allocator=tr.allocator)
    except stacks.NotApplied as exc:
        raise TraceUnsupported(str(exc)) from exc


#: why a trace on fake tensors cannot run a mechanism (request field, stack value) -> reason
_NOT_TRACEABLE = {
    ("training.loss_kernel", "liger"): "Liger's fused linear cross-entropy is a Triton kernel, which fake tensors "
                                       "cannot run; tracing the materialized loss instead would describe another "
                                       "setup",
    ("training.loss_kernel", "trl"): "TRL's ChunkedLogProbFunction runs Triton kernels on a GPU; on a CPU it falls "
                                     "back to torch tiles whose fp32 temporaries are not the GPU's (a 2-layer "
                                     "Llama at 512 tokens and a 32k vocabulary traced 771 MB against 426 MB for "
                                     "the materialized loss; the estimate of TRL's loss is 311 MB)",
    ("training.loss_kernel", "cce"): "Cut Cross-Entropy's forward and backward are Triton kernels, which fake "
                                     "tensors cannot run; tracing the materialized loss instead would describe "
                                     "another setup",
    ("training.fused_kernels", True): "Liger's RMSNorm / SwiGLU / RoPE are Triton kernels, which fake tensors "
                                      "cannot run; they change what every layer saves for backward",
    ("training.activation_offloading", "trl"): "offloading copies saved tensors to pinned host memory on a CUDA side "
                                               "stream: the trace has one (CPU) device and would count them as kept",
}


def mechanism_refusal(st: dict[str, Any]) -> str | None:
    """Why ``--trace`` cannot run the stack dict ``st`` (its field named), or ``None`` (``--run`` runs them all)."""
    if st["loss"] not in stacks.TRACEABLE["loss"]:
        return f"training.loss_kernel: {_NOT_TRACEABLE[('training.loss_kernel', st['loss'])]}; use --run on a GPU"
    if st["liger_kernels"]:
        return f"training.fused_kernels: {_NOT_TRACEABLE[('training.fused_kernels', True)]}; use --run on a GPU"
    if st["offload"] != "none":
        return (f"training.activation_offloading: {_NOT_TRACEABLE[('training.activation_offloading', 'trl')]}; "
                "use --run on a GPU")
    if st["optimizer"] not in stacks.TRACEABLE["optimizer"]:
        name = {v: k for k, v in stacks.OPTIMIZERS.items()}.get(st["optimizer"], st["optimizer"])
        what = ("torchao's quantised state tensors" if st["optimizer"].startswith("ao-") else
                "bitsandbytes' CUDA kernels, its states in CUDA managed memory" if name.startswith("paged-") else
                "bitsandbytes' CUDA kernels")
        return f"training.optimizer: {name} runs {what}, which fake tensors cannot run; use --run on a GPU"
    return None


def missing_packages(st: dict[str, Any]) -> str | None:
    """The first request field whose mechanism needs a library that is not installed, with the pip package."""
    import importlib.util

    for name, lib in stacks.needed_packages(st).items():
        if importlib.util.find_spec({"liger": "liger_kernel", "cce": "cut_cross_entropy"}.get(lib, lib)) is None:
            pkg = stacks.PACKAGES[lib]
            return f"{name}: needs the package {pkg}, which is not installed here (pip install {pkg})"
    return None


def loss_kwargs(st: dict[str, Any]) -> dict[str, Any]:
    """The extra arguments of ``model(input_ids=, labels=)`` for the stack's loss (TRL's fused head)."""
    return {"fused_lm_head": True} if st["loss"] == "trl" else {}


# --------------------------------------------------------------------------------------------------- the trace
@dataclass
class TraceResult:
    peak_allocated_bytes: int
    peak_phase: str
    parts_bytes: dict[str, int]
    unrepresented: dict[str, str]
    seconds: float
    world_size: int
    sharded: bool
    notes: list[str] = field(default_factory=list)
    #: request field -> what ran for it (issue 29's mechanisms, :func:`mechanisms`)
    mechanisms: dict[str, str] = field(default_factory=dict)


#: optimizer implementations with no fake-tensor kernel: FakeTensorMode would run the real kernel on real
#: tensors of the weights' sizes (``aten._fused_sgd_``: a minute for 1B weights, and their bytes in host RAM), so
#: the trace runs them as a for-loop, whose temporaries are at most one weight's (the fused kernel has none)
NO_FAKE_KERNEL = {("sgd", "fused")}


def _optimizer(request: EstimateRequest, params: list[nn.Parameter], traced: bool = False,
               model: nn.Module | None = None, info: dict[str, Any] | None = None) -> Any:
    """The request's optimizer on ``params``; issue 29's (paged / low-bit AdamW, Muon: ``model`` names the
    embedding and LM head that Muon leaves to AdamW) through :func:`app.check.stacks.make_optimizer`, whose
    settings go to ``info``."""
    tr = request.training
    if tr.optimizer == "adamw-8bit":  # --run only: bitsandbytes' block-wise 8-bit AdamW, measure.py's settings
        import bitsandbytes as bnb

        if info is not None:
            info["optimizer"] = {"class": "bitsandbytes.optim.AdamW8bit", "bitsandbytes": bnb.__version__}
        return bnb.optim.AdamW8bit(params, lr=1e-5, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if tr.optimizer in stacks.OPTIMIZERS:
        if model is None:
            raise TraceUnsupported(f"training.optimizer: {tr.optimizer} needs the model")
        opt, settings = stacks.make_optimizer(stacks.OPTIMIZERS[tr.optimizer], {}, model, params)
        if info is not None:
            info["optimizer"] = settings
        return opt
    impl_name = "for-loop" if traced and (tr.optimizer, tr.optimizer_impl) in NO_FAKE_KERNEL else tr.optimizer_impl
    impl = {"fused": {"fused": True}, "foreach": {"foreach": True}, "for-loop": {"foreach": False}}[impl_name]
    if tr.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=1e-5, eps=1e-8, weight_decay=0.01, **impl)
    if tr.optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9, **impl)
    if tr.optimizer == "adafactor":
        from transformers.optimization import Adafactor

        # the Hugging Face Trainer's optim="adafactor" settings (as benchmarks/calibration/measure.py)
        return Adafactor(params, lr=1e-5, scale_parameter=False, relative_step=False, warmup_init=False,
                         weight_decay=0.0, beta1=None)
    raise TraceUnsupported(f"training.optimizer: {tr.optimizer} is not traced")


def _build(request: EstimateRequest, cfg: Any, st: dict[str, Any] | None = None,
           info: dict[str, Any] | None = None) -> nn.Module:
    """The request's model on the meta device; with the stack dict ``st``, its loss installed on the causal LM
    before peft wraps it (:func:`app.check.stacks.install_loss`; what it ran goes to ``info``)."""
    from transformers import AutoModelForCausalLM

    tr = request.training
    dtype = torch.bfloat16 if tr.method != "full" or tr.precision == "bf16-true" else torch.float32
    attn = "eager" if tr.attention == "eager" else "sdpa"  # flash-attn is CUDA only; CPU SDPA saves the same
    kwargs: dict[str, Any] = {"dtype": dtype, "attn_implementation": attn}
    if getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None):
        kwargs["experts_implementation"] = "grouped_mm"  # static shapes (the eager loop needs the routing's data)
    with torch.device("meta"):
        try:
            model = AutoModelForCausalLM.from_config(cfg, **kwargs)
        except (TypeError, ValueError) as exc:
            if "attention implementation" in str(exc) or "scaled_dot_product_attention" in str(exc):
                kwargs["attn_implementation"] = "eager"  # e.g. Gemma 2 (soft-capped scores) in transformers 5.2x
            else:
                kwargs.pop("experts_implementation", None)
            model = AutoModelForCausalLM.from_config(cfg, **kwargs)
        model.config.use_cache = False
        if tr.activation_checkpointing != "none":  # transformers 5.2x renamed it (the old name warns)
            if hasattr(model, "activation_checkpointing_enable"):
                model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if st is not None:
            stacks.install_loss(st["loss"], model, info if info is not None else {}, stacks._caps(st))
        if tr.method == "lora":
            from peft import LoraConfig, get_peft_model

            targets: Any = {"all-linear": "all-linear", "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
                            "qkv": ["q_proj", "k_proj", "v_proj"]}[tr.lora_targets]
            if getattr(cfg, "model_type", "") == "phi3" and tr.lora_targets != "all-linear":
                targets = ["qkv_proj", "o_proj"] if tr.lora_targets == "attention" else ["qkv_proj"]
            model = get_peft_model(model, LoraConfig(r=tr.lora_rank, lora_alpha=2 * tr.lora_rank,
                                                     target_modules=targets, lora_dropout=tr.lora_dropout,
                                                     bias="none"))
            if tr.activation_checkpointing != "none":
                model.enable_input_require_grads()
    return model


def _layers(model: nn.Module) -> list[nn.Module]:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", base)
    layers = getattr(inner, "layers", None)
    return list(layers) if layers is not None else []


@contextlib.contextmanager
def _mask_choices_of_real_tensors() -> Iterator[None]:
    """Make transformers choose the attention mask it chooses for real tensors. Its SDPA path skips the causal
    mask (``is_causal=True``, grouped K/V read by the kernel) when nothing is padded, unless it sees a tracer:
    a fake tensor counts as one (``transformers.utils.import_utils.is_tracing``: in ``_ignore_causal_mask_sdpa``
    and ``find_packed_sequence_indices``, transformers 5.24 ``masking_utils.py``), and then it builds a boolean
    S x S mask that each layer's SDPA turns into a float mask and keeps for backward, and repeats K and V for
    GQA: +1 to +5 % over the H200's peak for Llama 3.1 8B at 4k tokens without checkpointing. Here a
    training forward has no padding and no cache, so the skip decision is the real-tensor one."""
    import transformers.masking_utils as masking

    original = masking._ignore_causal_mask_sdpa

    def ignore(padding_mask: Any, q_length: int, kv_length: int, q_offset: Any, kv_offset: Any,
               local_attention_size: int | None = None) -> bool:
        if padding_mask is None and q_length == kv_length and (
                local_attention_size is None or kv_length < local_attention_size):
            return True
        return bool(original(padding_mask, q_length, kv_length, q_offset, kv_offset, local_attention_size))

    original_packed = masking.find_packed_sequence_indices
    masking._ignore_causal_mask_sdpa = ignore
    # one sequence a row (positions 0..S-1): no packed documents, as transformers finds for real tensors
    masking.find_packed_sequence_indices = lambda position_ids: None
    try:
        yield
    finally:
        masking._ignore_causal_mask_sdpa = original
        masking.find_packed_sequence_indices = original_packed


def trace(request: EstimateRequest, result: EstimateResponse) -> TraceResult:
    """Trace one steady-state iteration of ``request`` (its layout from ``result``, the estimate). Raises
    :class:`TraceUnsupported` for what it cannot build."""
    import torch.distributed as dist
    from torch._subclasses.fake_tensor import FakeTensorMode

    why = _refusal(request, result)
    if why:
        raise TraceUnsupported(why)
    st, applied = mechanisms(request)
    why = mechanism_refusal(st) or missing_packages(st)
    if why:
        raise TraceUnsupported(why)
    started = time.perf_counter()
    tr, par, lay = request.training, request.parallelism, result.layout
    cfg = hf_config(request)
    sharded = par.sharding in ("fsdp", "zero3", "hsdp") and lay.shard_group_size > 1
    world = lay.shard_group_size if sharded else 1
    notes: list[str] = []
    info: dict[str, Any] = {}
    model = _build(request, cfg, st, info)
    ran = getattr(model.config, "_attn_implementation", None)
    if ran == "eager" and tr.attention != "eager":
        notes.append(f"attention: transformers runs {type(model).__name__} with eager attention (the request "
                     f"says {tr.attention}): its S x S scores are traced, and the estimate counts {tr.attention}; "
                     "request \"attention\": \"eager\" to compare like with like")
    mixed = tr.precision == "bf16-mixed"
    if sharded:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        from torch.testing._internal.distributed.fake_pg import FakeStore

        if dist.is_initialized():
            dist.destroy_process_group()
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        mesh = init_device_mesh("cpu", (world,))
        mpp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed else \
            MixedPrecisionPolicy()
        for layer in _layers(model):
            fully_shard(layer, mesh=mesh, mp_policy=mpp)
        fully_shard(model, mesh=mesh, mp_policy=mpp)
        notes.append(f"FSDP2 over a fake process group of {world}: rank 0 traced")
    counter = LiveCounter()
    from torch._subclasses.fake_tensor import UnsupportedOperatorException

    try:
        # no fallback: an operator without a fake kernel would run for real on real tensors of its sizes
        with FakeTensorMode(allow_non_fake_inputs=True, allow_fallback_kernels=False):
            if sharded:
                model.to_empty(device="cpu")
            else:
                materialize(model, "cpu")  # tied weights kept tied (``nn.Module.to_empty`` unties them)
            params = [p for p in model.parameters() if p.requires_grad]
            opt = _optimizer(request, params, traced=True, model=model, info=info)
            if (tr.optimizer, tr.optimizer_impl) in NO_FAKE_KERNEL:
                notes.append(f"{tr.optimizer} {tr.optimizer_impl} has no fake-tensor kernel: traced as a for-loop")
            model.train()
            ids = torch.randint(0, int(cfg.get_text_config().vocab_size), (tr.micro_batch_size, tr.seq_len))
            with counter:
                for t in [*model.parameters(), *model.buffers()]:
                    counter.add(t, "parameters")
                counter.add(ids, "parameters")
                counter.phase = "warmup"  # one untraced step: the optimizer's states, as from step 2 on
                for p in params:
                    p.grad = torch.zeros_like(p)
                opt.step()
                opt.zero_grad(set_to_none=True)
                leftovers = {k: "optimizer_states" for k, (_n, ph) in counter._live.items() if ph == "warmup"}
                counter.relabel(leftovers)
                counter.peak, counter.peak_parts, counter._snap_at = counter.current, dict(counter.by_phase), 0
                grads_of = params

                def reclassify() -> dict[int, str]:
                    return counter.storage_keys([p.grad for p in grads_of if p.grad is not None], "gradients")

                counter.reclassify = reclassify
                if tr.gradient_accumulation_steps > 1:  # micro-batch 2 on: the earlier ones' gradients are held
                    counter.phase = "gradients"
                    for p in params:
                        p.grad = torch.zeros_like(p)
                    notes.append(f"micro-batch 2 of {tr.gradient_accumulation_steps} traced: the gradients "
                                 "accumulated so far are held through it")
                counter.phase, counter.stage = "activations", "forward"
                ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mixed and not sharded else _null()
                with ctx, _mask_choices_of_real_tensors():
                    loss = model(input_ids=ids, labels=ids, **loss_kwargs(st)).loss
                counter.phase, counter.stage = "temporary", "backward"
                loss.backward()
                del loss
                counter.stage = "optimizer"
                opt.step()
                opt.zero_grad(set_to_none=True)
    except UnsupportedOperatorException as exc:
        raise TraceUnsupported(f"the trace cannot run {exc.func}: it has no fake-tensor kernel "
                               "(use --run on a GPU)") from exc
    finally:
        if sharded and dist.is_initialized():
            dist.destroy_process_group()
    parts = {k: max(0, v) for k, v in counter.peak_parts.items() if k != "setup"}
    parts = {name: parts.get(name, 0) for name in TRACED_PARTS} | {
        k: v for k, v in parts.items() if k not in TRACED_PARTS and v}
    return TraceResult(peak_allocated_bytes=counter.peak, peak_phase=counter.peak_phase, parts_bytes=parts,
                       unrepresented=unrepresented(request, result), seconds=time.perf_counter() - started,
                       world_size=world, sharded=sharded, notes=notes, mechanisms=applied)


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
