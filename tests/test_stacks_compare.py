"""benchmarks/calibration/stacks_compare.py turns a measured stack case into the request with issue 29's fields
(so the accuracy table compares like with like); with measurements under tests/data/stacks_h100_raw it checks the
memory error (issue 29's bar: every case within +-10 %, the median within 3 %)."""

from __future__ import annotations

import json

import pytest

from benchmarks.calibration.stacks_compare import compare, load_measured, mechanism, request_for, summary

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
    rows = compare([_case(optimizer="ao-adamw-8bit")])
    assert "predicted_bytes" not in rows[0] and "no request value" in rows[0]["note"]


@pytest.mark.skipif(not load_measured(), reason="no H100 stack measurements copied yet (the gpu branch got no device)")
def test_memory_within_the_issue_bar_on_measured_cases() -> None:
    """Issue 29: memory within +-10 % on every measured case, median <= 3 % (fit and held-out reported apart)."""
    rows = [r for r in compare(load_measured()) if "error_pct" in r]
    assert rows
    s = summary(rows)
    for label, stats in s.items():
        assert stats["max_pct"] <= 10.0, (label, [(r["id"], round(r["error_pct"], 1)) for r in rows])
        assert stats["median_pct"] <= 3.0, (label, stats)


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
