"""Step time of Hugging Face transformers mixture-of-experts models (issue 33, fidelity round 3).

transformers >= 5 runs the routed experts of its MoE models through ``grouped_mm`` by default (5.17.0, what every
measurement here ran: ``modeling_utils.py`` ``get_correct_experts_implementation``, ``integrations/moe.py``
``grouped_mm_experts_forward``): one ``torch._grouped_mm`` per projection, no Python loop over the experts and no
host sync. The estimator used to add a per-expert host sync (0.25 ms x local experts per forward) to the GPU time,
which put Qwen3-30B-A3B (128 experts x 48 layers: 1.54 s per forward pass) 2.8x above its measured H100 step. Now the
MoE block's issue time counts against the CPU budget (``timing._cpu_moe_fwd``, fitted on the one single-GPU MoE
calibration step, Mixtral 8x7B on the H200), the grouped GEMM computes tile-padded rows per expert
(``flops.grouped_gemm_rows``) and the dispatch copies are counted from the transformers code.

The measured cases: ``tests/data/stacks_h100_raw/call3_results.jsonl`` (Qwen3-30B-A3B, LoRA r16 on q/k/v/o, FSDP2
rank 0 of W=8 through the fake process group: compared with the estimate's compute, as the calibration's fake-group
FSDP2 cases are) and ``tests/data/calibration_h200.json`` (Mixtral 8x7B LoRA, one H200).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_calibration_time import estimated_step_s, measured_step_s

from benchmarks.calibration.stacks_compare import load_measured, request_for
from estimator import EstimateRequest, estimate
from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.training.flops import grouped_gemm_rows, workload
from estimator.training.layout import build_layout

#: the H100 Qwen3-30B-A3B cases, their hold-out label and the largest |error| each is held to (compute-only estimate
#: against the measured step). Before: +268 %, +176 %, +187 %. The remaining shortfall of the two host-paced fit
#: cases is host time the model does not price (FSDP2's per-unit hooks, peft's adapters at their measured cost).
QWEN3_MOE = {
    "h100-q3a3b-lora16at-fused-b1-s4096-ck-fsdp8": ("fit", 0.30),
    "h100-q3a3b-lora16at-fused-b1-s2048-nock-fsdp8": ("fit", 0.20),
    "h100-q3a3b-lora16at-fused-b1-s8192-ck-fsdp8": ("held_out", 0.15),
}
MIXTRAL = "mx8x7b-lora16at-fused-b1-s2048-ck"


def _qwen_cases() -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in load_measured(issues=(33,)) if c["id"] in QWEN3_MOE}


def _compute_only(case: dict[str, Any]) -> float:
    body = request_for(case)
    assert body is not None
    return estimated_step_s({"request": body, "run": {"world_size_fake": case["world_size_fake"]}})


def test_the_named_cases_were_measured_with_their_labels() -> None:
    cases = _qwen_cases()
    assert set(cases) == set(QWEN3_MOE)
    for cid, (label, _bar) in QWEN3_MOE.items():
        assert cases[cid]["holdout"] == label
        assert cases[cid]["hf_config"]["transformers_version"] == "5.17.0"  # grouped_mm experts by default


@pytest.mark.parametrize("case_id", sorted(QWEN3_MOE))
def test_qwen3_moe_h100_step_within_its_tolerance_and_error_bar(case_id: str) -> None:
    case = _qwen_cases()[case_id]
    est = _compute_only(case)
    err = est / float(case["step_time_s"]) - 1.0
    assert abs(err) <= QWEN3_MOE[case_id][1], (case_id, err)
    body = request_for(case)
    bar = estimate(EstimateRequest.model_validate(body)).time.error_bar_pct  # type: ignore[union-attr]
    assert abs(err) * 100.0 <= bar, (case_id, err, bar)


def test_mixtral_h200_calibration_step_stays_close() -> None:
    data = json.loads((__import__("pathlib").Path(__file__).parent / "data" / "calibration_h200.json").read_text())
    case = next(c for c in data["cases"] if c["id"] == MIXTRAL)
    assert abs(estimated_step_s(case) / measured_step_s(case) - 1.0) <= 0.05


def _qwen_body(num_experts: int, framework: str = "pytorch") -> dict[str, Any]:
    case = _qwen_cases()["h100-q3a3b-lora16at-fused-b1-s4096-ck-fsdp8"]
    body = request_for(case)
    assert body is not None
    body["model"]["num_experts"] = num_experts
    body["parallelism"]["framework"] = framework
    if framework == "megatron":
        body["parallelism"]["sharding"] = "zero1"
    return body


def test_expert_count_costs_no_host_sync() -> None:
    """The same active compute over 128 or 32 experts: the step barely moves (the weights the FSDP2 copies and the
    grouped GEMM's per-expert tiles move it a little); a per-expert host sync made 128 experts cost 4x 32's."""
    t128 = estimate(EstimateRequest.model_validate(_qwen_body(128))).time
    t32 = estimate(EstimateRequest.model_validate(_qwen_body(32))).time
    assert t128 is not None and t32 is not None
    assert t128.breakdown_s["forward_s"] < 1.25 * t32.breakdown_s["forward_s"]


def _routed_gemms(body: dict[str, Any]) -> list[Any]:
    req = EstimateRequest.model_validate(body)
    job = job_of(req)
    shape = ModelShape(resolve_model(req.model))
    work = workload(job, shape, build_layout(job, shape))
    assert work.moe is not None
    return [g for g in work.moe.gemms if g.count > 1]


def test_grouped_gemm_pads_rows_but_not_flops() -> None:
    routed = _routed_gemms(_qwen_body(128))
    assert routed and all(g.rows > g.m for g in routed)
    assert all(g.flops == 2.0 * g.m * g.k * g.n * g.count for g in routed)
    megatron = _routed_gemms(_qwen_body(128, "megatron"))  # Transformer Engine grouped linears: balanced rows
    assert megatron and all(g.rows == g.m for g in megatron)


def test_grouped_gemm_rows_follow_the_cutlass_tiles() -> None:
    # 256 rows on average, 128-row tiles: about half the experts spill into a third tile
    assert 300.0 < grouped_gemm_rows(4096, 8 / 128, 1536) < 340.0
    # 128 rows on average: the "small" 64-row tile (GroupMM.cu: M <= 128 or N <= 128)
    small = grouped_gemm_rows(2048, 8 / 128, 1536)
    assert 128.0 < small < 192.0 and small % 1 != 0
    # a narrow output also takes the small tile
    assert grouped_gemm_rows(4096, 8 / 128, 128) < grouped_gemm_rows(4096, 8 / 128, 1536)
    # the padding's share falls as the groups grow, never below the mean
    ratios = [grouped_gemm_rows(t, 8 / 128, 1536) / (t * 8 / 128) for t in (4096, 16384, 65536)]
    assert ratios[0] > ratios[1] > ratios[2] > 1.0
    # one expert per token (no variance): exactly the tile-rounded rows
    assert grouped_gemm_rows(1000, 1.0, 4096) == 1024.0
    assert grouped_gemm_rows(0, 0.5, 4096) == 0.0
