"""Merge the raw per-call results (tests/data/calibration_h200_raw/) into tests/data/calibration_h200.json.

    python benchmarks/calibration/merge.py [--include-call 4]

Each raw device call left ``callN_results.jsonl`` (one JSON line per case) and ``callN_provenance.json``.
A case's first ok/oom result is its measurement; later results for the same id (``repeat: true``) are kept
under ``repeats`` to show run-to-run spread.

Raw calls in ``PENDING_CALLS`` (measured, not yet matched by the memory model) are left out unless named with
``--include-call``: tests/test_calibration_memory.py checks every merged case within +-10 %. Device call 4 was
pending until the estimator matched it; it is merged now. Cases in ``EXCLUDED_CASES`` stay in the raw files as
references only (the reason is written to the merged provenance).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RAW = ROOT / "tests" / "data" / "calibration_h200_raw"
OUT = ROOT / "tests" / "data" / "calibration_h200.json"
sys.path.insert(0, str(HERE))

import cases as cases_mod  # noqa: E402

RUN_FIELDS = ("hf_arch", "hf_extra", "steps", "timed_steps", "world_size_fake", "expect", "note")
# Run fields that only the newer kinds of case carry (DDP, FSDP2 shard-grad-op, QLoRA preparation).
OPTIONAL_RUN_FIELDS = ("wrap", "ddp_gradient_as_bucket_view", "fsdp_reshard_after_forward", "qlora_prep")
# No raw call is pending (device call 4 -- QLoRA, 8-bit AdamW, DDP, shard-grad-op, eager attention, SGD,
# Adafactor -- is merged).
PENDING_CALLS: frozenset[int] = frozenset()
# Measured, but outside what a request can say: kept in the raw results as a reference, not merged.
EXCLUDED_CASES = {
    "l8b-qlora16al-fused-b1-s4096-ck-kbitprep": (
        "PEFT prepare_model_for_kbit_training casts embeddings, norms and the LM head to fp32 (+3.9 GiB here); "
        "the request contract has no field for it"),
}
REPEAT_KEYS = ("peak_allocated_bytes", "peak_reserved_bytes", "nvml_used_bytes", "step_time_s", "step_times_s",
               "oom")
CASE_KEYS = ("attn_implementation", "optimizer", "fsdp", "ddp", "qlora", "autocast_bf16", "wall_s", "launch",
             "est_s")

SEMANTICS = {
    "peak_allocated_bytes": "max over the memory steps of torch.cuda.max_memory_allocated(), the peak statistics "
                            "reset before each phase (forward, backward, optimizer.step()+zero_grad)",
    "peak_reserved_bytes": "max over the memory steps of torch.cuda.max_memory_reserved()",
    "nvml_used_bytes": "NVML used memory of the device after step 2 (the caching allocator still holds its peak)",
    "cuda_context_bytes": "NVML used after CUDA init and a 1-element allocation, minus NVML used before init, "
                          "minus torch reserved",
    "after_build_bytes": "torch.cuda.memory_allocated() after the model is built, sharded and initialised",
    "phase_peaks": "per memory step: peak allocated bytes in forward / backward / optimizer (step()+zero_grad), "
                   "*_reserved the reserved peak, *_end the allocated bytes at the end of the phase",
    "step_time_s": "median wall time of the timed steps (run after the memory steps, no peak resets or syncs "
                   "inside a step; torch.cuda.synchronize() before and after each step)",
    "oom": "torch.OutOfMemoryError raised; oom_phase/oom_step say where; peak_allocated_bytes is then the "
           "peak reached before the failing allocation, oom_tried_to_allocate_bytes the failing request",
    "sharded_cases": "FSDP2 fully_shard per decoder layer and root under torch's fake process group: rank 0's "
                     "memory is real; collectives do no work, so step_time_s is compute only, without "
                     "communication",
}
# Added to the semantics only once a merged case is of that kind (keeps the merged file stable until then).
SEMANTICS_BY_KEY = {
    "ddp": ("ddp_cases", "DistributedDataParallel over the fake process group (rank 0 of W): reducer buckets are "
                         "real allocations; an in-place div_(W) comm hook stands in for the all-reduce"),
    "qlora": ("qlora_cases", "bitsandbytes NF4 base (double quantisation, bf16 compute) built as from_pretrained("
                             "quantization_config=...) builds it, random weights; PEFT LoRA on all linears; see "
                             "qlora.build"),
}


def _read_calls(include: frozenset[int] = frozenset()) -> list[tuple[int, dict[str, Any], list[dict[str, Any]]]]:
    calls = []
    for prov_path in sorted(RAW.glob("call*_provenance.json")):
        n = int(prov_path.name[4:].split("_")[0])
        if n in PENDING_CALLS and n not in include:
            continue
        prov = json.loads(prov_path.read_text())
        rows = [json.loads(line) for line in (RAW / f"call{n}_results.jsonl").read_text().splitlines()
                if line.strip()]
        calls.append((n, prov, rows))
    return calls


def merge(include: frozenset[int] = frozenset()) -> dict[str, Any]:
    calls = _read_calls(include)
    by_id: dict[str, dict[str, Any]] = {}
    device: dict[str, Any] = {}
    for n, _prov, rows in calls:
        for r in rows:
            if r.get("status") not in ("ok", "oom") or r["id"] in EXCLUDED_CASES:
                continue
            device = device or r.get("device", {})
            spec = cases_mod.by_id(r["id"])
            if r["id"] not in by_id:
                rec: dict[str, Any] = {"id": r["id"], "status": r["status"], "request": spec["request"],
                                       "run": {k: spec[k] for k in RUN_FIELDS}, "device_call": n}
                rec["run"].update({k: spec[k] for k in OPTIONAL_RUN_FIELDS if k in spec})
                rec["run"]["tier"] = spec["call"]
                for k in CASE_KEYS:
                    if k in r:
                        rec[k] = r[k]
                rec["measured"] = r["measured"]
                rec["repeats"] = []
                by_id[r["id"]] = rec
            else:
                rep = {"device_call": n, "status": r["status"]}
                rep.update({k: r["measured"].get(k) for k in REPEAT_KEYS})
                by_id[r["id"]]["repeats"].append(rep)
    merged_calls = {n for n, _p, _r in calls}
    order = [c["id"] for c in cases_mod.CASES if (c["call"] not in PENDING_CALLS or c["call"] in merged_calls)
             and c["id"] not in EXCLUDED_CASES]
    out_cases = [by_id[i] for i in order if i in by_id]
    missing = [i for i in order if i not in by_id]
    prov = {
        "gpu_name": device.get("name"),
        "gpu_total_memory_bytes_torch": device.get("total_memory_bytes"),
        "gpu_capability": device.get("capability"),
        "gpu_multiprocessors": device.get("multiprocessors"),
        "driver": device.get("driver"),
        "cuda_driver_version": device.get("cuda_driver_version"),
        "cudnn": device.get("cudnn"),
        "hardware_request_gpu": cases_mod.GPU,
        "device_kind": "nvidia-h200 (one NVIDIA H200 SXM, Firecracker microVM)",
        "device_calls": [
            {"call": n, "date_utc": p.get("date_utc"), "command": p.get("command"), "git_sha": p.get("git_sha"),
             "script_sha256": p.get("script_sha256"), "torch": p.get("torch"), "torch_cuda": p.get("torch_cuda"),
             "transformers": p.get("transformers"), "peft": p.get("peft"), "accelerate": p.get("accelerate"),
             **({"bitsandbytes": p["bitsandbytes"]} if p.get("bitsandbytes") else {}),
             "nvidia_ml_py": p.get("nvidia_ml_py"), "python": p.get("python"), "platform": p.get("platform"),
             "nvidia_smi": p.get("nvidia_smi"), "env": p.get("env"), "cases_run": len(rows)}
            for n, p, rows in calls
        ],
        "torch": calls[0][1].get("torch") if calls else None,
        "cuda": calls[0][1].get("torch_cuda") if calls else None,
        "transformers": calls[0][1].get("transformers") if calls else None,
        "peft": calls[0][1].get("peft") if calls else None,
        "date": calls[0][1].get("date_utc", "")[:10] if calls else None,
        "method_doc": "docs/calibration-method.md",
        "script": "benchmarks/calibration/measure.py (cases: benchmarks/calibration/cases.py)",
        "merge": "python benchmarks/calibration/merge.py",
        "semantics": {**SEMANTICS, **dict(v for k, v in SEMANTICS_BY_KEY.items()
                                          if any(k in c for c in out_cases))},
        "cases_missing": missing,
        "cases_excluded": {k: v for k, v in EXCLUDED_CASES.items()
                           if any(k == r["id"] for _n, _p, rows in calls for r in rows)},
    }
    return {"provenance": prov, "cases": out_cases}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--include-call", type=int, action="append", default=[],
                    help="also merge this pending raw call (see PENDING_CALLS)")
    args = ap.parse_args()
    data = merge(frozenset(args.include_call))
    try:
        from estimator.request import EstimateRequest

        for c in data["cases"]:
            EstimateRequest.model_validate(c["request"])
    except ImportError:
        print("estimator not importable: requests not validated")
    OUT.write_text(json.dumps(data, indent=1) + "\n")
    n_oom = sum(c["status"] == "oom" for c in data["cases"])
    print(f"wrote {OUT.relative_to(ROOT)}: {len(data['cases'])} cases ({n_oom} oom), "
          f"missing {data['provenance']['cases_missing']}")


if __name__ == "__main__":
    main()
