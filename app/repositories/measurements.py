"""Measurements (``measurements``): add one, read one, list them, find those of a request, the content keys of
those stored for some requests (seeding). Never altered."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.models import Measurement
from app.schemas.measurement import RECORD_FIELDS, MeasurementCreate, record_key

__all__ = [
    "add_measurement",
    "get_measurement",
    "list_measurements",
    "measurements_of",
    "stored_content",
    "stored_record_keys",
]


def add_measurement(*, session: Session, actor: str, **fields: Any) -> Measurement:
    row = Measurement(created_by=actor, **fields)
    session.add(row)
    session.flush()
    return row


def get_measurement(*, session: Session, measurement_id: int) -> Measurement | None:
    return session.get(Measurement, measurement_id)


def list_measurements(*, session: Session, kind: str | None, request_key: str | None, limit: int,
                      offset: int) -> tuple[list[Measurement], int]:
    """Newest first, optionally of one kind or one request (its :func:`~app.schemas.measurement.request_key`)."""
    query = select(Measurement)
    if kind is not None:
        query = query.where(Measurement.kind == kind)
    if request_key is not None:
        query = query.where(Measurement.request_key == request_key)
    total = session.scalar(select(func.count()).select_from(query.subquery())) or 0
    rows = session.scalars(query.order_by(Measurement.id.desc()).limit(limit).offset(offset))
    return list(rows), total


def measurements_of(*, session: Session, request_key: str, limit: int = 5) -> list[Measurement]:
    """The newest ``limit`` measurements of one request (run before trace before calibration is the page's
    business, not the query's)."""
    return list(session.scalars(select(Measurement).where(Measurement.request_key == request_key)
                                .order_by(Measurement.id.desc()).limit(limit)))


def stored_content(row: Measurement) -> dict[str, Any]:
    """A stored row's record as today's schema reads it (``MeasurementCreate``, defaults filled in): a row stored
    before the schema gained a field with a default (``measured.mechanisms``, say) has the same content as the
    same record validated now. A row today's schema refuses keeps its content as stored."""
    raw = {name: getattr(row, name) for name in RECORD_FIELDS}
    try:
        return MeasurementCreate.model_validate(raw).model_dump(mode="json")
    except ValidationError:
        return raw


def stored_record_keys(*, session: Session, request_keys: Collection[str]) -> set[str]:
    """The :func:`~app.schemas.measurement.record_key` of every stored measurement of these requests (by whoever
    stored it; :func:`stored_content`), read through the indexed request key."""
    if not request_keys:
        return set()
    rows = session.scalars(select(Measurement).where(Measurement.request_key.in_(sorted(request_keys))))
    return {record_key(stored_content(row)) for row in rows}
