"""Freeze the estimator's answers for the H100 cases that measure what the allocator reserves and what it cannot
see (issue 33 items 4 and 5), before the device call, so that their errors are held out in time.

The cases are ``benchmarks/calibration/stack_cases.py``'s with ``alloc_conf`` (expandable segments), the Llama 3.1 8B
LoRA edge cases (16k / 32k tokens with checkpointing), paged optimizers and activation offloading. Per case: the
allocated peak as ``torch.cuda.max_memory_allocated()`` sees it (without the managed part), the managed bytes, the
reserved peak and its bar, what NVML should show, and the fit verdict.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m benchmarks.calibration.allocator_predictions
> tests/data/fidelity_h100_raw/predictions_allocator.json`` and commit it before the call.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from benchmarks.calibration.stacks_compare import request_for
from estimator import EstimateRequest, estimate

HERE = Path(__file__).resolve().parent


def _stack_cases() -> list[dict[str, Any]]:
    sys.path.insert(0, str(HERE))
    import stack_cases  # type: ignore[import-not-found]

    return list(stack_cases.STACK_CASES)


def selected(case: dict[str, Any]) -> bool:
    s = case.get("stack", {})
    edge = case["id"].startswith("h100-l8b-lora") and "-ck" in case["id"] and ("s32768" in case["id"]
                                                                                 or "s16384" in case["id"])
    return bool(s.get("alloc_conf")) or edge or "paged" in str(s.get("optimizer")) or s.get("offload", "none") != "none"


def predictions() -> dict[str, Any]:
    sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    rows = []
    for case in _stack_cases():
        if not selected(case):
            continue
        body = request_for(case)
        if body is None:
            rows.append({"id": case["id"], "note": "no request value describes it"})
            continue
        m = estimate(EstimateRequest.model_validate(body)).memory
        rows.append({"id": case["id"], "issue": case.get("issue"), "holdout": case.get("holdout"),
                     "allocator": body["training"].get("allocator", "default"),
                     "allocator_peak_allocated_bytes": m.peak_allocated_bytes - m.managed_bytes,
                     "managed_bytes": m.managed_bytes, "reserved_peak_bytes": m.reserved_peak_bytes,
                     "reserved_error_bar_pct": m.reserved_error_bar_pct, "nvml_total_bytes": m.total_bytes,
                     "error_bar_pct": m.error_bar_pct, "fits": m.fits, "fit_verdict": m.fit_verdict})
    return {"git_sha": sha, "note": "estimates frozen before the H100 call (issue 33 items 4 and 5)", "cases": rows}


def main() -> int:
    json.dump(predictions(), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
