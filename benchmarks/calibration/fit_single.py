"""Leave-one-family-out refits of the single-GPU step-time constants (issue 14, item 5).

Run: ``.venv/bin/python -m benchmarks.calibration.fit_single``. The five constants ``efficiency.H200_FIT`` fits on
the H200 single-GPU steps (``gemm_eff``, ``elem_scale``, ``autocast_extra``, ``cpu_layer_fwd_s``, ``lora_bytes``) are
refitted with one model family's cases left out (least squares on log step time, coordinate descent in log space
from the shipped values), and the left-out family's errors are computed with the refitted constants: errors on
cases the fit never saw, which calibrate the single-GPU error bar (``estimator.training.accuracy.held_out_bar``).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from functools import cache
from pathlib import Path
from typing import Any

from estimator.job import job_of
from estimator.model.spec import ModelShape, resolve_model
from estimator.request import EstimateRequest
from estimator.training.efficiency import H200_FIT, Constants
from estimator.training.layout import build_layout
from estimator.training.timing import step_time

ROOT = Path(__file__).resolve().parents[2]
HELD_OUT_JSON = ROOT / "tests" / "data" / "time_held_out_h200.json"
FITTED = ("gemm_eff", "elem_scale", "autocast_extra", "cpu_layer_fwd_s", "lora_bytes")
SWEEPS = 3


@cache
def _cases() -> tuple[tuple[str, dict[str, Any], float], ...]:
    """(family, case, measured seconds) of the single-GPU calibration steps."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    import test_calibration_time as cal

    from benchmarks.calibration.time_report import family

    return tuple((family(c), c, cal.measured_step_s(c)) for c in cal._single())


@cache
def _prepared() -> tuple[tuple[Any, ...], ...]:
    from hardware_catalog import load_catalog

    catalog = load_catalog()
    out = []
    for fam, case, measured in _cases():
        req = EstimateRequest.model_validate(case["request"])
        job = job_of(req)
        shape = ModelShape(resolve_model(req.model))
        out.append((fam, job, shape, build_layout(job, shape), catalog.gpus[req.hardware.gpu], catalog, measured))
    return tuple(out)


def _errors(k: Constants, rows: list[tuple[Any, ...]]) -> list[float]:
    return [step_time(job, shape, layout, gpu, None, cat, k).step_time_s / measured - 1.0
            for _, job, shape, layout, gpu, cat, measured in rows]


def _loss(k: Constants, rows: list[tuple[Any, ...]]) -> float:
    return sum(math.log1p(e) ** 2 for e in _errors(k, rows))


def _golden(f: Any, lo: float, hi: float, steps: int = 14) -> float:
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2.0


def refit(rows: list[tuple[Any, ...]]) -> Constants:
    """The fitted constants on ``rows`` (coordinate descent on log values within 0.5x-2x of the current)."""
    k = H200_FIT
    for _ in range(SWEEPS):
        for name in FITTED:
            x0 = math.log(getattr(k, name))

            def f(x: float, name: str = name, base: Constants = k) -> float:
                return _loss(dataclasses.replace(base, **{name: math.exp(x)}), rows)

            k = dataclasses.replace(k, **{name: math.exp(_golden(f, x0 - math.log(2.0), x0 + math.log(2.0)))})
    return k


@cache
def held_out_errors() -> dict[str, list[float]]:
    """Family -> errors of its cases under the constants refitted without it."""
    rows = list(_prepared())
    out: dict[str, list[float]] = {}
    for fam in sorted({r[0] for r in rows}):
        k = refit([r for r in rows if r[0] != fam])
        out[fam] = _errors(k, [r for r in rows if r[0] == fam])
    return out


def refitted_constants() -> dict[str, dict[str, float]]:
    rows = list(_prepared())
    return {fam: {n: getattr(refit([r for r in rows if r[0] != fam]), n) for n in FITTED}
            for fam in sorted({r[0] for r in rows})}


def write() -> dict[str, Any]:
    """Write ``tests/data/time_held_out_h200.json``: per family its case ids, the errors under constants refitted
    without it, those constants, and the shipped constants they started from (the staleness check of
    ``tests/test_published_time.py``)."""
    import json
    import subprocess

    errors = held_out_errors()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                            check=False).stdout.strip()
    data = {"provenance": {"script": "benchmarks/calibration/fit_single.py", "estimator_commit": commit,
                           "method": "leave-one-family-out refit of " + ", ".join(FITTED)},
            "shipped": {n: getattr(H200_FIT, n) for n in FITTED},
            "families": {f: {"case_ids": [c["id"] for fam, c, _ in _cases() if fam == f], "errors": e}
                         for f, e in errors.items()},
            "refitted": refitted_constants()}
    HELD_OUT_JSON.write_text(json.dumps(data, indent=1) + "\n")
    return data


if __name__ == "__main__":
    import json
    import statistics

    errors = held_out_errors()
    if "--write" in sys.argv:
        write()
    print(json.dumps({f: {"cases": len(e), "median_abs_pct": round(100 * statistics.median(abs(x) for x in e), 1),
                          "worst_pct": round(100 * max(e, key=abs), 1)} for f, e in errors.items()}, indent=2))
    print(json.dumps(refitted_constants(), indent=2))
