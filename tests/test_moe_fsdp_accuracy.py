"""Issue 33 item 2: Qwen3-30B-A3B with LoRA on attention only (q/k/v/o), FSDP2 ``fully_shard`` on every decoder
layer and the root at W = 8, measured on an H100 (rank 0 over PyTorch's fake process group, transformers 5.17,
torch 2.11; ``tests/data/stacks_h100_raw/call3_results.jsonl``).

What the frozen, sharded experts cost is the FSDP2 mechanism of :func:`estimator.training.memory._loss_gather_buffers`:
while the loss runs and its backward starts, the root group and exactly one decoder layer (all 128 experts of it, in
bf16: 1.16 GiB) are unsharded, not two. Two cases fit nothing and one is held out (8,192 tokens): all three must land
within 2 % of the measured allocated peak; before the mechanism they were +6.2 / +4.3 / +4.2 %."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.calibration.stacks_compare import compare, load_measured
from estimator import EstimateRequest
from estimator.job import job_of
from estimator.model.spec import shape_for
from estimator.training.layout import build_layout
from estimator.training.memory import peak_memory

GiB = 1 << 30

#: (case id, hold-out label, tolerance in % of the measured allocated peak)
CASES = (
    ("h100-q3a3b-lora16at-fused-b1-s4096-ck-fsdp8", "fit", 2.0),
    ("h100-q3a3b-lora16at-fused-b1-s2048-nock-fsdp8", "fit", 2.0),
    ("h100-q3a3b-lora16at-fused-b1-s8192-ck-fsdp8", "held_out", 2.0),  # checked, never fit on
)


def _cases() -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in load_measured(issues=(33,)) if c["id"].startswith("h100-q3a3b-")}


@pytest.mark.parametrize(("case_id", "holdout", "tolerance_pct"), CASES)
def test_qwen3_moe_attention_lora_fsdp2_within_tolerance(case_id: str, holdout: str, tolerance_pct: float) -> None:
    case = _cases()[case_id]
    assert case["holdout"] == holdout
    row = compare([case])[0]
    assert abs(row["error_pct"]) <= tolerance_pct, (case_id, round(row["error_pct"], 2))


def _phases(case: dict[str, Any]) -> dict[str, Any]:
    req = EstimateRequest.model_validate(case["request"])
    job = job_of(req)
    shape = shape_for(req.model)
    layout = build_layout(job, shape)
    return {p.name: p for p in peak_memory(job, shape, layout, 80 * GiB).phases}


@pytest.mark.parametrize("case_id", [c[0] for c in CASES])
def test_the_loss_phases_hold_one_layer_unsharded(case_id: str) -> None:
    """The measured forward peak sits the bf16 and fp32 logits (6 B per logit), the LM head's bf16 input (held by
    the causal LM's forward until it returns, 2 B per hidden element) and one unsharded layer above the forward's
    end (which holds the root group but no layer: the root's post_forward freed the last all-gather output), to
    0.5 %; the estimate's loss phases hold the root group and one layer (623,120,384 parameters in bf16)."""
    case = _cases()[case_id]
    step = case["phase_peaks"][-1]
    tokens = case["request"]["training"]["seq_len"]
    vocab, hidden = case["request"]["model"]["vocab_size"], case["request"]["model"]["hidden_size"]
    layer_bf16 = 2 * 623_120_384
    above_end = step["forward"] - step["forward_end"] - 6 * tokens * vocab - 2 * tokens * hidden
    assert abs(above_end - layer_bf16) / layer_bf16 < 0.005, (above_end, layer_bf16)
    # the backward peak (the log-softmax backward: the fp32 gradient of the log-probabilities and the fp32 input
    # gradient, 8 B per logit, beside the saved log-probabilities) sits the prefetched last layer above that too
    above_end = step["backward"] - step["forward_end"] - 8 * tokens * vocab
    assert abs(above_end - layer_bf16) / layer_bf16 < 0.005, (above_end, layer_bf16)
    root_bf16 = 2 * 622_331_904
    phases = _phases(case)
    for name in ("forward", "backward"):
        assert phases[name].temporary == layer_bf16 + root_bf16
    # within a layer's backward FSDP2 holds two layers (the current one and the prefetched next) and the root
    assert phases["backward-layer"].temporary > 2 * layer_bf16 + root_bf16


def test_deepspeed_zero3_keeps_its_prefetch_count() -> None:
    """The mechanism is FSDP2's: DeepSpeed ZeRO-3 keeps two layers in its loss phases."""
    case = _cases()[CASES[0][0]]
    body = {**case["request"], "parallelism": {"sharding": "zero3", "framework": "deepspeed"}}
    req = EstimateRequest.model_validate(body)
    job = job_of(req)
    shape = shape_for(req.model)
    phases = {p.name: p for p in peak_memory(job, shape, build_layout(job, shape), 80 * GiB).phases}
    assert phases["forward"].temporary == 2 * 2 * 623_120_384 + 2 * 622_331_904
