"""Issue 29: the estimator against the H100 measurements of the fine-tuning stacks' mechanisms.

The measurements (``benchmarks/calibration/measure_stacks.py`` on the ``gpu`` branch, one process per case) are
copied into ``tests/data/stacks_h100_raw/callN_results.jsonl`` (the case under ``case``); each case holds the
request today's contract can express, its ``stack`` block (the mechanism: loss, Liger kernels, offloading,
optimizer) and its hold-out label (``fit`` / ``held_out``). :func:`request_for` turns a case into the request with
issue 29's fields, so the same estimator sizes it; :func:`compare` lists the memory error per case, by mechanism
and hold-out label.

Run::

    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.calibration.stacks_compare            # the table
    PYTHONPATH=$PWD .venv/bin/python -m benchmarks.calibration.stacks_compare --cases-from /work/wt/gpu  # no data yet:
        # the estimator's answers for the cases of the gpu branch's stack_cases.py (predictions only)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from benchmarks.calibration.step_times import measured_step_s
from estimator import EstimateRequest, estimate
from estimator.errors import EstimatorError
from estimator.training.timing import without_collectives_s

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "tests" / "data" / "stacks_h100_raw"
GiB = 1024**3

#: the measured loss implementations and the request fields that describe them
LOSS_FIELDS: dict[str, dict[str, str]] = {
    "hf": {"loss_kernel": "materialized"},
    "trl": {"stack": "trl", "loss_kernel": "chunked"},  # TRL's ChunkedLogProbFunction (the trl implementation)
    "torchtune": {"loss_kernel": "chunked"},  # CEWithChunkedOutputLoss's algorithm
    "liger": {"loss_kernel": "fused"},
    "cce": {"loss_kernel": "fused"},
}
#: the measured optimizers and their request ids (None: no request value describes it)
OPTIMIZER_IDS: dict[str, str | None] = {
    "adamw": "adamw", "adamw-8bit": "adamw-8bit", "paged-adamw-8bit": "paged-adamw-8bit",
    "paged-adamw-32bit": "paged-adamw", "ao-adamw-4bit": "adamw-4bit", "ao-adamw-8bit": "ao-adamw-8bit",
    "muon": "muon",
}


def mechanism(case: dict[str, Any]) -> str:
    """The mechanism class a case measures (one row of docs/accuracy.md's stacks table)."""
    s = case["stack"]
    if "expandable_segments" in (s.get("alloc_conf") or ""):
        return "allocator expandable_segments"
    if s.get("optimizer", "adamw") != "adamw":
        return "optimizer " + s["optimizer"]
    if s.get("offload", "none") != "none":
        return "offload"
    if s.get("loss", "hf") != "hf":
        return "loss " + s["loss"]
    if s.get("liger_kernels"):
        return "liger kernels"
    return "baseline"


def request_for(case: dict[str, Any]) -> dict[str, Any] | None:
    """The case's request with issue 29's fields (None when no request value describes its mechanism)."""
    body = json.loads(json.dumps(case["request"]))
    s = case["stack"]
    t = body.setdefault("training", {})
    t.update(LOSS_FIELDS[s.get("loss", "hf")])
    if case.get("request_stack"):  # the stack itself (its defaults, e.g. torchtune's Gemma 2 without a logit cap)
        t["stack"] = case["request_stack"]
    if s.get("liger_kernels"):
        t["fused_kernels"] = "liger"
    if s.get("offload", "none") != "none":
        t["activation_offloading"] = "all"  # TRL's hooks: every saved tensor (with checkpointing: the checkpoints)
    if "expandable_segments:True" in (s.get("alloc_conf") or ""):
        t["allocator"] = "expandable_segments"  # PYTORCH_CUDA_ALLOC_CONF for that case (issue 33 item 5)
    opt = OPTIMIZER_IDS.get(s.get("optimizer", "adamw"))
    if opt is None:
        return None
    t["optimizer"] = opt
    if opt == "muon":
        t["optimizer_impl"] = "for-loop"
    return body


def load_measured(raw: Path = RAW, issues: tuple[int, ...] = (29,)) -> list[dict[str, Any]]:
    """Every case of ``issues`` measured (status ok) under ``raw``."""
    out: list[dict[str, Any]] = []
    paths = sorted(raw.glob("call*_results.jsonl")) + sorted(raw.glob("*/results.jsonl"))
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                # the case itself under "case" (the gpu branch's README), its measurement beside it
                # (the device's results put the figures under "measured": flattened here)
                merged = {**r.get("case", {}), **{k: v for k, v in r.items() if k not in ("case", "measured")},
                          **r.get("measured", {})}
                if merged.get("issue") in issues and merged.get("status") == "ok" \
                        and merged.get("peak_allocated_bytes"):
                    out.append(merged)
    return out


def load_cases(gpu_tree: Path) -> list[dict[str, Any]]:
    """The issue-29 cases of the gpu branch's stack_cases.py (no measurement: predictions only)."""
    sys.path.insert(0, str(gpu_tree / "benchmarks" / "calibration"))
    import stack_cases  # type: ignore[import-not-found]

    return [c for c in stack_cases.STACK_CASES if c.get("issue") == 29]


def compare(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per case: the estimate's peak allocated bytes and, where measured, the error."""
    rows: list[dict[str, Any]] = []
    for case in cases:
        body = request_for(case)
        row: dict[str, Any] = {"id": case["id"], "holdout": case.get("holdout", "fit"), "mechanism": mechanism(case)}
        if body is None:
            row["note"] = "no request value describes it"
            rows.append(row)
            continue
        try:
            r = estimate(EstimateRequest.model_validate(body))
        except (EstimatorError, ValueError) as exc:
            row["note"] = f"refused: {exc}"[:120]
            rows.append(row)
            continue
        # what torch.cuda.max_memory_allocated() sees: not the paged optimizer's managed states (issue 33 item 4)
        row["predicted_bytes"] = r.memory.peak_allocated_bytes - r.memory.managed_bytes
        row["predicted_step_s"] = r.time.step_time_s if r.time else None
        row["step_bar_pct"] = r.time.error_bar_pct if r.time else None  # the bar the estimate carries
        if r.time and case.get("world_size_fake"):  # one rank through the fake process group: no real collectives
            row["predicted_step_s"] = without_collectives_s(r.time.step_time_s, r.time.communication_s,
                                                            r.time.exposed_communication_s)
            row["step_compute_only"] = True
        row["predicted_reserved_bytes"] = r.memory.reserved_peak_bytes
        row["predicted_gpu_bytes"] = r.memory.total_bytes  # what NVML sees, managed memory included
        row["fit_verdict"] = r.memory.fit_verdict
        got_step = measured_step_s(case) if case.get("step_time_s") else None  # the NOISY_SPREAD rule
        if got_step and row["predicted_step_s"]:
            row["measured_step_s"] = got_step
            row["step_error_pct"] = 100.0 * (row["predicted_step_s"] - got_step) / got_step
        measured = case.get("peak_allocated_bytes")
        if measured:
            row["measured_bytes"] = measured
            row["error_pct"] = 100.0 * (row["predicted_bytes"] - measured) / measured
        for key, got in (("reserved", case.get("peak_reserved_bytes")), ("gpu", case.get("nvml_peak_used_bytes"))):
            if got:
                row[f"measured_{key}_bytes"] = got
                row[f"{key}_error_pct"] = 100.0 * (row[f"predicted_{key}_bytes"] - got) / got
        rows.append(row)
    return rows


def summary(rows: list[dict[str, Any]], key: str = "error_pct") -> dict[str, dict[str, float]]:
    """Median and largest |error| per hold-out label (cases with a measurement); ``key``: ``error_pct``
    (allocated peak), ``reserved_error_pct``, ``gpu_error_pct`` (NVML) or ``step_error_pct``."""
    out: dict[str, dict[str, float]] = {}
    for label in ("fit", "held_out"):
        errs = [abs(r[key]) for r in rows if r.get("holdout") == label and key in r]
        if errs:
            out[label] = {"cases": len(errs), "median_pct": statistics.median(errs), "max_pct": max(errs)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases-from", type=Path, help="a checkout of the gpu branch: predict its cases (no data)")
    ap.add_argument("--issue", type=int, action="append", help="the issues' cases (default 29; 33 for round 3)")
    args = ap.parse_args()
    issues = tuple(args.issue or [29])
    cases = load_cases(args.cases_from) if args.cases_from else load_measured(issues=issues)
    rows = compare(cases)
    for r in rows:
        pred = f"{r['predicted_bytes'] / GiB:7.2f}" if "predicted_bytes" in r else "      –"
        meas = f"{r['measured_bytes'] / GiB:7.2f}" if "measured_bytes" in r else "      –"
        err = f"{r['error_pct']:+6.1f} %" if "error_pct" in r else "        "
        step = f"{r['step_error_pct']:+6.1f} %" if "step_error_pct" in r else "        "
        res = f"{r['reserved_error_pct']:+6.1f} %" if "reserved_error_pct" in r else "        "
        print(f"{r['holdout']:8s} {r['mechanism']:28s} {pred} {meas} {err} res {res} step {step}  {r['id']} "
              f"{r.get('note', '')}")
    for key in ("error_pct", "reserved_error_pct", "gpu_error_pct", "step_error_pct"):
        print(key, json.dumps(summary(rows, key)))


if __name__ == "__main__":
    main()
