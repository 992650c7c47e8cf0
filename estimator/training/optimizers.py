"""Every optimizer the estimator knows, in one table: what its states cost, which temporaries its
implementations allocate, whether it runs on the CPU, how its step is priced, and which of that was measured.

Adding an optimizer: add its id to ``Optimizer`` in :mod:`estimator.request` and a row here; the memory model
(:mod:`estimator.training.memory`), host RAM (:mod:`estimator.host.ram`), checkpoints
(:mod:`estimator.training.checkpoint`), the step time (:mod:`estimator.training.timing`), the layout checks
(:mod:`estimator.training.layout`) and the error bars (:mod:`estimator.training.accuracy`, :mod:`estimator.estimate`)
read it.

Sources:
- AdamW (``torch/optim/adamw.py``): ``exp_avg`` and ``exp_avg_sq`` per parameter (``torch.zeros_like``), in the
  parameter dtype. The foreach implementation (``_multi_tensor_adamw``) allocates full-size intermediates over
  the whole list (``torch._foreach_sqrt(exp_avg_sqs)`` and its quotient); the for-loop one, two per tensor.
- bitsandbytes 8-bit AdamW (Dettmers et al. 2022, arXiv 2110.02861): two int8 states + one fp32 absmax per
  2048-element block each (``state1``, ``state2``, ``absmax1``, ``absmax2`` in the state dict); its own fused
  kernel, GPU only (``Optimizer8bit.step``).
- SGD with momentum: one ``momentum_buffer``; Lion (Chen et al. 2023, arXiv 2302.06675): one ``exp_avg``.
- Adafactor (Shazeer & Stern 2018, arXiv 1804.04235; ``torch/optim/_adafactor.py``): factored second moment
  (``row_var`` + ``col_var`` per matrix, ``variance`` per vector), no momentum by default; Hugging Face's
  ``Adafactor`` steps tensor by tensor.
- bitsandbytes paged AdamW (``PagedAdamW8bit``, ``PagedAdamW32bit``; bitsandbytes-foundation/bitsandbytes
  ``bitsandbytes/optim/optimizer.py`` ``get_state_buffer`` -> ``F.get_paged`` in ``bitsandbytes/functional.py``:
  state tensors of >= 1e5 elements in CUDA unified memory, ``cudaMallocManaged``): the same bytes as their
  unpaged rows, 8-bit blockwise or fp32 whatever the parameter dtype (``optim_bits=32``). The estimate assumes
  the states GPU-resident (the driver migrates pages to the host only when the GPU is oversubscribed; a setup
  that fits only by paging is not called a fit).
- torchao 4-bit AdamW (``AdamW4bit``; pytorch/ao ``torchao/optim/subclass_4bit.py`` @029bb60a,
  ``OptimState4bit.zeros``): per state ``codes`` (two 4-bit codes per uint8) and one fp32 ``scale`` per
  128-element block (``block_size=128``), plus a 16-entry qmap per tensor: 2 x (0.5 + 4/128) = 1.0625 bytes per
  parameter; its own kernels, GPU only. Its step (``torchao/optim/adam.py`` @v0.18.0, ``_AdamBase.step``) runs
  ``torch.compile(single_param_adam)`` one parameter at a time, and the compiled graph materialises each state
  dequantised to fp32, the int64 codes of the 4-bit binary search and the new scales: 24.06 bytes per element of
  the largest parameter (``torchao_step``; :func:`estimator.training.mechanisms.torchao_adamw_step_bytes`, measured
  on the H100 to 0.01 %).
- torchao 8-bit AdamW (``AdamW8bit``, request ``ao-adamw-8bit``; ``torchao/optim/subclass_8bit.py`` @v0.18.0,
  ``OptimState8bit.zeros``): per state uint8 ``codes`` and one fp32 ``scale`` per 256-element block (``block_size=
  256``): 2 x (1 + 4/256) = 2.03 bytes per parameter; the same compiled step, 8.03 bytes per element of the
  largest parameter (no int64 codes: the 8-bit codes go straight into the state).
- Muon (``torch.optim.Muon``; pytorch/pytorch ``torch/optim/_muon.py`` @098e03f9): one ``momentum_buffer``
  (``zeros_like(p.grad)``) per 2-D parameter; "Other parameters, such as bias, and embedding, should be optimized
  by a standard method such as AdamW" (its docstring): the callers add AdamW's second state for the embedding, the
  LM head and the vectors (:mod:`estimator.training.mechanisms`). Single-tensor loop only (``foreach`` raises).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from estimator.request import Optimizer, OptimizerImpl

__all__ = ["OPTIMIZERS", "OptimizerSpec", "StepCost", "optimizer_spec"]

#: how the step time prices an optimizer (:func:`estimator.training.timing._optimizer_cost`): ``adam`` = the measured
#: AdamW bytes of the implementation x ``adam_ratio``; ``adam8bit`` and ``adafactor`` have their own constants.
StepCost = Literal["adam", "adam8bit", "adafactor", "bnb32", "torchao"]


@dataclass(frozen=True)
class OptimizerSpec:
    """One optimizer.

    ``full_states``: full-size state tensors per parameter in the state dtype (AdamW 2, SGD and Lion 1);
    ``blockwise_8bit``: two int8 states + an fp32 absmax per 2048 elements instead; ``factored``: Adafactor's
    row / column second moment, counted per matrix by the callers. ``saved_tensors``: state tensors per
    parameter tensor in a saved ``optimizer.state_dict()`` (checkpoint records). ``temporaries``: whether the
    PyTorch foreach / for-loop implementations' intermediates apply (bitsandbytes has its own fused kernel: it
    always runs as ``fused``). ``torchao_step``: torchao's low-bit AdamW, whose per-parameter compiled step
    allocates :func:`estimator.training.mechanisms.torchao_adamw_step_bytes` for the largest parameter.
    ``cpu_offload_refusal``: why it cannot run on the CPU (``None``: it can).
    ``step_cost`` / ``adam_ratio``: how its step is priced. ``memory_measured`` / ``time_measured``: among the
    set-ups our H200 runs measured (docs/accuracy.md).
    """

    id: Optimizer
    full_states: int
    saved_tensors: int
    blockwise_8bit: bool = False
    factored: bool = False
    temporaries: bool = True
    cpu_offload_refusal: str | None = None
    step_cost: StepCost = "adam"
    adam_ratio: float = 1.0
    memory_measured: bool = True
    time_measured: bool = True
    block_bits: int = 0
    block_size: int = 0
    state_dtype_bytes: int = 0
    paged: bool = False
    matrix_only: bool = False
    only_impl: OptimizerImpl | None = None
    torchao_step: bool = False

    def state_bytes(self, dtype_bytes: int) -> float:
        """Optimizer-state bytes per trainable parameter, with states of ``dtype_bytes`` (factored: 0 here).

        ``block_bits`` / ``block_size``: ``full_states`` quantised states of that many bits with one fp32 scale
        per block (torchao 4-bit); ``state_dtype_bytes``: states of a fixed width whatever the parameters' dtype
        (bitsandbytes 32-bit). ``matrix_only`` (Muon): the rate of the 2-D matrices; the callers add AdamW's for
        the rest."""
        if self.blockwise_8bit:
            return 2 + 2 * 4 / 2048
        if self.block_bits:
            return self.full_states * (self.block_bits / 8 + 4 / self.block_size)
        return self.full_states * (self.state_dtype_bytes or dtype_bytes)

    def implementation(self, requested: OptimizerImpl) -> OptimizerImpl:
        """The implementation that actually runs: ``fused`` where the library has only its own kernel, the
        optimizer's only implementation where it has one (Muon: the single-tensor loop)."""
        if self.only_impl is not None:
            return self.only_impl
        return requested if self.temporaries else "fused"


