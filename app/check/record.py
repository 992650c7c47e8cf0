"""The measurement record (the body of ``POST /api/v1/measurements``) and what fills it: capplan's estimate of
the figures a check measures, the software versions, and the loader of our own calibration measurements
(``tests/data/calibration_h200.json``, made by ``benchmarks/calibration/measure.py``) into the same records."""

from __future__ import annotations

import importlib.metadata
import json
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.schemas.measurement import MeasurementCreate
from estimator import ESTIMATOR_VERSION, EstimateRequest, EstimateResponse, estimate

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["PARTS", "calibration_records", "estimated_figures", "measured_figures", "record", "versions"]

#: the estimate's parts of the peak, in the order checks print them (``MemoryBreakdown``'s fields)
PARTS = ("parameters", "gradients", "optimizer_states", "activations", "logits", "temporary", "overhead")


def estimated_figures(result: EstimateResponse) -> dict[str, Any]:
    """capplan's side of a record: the busiest GPU's peak allocated (``torch.cuda.max_memory_allocated()``),
    what nvidia-smi would show, step time, tokens/s and the peak's parts (estimator's ``MemoryBreakdown``).

    A paged optimizer's states live in CUDA managed memory (``memory.managed_bytes``): on the GPU, so in what
    nvidia-smi shows, but outside the caching allocator, so not in ``max_memory_allocated()`` nor in its
    optimizer-state part (H100, Llama 3.2 1B with bitsandbytes' PagedAdamW32bit: allocated 10.27 GiB, NVML 21.99
    GiB; compared with the whole estimate the run read +85 %)."""
    mem, time = result.memory, result.time
    parts = {p: getattr(mem.breakdown_bytes, p) for p in PARTS}
    parts["optimizer_states"] = max(0, parts["optimizer_states"] - mem.managed_bytes)
    out: dict[str, Any] = {
        "peak_allocated_bytes": mem.peak_allocated_bytes - mem.managed_bytes,
        "nvml_used_bytes": mem.total_bytes,
        "parts_bytes": parts,
    }
    if time is not None:
        out.update(step_time_s=time.step_time_s, tokens_per_s=time.tokens_per_s)
    return out


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def versions(torch_module: Any = None, driver: str | None = None) -> dict[str, str | None]:
    """The versions a record carries: capplan's estimator, Python, torch, transformers, peft (installed
    distributions), torch's CUDA build (``torch.version.cuda``) and the NVIDIA driver (when known)."""
    cuda = getattr(getattr(torch_module, "version", None), "cuda", None) if torch_module is not None else None
    return {"capplan": ESTIMATOR_VERSION, "python": platform.python_version(), "torch": _installed("torch"),
            "transformers": _installed("transformers"), "peft": _installed("peft"), "cuda": cuda, "driver": driver}


def record(*, kind: str, request: EstimateRequest, measured: dict[str, Any], estimated: dict[str, Any],
           versions_: dict[str, Any], gpu_name: str | None = None, label: str | None = None,
           notes: str | None = None) -> dict[str, Any]:
    """One record as JSON, validated by the same model the API validates it with (so a record this writes is
    one the API stores)."""
    body = MeasurementCreate.model_validate({
        "kind": kind, "request": request.model_dump(mode="json"), "label": label, "gpu_name": gpu_name,
        "versions": versions_, "measured": measured, "estimated": estimated, "notes": notes})
    return body.model_dump(mode="json", exclude_none=False)


def measured_figures(raw: dict[str, Any], *, memory_only: bool) -> dict[str, Any]:
    """The measured side of a record from a raw measurement in ``benchmarks/calibration/measure.py``'s format
    (what ``capplan check --run`` writes too): peak allocated and reserved, NVML used, and (unless
    ``memory_only``: one rank of several on one GPU through the fake process group, whose step has no real
    collectives) the median step time and tokens/s. One function for both, so a run and a calibration case of
    the same request give the same figures for the same measurement."""
    out = {k: raw[k] for k in ("peak_allocated_bytes", "peak_reserved_bytes", "nvml_used_bytes")
           if raw.get(k) is not None}
    if not memory_only:
        out.update({k: raw[k] for k in ("step_time_s", "tokens_per_s") if raw.get(k)})
    return out


def _call_versions(provenance: dict[str, Any], call: int | None) -> dict[str, Any]:
    calls = {c["call"]: c for c in provenance.get("device_calls", [])}
    c = calls.get(call, provenance)
    return {"capplan": None, "python": c.get("python"), "torch": c.get("torch"),
            "transformers": c.get("transformers"), "peft": c.get("peft"), "cuda": c.get("torch_cuda") or
            c.get("cuda"), "driver": provenance.get("driver")}


def calibration_records(path: Path, catalog: Catalog) -> tuple[list[dict[str, Any]], list[str]]:
    """Every measured case of a calibration file (``tests/data/calibration_h200.json``) as a record of kind
    ``calibration``, with today's estimate beside it; and the ids left out, each with why (out of memory on the
    GPU: no peak to compare). Cases run on one GPU through the fake process group (``run.world_size_fake``)
    keep their memory only: their step time has no real collectives in it."""
    data = json.loads(path.read_text())
    provenance = data["provenance"]
    out, skipped = [], []
    for case in data["cases"]:
        m = case.get("measured") or {}
        if case.get("status") != "ok" or m.get("oom"):
            skipped.append(f"{case['id']}: {case.get('status')} (out of memory on the GPU)")
            continue
        request = EstimateRequest.model_validate(case["request"])
        fake = (case.get("run") or {}).get("world_size_fake")
        measured = measured_figures(m, memory_only=bool(fake))
        estimated = estimated_figures(estimate(request, catalog))
        if fake:
            estimated = {k: v for k, v in estimated.items() if k not in ("step_time_s", "tokens_per_s")}
        notes = (f"{path.name} case {case['id']}, device call {case.get('device_call')}"
                 + (f"; one rank of {fake} on one GPU through the fake process group (memory only)" if fake else ""))
        out.append(record(kind="calibration", request=request, measured=measured, estimated=estimated,
                          versions_=_call_versions(provenance, case.get("device_call")),
                          gpu_name=provenance.get("gpu_name"), label=case["id"], notes=notes))
    return out, skipped
