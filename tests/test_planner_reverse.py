"""Reverse questions give monotone, sensible answers."""

from __future__ import annotations

import math
from typing import Any

import pytest

from estimator.model.spec import ModelShape, preset
from estimator.planner.contract import PlanRequest
from estimator.planner.reverse import fewest_gpus, largest_model, longest_sequence
from hardware_catalog import load_catalog

CATALOG = load_catalog()
NO_OFFLOAD_ZERO3 = {"sharding": "zero3", "offload": "none"}


def _req(**kw: Any) -> PlanRequest:
    return PlanRequest.model_validate(kw)


def _fewest(model: str, gpu: str, method: str = "full", parallelism: dict[str, Any] | None = None) -> int:
    req = _req(model=model, training={"method": method}, parallelism=parallelism or {"offload": "none"},
               constraints={"gpus": [gpu], "max_nodes": 16})
    (answer,) = fewest_gpus(req, CATALOG)
    assert answer.num_gpus is not None and answer.plan is not None
    assert answer.plan.layout.world_size == answer.num_gpus and answer.plan.estimate.memory.fits
    return answer.num_gpus


def test_fewest_gpus_for_70b_zero3_is_at_least_the_model_states() -> None:
    """Mixed-precision Adam keeps 16 bytes per parameter (ZeRO, arXiv 1910.02054): sharded over N GPUs they
    need N >= 16 P / memory."""
    n = _fewest("llama-3.1-70b", "h100-sxm5-80gb", parallelism=NO_OFFLOAD_ZERO3)
    params = ModelShape(preset("llama-3.1-70b")).total_params()
    assert params == pytest.approx(70.6e9, rel=0.01)
    states_only = params * 16 / CATALOG.gpus["h100-sxm5-80gb"].memory_bytes
    assert n >= math.ceil(states_only)
    assert n <= 32  # and it does not overshoot: 16 is the next world that splits the batch


@pytest.mark.parametrize(
    ("smaller", "larger"),
    [
        (("llama-3.1-8b", "h100-sxm5-80gb", "full"), ("llama-3.1-70b", "h100-sxm5-80gb", "full")),
        (("llama-3.1-70b", "h200-sxm-141gb", "full"), ("llama-3.1-70b", "h100-sxm5-80gb", "full")),
        (("llama-3.1-70b", "h100-sxm5-80gb", "lora"), ("llama-3.1-70b", "h100-sxm5-80gb", "full")),
        (("llama-3.1-70b", "h100-sxm5-80gb", "qlora"), ("llama-3.1-70b", "h100-sxm5-80gb", "lora")),
        (("llama-3.1-70b", "h100-sxm5-80gb", "full"), ("llama-3.1-405b", "h100-sxm5-80gb", "full")),
    ],
)
def test_fewest_gpus_is_monotone(smaller: tuple[str, str, str], larger: tuple[str, str, str]) -> None:
    assert _fewest(*smaller) <= _fewest(*larger)


def test_fewest_gpus_for_a_small_lora_is_one() -> None:
    assert _fewest("llama-3.1-8b", "h100-sxm5-80gb", "lora") == 1


def _largest(method: str, nodes: int, family: bool = False) -> Any:
    req = _req(model="llama-3.1-8b", training={"method": method}, parallelism={"offload": "none"},
               hardware={"server": "dell-xe9680-h100", "num_nodes": nodes})
    (answer,) = largest_model(req, CATALOG, family=family)
    return answer


def test_largest_model_on_one_server() -> None:
    full, lora = _largest("full", 1), _largest("lora", 1)
    size = {p.model: p.total_params for p in full.presets}
    assert full.largest_preset is not None and lora.largest_preset is not None
    assert 8e9 <= size[full.largest_preset] < 70e9  # 70B full fine-tune needs 16 x 70.6e9 B > 8 x 80 GB
    assert size[lora.largest_preset] >= 70e9
    assert [p.total_params for p in full.presets] == sorted((p.total_params for p in full.presets), reverse=True)


def test_largest_model_grows_with_nodes_and_the_family_is_monotone() -> None:
    one, four = _largest("full", 1, family=True), _largest("full", 4, family=True)
    assert one.family is not None and four.family is not None
    assert 32 <= one.family.num_layers <= four.family.num_layers
    assert one.family.total_params <= four.family.total_params
    fits_one = {p.model for p in one.presets if p.fits}
    assert fits_one <= {p.model for p in four.presets if p.fits}


def _longest(model: str, method: str, nodes: int = 1) -> int:
    req = _req(model=model, training={"method": method}, global_batch_size=16,
               hardware={"server": "dell-xe9680-h100", "num_nodes": nodes})
    (answer,) = longest_sequence(req, CATALOG)
    if answer.seq_len:
        assert answer.plan is not None and answer.plan.layout.seq_len == answer.seq_len
        assert answer.plan.estimate.memory.fits
    return answer.seq_len


def test_longest_sequence_is_monotone() -> None:
    small, big = _longest("llama-3.1-8b", "full"), _longest("llama-3.1-70b", "lora")
    assert small % 1024 == 0 and big % 1024 == 0
    assert small >= 32768  # 8B on 8x H100 with context parallelism and checkpointing
    assert big > 0
    assert _longest("llama-3.1-70b", "lora", nodes=2) >= big
