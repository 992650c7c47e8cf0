"""Memory error bars by kind: the kinds measured in H200 device call 4 (QLoRA on one GPU, 8-bit AdamW, SGD,
Adafactor, eager attention, DDP and FSDP2 shard-grad-op) and call 5 (ZeRO-1, DTensor tensor parallelism) take
their class's p90 from ``accuracy.json``; kinds never measured get at least ``UNMEASURED_MEMORY_ERROR_PCT``."""

from __future__ import annotations

import pytest

from estimator.estimate import _measured_kind
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.accuracy import UNMEASURED_MEMORY_ERROR_PCT, memory_error_bar_pct
from estimator.training.layout import build_layout


@pytest.mark.parametrize("training, parallelism, nodes, gpus, measured", [
    ({"method": "qlora"}, {"sharding": "none"}, 1, 1, True),
    ({"optimizer": "adamw-8bit"}, {"sharding": "none"}, 1, 1, True),
    ({"optimizer": "sgd"}, {"sharding": "none"}, 1, 1, True),
    ({"optimizer": "adafactor", "optimizer_impl": "for-loop"}, {"sharding": "none"}, 1, 1, True),
    ({"attention": "eager", "seq_len": 2048}, {"sharding": "none"}, 1, 1, True),
    ({}, {"sharding": "none"}, 1, 8, True),  # DDP (device call 4, fake process group)
    ({}, {"sharding": "zero2"}, 1, 8, True),  # FSDP2 shard-grad-op
    ({"method": "qlora"}, {"sharding": "fsdp"}, 1, 8, False),  # QLoRA measured on one GPU only
    ({"optimizer": "lion"}, {"sharding": "none"}, 1, 1, False),
    ({}, {"sharding": "zero1"}, 1, 8, True),  # DDP + ZeroRedundancyOptimizer (call 5, tests/test_calibration_tp.py)
    ({}, {"sharding": "zero1", "framework": "deepspeed"}, 1, 8, False),
    ({}, {"sharding": "zero2", "framework": "deepspeed"}, 1, 8, False),
    # DTensor tensor parallelism (call 5): alone, with SP, under FSDP2; not with LoRA, DDP, ZeRO-1 or Megatron
    ({}, {"sharding": "none", "tp": 2}, 1, 2, True),
    ({}, {"sharding": "none", "tp": 8, "sequence_parallel": True}, 1, 8, True),
    ({}, {"sharding": "fsdp", "tp": 2}, 2, 8, True),
    ({"method": "lora"}, {"sharding": "none", "tp": 2}, 1, 2, False),
    ({}, {"sharding": "none", "tp": 2}, 1, 8, False),
    ({}, {"sharding": "zero1", "tp": 2}, 1, 8, False),
    ({}, {"sharding": "zero1", "tp": 2, "framework": "megatron"}, 1, 8, False),
])
def test_memory_error_bar_kinds(training: dict, parallelism: dict, nodes: int, gpus: int, measured: bool) -> None:
    """Device call 4's kinds take their class's error bar; kinds never measured get at least the 10 % floor."""
    req = EstimateRequest.model_validate({"model": "llama-3.2-1b", "training": training, "parallelism": parallelism,
                                          "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": nodes,
                                                       "gpus_per_node": gpus}})
    layout = build_layout(job_of(req), ModelShape(resolve_model(req.model)))
    assert _measured_kind(job_of(req), layout) is measured
    bar = memory_error_bar_pct(layout.sharding != "none", req.training.method, measured, layout.tp > 1)
    assert (bar < UNMEASURED_MEMORY_ERROR_PCT) is measured


def test_unmeasured_reasons_are_shared_only_where_they_are_equal() -> None:
    """``estimate._unmeasured`` keys the layout by what it reads (degrees, sharding, TP plan, sequence
    parallelism, several DP ranks, several GPUs): across node counts, shardings, frameworks, offloads, methods
    and TP/PP/CP layouts each memoised answer is the one computed afresh (fails when a read is left out)."""
    from pydantic import ValidationError

    from estimator.errors import InvalidRequestError
    from estimator.estimate import _unmeasured, _unmeasured_memory_reasons
    from estimator.memo import clear_all
    from estimator.model.spec import shape_for
    from estimator.request import EstimateRequest
    from estimator.training.layout import build_layout

    clear_all()
    compared = 0
    pars = [{"framework": fw, "sharding": sh, "tp": tp, "pp": pp, "cp": cp, "sequence_parallel": tp > 1}
            for fw, sh in (("pytorch", "zero3"), ("pytorch", "none"), ("deepspeed", "zero2"), ("megatron", "zero1"))
            for tp, pp, cp in ((1, 1, 1), (8, 1, 1), (4, 2, 1), (2, 1, 2))
            if fw == "megatron" or pp == 1 or sh != "zero3"]
    pars += [{"framework": "pytorch", "sharding": "zero3", "tp": 8, "tp_plan": "replicated-embeddings"},
             {"framework": "pytorch", "sharding": "zero3", "offload": "optimizer+params"},
             {"framework": "deepspeed", "sharding": "zero2", "offload": "optimizer"}]
    for par in pars:
        for nodes in (1, 2):
            for training in ({"method": "full"}, {"method": "lora"}, {"method": "full", "optimizer": "sgd"}):
                try:
                    req = EstimateRequest.model_validate({"model": "llama-3.1-8b", "training": training,
                                                          "parallelism": par, "hardware": {"num_nodes": nodes}})
                    layout = build_layout(job_of(req), shape_for(req.model))
                except (ValidationError, InvalidRequestError):  # a combination the contract refuses
                    continue
                compared += 1
                job = job_of(req)
                assert list(_unmeasured(job, layout)[0]) == _unmeasured_memory_reasons(job, layout), (par, nodes)
    assert compared >= 60
