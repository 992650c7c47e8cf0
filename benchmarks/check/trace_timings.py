"""How long ``capplan check --trace`` takes for issue 31's classes at their real sizes on this machine, and the traced
peak beside the estimate (and beside a real-GPU measurement where one exists).

    CAPPLAN_NATIVE=0 python benchmarks/check/trace_timings.py [--out FILE]

Classes (issue 31, "Tests"): Llama 3.1 8B, Qwen3 MoE, Gemma 2, Phi-3; full, LoRA, FSDP2 at W = 8, checkpointing on
and off. Measured peaks: the H100 runs of ``tests/data/stacks_h100_raw`` (Qwen3-30B-A3B attention-only LoRA under
FSDP2 at W = 8, rank 0 through the fake process group) and the H200 calibration (``tests/data/calibration_h200.json``).
Phi-3 has no preset: its ``config.json`` (microsoft/Phi-3-mini-4k-instruct) is pasted as ``model.hf_config``.
Not run by the tests (minutes on 2 cores); ``benchmarks/check/trace_timings.json`` is its committed output."""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.check.record import versions  # noqa: E402
from app.core.startup import load_source_catalog  # noqa: E402
from benchmarks.calibration.stacks_compare import load_measured, request_for  # noqa: E402
from benchmarks.check.trace_vs_calibration import quiet_trace  # noqa: E402
from estimator import EstimateRequest, estimate  # noqa: E402

#: microsoft/Phi-3-mini-4k-instruct config.json (the fields the builder reads)
PHI_3_MINI = {"model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072, "num_attention_heads": 32,
              "num_key_value_heads": 32, "intermediate_size": 8192, "vocab_size": 32064,
              "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}


def _body(model: Any, *, method: str, ckpt: str, gpus: int = 1, seq: int = 4096,
          gpu: str = "h100-sxm5-80gb", targets: str = "all-linear") -> dict[str, Any]:
    training: dict[str, Any] = {"method": method, "precision": "bf16-mixed", "seq_len": seq, "micro_batch_size": 1,
                                "activation_checkpointing": ckpt}
    if method == "lora":
        training.update(lora_rank=16, lora_targets=targets)
    return {"model": model, "training": training,
            "parallelism": {"sharding": "fsdp" if gpus > 1 else "none", "framework": "pytorch"},
            "hardware": {"gpu": gpu, "num_nodes": 1, "gpus_per_node": gpus}}


def cases() -> list[tuple[str, dict[str, Any], int | None, str]]:
    """(id, request body, measured peak allocated bytes or None, where it was measured)."""
    out: list[tuple[str, dict[str, Any], int | None, str]] = []
    cal = {c["id"]: c for c in json.loads((ROOT / "tests" / "data" / "calibration_h200.json").read_text())["cases"]}
    for cid in ("l8b-full-mixed-fused-b1-s4096-ck", "l8b-lora16al-fused-b1-s4096-nock",
                "l8b-full-mixed-fused-b1-s4096-ck-fsdp8", "g9b-lora16al-fused-b1-s4096-ck"):
        c = cal[cid]
        out.append((cid, c["request"], int(c["measured"]["peak_allocated_bytes"]), "H200 calibration"))
    for c in load_measured(issues=(33,)):
        if c["id"].startswith("h100-q3a3b"):
            body = request_for(c)
            assert body is not None
            out.append((c["id"], body, int(c["peak_allocated_bytes"]), "H100 (stacks_h100_raw)"))
    phi = {"hf_config": PHI_3_MINI}
    out += [("phi3-mini-full-mixed-s4096-ck", _body(phi, method="full", ckpt="full"), None, ""),
            ("phi3-mini-lora16al-s4096-nock", _body(phi, method="lora", ckpt="none"), None, ""),
            ("phi3-mini-full-mixed-s4096-ck-fsdp8", _body(phi, method="full", ckpt="full", gpus=8), None, "")]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "check" / "trace_timings.json")
    args = ap.parse_args()
    catalog = load_source_catalog()
    rows = []
    for cid, body, measured, where in cases():
        request = EstimateRequest.model_validate(body)
        result = estimate(request, catalog)
        t = quiet_trace(request, result)
        if isinstance(t, str):
            rows.append({"id": cid, "refused": t})
            continue
        row: dict[str, Any] = {"id": cid, "seconds": round(t.seconds, 1),
                               "traced_bytes": t.peak_allocated_bytes,
                               "estimated_bytes": result.memory.peak_allocated_bytes,
                               "estimate_vs_trace_pct": round(100 * (result.memory.peak_allocated_bytes
                                                                     / t.peak_allocated_bytes - 1), 2)}
        if measured:
            row.update(measured_bytes=measured, measured_on=where,
                       trace_vs_measured_pct=round(100 * (t.peak_allocated_bytes / measured - 1), 2),
                       estimate_vs_measured_pct=round(100 * (result.memory.peak_allocated_bytes / measured - 1), 2))
        rows.append(row)
        print(json.dumps(row), flush=True)
    meta = {"machine": platform.machine(), "cpus": os.cpu_count(), "load_average": list(os.getloadavg()),
            "versions": versions(), "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    args.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
