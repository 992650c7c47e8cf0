"""The caching allocator's reserved peak and the fit verdict (issue 33 item 5; estimator.training.allocator).

The reserved peak is checked against every single-process H200 run that recorded ``torch.cuda.max_memory_reserved()``
(``tests/data/calibration_h200.json`` and the LoRA calls 7-8). Its constants were fitted on device calls 1-2
(commit 61c8f5c, 2026-12-02 19:03 UTC); calls 4, 7 and 8 ran afterwards and are the held-out part: the bar is
checked on them. The issue's H100 case (Llama 3.1 8B LoRA, 32k tokens, checkpointing: allocated within 1 % of the
estimate, died in step 2 with 16 GiB reserved but unallocated) must come out "at_risk", not "fits".
"""

from __future__ import annotations

import copy
import statistics
from typing import Any

import pytest

from benchmarks.calibration.compare import load_cases, load_lora_cases, load_parallel_cases, p90
from estimator import EstimateRequest, estimate
from estimator.training.allocator import (
    RESERVED_ERROR_BAR_PCT,
    RESERVED_ERROR_BAR_TP_PCT,
    UNMEASURED_RESERVED_ERROR_BAR_PCT,
    fit_verdict,
    reserved_error_bar_pct,
)
from estimator.training.suggest import apply_changes

GIB = 1 << 30
FITTED_CALLS = {1, 2}
MEASURED = load_cases() + load_lora_cases()
RAN = [c for c in MEASURED if not c["measured"].get("oom")]


def _call(case: dict[str, Any]) -> int:
    return int(case.get("device_call") or case.get("call") or 0)


def _error(case: dict[str, Any]) -> float:
    est = estimate(EstimateRequest.model_validate(case["request"])).memory.reserved_peak_bytes
    measured = int(case["measured"]["peak_reserved_bytes"])
    return (est - measured) / measured


HELD_OUT = [c for c in RAN if _call(c) not in FITTED_CALLS]
FITTED = [c for c in RAN if _call(c) in FITTED_CALLS]


def test_the_split_is_the_one_in_time() -> None:
    assert len(HELD_OUT) >= 40 and len(FITTED) >= 60
    assert {_call(c) for c in HELD_OUT} == {4, 7, 8}


def test_held_out_reserved_peaks_within_the_stated_bar() -> None:
    errors = [abs(_error(c)) for c in HELD_OUT]
    assert 100 * p90(errors) <= RESERVED_ERROR_BAR_PCT
    inside = sum(e <= RESERVED_ERROR_BAR_PCT / 100 for e in errors) / len(errors)
    assert inside >= 0.8, f"{100 * inside:.0f} % of the held-out runs inside the bar"
    assert statistics.median(errors) <= 0.05


# DTensor TP alone or under FSDP2 (calls 5-8, 2026-12-03, all after the fit): one process per rank's memory
TP_RAN = [c for c in load_parallel_cases() if not c["measured"].get("oom") and c["measured"].get("peak_reserved_bytes")]


def test_tensor_parallel_reserved_peaks_within_their_bar() -> None:
    assert len(TP_RAN) >= 35
    errors = [abs(_error(c)) for c in TP_RAN]
    assert 100 * p90(errors) <= RESERVED_ERROR_BAR_TP_PCT
    assert sum(e <= RESERVED_ERROR_BAR_TP_PCT / 100 for e in errors) / len(errors) >= 0.8
    assert max(errors) <= 0.20  # FSDP2 x TP 8 of the 70B, 18 % low, is the worst
    tp = EstimateRequest.model_validate(TP_RAN[0]["request"])
    assert estimate(tp).memory.reserved_error_bar_pct == max(RESERVED_ERROR_BAR_TP_PCT,
                                                             estimate(tp).memory.error_bar_pct)


def test_every_measured_reserved_peak_within_15_percent() -> None:
    worst = max(RAN, key=lambda c: abs(_error(c)))
    assert abs(_error(worst)) <= 0.15, f"{worst['id']}: {100 * _error(worst):+.1f} %"


def test_reserved_at_least_allocated_and_over_it_by_the_transients() -> None:
    """The reserve grows with the fp32 logits under checkpointing (the transient the recomputation fragments)."""
    base = next(c for c in RAN if c["id"] == "l8b-lora16al-fused-b2-s4096-ck")["request"]
    long = next(c for c in RAN if c["id"] == "l8b-lora16al-fused-b1-s32768-ck")["request"]
    small, large = (estimate(EstimateRequest.model_validate(r)).memory for r in (base, long))
    assert small.reserved_peak_bytes > small.peak_allocated_bytes
    gap_small = small.reserved_peak_bytes - small.peak_allocated_bytes
    gap_large = large.reserved_peak_bytes - large.peak_allocated_bytes
    logits_32k = 4 * 32768 * 128256
    assert gap_large - gap_small > 0.5 * logits_32k


