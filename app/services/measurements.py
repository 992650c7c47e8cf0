"""Storing measurements: the request must be one capplan can estimate (a 422 naming ``request.<field>``
otherwise), so that every stored record can be shown beside its estimate."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.orm import Session

from app.errors import NotFound
from app.models import Measurement
from app.repositories.measurements import add_measurement, get_measurement
from app.schemas.measurement import MeasurementCreate, request_key
from app.services.estimates import prefix_error
from estimator import EstimatorError, estimate

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["find_measurement", "store_measurement"]


def store_measurement(*, session: Session, catalog: Catalog, body: MeasurementCreate, actor: str) -> Measurement:
    try:
        result = estimate(body.request, catalog)
    except EstimatorError as exc:
        raise prefix_error(exc, "request") from exc
    return add_measurement(
        session=session, actor=actor, kind=body.kind, label=body.label,
        request=body.request.model_dump(mode="json"), request_key=request_key(body.request),
        gpu_name=body.gpu_name, versions=body.versions.model_dump(mode="json"),
        measured=body.measured.model_dump(mode="json"), estimated=body.estimated.model_dump(mode="json"),
        notes=body.notes, estimator_version=result.estimator_version)


def find_measurement(*, session: Session, measurement_id: int) -> Measurement:
    row = get_measurement(session=session, measurement_id=measurement_id)
    if row is None:
        raise NotFound(f"no measurement {measurement_id}")
    return row