# SGD with momentum and Lion touch fewer state bytes per parameter than AdamW (one state instead of two): 0.71 of
# AdamW's measured step bytes.
OPTIMIZERS: Final[dict[str, OptimizerSpec]] = {o.id: o for o in (
    OptimizerSpec("adamw", full_states=2, saved_tensors=2),
    OptimizerSpec("adamw-8bit", full_states=0, saved_tensors=4, blockwise_8bit=True, temporaries=False,
                  cpu_offload_refusal="8-bit AdamW (bitsandbytes) runs on the GPU; it cannot be offloaded",
                  step_cost="adam8bit"),
    OptimizerSpec("sgd", full_states=1, saved_tensors=1, adam_ratio=0.71),
    OptimizerSpec("adafactor", full_states=0, saved_tensors=2, factored=True, step_cost="adafactor"),
    OptimizerSpec("lion", full_states=1, saved_tensors=1, adam_ratio=0.71, memory_measured=False,
                  time_measured=False),
    # issue 29 (estimator.training.mechanisms): bitsandbytes paged AdamW, torchao 4-bit AdamW, torch.optim.Muon
    OptimizerSpec("paged-adamw-8bit", full_states=0, saved_tensors=4, blockwise_8bit=True, temporaries=False,
                  cpu_offload_refusal="paged 8-bit AdamW (bitsandbytes) keeps its states in CUDA unified memory; it "
                  "pages them itself and cannot be offloaded", step_cost="adam8bit", paged=True,
                  memory_measured=False, time_measured=False),
    OptimizerSpec("paged-adamw", full_states=2, saved_tensors=2, temporaries=False, state_dtype_bytes=4,
                  cpu_offload_refusal="paged AdamW (bitsandbytes) keeps its states in CUDA unified memory; it pages "
                  "them itself and cannot be offloaded", paged=True, memory_measured=False, time_measured=False,
                  step_cost="bnb32"),
    OptimizerSpec("adamw-4bit", full_states=2, saved_tensors=2, temporaries=False, block_bits=4, block_size=128,
                  cpu_offload_refusal="torchao 4-bit AdamW runs its own GPU kernels on its state tensor subclass; "
                  "capplan does not model torchao's separate CPUOffloadOptimizer", step_cost="torchao",
                  memory_measured=False, time_measured=False, torchao_step=True),
    # torchao AdamW8bit (not bitsandbytes' "adamw-8bit"): uint8 codes and an fp32 scale per 256-element block, the
    # same per-parameter compiled step as AdamW4bit without the 4-bit codes (measured on the H100)
    OptimizerSpec("ao-adamw-8bit", full_states=2, saved_tensors=2, temporaries=False, block_bits=8, block_size=256,
                  cpu_offload_refusal="torchao 8-bit AdamW runs its own GPU kernels on its state tensor subclass; "
                  "capplan does not model torchao's separate CPUOffloadOptimizer", step_cost="torchao",
                  memory_measured=False, time_measured=False, torchao_step=True),
    OptimizerSpec("muon", full_states=1, saved_tensors=1, adam_ratio=0.71, matrix_only=True, only_impl="for-loop",
                  cpu_offload_refusal="torch.optim.Muon runs Newton-Schulz on the GPU; capplan does not model it "
                  "offloaded", memory_measured=False, time_measured=False),
)}


def optimizer_spec(optimizer: str) -> OptimizerSpec:
    """The row of ``optimizer`` (an id of :data:`estimator.request.Optimizer`)."""
    return OPTIMIZERS[optimizer]
