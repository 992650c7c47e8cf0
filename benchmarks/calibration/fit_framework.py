"""Fit the Megatron-Core / Transformer Engine kernel constant on published runs, leave-one-source-out.

Run: ``.venv/bin/python -m benchmarks.calibration.fit_framework``. ``Constants.fused_ratio`` (the elementwise traffic
of Megatron's fused kernels -- norms, SwiGLU, rotary, residual adds -- as a share of the eager Hugging Face bytes)
is the one constant of ``framework: megatron`` no micro-benchmark measured. It is fitted here by least squares on
log tokens/s over the published Megatron rows (``tests/test_published_time_cases.py``: Korthikanti 2022, Narayanan
2021, Megatron-Core, NeMo, Megatron-Bridge), on a grid, once on all the rows (the shipped value) and once per
source with that source held out: the held-out errors are what ``docs/accuracy-time.md`` reports.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.efficiency import H200_FIT, Constants
from estimator.training.layout import build_layout
from estimator.training.timing import step_time

ROOT = Path(__file__).resolve().parents[2]
GRID = tuple(round(0.05 * i, 2) for i in range(2, 31))  # 0.10 .. 1.50


def _cases() -> list[Any]:
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import test_published_time as pub

    return [c for c in pub._cases() if c.request["parallelism"]["framework"] == "megatron"]


def _error(case: Any, k: Constants, catalog: Any) -> float:
    req = EstimateRequest.model_validate(case.request)
    shape = ModelShape(resolve_model(req.model))
    job = job_of(req)
    layout = build_layout(job, shape)
    t = step_time(job, shape, layout, catalog.gpus[case.gpu], None, catalog, k)
    return t.tokens_per_s_per_gpu / case.tokens_per_s_per_gpu - 1.0


def fit() -> dict[str, Any]:
    from hardware_catalog import load_catalog

    catalog = load_catalog()
    cases = _cases()
    errors = {v: [_error(c, dataclasses.replace(H200_FIT, fused_ratio=v), catalog) for c in cases] for v in GRID}

    def best(rows: list[int]) -> float:
        return min(GRID, key=lambda v: sum(math.log1p(errors[v][i]) ** 2 for i in rows))

    sources = sorted({c.source for c in cases})
    everything = list(range(len(cases)))
    held: dict[str, Any] = {}
    for s in sources:
        train = [i for i, c in enumerate(cases) if c.source != s]
        test = [i for i, c in enumerate(cases) if c.source == s]
        v = best(train)
        held[s] = {"fitted_without": v, "rows": len(test),
                   "held_out_median_abs_pct": 100 * statistics.median(abs(errors[v][i]) for i in test)}
    shipped = best(everything)
    return {"fused_ratio": shipped, "held_out": held,
            "all_rows_median_abs_pct": 100 * statistics.median(abs(e) for e in errors[shipped])}


if __name__ == "__main__":
    import json

    print(json.dumps(fit(), indent=2))
