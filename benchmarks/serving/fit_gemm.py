"""The GEMM time model of the serving estimator against the H200 micro-benchmark
(tests/data/serving_h200_raw/kernels_gemm.json): a smooth roofline::

    t = (t_mem^p + t_compute^p)^(1/p),  t_mem = weight bytes / (HBM x copy efficiency),
                                        t_compute = 2 M K N / (dense peak x large-M efficiency)

The large-M efficiency of each dtype is the median of the measured rate at M >= 1024 over the six shapes; the
exponent p is the one (of 1, 1.5, ..., 6) with the least median error over the GEMMs that took >= 40 us (the
eager launch floor was 12.7 us, kernels_launch.json: shorter eager timings measure the launch, not the GEMM;
in a CUDA graph the floor is 0.93 us). Prints both and every row's error::

    PYTHONPATH=. python benchmarks/serving/fit_gemm.py
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

RAW = Path(__file__).resolve().parents[2] / "tests/data/serving_h200_raw"
PEAK = {"bf16": 989.5e12, "fp8": 1979e12}
HBM = 4.8e12
MIN_TIMED_S = 40e-6


def rows() -> list[dict]:
    data: list[dict] = json.loads((RAW / "kernels_gemm.json").read_text())["rows"]
    return data


def large_m_efficiency(dtype: str) -> float:
    key = f"{dtype}_s"
    return statistics.median(2 * r["m"] * r["k"] * r["n"] / r[key] / PEAK[dtype]
                             for r in rows() if r["m"] >= 1024 and key in r)


def copy_efficiency() -> float:
    return float(json.loads((RAW / "bench.json").read_text())["copy_tb_s"]) * 1e12 / HBM


def model_s(m: int, k: int, n: int, dtype: str, p: float, eff: float, bw_eff: float) -> float:
    t_mem = k * n * (2 if dtype == "bf16" else 1) / (HBM * bw_eff)
    t_c = 2 * m * k * n / (PEAK[dtype] * eff)
    return float((t_mem**p + t_c**p) ** (1 / p))


def errors(p: float) -> list[tuple[dict, str, float]]:
    out = []
    bw = copy_efficiency()
    for dtype in ("bf16", "fp8"):
        eff = large_m_efficiency(dtype)
        for r in rows():
            if f"{dtype}_s" not in r or r[f"{dtype}_s"] < MIN_TIMED_S:
                continue
            est = model_s(r["m"], r["k"], r["n"], dtype, p, eff, bw)
            out.append((r, dtype, (est - r[f"{dtype}_s"]) / r[f"{dtype}_s"]))
    return out


def best_p() -> float:
    grid = [1 + 0.5 * i for i in range(11)]
    return min(grid, key=lambda p: statistics.median(abs(e) for _, _, e in errors(p)))


def main() -> None:
    p = best_p()
    print(f"bf16 large-M efficiency {large_m_efficiency('bf16'):.3f}, fp8 {large_m_efficiency('fp8'):.3f}, "
          f"copy efficiency {copy_efficiency():.3f}, p = {p}")
    for r, dtype, e in errors(p):
        print(f"{r['shape']:12} M={r['m']:5} {dtype:4} {e * 100:+6.1f}%")
    errs = [abs(e) for _, _, e in errors(p)]
    print(f"worst {max(errs) * 100:.1f}%  median {statistics.median(errs) * 100:.1f}%  rows {len(errs)}")


if __name__ == "__main__":
    main()
