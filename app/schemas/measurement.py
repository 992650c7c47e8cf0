"""Measurements: what a check (``capplan check --trace`` / ``--run``) or a calibration run measured for one
estimate request, beside what capplan estimated for it (issue 31).

A measurement is a record, never altered after it is stored: there is no update or delete route. The request is
validated as an estimate request (defaults filled in); the estimate page matches a stored measurement to its
own request through :func:`request_key` of the two.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from estimator import EstimateRequest

if TYPE_CHECKING:  # for the annotations only: the schema imports without SQLAlchemy (python -m app.check)
    from app.models import Measurement

__all__ = [
    "MEASUREMENT_KINDS",
    "RECORD_FIELDS",
    "Figures",
    "Kind",
    "MeasurementCreate",
    "MeasurementList",
    "MeasurementOut",
    "MeasurementSummary",
    "Versions",
    "record_key",
    "request_key",
]

#: trace: ``capplan check --trace`` (fake tensors, CPU); run: ``capplan check --run`` (a real GPU);
#: calibration: the project's own calibration measurements (``tests/data/calibration_h200.json``)
MEASUREMENT_KINDS = ("trace", "run", "calibration")
Kind = Literal["trace", "run", "calibration"]

#: bytes on one GPU: up to 2**50 (1 PiB), far beyond any device, inside JSON's exact integers
Bytes = Annotated[int, Field(ge=0, le=2**50)]
#: a part's name: lower-case words joined by underscores (parameters, gradients, optimizer_states, ...)
PartName = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,39}$")]
Version = Annotated[str, StringConstraints(min_length=1, max_length=100, pattern=r"^[\x21-\x7e]+$")]
#: a short explanation of a part that the check cannot represent (a fused kernel, a TP plan, CPU offload)
Reason = Annotated[str, StringConstraints(min_length=1, max_length=500)]


def request_key(request: EstimateRequest) -> str:
    """sha256 of the request's canonical JSON (defaults filled in, keys sorted): equal requests, however they
    were written, have equal keys."""
    text = json.dumps(request.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


#: what a record holds as posted (defaults filled in): what :func:`record_key` covers; the stored row adds its id,
#: request key, estimator version, time and author
RECORD_FIELDS = ("kind", "request", "label", "gpu_name", "versions", "measured", "estimated", "notes")


def record_key(fields: Mapping[str, Any]) -> str:
    """sha256 of a record's content (:data:`RECORD_FIELDS`, as stored: defaults filled in, keys sorted), from a
    :class:`MeasurementCreate`'s ``model_dump(mode="json")`` or a stored row's columns alike: equal records have
    equal keys, whoever stored them. Seeding (``app.services.measurements.seed_measurements``) adds a record
    only when no stored one has its key."""
    content = {name: fields[name] for name in RECORD_FIELDS}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


class Versions(BaseModel):
    """The software the figures were measured with (``null``: not used or not known)."""

    model_config = ConfigDict(extra="forbid")

    capplan: Version | None = None
    python: Version | None = None
    torch: Version | None = None
    transformers: Version | None = None
    peft: Version | None = None
    cuda: Version | None = Field(default=None, description="the CUDA version torch was built with")
    driver: Version | None = Field(default=None, description="the NVIDIA driver version")


class Figures(BaseModel):
    """One side of a measurement, per GPU: its peak, its parts, its step time. Every figure is optional (a
    trace has no step time; a run has no parts); ``unrepresented`` names what this side cannot show, with why."""

    model_config = ConfigDict(extra="forbid")

    peak_allocated_bytes: Bytes | None = Field(
        default=None, description="torch.cuda.max_memory_allocated() (or its traced equivalent) on the busiest GPU")
    peak_reserved_bytes: Bytes | None = Field(default=None, description="torch.cuda.max_memory_reserved()")
    nvml_used_bytes: Bytes | None = Field(default=None, description="what nvidia-smi showed at the peak")
    step_time_s: float | None = Field(default=None, gt=0, le=1e7, allow_inf_nan=False)
    tokens_per_s: float | None = Field(default=None, gt=0, le=1e12, allow_inf_nan=False)
    parts_bytes: dict[PartName, Bytes] = Field(
        default_factory=dict, max_length=40,
        description="the peak's parts by name (parameters, gradients, optimizer_states, activations, ...)")
    unrepresented: dict[PartName, Reason] = Field(
        default_factory=dict, max_length=40, description="parts this side cannot represent, each with why")
    mechanisms: dict[PartName, Reason] = Field(
        default_factory=dict, max_length=20, description="issue 29's mechanisms this side applied: request field "
        "(loss_kernel, fused_kernels, activation_offloading, optimizer, allocator) -> what ran for it (library, "
        "class, version)")


class MeasurementCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Kind = Field(description="trace (fake tensors on a CPU), run (a real GPU) or calibration")
    request: EstimateRequest = Field(description="the estimate request that was measured")
    label: str | None = Field(default=None, min_length=1, max_length=200, description="e.g. a calibration case id")
    gpu_name: str | None = Field(default=None, min_length=1, max_length=200,
                                 description="torch.cuda.get_device_name(); null for a trace")
    versions: Versions = Field(default_factory=Versions)
    measured: Figures
    estimated: Figures = Field(description="capplan's estimate of the same figures, as the tool computed it")
    notes: str | None = Field(default=None, max_length=2000)


class MeasurementSummary(BaseModel):
    id: int
    kind: Kind
    label: str | None
    gpu_name: str | None
    model: str = Field(description="the request's model (preset id or name)")
    measured_peak_allocated_bytes: int | None
    estimated_peak_allocated_bytes: int | None
    created_at: datetime
    created_by: str

    @classmethod
    def of(cls, row: Measurement) -> MeasurementSummary:
        return cls(id=row.id, kind=row.kind, label=row.label, gpu_name=row.gpu_name,  # type: ignore[arg-type]
                   model=model_name(row.request),
                   measured_peak_allocated_bytes=row.measured.get("peak_allocated_bytes"),
                   estimated_peak_allocated_bytes=row.estimated.get("peak_allocated_bytes"),
                   created_at=row.created_at, created_by=row.created_by)


def model_name(request: dict[str, Any]) -> str:
    model = request.get("model")
    if isinstance(model, dict):
        return str(model.get("name") or "custom model")
    return str(model)


class MeasurementOut(MeasurementSummary):
    request: dict[str, Any] = Field(description="the estimate request, defaults filled in")
    request_key: str = Field(description="sha256 of the request's canonical JSON (what the estimate page matches)")
    versions: dict[str, Any]
    measured: dict[str, Any]
    estimated: dict[str, Any]
    notes: str | None
    estimator_version: str = Field(description="the capplan estimator version of the server that stored it")

    @classmethod
    def of(cls, row: Measurement) -> MeasurementOut:
        return cls(**MeasurementSummary.of(row).model_dump(), request=row.request, request_key=row.request_key,
                   versions=row.versions, measured=row.measured, estimated=row.estimated, notes=row.notes,
                   estimator_version=row.estimator_version)


class MeasurementList(BaseModel):
    items: list[MeasurementSummary]
    total: int
    limit: int
    offset: int
