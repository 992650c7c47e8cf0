"""Compare the estimator with the H200 measurements in ``tests/data/calibration_h200.json``.

Shared by the accuracy tests (``tests/test_calibration_memory.py``) and the report writer
(``benchmarks/calibration/accuracy_report.py``), so the table in ``docs/accuracy.md`` and the tests use the
same numbers.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from estimator import EstimateRequest, estimate

ROOT = Path(__file__).resolve().parents[2]
CALIBRATION_FILE = ROOT / "tests" / "data" / "calibration_h200.json"
GIB = 1 << 30


@dataclass(frozen=True)
class MemoryRow:
    case_id: str
    klass: str  # full | lora | sharded | tensor_parallel
    oom: bool
    measured_bytes: int | None
    estimated_bytes: int
    estimated_total_bytes: int
    capacity_bytes: int
    fits: bool
    family: str = ""

    @property
    def error(self) -> float | None:
        if self.measured_bytes is None:
            return None
        return (self.estimated_bytes - self.measured_bytes) / self.measured_bytes


def load_cases(path: Path = CALIBRATION_FILE) -> list[dict[str, Any]]:
    data = json.loads(path.read_text())
    return [c for c in data["cases"] if c.get("status", "ok") in ("ok", "oom")]


def provenance(path: Path = CALIBRATION_FILE) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())["provenance"]
    return data


def memory_class(req: EstimateRequest) -> str:
    """The error-bar class of a measured case (``estimator.training.accuracy``): tensor parallelism (alone or under
    FSDP2) first, then sharded, LoRA/QLoRA, full."""
    if req.parallelism.tp > 1:
        return "tensor_parallel"
    if req.parallelism.normalized_sharding != "none":
        return "sharded"
    return "lora" if req.training.method != "full" else "full"


def memory_row(case: dict[str, Any]) -> MemoryRow:
    req = EstimateRequest.model_validate(case["request"])
    est = estimate(req).memory
    measured = case["measured"]
    oom = bool(measured.get("oom"))
    peak = None if oom else int(measured["peak_allocated_bytes"])
    return MemoryRow(case["id"], memory_class(req), oom, peak, est.peak_allocated_bytes, est.total_bytes,
                     est.capacity_bytes, est.fits, family(case))


def memory_rows(path: Path = CALIBRATION_FILE) -> list[MemoryRow]:
    return [memory_row(c) for c in load_cases(path)]


# Tensor parallelism (DTensor), 2-D FSDP2 x TP and ZeRO-1 (DDP + ZeroRedundancyOptimizer), measured by
# ``benchmarks/calibration/measure_tp.py`` (memory only, no timed steps): kept apart from CALIBRATION_FILE,
# whose cases also carry step times.
PARALLEL_RAW = sorted((ROOT / "tests" / "data" / "calibration_h200_raw").glob("call*_tp.jsonl"))


def load_parallel_cases(paths: list[Path] | None = None) -> list[dict[str, Any]]:
    out = []
    for path in PARALLEL_RAW if paths is None else paths:
        for line in path.read_text().splitlines():
            case = json.loads(line) if line.strip() else {}
            if case.get("status") in ("ok", "oom"):
                out.append(case)
    return out


def parallel_rows(paths: list[Path] | None = None) -> list[MemoryRow]:
    return [memory_row(c) for c in load_parallel_cases(paths)]


# peft LoRA / QLoRA without activation checkpointing (lora_dropout, enable_input_require_grads, bf16-true),
# measured by ``measure.py`` in device calls 7 and 8 (memory only, no timed steps): each result line names its
# case id, whose request is in ``cases.py``.
LORA_RAW = sorted((ROOT / "tests" / "data" / "calibration_h200_raw").glob("call*_lora.jsonl"))


def load_lora_cases(paths: list[Path] | None = None) -> list[dict[str, Any]]:
    from benchmarks.calibration import cases

    out = []
    for path in LORA_RAW if paths is None else paths:
        for line in path.read_text().splitlines():
            case = json.loads(line) if line.strip() else {}
            if case.get("status") in ("ok", "oom"):
                run = cases.by_id(case["id"])
                out.append({**case, "request": run["request"], "call": run["call"], "model_key": run["model_key"]})
    return out


def lora_rows(paths: list[Path] | None = None) -> list[MemoryRow]:
    return [memory_row(c) for c in load_lora_cases(paths)]


def family(case: dict[str, Any]) -> str:
    """The model family of a measured case, for leave-one-family-out: the model's name without its size
    ("Llama 3.1 8B" and "Llama 3.2 1B" -> "Llama 3"; "Qwen2.5 14B" -> "Qwen2.5"; "Llama 2 13B" -> "Llama 2")."""
    name = str(case["request"]["model"]["name"])
    for prefix in ("Llama 3", "Llama 2", "Qwen2.5", "Qwen3", "Mistral", "Mixtral", "Gemma 2", "Phi-3"):
        if name.startswith(prefix):
            return prefix
    return name.split()[0]


def p90(values: list[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))
    return ordered[index]


def error_summary(rows: list[MemoryRow]) -> dict[str, float]:
    errors = [abs(r.error) for r in rows if r.error is not None]
    return {"count": float(len(errors)), "median_abs_pct": 100 * statistics.median(errors),
            "p90_abs_pct": 100 * p90(errors), "max_abs_pct": 100 * max(errors)}
