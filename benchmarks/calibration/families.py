"""The per-family H200 step times of ``tests/data/families_h200_raw`` (device call of
``benchmarks/calibration/time/families.py``) as estimator requests, and their errors.

Run: ``.venv/bin/python -m benchmarks.calibration.families`` (prints a table). Each measured case becomes the
request it ran: the family's ``config.json`` fields (truncated to the layers it ran) as ``model.hf_config``, one
H200, micro-batch 1, LoRA r 16 on all linear layers (peft, dropout 0) under bf16 autocast or full fine-tuning in
bf16 ("bf16-true") with fused AdamW, the attention it ran, no accumulation. The error is estimated / measured
step time - 1. Held out of every fit: no constant of ``estimator.training.efficiency`` was fitted on these cases
(``docs/accuracy-time.md``, "Families the fit never saw").
"""

from __future__ import annotations

import json
import statistics
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RAW = ROOT / "tests" / "data" / "families_h200_raw" / "families.jsonl"


@cache
def results() -> tuple[dict[str, Any], ...]:
    return tuple(json.loads(line) for line in RAW.read_text().splitlines() if line.strip())


def family(case_id: str) -> str:
    """``qwen3-8b-l8-lora-s4096`` -> ``qwen3``; Phi-3 mini and medium are one family, so are Llama 3.1 / 3.2."""
    word = case_id.split("-")[0]
    return "llama" if word.startswith("llama") else "".join(ch for ch in word if ch.isalpha() or ch.isdigit())


def request(res: dict[str, Any]) -> dict[str, Any]:
    case = res["case"]
    full = case["method"] == "full"
    training: dict[str, Any] = {
        "method": case["method"], "precision": "bf16-true" if full else "bf16-mixed", "optimizer": "adamw",
        "optimizer_impl": "fused", "micro_batch_size": case["micro_batch_size"], "seq_len": case["seq_len"],
        "gradient_accumulation_steps": 1, "activation_checkpointing": case["activation_checkpointing"],
        "attention": case["attention"]}
    if not full:
        training.update(lora_rank=16, lora_targets="all-linear")
    return {"model": {"hf_config": case["config"]}, "training": training,
            "parallelism": {"sharding": "none", "framework": "pytorch"},
            "hardware": {"gpu": "h200-sxm-141gb", "num_nodes": 1, "gpus_per_node": 1}}


def step_cases() -> list[dict[str, Any]]:
    return [r for r in results() if r["id"] != "micro" and r["status"] == "ok"]


def estimated_step_s(res: dict[str, Any], constants: Any = None) -> float:
    from estimator.job import job_of
    from estimator.model.spec import ModelShape, resolve_model
    from estimator.request import EstimateRequest
    from estimator.training.efficiency import H200_FIT
    from estimator.training.layout import build_layout
    from estimator.training.timing import step_time

    req = EstimateRequest.model_validate(request(res))
    shape = ModelShape(resolve_model(req.model))
    cat = _catalog()
    job = job_of(req)
    return step_time(job, shape, build_layout(job, shape), cat.gpus[req.hardware.gpu], None, cat,
                     constants or H200_FIT).step_time_s


@cache
def _catalog() -> Any:
    from hardware_catalog import load_catalog

    return load_catalog()


def measured_step_s(res: dict[str, Any]) -> float:
    return float(res["measured"]["step_time_s"])


def errors() -> dict[str, float]:
    return {r["id"]: estimated_step_s(r) / measured_step_s(r) - 1.0 for r in step_cases()}


if __name__ == "__main__":
    errs = errors()
    for r in step_cases():
        print(f"{r['id']:36s} {measured_step_s(r):8.4f} {estimated_step_s(r):8.4f} {100 * errs[r['id']]:+6.1f}%")
    print("median |error|", round(100 * statistics.median(abs(e) for e in errs.values()), 1))
