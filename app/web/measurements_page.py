"""``/measurements`` (newest first, paged) and ``/measurements/{id}`` (one record: measured beside estimated,
part by part), and :func:`measured_beside`, the rows the estimate page shows as "measured on your hardware"
when a stored measurement has the page's request (issue 31)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from app.api.routes.saved_routes import ItemId
from app.core.i18n import N_
from app.deps import SessionDep
from app.models import Measurement
from app.repositories.measurements import list_measurements, measurements_of
from app.repositories.saved import MAX_OFFSET
from app.schemas.measurement import model_name, request_key
from app.services.measurements import find_measurement
from app.web.forms import request_to_query
from app.web.templating import render
from estimator import EstimateRequest, EstimateResponse

__all__ = ["MeasuredRow", "gpu_model", "measured_beside", "router"]

router = APIRouter()
PAGE_SIZE = 25
MAX_PAGE = MAX_OFFSET // PAGE_SIZE + 1

#: how each kind is named on the pages
KIND_LABELS = {"trace": N_("Trace (fake tensors, CPU)"), "run": N_("Run on a GPU"),
               "calibration": N_("Calibration run")}
#: the figures both sides may have, in the order the pages show them: (key, label, unit)
FIGURES = (
    ("peak_allocated_bytes", N_("Peak allocated"), "bytes"),
    ("peak_reserved_bytes", N_("Peak reserved"), "bytes"),
    ("nvml_used_bytes", N_("Used as nvidia-smi shows it"), "bytes"),
    ("step_time_s", N_("Step time"), "s"),
    ("tokens_per_s", N_("Tokens per second"), "tok/s"),
)


@dataclass(frozen=True)
class MeasuredRow:
    """One figure of a stored measurement beside the page's prediction of it."""

    label: str
    unit: str
    measured: float
    predicted: float | None

    @property
    def difference_pct(self) -> float | None:
        """(prediction - measured) / measured, in percent."""
        if self.predicted is None or not self.measured:
            return None
        return (self.predicted - self.measured) / self.measured * 100


def _predicted(result: EstimateResponse) -> dict[str, float | None]:
    time = result.time
    return {"peak_allocated_bytes": result.memory.peak_allocated_bytes, "peak_reserved_bytes": None,
            "nvml_used_bytes": result.memory.total_bytes,
            "step_time_s": time.step_time_s if time else None, "tokens_per_s": time.tokens_per_s if time else None}


#: a GPU's model in its name: H100, H200, A100, B200, GB200, L40S, MI300X (letters, then digits, then a letter or
#: none), as torch names the device ("NVIDIA H100 80GB HBM3") and as the catalog does ("NVIDIA H100 SXM5 80GB")
_GPU_MODEL = re.compile(r"\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b")
#: the figures a GPU's speed sets: not compared with a prediction for another GPU
_SPEED_UNITS = ("s", "tok/s")


def gpu_model(name: str | None) -> str | None:
    """The model of a GPU named ``name`` (``H100`` of "NVIDIA H100 80GB HBM3"), or ``None`` when the name shows
    none (then a measurement is taken to be of the estimate's GPU)."""
    found = _GPU_MODEL.search((name or "").upper())
    return found.group(1) if found else None


def measured_beside(session: Session, request: EstimateRequest, result: EstimateResponse,
                    gpu_name: str | None = None) -> list[tuple[Measurement, list[MeasuredRow], str | None]]:
    """The stored measurements of ``request`` (newest first), each with its figures beside this page's
    prediction: the prediction is today's estimate, not the one stored with the record. A measurement taken on
    another GPU model than the estimate's (``gpu_name``, the catalog's name; our H100 ``--run`` records of
    requests for the H200, say) keeps its step time and tokens/s without a prediction beside them (the
    difference would be the GPUs'), and comes with the estimate's GPU name (else ``None``)."""
    predicted = _predicted(result)
    model = gpu_model(gpu_name)
    out = []
    for row in measurements_of(session=session, request_key=request_key(request)):
        theirs = gpu_model(row.gpu_name)
        other = gpu_name if model is not None and theirs is not None and theirs != model else None
        figures = [MeasuredRow(label, unit, row.measured[key],
                               None if other is not None and unit in _SPEED_UNITS else predicted[key])
                   for key, label, unit in FIGURES if row.measured.get(key) is not None]
        out.append((row, figures, other))
    return out


@router.get("/measurements", response_class=HTMLResponse, name="measurements_page")
def measurements_page(request: Request, session: SessionDep,
                      page: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1) -> HTMLResponse:
    rows, total = list_measurements(session=session, kind=None, request_key=None, limit=PAGE_SIZE,
                                    offset=(page - 1) * PAGE_SIZE)
    items = [(row, model_name(row.request)) for row in rows]
    return render(request, "measurements.html", {
        "items": items, "total": total, "page": page, "pages": max(1, -(-total // PAGE_SIZE)),
        "kind_labels": KIND_LABELS, "active": "measurements"})


def _parts(row: Measurement) -> list[tuple[str, Any, Any, str | None]]:
    """Every part either side names: (part, measured bytes, estimated bytes, why one side cannot show it)."""
    measured, estimated = row.measured.get("parts_bytes", {}), row.estimated.get("parts_bytes", {})
    why = {**row.estimated.get("unrepresented", {}), **row.measured.get("unrepresented", {})}
    names = list(dict.fromkeys([*estimated, *measured, *why]))
    return [(n, measured.get(n), estimated.get(n), why.get(n)) for n in names]


@router.get("/measurements/{measurement_id:int}", response_class=HTMLResponse, name="measurement_page")
def measurement_page(request: Request, measurement_id: ItemId, session: SessionDep) -> HTMLResponse:
    row = find_measurement(session=session, measurement_id=measurement_id)
    figures = [(label, unit, row.measured.get(key), row.estimated.get(key)) for key, label, unit in FIGURES
               if row.measured.get(key) is not None or row.estimated.get(key) is not None]
    return render(request, "measurement.html", {
        "row": row, "model": model_name(row.request), "figures": figures, "parts": _parts(row),
        "kind_labels": KIND_LABELS, "active": "measurements",
        "estimate_url": "/estimate?" + request_to_query(EstimateRequest.model_validate(row.request))})
