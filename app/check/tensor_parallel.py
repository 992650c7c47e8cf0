"""Tensor parallelism (PyTorch DTensor) of a Hugging Face Llama-family model: one implementation for
``capplan check --run`` (:mod:`app.check.run`) and the calibration's TP measurements
(``benchmarks/calibration/measure_tp.py``), so the plan ``--run`` measures is the plan the calibration measured
and the estimator is fitted to.

Two plans, the two values of the request's ``parallelism.tp_plan`` (``Parallelism.resolved_tp_plan``; the
estimator's ``Layout.embedding_tp`` / ``logits_tp``):

* ``"vocab-parallel"``: torchtitan's (``torchtitan/models/llama3/infra/parallelize.py`` ``apply_tp``):
  ColwiseParallel q/k/v/gate/up, RowwiseParallel o/down; the embedding RowwiseParallel on the vocabulary, the LM
  head ColwiseParallel with its logits kept sharded on the vocabulary and the loss under ``loss_parallel()``
  (:func:`torchtitan_plan`). With ``sequence_parallel``, torchtitan's sequence-parallel variant: SequenceParallel
  norms, PrepareModuleInput all-gathers before attention and MLP, RowwiseParallel outputs reduce-scattered to
  Shard(1).
* ``"replicated-embeddings"``: Hugging Face transformers' own (``LlamaConfig.base_model_tp_plan`` +
  ``LlamaForCausalLM._tp_plan``, ``from_pretrained(tp_plan="auto")``): the same linear layers, the input
  embedding and the norms replicated, the LM head's output gathered to the full vocabulary, HF's
  ``ForCausalLMLoss`` on the full logits (:func:`hf_tp_plan`).

It imports torch only (no capplan, no web dependencies): ``measure_tp.py`` loads it by its path, or from a copy
beside it where the calibration's scripts run from one folder (``docs/check.md``, "--run on our GPU").
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

__all__ = ["PLANS", "TP_FAMILIES", "apply_fsdp", "apply_tp", "backward", "batch", "forward_loss", "hf_tp_plan",
           "local", "materialize", "optimizer_groups", "plan_modules", "plan_record", "torchtitan_plan",
           "uses_loss_parallel"]

#: the plans, by the request's ``parallelism.tp_plan``
PLANS = ("vocab-parallel", "replicated-embeddings")
#: transformers ``model_type`` values whose module names the plans address (``model.layers[i].self_attn.q_proj``,
#: ``mlp.gate_proj``, ``model.embed_tokens``, ``model.norm``, ``lm_head``) and whose attention reshapes to
#: ``(-1, head_dim)``, so a rank's heads follow its shard: the families the calibration measured under TP
TP_FAMILIES = ("llama", "qwen2", "mistral")


def torchtitan_plan(sp: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """(root plan, per-layer plan) of the "vocab-parallel" plan, torchtitan-style, with or without sequence
    parallelism."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, PrepareModuleInput, RowwiseParallel, SequenceParallel

    if not sp:
        root = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate()),
                "lm_head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
        layer = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
                 "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
                 "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                 "mlp.down_proj": RowwiseParallel()}
        return root, layer
    root = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1),
                                                  use_local_output=False),
            "model.norm": SequenceParallel(),
            "lm_head": ColwiseParallel(input_layouts=Shard(1), output_layouts=Shard(-1), use_local_output=False)}
    layer = {
        "input_layernorm": SequenceParallel(),
        "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                        desired_input_kwarg_layouts={"hidden_states": Replicate()}),
        "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
        "self_attn.v_proj": ColwiseParallel(),
        "self_attn.o_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
        "post_attention_layernorm": SequenceParallel(),
        "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
        "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
        "mlp.down_proj": RowwiseParallel(output_layouts=Shard(1), use_local_output=False),
    }
    return root, layer


def hf_tp_plan() -> tuple[dict[str, Any], dict[str, Any]]:
    """(root plan, per-layer plan) of Hugging Face transformers' plan (``tp_plan="auto"``, accelerate's TP):
    q/k/v/gate/up "colwise", o/down "rowwise", the LM head "colwise_rep" (weight sharded on the vocabulary,
    output all-gathered to the full vocabulary on every rank), the input embedding and norms not in the plan
    (replicated); the loss is HF's own ``ForCausalLMLoss`` on the full logits (no ``loss_parallel``)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    root = {"lm_head": ColwiseParallel(output_layouts=Replicate())}
    layer = {"self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
             "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(),
             "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
             "mlp.down_proj": RowwiseParallel()}
    return root, layer


def plan_modules(plan: str, sp: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (root, per-layer) plan of ``plan`` (one of :data:`PLANS`)."""
    if plan not in PLANS:
        raise ValueError(f"tp_plan {plan!r} is not one of {PLANS}")
    return hf_tp_plan() if plan == "replicated-embeddings" else torchtitan_plan(sp)


def uses_loss_parallel(tp: int, plan: str) -> bool:
    """Whether the loss runs on vocabulary-sharded logits under ``loss_parallel()`` (the "vocab-parallel" plan at
    tp > 1); otherwise the model's own loss on full logits."""
    return tp > 1 and plan != "replicated-embeddings"


