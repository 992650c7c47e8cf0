"""Write the estimator's answers for a device call's cases BEFORE the call runs, so that the call's errors are
errors on cases no part of the model was fitted to (issue 14, item 5).

Run: ``python -m benchmarks.calibration.predictions --call 8 > tests/data/calibration_h200_raw/call8_predictions.json``
and commit the file (and the estimator it names by ``git_sha``) before the device call. ``tests`` compare the
measured peaks with these frozen numbers as well as with the current estimator.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from typing import Any

from benchmarks.calibration import cases, measure_tp
from estimator import EstimateRequest, estimate


def predictions(calls: list[int]) -> dict[str, Any]:
    sha = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "estimator"], capture_output=True, text=True,
                                check=False).stdout.strip())
    rows = []
    for source, pool in (("measure.py", cases.CASES), ("measure_tp.py", measure_tp.CASES)):
        for case in pool:
            if case["call"] not in calls:
                continue
            mem = estimate(EstimateRequest.model_validate(case["request"])).memory
            rows.append({"id": case["id"], "script": source, "expect": case["expect"],
                         "peak_allocated_bytes": mem.peak_allocated_bytes, "total_bytes": mem.total_bytes,
                         "fits": mem.fits, "error_bar_pct": mem.error_bar_pct})
    return {"calls": calls, "git_sha": sha, "estimator_dirty": dirty, "cases": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--call", type=int, action="append", required=True)
    args = ap.parse_args(argv)
    json.dump(predictions(args.call), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
