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
  already on) nor when the request already offloads.

Each combination of the allowed changes is one variant of the request; the planner searches every variant with the
same search (:mod:`estimator.planner.search`) and ranks all the layouts together by its objective. A combination the
stack's own code refuses never becomes a plan: one that validation refuses (TRL's chunked loss with Liger,
:func:`estimator.rules.stacks.training_refusal`) is not a variant, and one refused with the parallelism (Liger or
offloading under Megatron-LM, Unsloth under FSDP, offloading with parameter offload:
:func:`estimator.rules.stacks.request_refusal`, checked by :func:`estimator.training.layout.build_layout`) has no
layout in the search. The same layout found by several variants is kept once: the fastest, and on a tie the one
that changes the fewest mechanisms (variants are searched fewest changes first), so a mechanism is only proposed
where it makes a layout fit or run faster.
"""

from __future__ import annotations

from collections.abc import Iterable
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

__all__ = ["FIELDS", "changes_of", "mechanism_words", "relabel", "restored", "variants"]

#: the training fields the axis may change, in the order a plan's changes are named
FIELDS: Final = ("loss_kernel", "fused_kernels", "activation_offloading")


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
    if "activation_offloading" in allowed and t.activation_offloading == "none":
        if t.stack != "unsloth":
            axes.append(("activation_offloading", "all"))
        else:
            notes.append(Text("activation_offloading: not varied, the request sets it \"none\" for the Unsloth "
                              "stack, whose offloaded checkpointing is its use_gradient_checkpointing=\"unsloth\"."))
    return axes, notes


def variants(req: PlanRequest, dims: Any) -> tuple[list[PlanRequest], list[str]]:
    """The request (first) and one request per combination of the allowed changes that validation accepts, fewest
    changes first; and the notes on what is not varied. Without ``vary_mechanisms``: ``[req]``, no notes."""
    if not req.vary_mechanisms:
        return [req], []
    axes, notes = _axes(req, dims)
    t = req.training
    out = [req]
    refused: list[str] = []
    for size in range(1, len(axes) + 1):
        for combo in combinations(axes, size):
            changes = dict(combo)
            try:  # the stack's refusals that do not depend on the layout (estimator.rules.stacks.training_refusal)
                Training.model_validate({**t.model_dump(), **changes})
            except ValidationError:
                refused.append(_words(changes))
                continue
            # the request's own set fields stay what they were (the planner's pins read them) plus the changes
            out.append(req.model_copy(update={"training": replaced(t, changes)}))
    if refused:
        notes.append(Text("Not tried, the stack refuses them: %(what)s.", what=join(refused, N_("; "))))
    return out, notes


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
