"""Issue 33 item 4 / issue 29: the host memory activation offloading pins, against the H100 measurements.

TRL's ``get_act_offloading_ctx_manager`` (torchtune's ``OffloadActivations``) around forward and backward of a
Llama 3.2 1B full fine-tune, bf16-mixed, one H100 (``tests/data/stacks_h100_raw/call{1,2}_results.jsonl``,
``benchmarks/calibration/measure_stacks.py``): ``host_pinned`` is ``torch.cuda.host_memory_stats()``'s
``allocated_bytes.peak``, ``host_rss_peak_bytes`` the process' sampled RSS peak. The model
(:func:`estimator.training.activations.pinned_offload_bytes`) has no fitted constant; the two ``fit`` cases were
read while building it, the 16k one was not.

Tolerances: the pinned bytes within 3 % of the measured pinned peak (the mechanism leaves about 11 KiB a token
unexplained with checkpointing: 1.7 %), the process' host RAM within 5 % of its RSS peak (the framework baseline
is a configured 1.48 GiB against the measured 1.3 GiB of RSS beside the pinned bytes).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from benchmarks.calibration.stacks_compare import load_measured, request_for
from estimator.estimate import estimate
from estimator.request import EstimateRequest

os.environ.setdefault("CAPPLAN_NATIVE", "0")

CASES = {
    "h100-l1b-full-mixed-fused-b1-s8192-ck-offtrl": "fit",  # 5,503,090,693 B pinned, 6.43 GiB RSS
    "h100-l1b-full-mixed-fused-b1-s4096-nock-offtrl": "fit",  # 12,585,615,365 B pinned, 13.02 GiB RSS
    "h100-l1b-full-mixed-fused-b1-s16384-ck-offtrl": "held_out",  # 11,006,181,381 B pinned, 11.56 GiB RSS
}
PINNED_TOL = 0.03
RSS_TOL = 0.05


def _cases() -> dict[str, dict[str, Any]]:
    found = {c["id"]: c for c in load_measured(issues=(29,)) if c["id"] in CASES}
    assert set(found) == set(CASES), "the three measured offloading cases are in tests/data/stacks_h100_raw"
    return found


MEASURED = _cases()


def _estimate(req: dict[str, Any]):  # type: ignore[no-untyped-def]
    return estimate(EstimateRequest.model_validate(req))


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_pinned_offload_bytes_match_the_h100(case_id: str) -> None:
    case = MEASURED[case_id]
    assert case["holdout"] == CASES[case_id]
    req = request_for(case)
    assert req is not None and req["training"]["activation_offloading"] == "all"
    host = _estimate(req).host
    pinned = case["host_pinned"]["allocated_bytes.peak"]
    assert host.pinned_offload_bytes == pytest.approx(pinned, rel=PINNED_TOL)
    assert host.ram_breakdown_bytes["offloaded_activations"] == host.pinned_offload_bytes  # one GPU: node = process
    assert host.pinned_offload_bytes_per_node == host.pinned_offload_bytes
    assert host.ram_bytes_per_process == pytest.approx(case["host_rss_peak_bytes"], rel=RSS_TOL)


def test_with_checkpointing_the_loss_log_probs_dominate_not_the_layer_inputs() -> None:
    """8k tokens with checkpointing: the 16 fp32 layer inputs are 1 GiB; the hook also pins the loss's fp32
    log-probabilities (8,192 x 128,256 x 4 B = 3.9 GiB), saved outside the layers."""
    req = request_for(MEASURED["h100-l1b-full-mixed-fused-b1-s8192-ck-offtrl"])
    assert req is not None
    pinned = _estimate(req).host.pinned_offload_bytes
    layer_inputs = 16 * 8192 * 2048 * 4
    log_probs = 8192 * 128256 * 4
    assert pinned > layer_inputs + log_probs
    assert pinned < layer_inputs + log_probs + 8192 * 64 * 1024  # the rest is tens of KiB a token at most
    # a chunked loss keeps no full log-probabilities: the hook pins far less
    chunked = _estimate({**req, "training": {**req["training"], "loss_kernel": "chunked"}}).host
    assert chunked.pinned_offload_bytes < pinned - 0.9 * log_probs


def test_gpu_figures_do_not_move_with_the_host_model_and_node_counts_every_process() -> None:
    req = request_for(MEASURED["h100-l1b-full-mixed-fused-b1-s4096-nock-offtrl"])
    assert req is not None
    one = _estimate(req)
    # the same job on 8 GPUs under DDP: each process pins its own copies, the node holds eight
    ddp = {**req, "hardware": {**req["hardware"], "gpus_per_node": 8},
           "parallelism": {**req["parallelism"], "sharding": "none"}}
    eight = _estimate(ddp).host
    assert eight.pinned_offload_bytes == one.host.pinned_offload_bytes
    assert eight.pinned_offload_bytes_per_node == 8 * one.host.pinned_offload_bytes
    assert eight.ram_bytes_per_node >= eight.pinned_offload_bytes_per_node
    # no offloading: no pinned part, and the GPU's activations are the ones the offloading run keeps on the GPU
    plain = _estimate({**req, "training": {**req["training"], "activation_offloading": "none"}})
    assert plain.host.pinned_offload_bytes == 0
    assert "offloaded_activations" not in plain.host.ram_breakdown_bytes
    assert one.memory.breakdown_bytes.activations < plain.memory.breakdown_bytes.activations
