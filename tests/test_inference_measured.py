"""The serving model held to the H200 measurements (tests/data/serving_h200_raw, provenance.json beside them):
weights and static-KV-cache bytes within 5 %, CUDA-graph decode step time (so tokens/s) within 15 % at every
batch 1-256 of the 8B, 8B-at-8k and 70B-widths-20-layers sweeps, prefill at 2048 and 8192 tokens within 15 %.

The ``hf-static`` profile's two free constants were fitted on the 8B sweep alone
(benchmarks/serving/fit_hf_static.py); the 8k-context and 70B-widths sweeps test the mechanism (weights over
HBM bandwidth, the (1 + 2g) KV traffic of HF's repeat_kv, per-layer fixed time) on shapes it was not fitted to.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import pytest

from benchmarks.serving.fit_gemm import best_p, large_m_efficiency
from benchmarks.serving.fit_gemm import errors as gemm_errors
from benchmarks.serving.fit_hf_static import H200_BF16, H200_HBM, case_shape, model_for
from estimator.inference.engines import ENGINES, GRAPH_KERNEL_S
from estimator.inference.kv import kv_layout
from estimator.inference.speed import GEMM_EFFICIENCY, ROOFLINE_P
from estimator.inference.weights import weight_bytes_per_gpu

RAW = Path(__file__).parent / "data" / "serving_h200_raw"
CASES = ("8b", "8b-ctx8k", "70b-l20")


def _case(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((RAW / f"{name}.json").read_text())
    assert "error" not in data, data.get("error")
    return data


@pytest.mark.parametrize("name", CASES)
def test_weight_bytes_within_5_percent(name: str) -> None:
    d = _case(name)
    shape = case_shape(d["config"])
    est = weight_bytes_per_gpu(shape, "bf16", 128, True, 1).total
    measured = d["mem_after_weights"]["allocated"]
    assert abs(est - measured) / measured < 0.05
    assert est == d["param_bytes"]  # exact: same matrices, same dtype


@pytest.mark.parametrize("name", CASES)
def test_static_kv_cache_bytes_within_5_percent(name: str) -> None:
    d = _case(name)
    kv = kv_layout(case_shape(d["config"]), "auto", "bf16", 1)
    for row in d["decode"]:
        est = row["batch"] * kv.request_bytes(row["cache_len"], 1)
        assert abs(est - row["kv_cache_tensor_bytes"]) / row["kv_cache_tensor_bytes"] < 0.05, row["batch"]
        assert abs(est - row["alloc_delta_after_first_step"]) / row["alloc_delta_after_first_step"] < 0.05


@pytest.mark.parametrize("name", CASES)
def test_graph_decode_throughput_within_15_percent(name: str) -> None:
    d = _case(name)
    m = model_for(d["config"])
    errors = []
    for row in d["decode"]:
        est = row["batch"] / m.step_s(row["batch"], row["cache_len"])
        errors.append((est - row["tokens_per_s"]) / row["tokens_per_s"])
    assert max(abs(e) for e in errors) < 0.15, errors
    assert len(errors) >= 5


def test_the_eager_loop_is_launch_bound_which_is_why_the_graph_is_measured() -> None:
    d = _case("8b")
    first = d["decode"][0]
    assert first["eager_step_s"] > 3 * first["graph_step_s"]


@pytest.mark.parametrize("name", ("8b", "70b-l20"))
def test_prefill_within_15_percent_where_compute_bound(name: str) -> None:
    d = _case(name)
    m = model_for(d["config"], ENGINES["hf-static"])
    for row in d["prefill"]:
        if row["tokens"] < 2048:  # HF eager prefill of 512 tokens is launch-bound (no graph), not compared
            continue
        est = m.prefill_s(row["tokens"])
        assert abs(est - row["s"]) / row["s"] < 0.15, (row, est)


def test_ceilings_used_are_the_measured_ones() -> None:
    bench = json.loads((RAW / "bench.json").read_text())
    for engine in ENGINES.values():
        assert abs(engine.hbm_efficiency - bench["copy_tb_s"] * 1e12 / H200_HBM) < 0.005
    assert bench["matmul_8192_tflops"] * 1e12 / H200_BF16 > GEMM_EFFICIENCY["bf16"]


def test_gemm_model_against_the_gemm_micro_benchmark() -> None:
    """The smooth roofline with the measured large-M efficiencies, over the 80 GEMMs that were not launch-bound
    when timed (>= 40 us): median within 5 %, every one within 35 % (the worst: Llama-8B's down projection at
    M = 64-256, K = 14,336)."""
    assert {"bf16": round(large_m_efficiency("bf16"), 3), "fp8": round(large_m_efficiency("fp8"), 3)} == GEMM_EFFICIENCY
    assert best_p() == ROOFLINE_P
    errs = [abs(e) for _, _, e in gemm_errors(ROOFLINE_P)]
    assert len(errs) >= 60
    assert statistics.median(errs) < 0.05 and max(errs) < 0.35


def test_engine_attention_reads_kv_at_the_copy_rate_and_hf_repeat_kv_does_not() -> None:
    """SDPA with enable_gqa (what paged-attention kernels do: GQA heads read once) moved the KV cache at >= 0.8 of
    the datasheet bandwidth from batch 16 x 4k context up; HF's repeat_kv + SDPA at ~0.04 of it, what the fitted
    hf-static profile implies (0.891 x 0.416 / (1 + 2 x 4))."""
    rows = json.loads((RAW / "kernels_attention.json").read_text())["rows"]
    big = [r for r in rows if r["batch"] * r["ctx"] >= 64 * 1024]
    assert big and all(r["kv_bytes"] / r["gqa_s"] / H200_HBM > 0.8 for r in big)
    hf = ENGINES["hf-static"]
    implied = hf.hbm_efficiency * hf.attention_bandwidth_fraction / (1 + hf.kv_amplification_per_group * 4)
    for r in big:
        measured = r["kv_bytes"] / r["repeat_kv_s"] / H200_HBM
        assert abs(measured - implied) / implied < 0.2


def test_engine_layer_overhead_is_kernels_times_the_graph_floor() -> None:
    floor = json.loads((RAW / "kernels_launch.json").read_text())["per_kernel_s"]
    assert abs(GRAPH_KERNEL_S - floor) / floor < 0.01
    assert ENGINES["vllm"].layer_overhead_s == 12 * GRAPH_KERNEL_S


# Device call 3 (benchmarks/serving/measure_sustained.py): an engine-like Llama-3.1-8B decode step in one CUDA
# graph (fp8 GEMMs with their activation casts, SDPA enable_gqa over a bf16 KV cache of B x CTX, optionally one
# causal prefill chunk of C tokens in the same step: in-flight batching's mixed batch), replayed back to back for
# 12 s. The vllm profile (its constants are the kernel measurements of calls 1-2, nothing fitted here) must give
# its step within 15 %: decode step + (with C) one prefill of C tokens, step overhead left out (no scheduler ran).
SUSTAINED = sorted(RAW.glob("sustained_step_*.json"))


def _sustained_s(d: dict[str, Any]) -> float:
    windows = d["windows_s"]
    return float(statistics.mean(windows[len(windows) // 2:]))


def _engine_like_step(batch: int, ctx: int, chunk: int) -> float:
    from estimator.inference.speed import SpeedModel
    from estimator.model.spec import ModelShape, preset

    shape = ModelShape(preset("llama-3.1-8b"))
    m = SpeedModel(engine=ENGINES["vllm"], shape=shape, weights=weight_bytes_per_gpu(shape, "fp8", 128, True, 1),
                   kv=kv_layout(shape, "auto", "fp8", 1), hbm_bytes_per_s=H200_HBM, peak_flops=2 * H200_BF16, tp=1,
                   pp=1, link=None, block_size=16, gemm_efficiency=GEMM_EFFICIENCY["fp8"],
                   attention_peak_flops=H200_BF16)
    overhead = m.engine.step_overhead_s
    t = m.step_s(batch, ctx) - overhead
    return t + (m.prefill_s(chunk) - overhead if chunk else 0.0)


@pytest.mark.parametrize("path", SUSTAINED, ids=lambda p: p.stem)
def test_engine_like_cuda_graph_step_within_15_percent(path: Path) -> None:
    d = json.loads(path.read_text())
    assert "error" not in d, d.get("error")
    measured = _sustained_s(d)
    assert abs(_engine_like_step(d["batch"], d["ctx"], d["chunk"]) - measured) / measured < 0.15


@pytest.mark.parametrize("path", SUSTAINED, ids=lambda p: p.stem)
def test_a_decode_step_does_not_slow_down_under_sustained_load(path: Path) -> None:
    """Back to back for 12 s at the 700 W limit the step stays within 2 % of its 30-replay burst: the memory-bound
    attention keeps the clocks up (median SM clock 1800-1965 MHz), so burst kernel rates stand for serving."""
    d = json.loads(path.read_text())
    assert _sustained_s(d) / d["burst_s"] < 1.02


def test_pure_fp8_gemms_do_slow_down_under_sustained_load() -> None:
    """The contrast: fp8 GEMMs alone, back to back, drop to ~1.3-1.4 GHz at 700 W and run ~20 % slower than their
    burst; only a sustained load that is nearly all GEMM (long prefills) would see it (not modelled)."""
    d = json.loads((RAW / "sustained_gemm.json").read_text())
    for row in d["rows"]:
        ratio = _sustained_s(row) / row["burst_s"]
        assert 1.10 < ratio < 1.30, (row["shape"], ratio)
        assert statistics.median(s[0] for s in row["smi"]) < 1500  # SM clock, MHz
