"""``capplan check --trace`` against our real-GPU calibration measurements (issue 31): for calibration cases of
each class, the traced peak, the measured peak (``tests/data/calibration_h200.json``, one NVIDIA H200) and the
estimate, and how long each trace took on this machine.

    CAPPLAN_NATIVE=0 python benchmarks/check/trace_vs_calibration.py [--out FILE] [CASE_ID ...]

Writes JSON (one row per case) to ``--out`` and a table to stdout. Not run by the tests (minutes on 2 cores);
its output is what the trace tests' tolerances are justified from (``tests/test_check_trace.py``)."""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.check.record import versions  # noqa: E402
from app.check.trace import TraceResult, TraceUnsupported, trace  # noqa: E402
from app.core.startup import load_source_catalog  # noqa: E402
from estimator import EstimateRequest, estimate  # noqa: E402

#: one or more cases of every class the trace can represent: full (mixed / true bf16), LoRA, checkpointing on
#: and off, FSDP2 at W = 8, other optimizers and implementations, Gemma 2, Mixtral (MoE), Qwen 2.5, Mistral
CASES = [
    "l8b-full-mixed-fused-b1-s4096-ck", "l8b-full-true-fused-b1-s4096-nock", "l8b-lora16al-fused-b1-s4096-ck",
    "l8b-lora16al-fused-b1-s4096-nock", "l8b-full-mixed-fused-b1-s4096-ck-fsdp8",
    "l8b-full-mixed-fused-b1-s4096-nock-fsdp8", "l8b-full-true-fused-b1-s4096-nock-fsdp8",
    "g9b-lora16al-fused-b1-s4096-ck", "g9b-full-true-fused-b1-s4096-ck", "mx8x7b-lora16at-fused-b1-s2048-ck",
    "q7b-full-true-fused-b1-s4096-nock", "m7b-lora16al-fused-b1-s4096-ck", "l1b-full-mixed-foreach-b1-s4096-nock",
    "l1b-full-mixed-sgd-fused-b1-s4096-nock", "l1b-full-mixed-adafactor-for-loop-b1-s4096-nock",
    "l1b-full-mixed-eager-fused-b1-s2048-nock",
]


def quiet_trace(request: EstimateRequest, result: Any) -> TraceResult | str:
    """``capplan check --trace`` of ``request`` with transformers' and peft's warnings silenced, or why the trace
    refuses it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return trace(request, result)
        except TraceUnsupported as exc:
            return str(exc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "check" / "trace_vs_calibration.json")
    ap.add_argument("cases", nargs="*")
    args = ap.parse_args()
    data = json.loads((ROOT / "tests" / "data" / "calibration_h200.json").read_text())
    by_id = {c["id"]: c for c in data["cases"]}
    catalog = load_source_catalog()
    rows = []
    for cid in args.cases or CASES:
        case = by_id[cid]
        request = EstimateRequest.model_validate(case["request"])
        result = estimate(request, catalog)
        t = quiet_trace(request, result)
        if isinstance(t, str):
            rows.append({"id": cid, "refused": t})
            continue
        measured = case["measured"]["peak_allocated_bytes"]
        row = {"id": cid, "traced_bytes": t.peak_allocated_bytes, "measured_bytes": measured,
               "estimated_bytes": result.memory.peak_allocated_bytes,
               "trace_vs_measured_pct": (t.peak_allocated_bytes - measured) / measured * 100,
               "estimate_vs_measured_pct": (result.memory.peak_allocated_bytes - measured) / measured * 100,
               "estimate_vs_trace_pct": (result.memory.peak_allocated_bytes - t.peak_allocated_bytes)
               / t.peak_allocated_bytes * 100,
               "trace_s": round(t.seconds, 1), "peak_phase": t.peak_phase, "traced_parts": t.parts_bytes}
        rows.append(row)
        print(f"{cid:48} traced {row['traced_bytes'] / 2**30:7.2f} measured {measured / 2**30:7.2f} "
              f"estimated {row['estimated_bytes'] / 2**30:7.2f} GiB  trace-meas {row['trace_vs_measured_pct']:+6.1f}% "
              f"est-meas {row['estimate_vs_measured_pct']:+6.1f}%  {t.seconds:5.1f} s", flush=True)
    args.out.write_text(json.dumps({"machine": platform.processor() or platform.machine(), "versions": versions(),
                                    "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                    "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
