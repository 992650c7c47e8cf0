"""benchmarks/calibration/stacks_compare.py turns a measured stack case into the request with issue 29's fields
(so the accuracy table compares like with like); with measurements under tests/data/stacks_h100_raw it checks the
memory error (issue 29's bar: every case within +-10 %, the median within 3 %)."""

from __future__ import annotations

import json

import pytest

from benchmarks.calibration import stacks_report
from benchmarks.calibration.stacks_compare import compare, load_measured, mechanism, request_for, summary
from estimator import EstimateRequest, estimate

BASE = {"model": "llama-3.2-1b", "training": {"method": "full", "seq_len": 4096, "activation_checkpointing": "full"},
        "hardware": {"gpu": "h100-sxm5-80gb", "num_nodes": 1, "gpus_per_node": 1}}


def _case(**stack: object) -> dict:
    s = {"loss": "hf", "liger_kernels": False, "offload": "none", "optimizer": "adamw", **stack}
    return {"id": "x", "request": BASE, "stack": s, "holdout": "fit", "issue": 29}


@pytest.mark.parametrize(("stack", "fields", "klass"), [
    ({}, {"loss_kernel": "materialized"}, "baseline"),
    ({"loss": "trl"}, {"stack": "trl", "loss_kernel": "chunked"}, "loss trl"),
    ({"loss": "torchtune"}, {"loss_kernel": "chunked"}, "loss torchtune"),
    ({"loss": "liger", "liger_kernels": True}, {"loss_kernel": "fused", "fused_kernels": "liger"}, "loss liger"),
    ({"loss": "cce"}, {"loss_kernel": "fused"}, "loss cce"),
    ({"offload": "trl"}, {"activation_offloading": "all"}, "offload"),
    ({"optimizer": "paged-adamw-32bit"}, {"optimizer": "paged-adamw"}, "optimizer paged-adamw-32bit"),
    ({"optimizer": "muon"}, {"optimizer": "muon", "optimizer_impl": "for-loop"}, "optimizer muon"),
])
def test_a_case_becomes_its_request(stack: dict, fields: dict, klass: str) -> None:
    case = _case(**stack)
    body = request_for(case)
    assert body is not None and mechanism(case) == klass
    assert fields.items() <= body["training"].items()
    assert "loss_kernel" not in BASE["training"]  # the case itself is not changed


def test_a_mechanism_no_request_describes_is_listed_not_estimated() -> None:
    rows = compare([_case(optimizer="ao-adamw-fp8")])  # torchao AdamWFp8: no request value
    assert "predicted_bytes" not in rows[0] and "no request value" in rows[0]["note"]


#: the held-out Gemma 2 case with a chunked loss: the soft-cap applied in the loss on the fp32 chunk (the
#: measurement's torchtune-algorithm loss on Hugging Face's Gemma 2), whose fp32 tanh output the estimate sized at
#: 2 B per logit (-10.2 %) until the mechanism was named from it (4 B per logit, mechanisms.loss_bytes): +2.0 %
SOFTCAP_CASE = "h100-g2b-lora16al-eager-fused-b1-s4096-ck-losstorchtune"


def _measured_rows() -> list[dict]:
    return [r for r in compare(load_measured(issues=(29, 33))) if "error_pct" in r]


def test_memory_within_the_issue_bar_on_measured_cases() -> None:
    """Issue 29 on the H100 (tests/data/stacks_h100_raw, 51 cases of issues 29 and 33): every case within +-10 %
    of the measured allocated peak, the median within 3 %, fit and held-out cases reported apart."""
    rows = _measured_rows()
    assert len(rows) >= 50
    for label, stats in summary(rows).items():
        assert stats["median_pct"] <= 3.0, (label, stats)
    outside = [(r["id"], round(r["error_pct"], 1)) for r in rows if abs(r["error_pct"]) > 10.0]
    assert not outside, outside


def test_the_softcap_case_at_its_mechanism() -> None:
    """The held-out Gemma 2 chunked-loss case (measured 16.03 GiB): within 3 % now that the chunk's fp32 tanh
    output is counted (4 B per logit of 4,096 tokens x 256,000 entries); the 2 B bf16 sizing missed it by 1.63 GiB."""
    row = next(r for r in _measured_rows() if r["id"] == SOFTCAP_CASE)
    assert abs(row["error_pct"]) <= 3.0, row