@pytest.mark.parametrize("case", [c for c in MEASURED if c["measured"].get("oom")], ids=lambda c: c["id"])
def test_every_run_out_of_memory_is_does_not_fit(case: dict[str, Any]) -> None:
    assert estimate(EstimateRequest.model_validate(case["request"])).memory.fit_verdict == "does_not_fit"


def test_tensor_parallel_verdicts_match_what_ran() -> None:
    for case in load_parallel_cases():
        verdict = estimate(EstimateRequest.model_validate(case["request"])).memory.fit_verdict
        assert verdict == ("does_not_fit" if case["measured"].get("oom") else "fits"), case["id"]


def test_no_run_that_ran_is_does_not_fit_and_most_fit() -> None:
    verdicts = [estimate(EstimateRequest.model_validate(c["request"])).memory.fit_verdict for c in RAN]
    assert "does_not_fit" not in verdicts
    assert verdicts.count("fits") >= 0.95 * len(verdicts)


def _issue_case(gpu: str, **training: Any) -> EstimateRequest:
    req = copy.deepcopy(next(c for c in RAN if c["id"] == "l8b-lora16al-fused-b1-s32768-ck")["request"])
    req["hardware"]["gpu"] = gpu
    req["training"].update(training)
    return EstimateRequest.model_validate(req)


def test_the_issue_case_is_at_risk_on_the_h100_and_fits_on_the_h200() -> None:
    h100 = estimate(_issue_case("h100-sxm5-80gb"))
    mem = h100.memory
    assert mem.fits and mem.fit_verdict == "at_risk"
    # the issue: 16 GiB reserved but not allocated when the next 15.7 GiB logits allocation failed
    assert abs((mem.reserved_peak_bytes - mem.peak_allocated_bytes) / GIB - 16.0) <= 1.6
    assert mem.reserved_error_bar_pct == RESERVED_ERROR_BAR_PCT
    assert estimate(_issue_case("h200-sxm-141gb")).memory.fit_verdict == "fits"


def test_the_issue_case_suggests_a_chunked_or_fused_loss_that_fits() -> None:
    req = _issue_case("h100-sxm5-80gb")
    result = estimate(req)
    by_change = {tuple(s.changes.items()): s for s in result.fit_suggestions}
    chunked = by_change[(("training.loss_kernel", "chunked"),)]
    assert chunked.fits and "GiB less reserved at the peak; fits" in chunked.summary
    # the suggestion's own request, estimated again, fits with the total it was given
    again = estimate(apply_changes(req, chunked.changes)).memory
    assert again.fit_verdict == "fits"
    assert chunked.total_bytes < result.memory.reserved_peak_bytes
    # the allocator setting frees the transients' fragments, but its bar is the unmeasured floor: still at risk
    expandable = by_change[(("training.allocator", "expandable_segments"),)]
    assert not expandable.fits and "still at risk" in expandable.summary
    assert result.fit_suggestions[0].fits  # those that fit first


def test_expandable_segments_drop_the_transient_term_not_the_allocated_peak() -> None:
    default = estimate(_issue_case("h200-sxm-141gb")).memory
    expandable = estimate(_issue_case("h200-sxm-141gb", allocator="expandable_segments")).memory
    assert expandable.peak_allocated_bytes == default.peak_allocated_bytes
    assert expandable.reserved_peak_bytes < default.reserved_peak_bytes - 10 * GIB
    assert expandable.reserved_error_bar_pct == UNMEASURED_RESERVED_ERROR_BAR_PCT
    said = estimate(_issue_case("h200-sxm-141gb", allocator="expandable_segments")).assumptions
    assert any("expandable segments" in a and "Not measured on a GPU" in a for a in said)
    assert not any("expandable segments" in a for a in estimate(_issue_case("h200-sxm-141gb")).assumptions)


def test_expandable_segments_make_the_fragmented_logits_case_fit() -> None:
    """l1b b8 s4096 without checkpointing failed for its 15.7 GiB logits gradient with 14.5 GiB cached but
    fragmented: the default allocator says does_not_fit; with expandable segments the fragments can be unmapped
    and mapped again, so what cannot be given back is the slivers only."""
    case = next(c for c in MEASURED if c["id"] == "l1b-full-mixed-fused-b8-s4096-nock")
    default = estimate(EstimateRequest.model_validate(case["request"]))
    assert default.memory.fit_verdict == "does_not_fit"
    req = copy.deepcopy(case["request"])
    req["training"]["allocator"] = "expandable_segments"
    assert estimate(EstimateRequest.model_validate(req)).memory.fits
    assert any(s.changes == {"training.allocator": "expandable_segments"} for s in default.fit_suggestions)