def apply_tp(model: nn.Module, tp_mesh: Any, sp: bool, plan: str = "vocab-parallel") -> None:
    """``parallelize_module`` each decoder layer with the per-layer plan, then the root with the root plan."""
    from torch.distributed.tensor.parallel import parallelize_module

    root, layer = plan_modules(plan, sp)
    for blk in model.model.layers:  # type: ignore[union-attr]
        parallelize_module(blk, tp_mesh, layer)
    parallelize_module(model, tp_mesh, root)


def plan_record(plan: str, sp: bool, cfg: Any, model: nn.Module) -> dict[str, Any]:
    """What a measurement records of the plan it applied (the calibration's ``tp_plan`` field)."""
    hf = plan == "replicated-embeddings"
    root, layer = plan_modules(plan, sp)
    out: dict[str, Any] = {"plan": plan, "sp": sp, "root": {k: repr(v)[:160] for k, v in root.items()},
                           "layer": {k: type(v).__name__ for k, v in layer.items()}, "loss_parallel": not hf}
    if hf:  # what the installed transformers declares, for the record
        out["transformers_base_model_tp_plan"] = dict(getattr(cfg, "base_model_tp_plan", {}) or {})
        out["transformers_causal_lm_tp_plan"] = dict(getattr(type(model), "_tp_plan", {}) or {})
    return out


def apply_fsdp(model: nn.Module, dp_mesh: Any, tied: bool) -> dict[str, Any]:
    """2-D parallelism, as torchtitan's: FSDP2 ``fully_shard`` per decoder layer and the root on the data-parallel
    mesh dimension, bf16 parameters and fp32 gradient reduction. Tied embeddings share one parameter first
    (FSDP2 keeps a shared parameter in the root)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mpp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight  # type: ignore[union-attr]
    for blk in model.model.layers:  # type: ignore[union-attr]
        fully_shard(blk, mesh=dp_mesh, mp_policy=mpp)
    fully_shard(model, mesh=dp_mesh, mp_policy=mpp)
    return {"mp_param_dtype": "bfloat16", "mp_reduce_dtype": "float32"}


def materialize(model: nn.Module, device: str, tied: bool, fsdp: bool) -> None:
    """``to_empty`` on ``device``; then, without FSDP, tie the LM head to the embedding again:
    ``parallelize_module`` gives each module its own parameter and ``to_empty`` unties (the LM head's copy is
    freed), and a loaded tied model has one."""
    model.to_empty(device=device)
    if tied and not fsdp:
        model.lm_head.weight = model.model.embed_tokens.weight  # type: ignore[union-attr]


def local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard, or the tensor itself."""
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def optimizer_groups(params: list[torch.Tensor]) -> tuple[Any, str]:
    """The optimizer's parameter groups and their description. Without sequence parallelism the norms stay
    plain tensors: a fused / foreach kernel takes no mix of tensors and DTensors in one call, so they form their
    own group (same states, same memory)."""
    from torch.distributed.tensor import DTensor

    dt = [p for p in params if isinstance(p, DTensor)]
    plain = [p for p in params if not isinstance(p, DTensor)]
    if dt and plain:
        return [{"params": dt}, {"params": plain}], "DTensor / plain"
    return params, "one"


def batch(vocab: int, mbs: int, seq: int, device: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(input ids, next-token labels, position ids) of one micro-batch: ids from a CPU generator seeded 0, the
    labels the ids shifted left by one (``torch.roll``), positions 0..S-1 on every row."""
    g = torch.Generator(device="cpu")
    g.manual_seed(0)
    x = torch.randint(0, vocab, (mbs, seq), generator=g).to(device)
    labels = torch.roll(x, -1, dims=1)
    pos = torch.arange(seq, device=device).unsqueeze(0).expand(mbs, -1)
    return x, labels, pos


def _loss_parallel(on: bool) -> AbstractContextManager[Any]:
    if not on:
        return nullcontext()
    from torch.distributed.tensor.parallel import loss_parallel

    return loss_parallel()


def forward_loss(model: nn.Module, x: torch.Tensor, labels: torch.Tensor, pos: torch.Tensor, *, vocab_parallel: bool,
                 device: str, autocast: bool) -> torch.Tensor:
    """One micro-batch's loss, under bf16 autocast when ``autocast``. ``vocab_parallel``
    (:func:`uses_loss_parallel`): the logits stay sharded on the vocabulary and cross-entropy runs on them under
    ``loss_parallel()`` (torchtitan's default), in fp32; otherwise the model's own loss (``labels=x``: HF shifts
    them)."""
    with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
        if not vocab_parallel:
            loss: torch.Tensor = model(input_ids=x, labels=x).loss
            return loss
        logits = model(input_ids=x, position_ids=pos).logits
        with _loss_parallel(True):
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))


def backward(loss: torch.Tensor, *, vocab_parallel: bool) -> None:
    """``loss.backward()``, under ``loss_parallel()`` for the vocabulary-parallel loss (its backward needs it)."""
    with _loss_parallel(vocab_parallel):
        loss.backward()
