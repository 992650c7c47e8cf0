"""Random weights for a model built on the ``meta`` device: one implementation for ``capplan check`` (``--trace``,
``--run``) and the calibration's measurement scripts (``benchmarks/calibration/measure.py``,
``measure_stacks.py``).

It imports torch only (no capplan, no web dependencies): the measurement scripts run on a bare GPU machine from
one folder, with this file copied beside them as ``random_init.py`` (``docs/check.md``, "--run on our GPU").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["SEED", "init_weights", "materialize"]

#: the generator's seed for the weights (the calibration's since device call 1)
SEED = 1234


def materialize(model: nn.Module, device: str, skip: Callable[[torch.Tensor], bool] | None = None) -> None:
    """``to_empty`` that keeps tied parameters tied (``nn.Module.to_empty`` unties them); ``skip(t)`` leaves ``t``
    as it is (QLoRA's packed 4-bit weights). Under ``FakeTensorMode`` the new tensors are fake. The replaced
    tensors are kept alive until the end, so no ``id`` is reused while the memo is read."""
    memo: dict[int, torch.Tensor] = {}
    keep = []
    for mod in model.modules():
        for store in (mod._parameters, mod._buffers):
            for k, t in list(store.items()):
                if t is None or (skip is not None and skip(t)):
                    continue
                if id(t) not in memo:
                    new = torch.empty_like(t, device=device)
                    if isinstance(t, nn.Parameter):
                        new = nn.Parameter(new, requires_grad=t.requires_grad)
                    memo[id(t)] = new
                    keep.append(t)
                store[k] = memo[id(t)]


@torch.no_grad()
def init_weights(model: nn.Module, device: str, seed: int = SEED) -> None:
    """normal(0, 0.02) matrices, zero LoRA B and biases, unit norms (floating-point parameters only: packed NF4
    weights are uint8, set when quantised); FSDP2's DTensors initialise their local shard. The rotary embedding's
    non-persistent buffers are garbage after ``to_empty``: rebuilt from the config."""
    from torch.distributed.tensor import DTensor

    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    for name, p in model.named_parameters():
        t = p.to_local() if isinstance(p, DTensor) else p
        if t.numel() == 0 or not t.is_floating_point():
            continue
        if "lora_B" in name:
            t.zero_()
        elif t.dim() >= 2:
            t.normal_(0.0, 0.02, generator=gen)
        elif name.endswith("bias"):
            t.zero_()
        else:
            t.fill_(1.0)
    for mod in model.modules():
        if type(mod).__name__.endswith("RotaryEmbedding") and hasattr(mod, "config"):
            with torch.device("cpu"):
                fresh = type(mod)(mod.config)
            for bname, buf in mod._buffers.items():
                if buf is not None and bname in fresh._buffers:
                    buf.copy_(fresh._buffers[bname].to(buf.device, buf.dtype))