def test_a_job_far_from_the_edge_fits_and_has_no_fit_suggestions() -> None:
    case = next(c for c in RAN if c["id"] == "l8b-lora16al-fused-b1-s4096-ck")
    result = estimate(EstimateRequest.model_validate(case["request"]))
    assert result.memory.fit_verdict == "fits" and result.fit_suggestions == []


@pytest.mark.parametrize(("capacity", "verdict"), [(100, "fits"), (93, "fits"), (92, "at_risk"), (85, "at_risk")])
def test_fit_verdict_boundaries(capacity: int, verdict: str) -> None:
    # hard total 80 with a 2 % bar (81.6), reserved total 87 with a 6.5 % bar (92.7)
    assert fit_verdict(True, capacity, 80, 2.0, 87, 6.5) == verdict


def test_fit_verdict_keeps_does_not_fit_and_the_allocated_bar() -> None:
    assert fit_verdict(False, 1000, 80, 2.0, 87, 6.5) == "does_not_fit"
    assert fit_verdict(True, 81, 80, 2.0, 60, 6.5) == "at_risk"  # the allocated peak's own bar
    assert reserved_error_bar_pct("default", 8.0) == 8.0  # never below the allocated bar
    assert reserved_error_bar_pct("expandable_segments", 2.0) == UNMEASURED_RESERVED_ERROR_BAR_PCT
    assert reserved_error_bar_pct("default", 2.0, tensor_parallel=True) == RESERVED_ERROR_BAR_TP_PCT


def test_a_bad_allocator_is_refused_naming_the_field() -> None:
    with pytest.raises(ValueError, match="allocator"):
        EstimateRequest.model_validate({"training": {"allocator": "cudaMallocAsync"}})


# --- item 4: what the allocator cannot see ---------------------------------------------------------------------


def _small(optimizer: str, **extra: Any) -> EstimateRequest:
    return EstimateRequest.model_validate({"model": "llama-3.1-8b", "training": {
        "method": "full", "optimizer": optimizer, "precision": "bf16-true", "activation_checkpointing": "full",
        "seq_len": 2048, **extra}, "hardware": {"gpu": "h200-sxm-141gb", "gpus_per_node": 1}})


def test_paged_optimizer_states_are_named_as_managed_memory() -> None:
    """bitsandbytes' paged optimizers keep their states in CUDA managed memory: NVML sees them on the GPU,
    max_memory_allocated does not. The per-GPU figure keeps them (what the GPU holds); managed_bytes names them."""
    paged = estimate(_small("paged-adamw-8bit")).memory
    plain = estimate(_small("adamw-8bit")).memory
    assert paged.managed_bytes == paged.breakdown_bytes.optimizer_states > 0
    assert plain.managed_bytes == 0
    assert paged.total_bytes >= paged.peak_allocated_bytes  # what the GPU holds includes them
    assert paged.breakdown_bytes.optimizer_states == plain.breakdown_bytes.optimizer_states  # same bytes, paged
    # the allocator's reserved peak does not hold them; the GPU does
    assert paged.reserved_peak_bytes + paged.managed_bytes == plain.reserved_peak_bytes


def test_activation_offloading_shows_on_the_host_not_the_gpu() -> None:
    """torchtune / TRL activation offloading: the saved activations move to pinned host memory; the host panel
    carries them, the GPU's activations drop."""
    base = estimate(_small("adamw", activation_checkpointing="none", seq_len=8192))
    off = estimate(_small("adamw", activation_checkpointing="none", activation_offloading="all", seq_len=8192))
    assert off.memory.breakdown_bytes.activations < base.memory.breakdown_bytes.activations
    assert off.host is not None and base.host is not None
    pinned = off.host.ram_breakdown_bytes.get("offloaded_activations", 0)
    assert pinned > 0 and "offloaded_activations" not in base.host.ram_breakdown_bytes
    # the host's peak is the training phase, and its figure adds the pinned copies up with the rest
    assert off.host.ram_peak_phase == "train" and base.host.ram_peak_phase == "load"
    assert off.host.ram_bytes_per_node == sum(off.host.ram_breakdown_bytes.values())
    assert off.host.ram_bytes_per_process >= pinned  # the one process holds them in the training phase
