"""Bytes per element of each model state, by precision, optimizer and framework.

Sources:
- PyTorch mixed precision (``torch.autocast``; FSDP2 ``MixedPrecisionPolicy``): fp32 parameters, fp32
  gradients, optimizer states in the parameter dtype (``torch/optim/adamw.py`` allocates ``exp_avg`` and
  ``exp_avg_sq`` with ``torch.zeros_like(param)``).
- ZeRO (Rajbhandari et al. 2020, arXiv 1910.02054, Sec. 3): "K = 12" bytes of optimizer state per parameter for
  mixed-precision Adam (fp32 master, momentum, variance) plus 2 + 2 bytes of fp16 parameters and gradients.
- DeepSpeed ``runtime/zero/stage_1_and_2.py`` (``estimate_zero2_model_states_mem_needs``): ``2P + 18P/N``,
  i.e. bf16 params + (bf16 grads 2 + fp32 grads 4 + fp32 master 4 + Adam 8) sharded.
- Megatron-LM ``megatron/training/theoretical_memory_usage.py``: ``18`` bytes per parameter without the
  distributed optimizer, ``6 + 12/d`` with it (bf16 param 2 + fp32 main grad 4 + 12 sharded).
- Optimizer states per optimizer: the table in :mod:`estimator.training.optimizers`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from estimator.request import Framework, Optimizer, Precision
from estimator.training.optimizers import optimizer_spec

__all__ = ["StateBytes", "optimizer_state_bytes", "state_bytes"]


@dataclass(frozen=True)
class StateBytes:
    """Bytes per trainable parameter.

    ``param``: the stored (sharded) parameter; ``compute_param``: the copy used in matmuls (bf16 copy under
    autocast or the FSDP all-gathered parameter), 0 when the stored parameter is used directly;
    ``grad``: the gradient the optimizer reads; ``low_grad``: a low-precision gradient the framework keeps in
    addition (DeepSpeed's bf16 gradients); ``master``: a separate fp32 master copy (DeepSpeed, Megatron).
    """

    param: float
    compute_param: float
    grad: float
    low_grad: float
    master: float
    compute_dtype_bytes: int


_STATE_BYTES: Final[dict[tuple[str, str], StateBytes]] = {}


def state_bytes(precision: Precision, framework: Framework) -> StateBytes:
    """Per-parameter bytes of the parameter, gradient and master copies (one frozen object per precision and
    framework: a dataclass's ``__init__`` stays interpreted in the compiled build, and the memory model, host
    sizing and the planner ask thousands of times)."""
    key = (precision, framework)
    found = _STATE_BYTES.get(key)
    if found is None:
        found = _STATE_BYTES[key] = _state_bytes(precision, framework)
    return found


def _state_bytes(precision: Precision, framework: Framework) -> StateBytes:
    if precision == "fp32":
        return StateBytes(param=4, compute_param=0, grad=4, low_grad=0, master=0, compute_dtype_bytes=4)
    if precision == "bf16-true":
        return StateBytes(param=2, compute_param=0, grad=2, low_grad=0, master=0, compute_dtype_bytes=2)
    fp8_cache = 1.0 if precision == "fp8-mixed" else 0.0
    if framework == "deepspeed":
        return StateBytes(param=2 + fp8_cache, compute_param=0, grad=4, low_grad=2, master=4,
                          compute_dtype_bytes=2)
    if framework == "megatron":
        return StateBytes(param=2 + fp8_cache, compute_param=0, grad=4, low_grad=0, master=4,
                          compute_dtype_bytes=2)
    return StateBytes(param=4, compute_param=2 + fp8_cache, grad=4, low_grad=0, master=0, compute_dtype_bytes=2)


def optimizer_state_bytes(optimizer: Optimizer, precision: Precision, framework: Framework) -> float:
    """Bytes of optimizer state per trainable parameter (excluding any master copy)."""
    dtype = 2 if precision == "bf16-true" and framework == "pytorch" else 4
    return optimizer_spec(optimizer).state_bytes(dtype)  # adafactor: factored state added per matrix by callers
