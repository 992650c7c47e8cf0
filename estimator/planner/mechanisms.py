"""The fine-tuning stacks' memory mechanisms as one more axis of the planner (issue 29, ``vary_mechanisms``).

The request's ``training`` names a loss kernel, fused kernels and activation offloading (``docs/stacks.md``); with
``vary_mechanisms`` the planner may also try, on every layout it searches:

- ``loss_kernel``: ``"fused"`` (Liger fused linear cross-entropy, Cut Cross-Entropy: the full logits never exist);
- ``fused_kernels``: ``"liger"``, only on a model whose norm and MLP Liger patches
  (:func:`estimator.rules.stacks.liger_patches`: the families its ``monkey_patch.py`` patches are RMSNorm +
  gated-MLP ones; a LayerNorm or non-gated family, e.g. Phi-2, is never given Liger);
- ``activation_offloading``: ``"all"`` (torchtune / TRL: every saved tensor to pinned host memory), named
  ``"checkpoints"`` (Unsloth / axolotl: the checkpointed layer inputs) on a layout with full checkpointing, where the
  two are the same bytes (:func:`estimator.training.mechanisms.offload_split`) and the estimate's ways out propose
  ``"checkpoints"`` (:func:`estimator.training.suggest.offload_mode`). Not for the Unsloth stack (its offloading is
  already on) nor when the request already offloads;
- ``optimizer``: ``"adamw-8bit"`` (bitsandbytes ``AdamW8bit``: blockwise 8-bit states,
  :mod:`estimator.training.optimizers`) in place of ``"adamw"`` only. It changes the optimizer's numerics, which is
  why it is proposed only when asked; its CPU offload is refused (the optimizer's own ``cpu_offload_refusal``), so
  no layout offloads it, and it is not proposed on Megatron-LM layouts (:func:`runnable`).

The fused loss and Liger cost no step time (the same GEMMs: :mod:`estimator.training.mechanisms`), they only shrink
memory; offloading costs PCIe time and the optimizer its own step. So the planner searches (:func:`variants`) the
request, the request with every allowed no-cost mechanism, and that with each combination of the costly ones
(:data:`COSTLY`), with the same search (:mod:`estimator.planner.search`), and ranks all the layouts together by its
objective. Each layout a variant found is then given the fewest of its
changes that still fit it at no more step time (:func:`fewest_changes`), and the same layout found twice is kept
once (the fastest, then the fewest changes), so a mechanism is only proposed where it makes a layout fit or run
faster. A combination the stack's own code refuses never becomes a plan: one that validation refuses (TRL's
chunked loss with Liger, :func:`estimator.rules.stacks.training_refusal`) is neither searched nor kept, and one
refused with the parallelism (Liger or offloading under Megatron-LM, Unsloth under FSDP, offloading with parameter
offload: :func:`estimator.rules.stacks.request_refusal`, checked by :func:`estimator.training.layout.build_layout`)
has no layout in the search.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import combinations
from typing import Any, Final

from pydantic import ValidationError

from estimator.construct import replaced
from estimator.messages import N_, Text, capitalized, join
from estimator.planner.contract import PlanRequest
from estimator.planner.search import Found
from estimator.request import Training
from estimator.rules.stacks import liger_patches
from estimator.training.suggest import mechanism_name, offload_mode

__all__ = ["FIELDS", "changes_of", "export_notes", "fewest_changes", "mechanism_words", "relabel", "restored",
           "runnable", "variant", "variants"]

#: the training fields the axis may change, in the order a plan's changes are named
FIELDS: Final = ("loss_kernel", "fused_kernels", "activation_offloading", "optimizer")
#: the mechanisms that cost step time (the others only shrink memory): each combination of them is searched
COSTLY: Final = ("activation_offloading", "optimizer")
#: the optimizer the axis proposes in place of AdamW (bitsandbytes AdamW8bit: the most common optimizer of axolotl's
#: examples, issue 29), and the one it replaces
OPTIMIZER_FROM: Final = "adamw"
OPTIMIZER_TO: Final = "adamw-8bit"


def _axes(req: PlanRequest, dims: Any) -> tuple[list[tuple[str, str]], list[str]]:
    """The single changes the request allows and the stack runs on some layout, and a note per allowed mechanism
    that is not varied (and why)."""
    t = req.training
    allowed = set(req.vary_mechanisms)
    axes: list[tuple[str, str]] = []
    notes: list[str] = []
    if "loss_kernel" in allowed and t.loss_kernel != "fused":
        axes.append(("loss_kernel", "fused"))
    if "fused_kernels" in allowed and t.fused_kernels == "none":
        if liger_patches(dims):
            axes.append(("fused_kernels", "liger"))
        else:
            notes.append(Text("fused_kernels: not varied, Liger has no kernel for this model's norm or MLP (it "
                              "patches RMSNorm, gated-MLP families: liger_kernel/transformers/monkey_patch.py)."))
    if "optimizer" in allowed:
        if t.optimizer == OPTIMIZER_FROM:
            axes.append(("optimizer", OPTIMIZER_TO))
        else:
            notes.append(Text("optimizer: not varied, the planner replaces only AdamW's fp32 states (by 8-bit "
                              "AdamW); the request names %(optimizer)s.", optimizer=t.optimizer))
    if "activation_offloading" in allowed and t.activation_offloading == "none":
        if t.stack != "unsloth":
            axes.append(("activation_offloading", "all"))
        else:
            notes.append(Text("activation_offloading: not varied, the request sets it \"none\" for the Unsloth "
                              "stack, whose offloaded checkpointing is its use_gradient_checkpointing=\"unsloth\"."))
    return axes, notes


def variant(req: PlanRequest, changes: dict[str, str]) -> PlanRequest | None:
    """The request with ``changes`` (training field -> value), or ``None`` when validation refuses the combination
    (the stack's refusals that do not depend on the layout: :func:`estimator.rules.stacks.training_refusal`).
    The request's own set fields stay what they were (the planner's pins read them) plus the changes."""
    if not changes:
        return req
    t = req.training
    try:
        Training.model_validate({**t.model_dump(), **changes})
    except ValidationError:
        return None
    return req.model_copy(update={"training": replaced(t, changes)})


def variants(req: PlanRequest, dims: Any) -> tuple[list[PlanRequest], list[str]]:
    """The requests the planner searches: the request itself (first), the request with the most allowed
    mechanisms that cost no step time (the fused loss, Liger: validation accepting the combination), and that with
    activation offloading added, which costs PCIe time; and the notes on what is not varied. Without
    ``vary_mechanisms``: ``[req]``, no notes.

    A mechanism that costs no time only shrinks memory, so the variant with all of them fits every layout a
    variant with fewer fits, at the same step time: searching it finds every layout the axis can add. Each layout
    found is then given the fewest changes it needs (:func:`fewest_changes`)."""
    if not req.vary_mechanisms:
        return [req], []
    axes, notes = _axes(req, dims)
    free = [a for a in axes if a[0] not in COSTLY]
    costly = [a for a in axes if a[0] in COSTLY]
    refused = [_words(dict(c)) for size in range(1, len(axes) + 1) for c in combinations(axes, size)
               if variant(req, dict(c)) is None]
    out = [req]
    for size in range(len(costly) + 1):
        for extra in combinations(costly, size):
            most = _most(req, free, dict(extra))
            if most is not None and all(most is not v for v in out):
                out.append(most)
    if refused:
        notes.append(Text("Not tried, the stack refuses them: %(what)s.", what=join(refused, N_("; "))))
    return out, notes


def _most(req: PlanRequest, free: list[tuple[str, str]], extra: dict[str, str]) -> PlanRequest | None:
    """The request with ``extra`` and the most of the ``free`` changes that validation accepts."""
    for size in range(len(free), -1, -1):
        for combo in combinations(free, size):
            v = variant(req, {**dict(combo), **extra})
            if v is not None:
                return v
    return None


def fewest_changes(f: Found, requested: Any, context: Callable[[dict[str, str]], Any]) -> Found:
    """``f`` with the fewest of its mechanism changes that still fit its layout (GPU memory with the planner's
    margin, host RAM) at no more step time: the smallest subsets first, in :data:`FIELDS` order.
    ``context(changes)``: the search context of the request with those changes, or ``None`` when it is refused."""
    items = [(k.removeprefix("training."), v) for k, v in changes_of(requested, f.request.training).items()]
    w, s, ckpt, mbs, gas = f.world, f.structure, f.ckpt, f.micro_batch_size, f.accumulation
    for size in range(len(items)):
        for subset in combinations(items, size):
            ctx = context(dict(subset))
            if (ctx is None or ctx.layout(w, s) is None or not ctx.fits(w, s, ckpt, mbs, gas)
                    or not ctx.host_fits(w, s)):
                continue
            t = ctx.time(w, s, ckpt, mbs, gas)
            if t.step_time_s > f.step_time_s:
                continue
            return Found(w, s, ckpt, mbs, gas, f.dp, t, ctx.request(w, s, ckpt, mbs, gas),
                         ctx.memory_total(w, s, ckpt, mbs, gas), ctx.memory_need(w, s, ckpt, mbs, gas),
                         ctx.host_ram_bytes(w, s))
    return f


def runnable(f: Found, requested: Any) -> bool:
    """Whether the launcher a plan exports runs its changed mechanisms: Megatron-LM's own optimizers (``--optimizer``
    adam or sgd, ``megatron/training/arguments.py``) have no bitsandbytes 8-bit AdamW, so the axis never proposes
    it on a Megatron-LM layout (the other mechanisms' refusals are the stacks' own, checked with the layout)."""
    t = f.request.training
    return not (f.structure.framework == "megatron" and t.optimizer != requested.optimizer)


def export_notes(changes: dict[str, str]) -> list[str]:
    """What the training script must turn on for a plan's changed optimizer (the launch notes already name the loss,
    the kernels and the offloading the plan is sized with)."""
    if changes.get("training.optimizer") == OPTIMIZER_TO:
        return [Text("Sized with 8-bit AdamW: use bitsandbytes.optim.AdamW8bit (Hugging Face Trainer / TRL "
                     "optim=\"adamw_bnb_8bit\", axolotl optimizer: adamw_bnb_8bit) in place of AdamW.")]
    return []


def changes_of(requested: Any, used: Any) -> dict[str, str]:
    """The mechanisms ``used`` (a plan's training section) changes from ``requested`` (the request's), as dotted
    request fields."""
    return {f"training.{f}": str(getattr(used, f)) for f in FIELDS if getattr(used, f) != getattr(requested, f)}


def restored(found_training: Any, requested: Any) -> Any:
    """``found_training`` with the request's own mechanisms: the same layout as the user asked for it."""
    return replaced(found_training, {f: getattr(requested, f) for f in FIELDS})


def _words(changes: dict[str, str]) -> str:
    names = [mechanism_name(k.removeprefix("training."), v) for k, v in changes.items()]
    return join(names, N_(" and "))


def mechanism_words(changes: dict[str, str]) -> str:
    """A plan's changes in words, as the estimate's ways out name them."""
    return capitalized(_words(changes))


def relabel(found: Iterable[Found], requested: Any) -> list[Found]:
    """Offloading that the axis set to ``"all"`` is named ``"checkpoints"`` on a layout with full checkpointing (the
    same bytes and seconds: module docstring), as the estimate's ways out name it."""
    out: list[Found] = []
    for f in found:
        t = f.request.training
        mode = offload_mode(f.ckpt)
        if t.activation_offloading == "all" and requested.activation_offloading == "none" and mode != "all":
            request = replaced(f.request, {"training": replaced(t, {"activation_offloading": mode})})
            f = Found(f.world, f.structure, f.ckpt, f.micro_batch_size, f.accumulation, f.dp, f.step, request,
                      f.memory_total_bytes, f.memory_need_bytes, f.host_ram_bytes)
        out.append(f)
    return out
