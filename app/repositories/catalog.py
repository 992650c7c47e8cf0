"""Catalog rows: seeding from the source catalog, custom entries and audited overrides.

Seeding never overwrites silently: a new entry is added (audit ``seed``); a changed seeded entry has its
``data`` replaced and the previous data kept in the audit (``reseed``), while sales overrides stay as they
are; an id held by a custom entry is left alone and reported as a conflict.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from app.catalog_kinds import KINDS, Kind, source_items
from app.models import CatalogAudit, CatalogEntry, CatalogSeed, utcnow

if TYPE_CHECKING:
    from app.services.measurements import MeasurementSeedReport
    from hardware_catalog import Catalog

__all__ = [
    "SeedReport",
    "add_custom",
    "apply_override",
    "catalog_fingerprint",
    "get_entry",
    "list_entries",
    "seed_catalog",
]

log = logging.getLogger("capplan.catalog")


@dataclass
class SeedReport:
    version: str
    added: int = 0
    changed: int = 0
    unchanged: int = 0
    conflicts: list[str] = field(default_factory=list)
    #: the shipped measurement records seeded in the same ``prepare_database`` call (``None``: not seeded)
    measurements: MeasurementSeedReport | None = None


def get_entry(*, session: Session, kind: Kind, entry_id: str) -> CatalogEntry | None:
    return session.scalar(
        select(CatalogEntry)
        .where(CatalogEntry.kind == kind, CatalogEntry.entry_id == entry_id)
        .options(selectinload(CatalogEntry.audit))
    )


def list_entries(*, session: Session, kind: Kind | None = None) -> list[CatalogEntry]:
    query = select(CatalogEntry).order_by(CatalogEntry.kind, CatalogEntry.entry_id)
    if kind is not None:
        query = query.where(CatalogEntry.kind == kind)
    return list(session.scalars(query))


def catalog_fingerprint(*, session: Session) -> tuple[int, str]:
    """Changes whenever any row changes: (row count, latest update)."""
    count, latest = session.execute(select(func.count(CatalogEntry.id), func.max(CatalogEntry.updated_at))).one()
    return int(count), str(latest)


def _audit(entry: CatalogEntry, action: str, actor: str, changes: dict[str, Any],
           previous: dict[str, Any] | None = None, reason: str | None = None) -> None:
    entry.audit.append(
        CatalogAudit(action=action, changes=changes, previous=previous, reason=reason, actor=actor)
    )


def _seed_one(session: Session, report: SeedReport, kind: Kind, entry_id: str, data: dict[str, Any]) -> None:
    actor = f"catalog:{report.version}"
    row = get_entry(session=session, kind=kind, entry_id=entry_id)
    if row is None:
        row = CatalogEntry(kind=kind, entry_id=entry_id, origin="seeded", data=data, overrides={},
                           catalog_version=report.version, created_by=actor, updated_by=actor)
        session.add(row)
        _audit(row, "seed", actor, data)
        report.added += 1
    elif row.origin == "custom":
        report.conflicts.append(f"{kind}:{entry_id}")
        log.warning("catalog %s has %s %r, but a custom entry holds that id; kept the custom entry",
                    report.version, kind, entry_id)
    elif row.data != data:
        _audit(row, "reseed", actor, data, previous=row.data)
        log.info("catalog %s changed %s %r (overrides kept: %s)", report.version, kind, entry_id,
                 sorted(row.overrides) or "none")
        row.data, row.catalog_version, row.updated_at, row.updated_by = data, report.version, utcnow(), actor
        report.changed += 1
    else:
        row.catalog_version = report.version
        report.unchanged += 1


def seed_catalog(*, session: Session, catalog: Catalog) -> SeedReport:
    """Bring the rows up to date with ``catalog`` (see the module docstring); records a ``catalog_seeds`` row
    when anything was added or changed."""
    report = SeedReport(version=str(catalog.version))
    for kind in KINDS:
        for entry_id, item in source_items(catalog, kind).items():
            _seed_one(session, report, kind, entry_id, item.model_dump(mode="json"))
    if report.added or report.changed or report.conflicts:
        session.add(CatalogSeed(catalog_version=report.version, added=report.added, changed=report.changed,
                                unchanged=report.unchanged, conflicts=report.conflicts))
    session.flush()
    return report


def add_custom(*, session: Session, kind: Kind, data: dict[str, Any], actor: str,
               reason: str | None = None) -> CatalogEntry:
    row = CatalogEntry(kind=kind, entry_id=str(data["id"]), origin="custom", data=data, overrides={},
                       catalog_version=None, created_by=actor, updated_by=actor)
    session.add(row)
    _audit(row, "create", actor, data, reason=reason)
    session.flush()
    return row


def apply_override(*, entry: CatalogEntry, set_fields: dict[str, Any], unset: Sequence[str], actor: str,
                   reason: str) -> None:
    """Set and unset override fields; the previous overrides go to the audit."""
    previous = dict(entry.overrides)
    overrides = {k: v for k, v in previous.items() if k not in unset}
    overrides.update(set_fields)
    _audit(entry, "override", actor, {"set": set_fields, "unset": list(unset)}, previous=previous, reason=reason)
    entry.overrides, entry.updated_at, entry.updated_by = overrides, utcnow(), actor
