"""The optimizer table (estimator/training/optimizers.py): one row per optimizer the contract accepts, and the facts its
readers take from it."""

from __future__ import annotations

from typing import get_args

import pytest

from estimator.request import Optimizer, OptimizerImpl
from estimator.training.optimizers import OPTIMIZERS, optimizer_spec
from estimator.training.precision import optimizer_state_bytes


def test_every_optimizer_of_the_contract_has_one_row() -> None:
    assert sorted(OPTIMIZERS) == sorted(get_args(Optimizer))
    assert all(spec.id == key for key, spec in OPTIMIZERS.items())


@pytest.mark.parametrize(("optimizer", "precision", "framework", "expected"), [
    ("adamw", "bf16-mixed", "pytorch", 8),  # exp_avg + exp_avg_sq in fp32 (torch.zeros_like of an fp32 param)
    ("adamw", "bf16-true", "pytorch", 4),  # ... in bf16
    ("adamw", "bf16-true", "deepspeed", 8),  # DeepSpeed keeps fp32 states beside its master copy
    ("sgd", "bf16-mixed", "pytorch", 4),  # one momentum buffer
    ("lion", "bf16-true", "pytorch", 2),
    ("adamw-8bit", "bf16-mixed", "pytorch", 2 + 2 * 4 / 2048),  # two int8 states + an fp32 absmax per 2048
    ("adafactor", "bf16-mixed", "pytorch", 0),  # factored: counted per matrix by the callers
    ("paged-adamw-8bit", "bf16-mixed", "pytorch", 2 + 2 * 4 / 2048),  # paged: the same bytes, GPU-resident
    ("paged-adamw", "bf16-true", "pytorch", 8),  # bitsandbytes 32-bit states whatever the parameters' dtype
    ("adamw-4bit", "bf16-mixed", "pytorch", 2 * (0.5 + 4 / 128)),  # torchao: packed 4-bit codes + fp32 scale / 128
    ("ao-adamw-8bit", "bf16-mixed", "pytorch", 2 * (1 + 4 / 256)),  # torchao: uint8 codes + fp32 scale / 256
    ("muon", "bf16-mixed", "pytorch", 4),  # one momentum buffer per matrix (AdamW's for the rest: the callers)
])
def test_state_bytes_per_parameter(optimizer: str, precision: str, framework: str, expected: float) -> None:
    assert optimizer_state_bytes(optimizer, precision, framework) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("impl", get_args(OptimizerImpl))
def test_bitsandbytes_runs_its_own_kernel_whatever_the_implementation(impl: str) -> None:
    assert optimizer_spec("adamw-8bit").implementation(impl) == "fused"  # type: ignore[arg-type]
    assert optimizer_spec("adamw").implementation(impl) == impl  # type: ignore[arg-type]


def test_only_the_gpu_only_optimizers_refuse_cpu_offload() -> None:
    """bitsandbytes (paged or not), torchao 4-bit and Muon run their own GPU code (issue 29 added the last
    four); the PyTorch optimizers offload."""
    refusing = {o.id for o in OPTIMIZERS.values() if o.cpu_offload_refusal}
    assert refusing == {"adamw-8bit", "paged-adamw-8bit", "paged-adamw", "adamw-4bit", "muon", "ao-adamw-8bit"}
