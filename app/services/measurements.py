"""Storing measurements: the request must be one capplan can estimate (a 422 naming ``request.<field>``
otherwise), so that every stored record can be shown beside its estimate; and seeding the records capplan ships
(``app/data/measurements/*.json``: our own ``capplan check --run`` records from a real GPU), which the app does
at start-up beside the hardware catalog (:func:`app.core.startup.prepare_database`)."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.errors import NotFound
from app.models import Measurement
from app.repositories.measurements import add_measurement, get_measurement, stored_record_keys
from app.schemas.measurement import MeasurementCreate, record_key, request_key
from app.services.estimates import prefix_error
from estimator import EstimatorError, estimate

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = [
    "SHIPPED_DIR",
    "SHIPPED_SEED_ACTOR",
    "MeasurementSeedReport",
    "find_measurement",
    "seed_measurements",
    "shipped_measurements",
    "store_measurement",
]

log = logging.getLogger("capplan.measurements")

#: the measurement records shipped with capplan (package data): each file a JSON list of records, as
#: ``capplan check --json`` writes them (``check_run_h100.json``: tests/data/check_run_h100/call2, docs/check.md)
SHIPPED_DIR = Path(__file__).resolve().parents[1] / "data" / "measurements"
#: ``created_by`` of the records seeded from :data:`SHIPPED_DIR`
SHIPPED_SEED_ACTOR = "capplan-seed"


@dataclass
class MeasurementSeedReport:
    """What one seeding did: records added, records already stored (the same content, by whoever stored it),
    and those left out because the catalog cannot estimate their request (each with why)."""

    added: int = 0
    unchanged: int = 0
    left_out: list[str] = field(default_factory=list)
    ids: list[int] = field(default_factory=list)


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


@cache
def _shipped(folder: Path) -> tuple[tuple[str, int, MeasurementCreate], ...]:
    out = []
    for path in sorted(folder.glob("*.json")):
        for i, rec in enumerate(json.loads(path.read_text(encoding="utf-8"))):
            try:
                out.append((path.name, i, MeasurementCreate.model_validate(rec)))
            except ValidationError as exc:
                raise ValueError(f"shipped measurement {path.name} record {i}: {exc}") from exc
    return tuple(out)


def shipped_measurements(folder: Path = SHIPPED_DIR) -> list[MeasurementCreate]:
    """The records shipped with capplan, validated as the API validates a posted one (read once per process;
    a bad shipped record fails loudly: a ``ValueError`` naming its file and index)."""
    return [body.model_copy(deep=True) for _name, _i, body in _shipped(folder)]


def seed_measurements(*, session: Session, catalog: Catalog, bodies: Sequence[MeasurementCreate],
                      actor: str = SHIPPED_SEED_ACTOR) -> MeasurementSeedReport:
    """Store each record unless one with the same content (:func:`~app.schemas.measurement.record_key`) is
    stored already, by anyone: seeding twice adds nothing, and a stored measurement is never altered or
    deleted (a user's record of the same request with other figures stays beside ours). A record whose request
    this catalog cannot estimate is left out, named (a stored record must be showable beside its estimate)."""
    report = MeasurementSeedReport()
    stored = stored_record_keys(session=session, request_keys={request_key(b.request) for b in bodies})
    for i, body in enumerate(bodies):
        key = record_key(body.model_dump(mode="json"))
        if key in stored:
            report.unchanged += 1
            continue
        try:
            row = store_measurement(session=session, catalog=catalog, body=body, actor=actor)
        except EstimatorError as exc:
            report.left_out.append(f"record {i} ({body.label or body.gpu_name or body.kind}): "
                                   f"{exc.field}: {exc.message}")
            continue
        stored.add(key)
        report.added += 1
        report.ids.append(row.id)
    return report