def test_held_out_cases_inside_their_mechanism_bars() -> None:
    """Each held-out mechanism case (never used for a bar) inside the bar its estimate carries (the p90 of its
    mechanism's fit cases, estimator/data/accuracy.json): >= 80 % per issue 29."""
    rows = [r for r in _measured_rows() if r["holdout"] == "held_out"]
    by_id = {c["id"]: c for c in load_measured(issues=(29, 33))}
    inside, outside = 0, []
    for r in rows:
        body = request_for(by_id[r["id"]])
        bar = estimate(EstimateRequest.model_validate(body)).memory.error_bar_pct
        if abs(r["error_pct"]) <= bar:
            inside += 1
        else:
            outside.append((r["id"], round(r["error_pct"], 1), bar))
    assert len(outside) <= 0.2 * len(rows), outside
    assert inside / len(rows) >= 0.8


def test_no_case_that_ran_is_called_does_not_fit() -> None:
    """Every measured case ran its steps on the 80 GB H100: no verdict may say it does not fit."""
    verdicts = {r["id"]: r["fit_verdict"] for r in compare(load_measured(issues=(29, 33))) if "fit_verdict" in r}
    assert verdicts and "does_not_fit" not in verdicts.values()
    # the edge case of issue 33 item 5 (8B LoRA at 32k, 71 GiB allocated of 79.1): at risk, not a plain "fits"
    assert verdicts["h100-l8b-lora16al-fused-b1-s32768-ck"] == "at_risk"


def test_the_generated_section_is_current() -> None:
    """docs/accuracy.md's H100 section and the mechanism bars in accuracy.json are what stacks_report writes."""
    files = stacks_report.expected()
    stale = [str(p) for p, text in files.items() if p.read_text() != text]
    assert not stale, f"run benchmarks/calibration/stacks_report.py: {stale}"


def test_measured_lines_are_read_with_their_case(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The gpu branch writes the case under "case" and the measurement beside it (tests/data/stacks_h100_raw)."""
    case = _case(loss="liger", liger_kernels=True)
    line = {"case": case, "status": "ok", "peak_allocated_bytes": 10 * 2**30}
    (tmp_path / "call1_results.jsonl").write_text(json.dumps(line) + "\n" + json.dumps({**line, "status": "oom"}))
    found = load_measured(tmp_path)
    assert len(found) == 1 and found[0]["id"] == "x" and found[0]["peak_allocated_bytes"] == 10 * 2**30
    row = compare(found)[0]
    assert row["error_pct"] == pytest.approx(100 * (row["predicted_bytes"] - 10 * 2**30) / (10 * 2**30))


def test_the_allocator_setting_reaches_the_request() -> None:
    body = request_for({**_case(), "stack": {**_case()["stack"], "alloc_conf": "expandable_segments:True"}})
    assert body is not None and body["training"]["allocator"] == "expandable_segments"
    assert "allocator" not in (request_for(_case()) or {})["training"]


def test_paged_states_are_compared_with_what_each_counter_sees() -> None:
    """max_memory_allocated misses the managed states, NVML sees them: the allocated figure compared is the peak
    without them, the GPU figure the total with them (issue 33 item 4)."""
    measured = {"peak_allocated_bytes": 10 * 2**30, "peak_reserved_bytes": 11 * 2**30,
                "nvml_peak_used_bytes": 14 * 2**30}
    paged, plain = (compare([{**_case(optimizer=o), **measured}])[0] for o in ("paged-adamw-8bit", "adamw-8bit"))
    assert paged["predicted_bytes"] < plain["predicted_bytes"]  # the same states, outside the allocator
    assert paged["predicted_gpu_bytes"] == plain["predicted_gpu_bytes"]  # both on the GPU
    assert {"reserved_error_pct", "gpu_error_pct", "error_pct"} <= paged.keys()
    assert paged["fit_verdict"] in {"fits", "at_risk", "does_not_fit"}


def test_step_time_within_the_bar_each_estimate_carries() -> None:
    """Issue 29 / 33 on the H100: each measured case's step time within the error bar its estimate carries (the
    single-GPU class's, or its mechanisms' bar from their fit cases: estimator/data/accuracy.json); held-out cases
    inside at >= 80 %. bitsandbytes' 8-bit AdamW (its kernel priced on the CUDA cores) and Muon under FSDP2 (DTensor's
    local products and host dispatch), once the two misses, are inside with every other case: no known miss."""
    by_id = {c["id"]: c for c in load_measured(issues=(29, 33))}
    rows = [r for r in compare(list(by_id.values())) if "step_error_pct" in r]
    assert len(rows) >= 50
    outside, held, held_in = [], 0, 0
    for r in rows:
        bar = estimate(EstimateRequest.model_validate(request_for(by_id[r["id"]]))).time.error_bar_pct
        inside = abs(r["step_error_pct"]) <= bar
        if r["holdout"] == "held_out":
            held += 1
            held_in += inside
        if not inside:
            outside.append((r["id"], round(r["step_error_pct"], 1), bar))
    assert not outside, outside
    assert held_in / held >= 0.8
