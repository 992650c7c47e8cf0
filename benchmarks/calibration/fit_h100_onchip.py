"""Fit ``efficiency.Constants.onchip_share`` on the H100's plain "fit" steps (issue 33 item 3).

Least squares on log step time (estimated / measured) over the ``fit``-labelled plain cases of
``benchmarks.calibration.h100_time`` (the ``held_out`` ones are never looked at), on a 0.01 grid. The H200's
predictions do not depend on the constant (``efficiency._elem_bytes`` is the HBM rate there), so nothing else is
refitted. Run: ``PYTHONPATH=$PWD .venv/bin/python -m benchmarks.calibration.fit_h100_onchip`` (2026-12-06: 0.69).
"""

from __future__ import annotations

import dataclasses
import math

import estimator.memo as memo
import estimator.training.efficiency as eff
from benchmarks.calibration import h100_time


def sse(share: float) -> float:
    """Sum of squared log errors of the fit cases at ``onchip_share = share``."""
    k = dataclasses.replace(eff.H200_FIT, onchip_share=share)
    original = eff._rates_for
    eff._rates_for = lambda gpu, precision, kk: original(gpu, precision, k if kk is eff.H200_FIT else kk)
    memo.clear_all()
    h100_time.rows.cache_clear()
    try:
        return sum(math.log(r["estimated_s"] / r["measured_s"]) ** 2 for r in h100_time.rows() if r["holdout"] == "fit")
    finally:
        eff._rates_for = original
        memo.clear_all()
        h100_time.rows.cache_clear()


def main() -> None:
    grid = {i / 100: sse(i / 100) for i in range(0, 101)}
    best = min(grid, key=lambda s: grid[s])
    for s in (0.0, 0.5, best, 1.0):
        print(f"onchip_share {s:.2f}: sum of squared log errors {grid[s]:.5f}")
    print(f"best {best:.2f} (shipped {eff.H200_FIT.onchip_share:.2f})")


if __name__ == "__main__":
    main()
