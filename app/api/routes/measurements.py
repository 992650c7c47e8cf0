"""``/api/v1/measurements``: measured records (``capplan check --trace`` / ``--run``, calibration cases) beside
capplan's estimate of the same request. Posting needs an API key, as quotes do; a stored record is never
altered (no update or delete route)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from app.api.routes.saved_routes import ItemId
from app.deps import CatalogDep, SessionDep, WriterDep
from app.repositories.measurements import list_measurements
from app.repositories.saved import MAX_OFFSET
from app.schemas.measurement import Kind, MeasurementCreate, MeasurementList, MeasurementOut, MeasurementSummary
from app.schemas.problem import problem_responses
from app.services.measurements import find_measurement, store_measurement

router = APIRouter(prefix="/measurements", tags=["measurements"])


@router.post("", status_code=status.HTTP_201_CREATED, response_model=MeasurementOut, name="create_measurement",
             responses=problem_responses(422),
             summary="Store a measurement (the request must be one capplan can estimate)")
def create_measurement(body: MeasurementCreate, session: SessionDep, catalog: CatalogDep,
                       writer: WriterDep) -> MeasurementOut:
    row = store_measurement(session=session, catalog=catalog, body=body, actor=writer.name)
    session.commit()
    return MeasurementOut.of(row)


@router.get("", response_model=MeasurementList, name="list_measurements",
            summary="List measurements, newest first (paged; by kind or by request key)")
def list_all(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0,
    kind: Kind | None = None,
    request_key: Annotated[str | None, Query(pattern=r"^[0-9a-f]{64}$",
                                             description="sha256 of a request's canonical JSON")] = None,
) -> MeasurementList:
    rows, total = list_measurements(session=session, kind=kind, request_key=request_key, limit=limit,
                                    offset=offset)
    return MeasurementList(items=[MeasurementSummary.of(r) for r in rows], total=total, limit=limit, offset=offset)


@router.get("/{measurement_id:int}", response_model=MeasurementOut, name="get_measurement",
            responses=problem_responses(404), summary="One measurement")
def get_one(measurement_id: ItemId, session: SessionDep) -> MeasurementOut:
    return MeasurementOut.of(find_measurement(session=session, measurement_id=measurement_id))
