"""Issue 33 item 3: single-GPU step time on the H100 80GB HBM3 against the first real H100 measurements.

The cases are the plain ones (``stacks_compare.mechanism`` "baseline": Hugging Face loss, AdamW, no Liger, no
offloading) of ``tests/data/stacks_h100_raw/call*_results.jsonl`` measured on one GPU (the sharded cases, one rank
through the fake process group, are compute only and left out), labelled ``fit`` (the only ones
``efficiency.Constants.onchip_share`` was fitted on) or ``held_out``. Where the same case id (without the ``h100-``
prefix) was measured on the H200 (``tests/data/calibration_h200.json``), the measured and estimated H100 / H200
step-time ratios stand beside it: the mechanism the constant models is that ratio.

Run: ``PYTHONPATH=$PWD .venv/bin/python -m benchmarks.calibration.h100_time`` (the table and the summary).
"""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path
from typing import Any

from benchmarks.calibration.stacks_compare import load_measured, mechanism, request_for
from estimator import EstimateRequest, estimate

ROOT = Path(__file__).resolve().parents[2]
H200_JSON = ROOT / "tests" / "data" / "calibration_h200.json"
#: issue 33's target: median |error| over the plain H100 cases
MEDIAN_TARGET_PCT = 8.0


def _step_s(body: dict[str, Any]) -> tuple[float, float]:
    t = estimate(EstimateRequest.model_validate(body)).time
    assert t is not None
    return t.step_time_s, t.error_bar_pct


@cache
def _h200_cases() -> dict[str, dict[str, Any]]:
    data = json.loads(H200_JSON.read_text())
    return {c["id"]: c for c in data["cases"] if c.get("status") == "ok" and c.get("measured", {}).get("step_time_s")}


@cache
def rows() -> tuple[dict[str, Any], ...]:
    """One row per plain H100 case: measured and estimated step seconds, error %, the estimate's error bar, and
    the H200 twin's measured / estimated step seconds where one was measured. A case measured again on another
    machine (``repeat_of``: a same-session reference of a later device call) is in :func:`repeats` instead."""
    return tuple(r for r in _all_rows() if not r.get("repeat_of"))


@cache
def repeats() -> tuple[dict[str, Any], ...]:
    """The plain cases measured again on another machine (``...-repN``, ``repeat_of`` the case), as :func:`rows`."""
    return tuple(r for r in _all_rows() if r.get("repeat_of"))


@cache
def _all_rows() -> tuple[dict[str, Any], ...]:
    out: list[dict[str, Any]] = []
    for case in load_measured(issues=(29, 33)):
        # the allocator setting changes no kernel: its case times the same computation
        if mechanism(case) not in ("baseline", "allocator expandable_segments") or not case.get("step_time_s"):
            continue
        if case.get("world_size_fake"):  # one rank of W through the fake process group: not a single-GPU step
            continue
        body = request_for(case)
        assert body is not None
        est, bar = _step_s(body)
        got = float(case["step_time_s"])
        row: dict[str, Any] = {"id": case["id"], "holdout": case.get("holdout", "fit"), "measured_s": got,
                               "estimated_s": est, "error_pct": 100.0 * (est / got - 1.0), "bar_pct": bar,
                               "repeat_of": case.get("repeat_of")}
        twin = _h200_cases().get(case["id"].removeprefix("h100-"))
        if twin is not None:
            h200_body = json.loads(json.dumps(body))
            h200_body["hardware"]["gpu"] = "h200-sxm-141gb"
            row["h200_measured_s"] = float(twin["measured"]["step_time_s"])
            row["h200_estimated_s"] = _step_s(h200_body)[0]
        out.append(row)
    return tuple(out)


def summary() -> dict[str, dict[str, float]]:
    """Median and largest |error| %, over all plain cases and per hold-out label."""
    out: dict[str, dict[str, float]] = {}
    for label in ("all", "fit", "held_out"):
        errs = [abs(r["error_pct"]) for r in rows() if label == "all" or r["holdout"] == label]
        if errs:
            out[label] = {"cases": len(errs), "median_pct": statistics.median(errs), "max_pct": max(errs)}
    return out


def table_lines() -> list[str]:
    """The per-case markdown table (docs/accuracy-time.md's H100 section)."""
    lines = ["| case | set | measured s | estimated s | error | bar | H200 measured s | H100/H200 measured | "
             "H100/H200 estimated |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows():
        twin = (f"{r['h200_measured_s']:.4f} | {r['measured_s'] / r['h200_measured_s']:.2f} | "
                f"{r['estimated_s'] / r['h200_estimated_s']:.2f} |" if "h200_measured_s" in r else " | | |")
        lines.append(f"| {r['id']} | {r['holdout']} | {r['measured_s']:.4f} | {r['estimated_s']:.4f} | "
                     f"{r['error_pct']:+.1f}% | {r['bar_pct']:g}% | {twin}")
    return lines


def main() -> None:
    print("\n".join(table_lines()))
    print(json.dumps(summary(), indent=2))


if __name__ == "__main__":
    main()
