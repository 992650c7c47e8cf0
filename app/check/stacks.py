"""Issue 29's fine-tuning stack mechanisms, one implementation for ``capplan check`` (``--trace``, ``--run``) and the
GPU measurements (``benchmarks/calibration/measure_stacks.py``, ``benchmarks/check/trace_fsdp_mechanisms.py``):
the loss kernels (Hugging Face's materialised loss, TRL's chunked log-prob head, torchtune's chunked output loss,
Liger's fused linear cross-entropy, Apple's Cut Cross-Entropy), Liger's layer kernels, TRL's activation offloading
and the optimizers (bitsandbytes paged AdamW, torchao low-bit AdamW, Muon).

It imports torch only (no capplan, no pydantic, no web dependencies; each library when its mechanism is asked for),
taking plain arguments: the measurement scripts run on a bare GPU machine from one folder, with this file copied
beside them as ``stacks.py`` (as ``random_init.py``; ``docs/check.md``, "--run on our GPU").

The mechanism is described by a *stack dict*, the one ``benchmarks/calibration/stack_cases.py`` gives each case:
``{"loss": "hf" | "trl" | "torchtune" | "liger" | "cce", "liger_kernels": bool, "offload": "none" | "trl",
"optimizer": str, "alloc_conf": str | None}``. :func:`stack_of` maps a request's issue-29 fields onto it, as the
estimator reads them (which library each value stands for), and names what it cannot apply.

Sources (as read for each function): TRL 1.16.0 ``trl/trainer/utils.py`` (``add_fused_lm_head``),
``trl/kernels/chunked_logprob.py`` (``ChunkedLogProbFunction``), ``trl/models/activation_offloading.py``
(``get_act_offloading_ctx_manager``, the port of torchtune's ``OffloadActivations``); torchtune
``torchtune/modules/loss/ce_chunked_output_loss.py`` (``CEWithChunkedOutputLoss``, 8 chunks); Liger-Kernel 0.8.5
``liger_kernel/transformers/monkey_patch.py`` (``apply_liger_kernel_to_<family>``); apple/ml-cross-entropy 25.1.1
``cut_cross_entropy.linear_cross_entropy``; bitsandbytes 0.50.2 ``bnb.optim.PagedAdamW8bit`` /
``PagedAdamW32bit``; torchao 0.18.0 ``torchao.optim.AdamW8bit`` / ``AdamW4bit``; torch 2.11+ ``torch.optim.Muon``.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

__all__ = [
    "CHUNKED_LOSS_CHUNKS",
    "LIGER_FN",
    "PACKAGES",
    "TRACEABLE",
    "Combined",
    "NotApplied",
    "add_trl_head",
    "add_trl_head_direct",
    "apply_liger",
    "cce_loss",
    "chunked_output_loss",
    "dist_version",
    "ensure_trl_utils",
    "install_loss",
    "loss_fsdp_units",
    "make_loss",
    "make_optimizer",
    "muon_split",
    "offload_context",
    "stack_of",
    "state_bytes",
]

#: torchtune ``CEWithChunkedOutputLoss(num_output_chunks=8)``
CHUNKED_LOSS_CHUNKS = 8
#: the pip package each library mechanism needs (what ``capplan check`` names when it is not installed)
PACKAGES = {"trl": "trl", "liger": "liger-kernel", "cce": "cut-cross-entropy", "bitsandbytes": "bitsandbytes",
            "torchao": "torchao"}
#: the stack values a trace on fake tensors runs as the GPU runs them (plain torch); the others need CUDA / Triton
#: kernels (TRL's chunked log-prob falls back to other torch tiles on a CPU) or pinned host memory
#: (``docs/check.md``, "Issue 29's mechanisms")
TRACEABLE = {"loss": {"hf", "torchtune"}, "optimizer": {"adamw", "sgd", "adafactor", "muon"},
             "offload": {"none"}, "liger_kernels": {False}}
#: the request's optimizers -> the stack dict's (the measured implementation of each)
OPTIMIZERS = {"paged-adamw-8bit": "paged-adamw-8bit", "paged-adamw": "paged-adamw-32bit",
              "adamw-4bit": "ao-adamw-4bit", "ao-adamw-8bit": "ao-adamw-8bit", "muon": "muon",
              "adamw-8bit": "adamw-8bit"}


class NotApplied(ValueError):
    """A request value ``capplan check`` cannot apply; ``field`` names it (the CLI exits 2)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def dist_version(name: str) -> str | None:
    """A package's installed version without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


# ------------------------------------------------------------------------------------- request -> stack dict
def stack_of(*, stack: str, loss_kernel: str, fused_kernels: str, activation_offloading: str, optimizer: str,
             allocator: str = "default") -> tuple[dict[str, Any], dict[str, str]]:
    """(the stack dict, what each request field became) for a request's resolved training fields (the stack's
    defaults already filled in by ``estimator.request.Training``). Which library runs each value is the one the
    estimator sizes it as:

    - ``loss_kernel`` ``"chunked"``: TRL's ``ChunkedLogProbFunction`` when ``stack`` is ``"trl"``, otherwise
      torchtune's ``CEWithChunkedOutputLoss`` (``estimator/training/activations.py`` ``_logits``:
      ``impl="trl" if t.stack == "trl" else "torchtune"``);
    - ``"fused"``: Liger's fused linear cross-entropy with ``fused_kernels`` ``"liger"``, otherwise Cut
      Cross-Entropy (``estimator/training/timing.py`` ``_head_times``: without Liger the stacks' fused loss is
      CCE, axolotl's plugin, or Unsloth's, sized as CCE's); Unsloth's own loss is not run;
    - ``activation_offloading`` ``"all"``: TRL's ``get_act_offloading_ctx_manager`` (torchtune's
      ``OffloadActivations`` ported); ``"checkpoints"`` (Unsloth's offloaded checkpointer) has no implementation
      here: :class:`NotApplied`;
    - the optimizers: ``paged-adamw-8bit`` / ``paged-adamw`` bitsandbytes ``PagedAdamW8bit`` / ``PagedAdamW32bit``,
      ``adamw-4bit`` torchao ``AdamW4bit``, ``muon`` ``torch.optim.Muon`` on the decoder matrices + fused AdamW,
      ``adamw-8bit`` bitsandbytes ``AdamW8bit``; the others torch's own.
    """
    applied: dict[str, str] = {}
    if loss_kernel == "materialized":
        loss = "hf"
    elif loss_kernel == "chunked":
        loss = "trl" if stack == "trl" else "torchtune"
        applied["loss_kernel"] = ("chunked: TRL ChunkedLogProbFunction through add_fused_lm_head (training.stack "
                                  "trl)" if loss == "trl" else "chunked: torchtune CEWithChunkedOutputLoss's "
                                  f"algorithm in plain torch, {CHUNKED_LOSS_CHUNKS} chunks")
    elif loss_kernel == "fused":
        loss = "liger" if fused_kernels == "liger" else "cce"
        applied["loss_kernel"] = ("fused: Liger fused linear cross-entropy (fused_kernels liger)" if loss == "liger"
                                  else "fused: Apple Cut Cross-Entropy linear_cross_entropy (the estimator sizes "
                                  "a fused loss without Liger as CCE's" + (", Unsloth's own loss is not run)"
                                                                          if stack == "unsloth" else ")"))
    else:
        raise NotApplied("training.loss_kernel", f"{loss_kernel!r} is not run by capplan check")
    liger = fused_kernels == "liger"
    if liger:
        applied["fused_kernels"] = "liger: Liger RMSNorm, SwiGLU / GeGLU, RoPE (apply_liger_kernel_to_<family>)"
    if activation_offloading == "none":
        offload = "none"
    elif activation_offloading == "all":
        offload = "trl"
        applied["activation_offloading"] = ("all: TRL get_act_offloading_ctx_manager (torchtune OffloadActivations "
                                            "ported), around forward and backward")
    else:
        raise NotApplied("training.activation_offloading", f"{activation_offloading!r} (Unsloth's offloaded "
                         "checkpointer) has no implementation in capplan check; \"all\" runs TRL's offloading hooks")
    opt = OPTIMIZERS.get(optimizer, optimizer)
    if optimizer in OPTIMIZERS:
        applied["optimizer"] = {"paged-adamw-8bit": "bitsandbytes PagedAdamW8bit",
                                "paged-adamw-32bit": "bitsandbytes PagedAdamW32bit",
                                "ao-adamw-4bit": "torchao AdamW4bit", "ao-adamw-8bit": "torchao AdamW8bit",
                                "adamw-8bit": "bitsandbytes AdamW8bit",
                                "muon": "torch.optim.Muon (2-D decoder matrices) + fused AdamW (the rest)"}[opt]
    alloc = "expandable_segments:True" if allocator == "expandable_segments" else None
    if alloc:
        applied["allocator"] = "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
    st = {"loss": loss, "liger_kernels": liger, "offload": offload, "optimizer": opt, "alloc_conf": alloc}
    if loss == "torchtune" and stack == "torchtune":
        # torchtune's own Gemma 2 soft-caps the normed hidden state (Gemma2FinalNorm), never the logits
        # (estimator.training.mechanisms.loss_bytes): its loss caps nothing
        st["logit_softcap"] = False
    return st, applied


def needed_packages(st: dict[str, Any]) -> dict[str, str]:
    """Request field -> the pip package the stack dict ``st`` needs (its import name in :data:`PACKAGES`)."""
    out: dict[str, str] = {}
    if st["loss"] in ("trl", "liger", "cce"):
        out["training.loss_kernel"] = st["loss"]
    if st["liger_kernels"]:
        out["training.fused_kernels"] = "liger"
    if st["offload"] == "trl":
        out["training.activation_offloading"] = "trl"
    if st["optimizer"].startswith("paged-") or st["optimizer"] == "adamw-8bit":
        out["training.optimizer"] = "bitsandbytes"
    elif st["optimizer"].startswith("ao-"):
        out["training.optimizer"] = "torchao"
    return out


# ------------------------------------------------------------------------------------------ optimizers
class Combined:
    """Two optimizers stepped together (Muon on the 2-D matrices, AdamW on the rest)."""

    def __init__(self, opts: list[Any]) -> None:
        self.opts = opts
        self.state: dict[Any, Any] = {}
        for o in opts:
            self.state.update(o.state)

    def step(self) -> None:
        for o in self.opts:
            o.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        for o in self.opts:
            o.zero_grad(set_to_none=set_to_none)


def muon_split(model: nn.Module, params: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(Muon's parameters, AdamW's): the 2-D matrices but the embedding and the LM head (tied or not) for Muon, the
    rest (embeddings, LM head, norms, biases) for AdamW. By identity, so FSDP2's DTensors split the same way."""
    emb = {id(p) for m in (model.get_input_embeddings(), model.get_output_embeddings()) if m is not None
           for p in m.parameters()}
    mats = [p for p in params if p.dim() == 2 and id(p) not in emb]
    rest = [p for p in params if not (p.dim() == 2 and id(p) not in emb)]
    return mats, rest


def make_optimizer(name: str, tr: dict[str, Any], model: nn.Module, params: list[torch.Tensor],
                   base: Callable[[dict[str, Any], list[torch.Tensor]], tuple[Any, dict[str, Any]]] | None = None
                   ) -> tuple[Any, dict[str, Any]]:
    """(the optimizer of stack name ``name``, its settings as recorded). ``"adamw"`` and ``"adamw-8bit"`` are the
    plain ones of ``base(dict(tr, optimizer=name), params)`` (``measure.py``'s ``make_optimizer``); the others
    here. lr 1e-5, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 for all."""
    kw = {"lr": 1e-5, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
    if name in ("adamw", "adamw-8bit"):
        if base is None:
            raise ValueError(f"{name}: the plain optimizers are the caller's (base)")
        t = dict(tr, optimizer=name)
        return base(t, params)
    if name in ("paged-adamw-8bit", "paged-adamw-32bit"):
        import bitsandbytes as bnb

        cls = bnb.optim.PagedAdamW8bit if name.endswith("8bit") else bnb.optim.PagedAdamW32bit
        opt = cls(params, **kw)
        return opt, {"class": f"bitsandbytes.optim.{cls.__name__}", "lr": 1e-5, "weight_decay": 0.01,
                     "is_paged": getattr(opt, "is_paged", None), "bitsandbytes": getattr(bnb, "__version__", None)}
    if name in ("ao-adamw-8bit", "ao-adamw-4bit"):
        import torchao
        from torchao import optim as ao

        cls = ao.AdamW8bit if name.endswith("8bit") else ao.AdamW4bit
        opt = cls(params, **kw)
        return opt, {"class": f"torchao.optim.{cls.__name__}", "lr": 1e-5, "weight_decay": 0.01,
                     "torchao": getattr(torchao, "__version__", None),
                     "defaults": {k: v for k, v in opt.defaults.items() if isinstance(v, bool | int | float | str)}}
    if name == "muon":
        mats, rest = muon_split(model, params)
        muon = torch.optim.Muon(mats, lr=1e-5, weight_decay=0.01)
        # LoRA: every trainable tensor is an adapter matrix, nothing is left for AdamW (which refuses an empty list)
        adam = [torch.optim.AdamW(rest, fused=True, **kw)] if rest else []
        return Combined([muon, *adam]), {
            "class": "torch.optim.Muon (2-D decoder matrices) + torch.optim.AdamW(fused=True) (embeddings, LM head, "
                     "norms, biases)", "muon_params": int(sum(p.numel() for p in mats)),
            "adamw_params": int(sum(p.numel() for p in rest)),
            "muon_defaults": {k: v for k, v in muon.defaults.items() if isinstance(v, bool | int | float | str)}}
    raise ValueError(name)


def state_bytes(opt: Any) -> dict[str, int]:
    """Bytes of the optimizer's state tensors (a DTensor's local shard, a torchao subclass' parts), and those
    bitsandbytes put in CUDA managed memory (``is_paged``)."""
    out = {"state_bytes": 0, "paged_state_bytes": 0, "paged_tensors": 0}
    opts = opt.opts if isinstance(opt, Combined) else [opt]
    seen: set[int] = set()
    for o in opts:
        for st in o.state.values():
            for v in st.values():
                if not torch.is_tensor(v):
                    continue
                t = v
                try:
                    n = t.numel() * t.element_size()
                except Exception:
                    n = 0
                if hasattr(t, "to_local"):  # DTensor (FSDP2): the local shard
                    loc = t.to_local()
                    n = loc.numel() * loc.element_size()
                elif hasattr(t, "__tensor_flatten__") and type(t).__name__ != "Tensor":  # torchao subclass
                    names, _ = t.__tensor_flatten__()
                    parts = [getattr(t, a) for a in names]
                    n = sum(q.numel() * q.element_size() for q in parts if torch.is_tensor(q))
                if id(t) in seen:
                    continue
                seen.add(id(t))
                out["state_bytes"] += n
                if getattr(t, "is_paged", False):
                    out["paged_state_bytes"] += n
                    out["paged_tensors"] += 1
    return out


# ---------------------------------------------------------------------------------------------- Liger
LIGER_FN = {"llama": "apply_liger_kernel_to_llama", "qwen2": "apply_liger_kernel_to_qwen2",
            "mistral": "apply_liger_kernel_to_mistral", "gemma2": "apply_liger_kernel_to_gemma2",
            "qwen3_moe": "apply_liger_kernel_to_qwen3_moe", "mixtral": "apply_liger_kernel_to_mixtral",
            "qwen3": "apply_liger_kernel_to_qwen3", "phi3": "apply_liger_kernel_to_phi3"}


def apply_liger(arch: str, kernels: bool, flce: bool, res: dict[str, Any]) -> None:
    """Liger's monkey patch of the transformers family ``arch`` (``model_type``): its RMSNorm / SwiGLU (GeGLU) /
    RoPE kernels when ``kernels``, its fused linear cross-entropy when ``flce``; its plain cross-entropy off.
    Patches the classes, so it runs before the model is built."""
    import liger_kernel
    import liger_kernel.transformers as lt

    fn = getattr(lt, LIGER_FN[arch])
    params = inspect.signature(fn).parameters
    kw: dict[str, Any] = {}
    for k in ("rope", "swiglu", "geglu", "rms_norm"):
        if k in params:
            kw[k] = kernels
    if "fused_linear_cross_entropy" in params:
        kw["fused_linear_cross_entropy"] = flce
    if "cross_entropy" in params:
        kw["cross_entropy"] = False
    fn(**kw)
    res["liger"] = {"function": fn.__name__, "kwargs": kw,
                    "version": getattr(liger_kernel, "__version__", None) or dist_version("liger-kernel")}


# ---------------------------------------------------------------------------------------------- losses
def _parts(model: nn.Module) -> tuple[nn.Module, nn.Module, nn.Module]:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base, base.base_model if hasattr(base, "base_model") else base.model, base.get_output_embeddings()


def chunked_output_loss(hidden: torch.Tensor, head: nn.Module, input_ids: torch.Tensor, softcap: float | None,
                        n_chunks: int = CHUNKED_LOSS_CHUNKS) -> torch.Tensor:
    """torchtune ``CEWithChunkedOutputLoss``'s algorithm in plain torch, labels = the inputs shifted by one: the LM
    head on ``n_chunks`` sequence chunks (the bf16 logits of every chunk kept), each chunk upcast to fp32 inside
    the loss (soft-capped where the model caps), summed and divided by the count of labels."""
    labels = torch.cat([input_ids[:, 1:], torch.full_like(input_ids[:, :1], -100)], dim=1)
    logits = [head(hc) for hc in hidden.chunk(n_chunks, dim=1)]
    total = torch.zeros((), device=hidden.device)
    for lg, lb in zip(logits, labels.chunk(n_chunks, dim=1), strict=True):
        lf = lg.float()
        if softcap:
            lf = torch.tanh(lf / softcap) * softcap
        total = total + nn.functional.cross_entropy(lf.reshape(-1, lf.size(-1)), lb.reshape(-1), reduction="sum",
                                                    ignore_index=-100)
    return total / (labels != -100).sum()


def cce_loss(hidden: torch.Tensor, head: nn.Module, input_ids: torch.Tensor, softcap: float | None) -> torch.Tensor:
    """Apple's Cut Cross-Entropy on the last hidden state (bf16), labels = the inputs shifted by one."""
    from cut_cross_entropy import linear_cross_entropy

    return linear_cross_entropy(hidden.to(torch.bfloat16), head.weight.to(torch.bfloat16), input_ids, shift=1,
                                softcap=softcap, reduction="mean")


_LOSS_IMPL = {
    "torchtune": ("torchtune CEWithChunkedOutputLoss algorithm in plain torch: LM head on 8 sequence chunks (bf16 "
                  "logits of every chunk kept), each chunk upcast to fp32 inside the loss, summed and divided by the "
                  "count of labels"),
    "cce": ("cut_cross_entropy.linear_cross_entropy(hidden.bf16, lm_head.weight.bf16, input_ids, shift=1, "
            "softcap=final_logit_softcapping)"),
}


def make_loss(case: dict[str, Any], model: nn.Module, x: torch.Tensor, res: dict[str, Any]) -> Callable[[], Any]:
    """A function computing the training loss of ``case``'s stack (``case["stack"]["loss"]``) on the batch ``x``
    (labels = inputs): the model's own forward (``hf``; ``liger`` once :func:`apply_liger` patched it), TRL's
    fused head (``trl``, after :func:`add_trl_head`), or the backbone then :func:`chunked_output_loss` /
    :func:`cce_loss`."""
    kind = case["stack"]["loss"]
    base, backbone, head = _parts(model)
    softcap = getattr(base.config, "final_logit_softcapping", None) if _caps(case["stack"]) else None
    if kind in ("hf", "liger"):
        return lambda: model(input_ids=x, labels=x).loss
    if kind == "trl":
        return lambda: model(input_ids=x, labels=x, fused_lm_head=True).loss
    if kind in _LOSS_IMPL:
        if kind == "cce":  # imported here, so a missing library (or Triton) fails before the model runs
            import cut_cross_entropy  # noqa: F401
        res["loss_impl"] = _LOSS_IMPL[kind]
        fn = chunked_output_loss if kind == "torchtune" else cce_loss
        return lambda: fn(backbone(input_ids=x).last_hidden_state, head, x, softcap)
    raise ValueError(kind)


def _caps(st: dict[str, Any]) -> bool:
    """Whether the loss applies the model's final logit soft-cap (not torchtune's own stack: :func:`stack_of`)."""
    return bool(st.get("logit_softcap", True))


def install_loss(kind: str, model: nn.Module, res: dict[str, Any], logit_softcap: bool = True) -> dict[str, Any]:
    """Make ``model(input_ids=x, labels=x, **extra).loss`` compute the loss ``kind``, on the causal-LM module
    ``model`` before peft wraps it (peft's forward calls the instance's); returns ``extra`` (TRL's
    ``fused_lm_head=True``). ``torchtune`` and ``cce`` replace the instance's ``forward``, so a module's hooks
    around it (FSDP2's root all-gather of the embedding / LM head) still run; ``hf`` / ``liger`` leave it."""
    if kind in ("hf", "liger"):
        return {}
    if kind == "trl":
        add_trl_head(model, res)
        return {"fused_lm_head": True}
    if kind not in _LOSS_IMPL:
        raise ValueError(kind)
    if kind == "cce":
        import cut_cross_entropy  # noqa: F401
    res["loss_impl"] = _LOSS_IMPL[kind]
    fn = chunked_output_loss if kind == "torchtune" else cce_loss

    def forward(self: nn.Module, input_ids: Any = None, labels: Any = None, **_: Any) -> Any:
        base, backbone, head = _parts(self)
        h = backbone(input_ids=input_ids).last_hidden_state
        cap = getattr(base.config, "final_logit_softcapping", None) if logit_softcap else None
        return types.SimpleNamespace(loss=fn(h, head, labels, cap))

    model.forward = types.MethodType(forward, model)
    return {}


def loss_fsdp_units(kind: str, model: nn.Module) -> list[tuple[str, Any]]:
    """(name, module or list of modules) of what the loss ``kind`` calls outside the causal-LM module's forward,
    each to be its own FSDP2 unit (``fully_shard`` after the decoder layers, before the root: their parameters
    all-gathered around those calls; torchtune's recipes shard the output projection as its own unit too): the
    decoder stack and the LM head for ``torchtune`` and ``cce`` (``measure_stacks.py``'s FSDP2 cases); nothing for
    the other losses, nor when the LM head is the tied embedding: FSDP2 refuses a parameter in two units ("For
    shared/tied parameters, use fully_shard([module_a, module_b])"), and one unit of both frees the gathered
    weight between the embedding's and the head's use (the backward then fails on the CPU); the root unit keeps
    it gathered around :func:`install_loss`'s forward instead."""
    if kind not in ("torchtune", "cce"):
        return []
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    head = inner.get_output_embeddings()
    if head.weight is inner.get_input_embeddings().weight:
        return []
    return [("model.model", inner.model), ("lm_head", head)]


def ensure_trl_utils(res: dict[str, Any]) -> bool:
    """True when trl.trainer.utils imports (it needs datasets and pandas). Otherwise a stub module stands in for it
    with the one name TRL's ChunkedLogProbFunction.backward imports from it, ``maybe_gather_lm_head_ctx``, which is a
    null context unless DeepSpeed ZeRO-3 is on (trl/trainer/utils.py, 1.16.0)."""
    try:
        import trl.trainer.utils

        return True
    except Exception as e:
        res["trl_import_error"] = f"{type(e).__name__}: {e}"[:300]
        for k in [k for k in sys.modules if k.startswith("trl.trainer")]:
            del sys.modules[k]
        import trl

        pkg = types.ModuleType("trl.trainer")
        pkg.__path__ = []
        stub = types.ModuleType("trl.trainer.utils")
        stub.maybe_gather_lm_head_ctx = lambda *params: contextlib.nullcontext()  # type: ignore[attr-defined]
        sys.modules["trl.trainer"] = pkg
        sys.modules["trl.trainer.utils"] = stub
        pkg.utils = stub  # type: ignore[attr-defined]
        trl.trainer = pkg
        return False


def add_trl_head(model: nn.Module, res: dict[str, Any]) -> None:
    """TRL's fused LM head (``add_fused_lm_head``, what ``SFTTrainer`` installs for ``loss_type="chunked_nll"``):
    ``model(..., labels=, fused_lm_head=True).loss`` without the full logits."""
    import trl

    if not ensure_trl_utils(res):
        add_trl_head_direct(model, res)
        return
    from trl.trainer.utils import add_fused_lm_head

    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    res["trl"] = {"version": trl.__version__,
                  "how": "trl.trainer.utils.add_fused_lm_head(model, outputs=('log_probs', 'entropy', 'is_top1'))"}


def add_trl_head_direct(model: nn.Module, res: dict[str, Any]) -> None:
    """TRL 1.16's add_fused_lm_head, minus the imports of trl.trainer.utils (datasets, pandas): the same
    ChunkedLogProbFunction, 32,768-token tiles, loss = -sum(log p) / count; as TRL, only the valid positions on
    a Triton device (CUDA), every position elsewhere (static shapes: the CPU, fake tensors), and an FSDP2 head
    gathered whole."""
    import trl
    from trl.kernels import ChunkedLogProbFunction

    original = model.forward
    softcap = getattr(model.config, "final_logit_softcapping", None)

    def fwd(self, *args, fused_lm_head=False, labels=None, **kwargs):
        if not fused_lm_head:
            return original(*args, labels=labels, **kwargs)
        kwargs["use_cache"] = False
        out = self.base_model(*args, **kwargs)
        hidden = out.last_hidden_state[:, :-1]
        lab = labels[:, 1:]
        head = self.get_output_embeddings()
        weight, bias = head.weight, head.bias
        if hasattr(weight, "full_tensor"):  # FSDP2: a DTensor (trl/trainer/utils.py gathers it the same way)
            weight = weight.full_tensor()
            bias = bias.full_tensor() if bias is not None else None
        mask = lab != -100
        compact = hidden.device.type in ("cuda", "xpu")
        h_in = hidden[mask] if compact else hidden.reshape(-1, hidden.size(-1))
        l_in = lab[mask] if compact else lab.clamp(min=0).reshape(-1)
        per_token = ChunkedLogProbFunction.apply(h_in, weight, bias, l_in, 1.0, 32768, softcap, 1.0,
                                                 ("log_probs", "entropy", "is_top1"))
        log_probs = per_token[0] if compact else per_token[0].view(mask.shape).masked_fill(~mask, 0)
        loss = -log_probs.sum() / mask.sum().clamp(min=1)
        return types.SimpleNamespace(loss=loss)

    model.forward = types.MethodType(fwd, model)
    res["trl"] = {"version": trl.__version__,
                  "how": "TRL 1.16 add_fused_lm_head's forward re-stated (ChunkedLogProbFunction, 32768-token "
                         "tiles, valid positions only); trl.trainer.utils not importable here"}


# ----------------------------------------------------------------------------------------- offloading
def offload_context(model: nn.Module, res: dict[str, Any], dry: bool = False) -> Any:
    """TRL's activation offloading (``get_act_offloading_ctx_manager``: every saved tensor >= 1 KiB to pinned host
    memory on a side stream, the LM head's excepted), to enter around forward and backward as
    ``SFTTrainer.training_step`` does. ``dry``: a null context (OffloadActivations asks torch.accelerator for the
    device: none on the CPU)."""
    from trl.models.activation_offloading import get_act_offloading_ctx_manager

    res["offload_impl"] = ("trl.models.activation_offloading.get_act_offloading_ctx_manager(model) "
                           "(use_pin_memory, use_streams, min_offload_size=1024, max_fwd_stash_size=5), entered "
                           "around forward and backward as SFTTrainer.training_step does")
    return contextlib.nullcontext() if dry else get_act_offloading_ctx_manager(model)
