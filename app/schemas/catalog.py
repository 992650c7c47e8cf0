"""Catalog entries as the API shows them: the effective value, the seeded source data and the overrides."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from app.catalog_kinds import Kind
from app.models import CatalogAudit, CatalogEntry

__all__ = ["AuditOut", "CatalogEntryDetail", "CatalogEntryOut", "CatalogList", "ModelPreset", "OverridePatch"]


class AuditOut(BaseModel):
    action: str = Field(description="seed | reseed | create | override")
    changes: dict[str, Any]
    previous: dict[str, Any] | None
    reason: str | None
    actor: str = Field(description="the API key name, or catalog:<version> for seeding")
    created_at: datetime

    @classmethod
    def of(cls, row: CatalogAudit) -> AuditOut:
        return cls(action=row.action, changes=row.changes, previous=row.previous, reason=row.reason,
                   actor=row.actor, created_at=row.created_at)


class CatalogEntryOut(BaseModel):
    id: str
    kind: Kind
    origin: Literal["seeded", "custom"]
    effective: dict[str, Any] = Field(description="what estimates use: the data updated by the overrides")
    seeded: dict[str, Any] | None = Field(description="the source catalog's data; null for a custom entry")
    custom: dict[str, Any] | None = Field(description="the posted data of a custom entry; null when seeded")
    overrides: dict[str, Any] = Field(description="fields overridden by sales (PATCH)")
    catalog_version: str | None = Field(description="catalog version that seeded this entry")
    updated_at: datetime
    updated_by: str

    @classmethod
    def of(cls, row: CatalogEntry) -> CatalogEntryOut:
        seeded = row.origin == "seeded"
        return cls(id=row.entry_id, kind=row.kind, origin=row.origin, effective=row.effective,
                   seeded=row.data if seeded else None, custom=None if seeded else row.data,
                   overrides=row.overrides, catalog_version=row.catalog_version, updated_at=row.updated_at,
                   updated_by=row.updated_by)


class CatalogEntryDetail(CatalogEntryOut):
    history: list[AuditOut] = Field(description="every change, oldest first")

    @classmethod
    def of(cls, row: CatalogEntry) -> CatalogEntryDetail:
        base = CatalogEntryOut.of(row).model_dump()
        return cls(**base, history=[AuditOut.of(a) for a in row.audit])


class CatalogList(BaseModel):
    catalog_version: str = Field(description="version of the effective catalog (+db.<hash> with overrides)")
    items: list[CatalogEntryOut]


class ModelPreset(BaseModel):
    id: str
    name: str
    published_params: int | None
    source: str


class OverridePatch(BaseModel):
    """Set and/or unset override fields of one entry. The seeded data is never changed; ``unset`` returns a
    field to its seeded (or posted) value."""

    model_config = ConfigDict(extra="forbid")

    set: dict[str, Any] = Field(default_factory=dict, description="fields to override, e.g. {'price_usd': 250000}")
    unset: list[str] = Field(default_factory=list, max_length=100, validate_default=True,
                             description="override fields to drop")
    reason: str = Field(min_length=1, max_length=500, description="why, for the audit trail")

    @field_validator("set")
    @classmethod
    def _not_the_id(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "id" in value:
            raise ValueError("the id of an entry cannot be overridden")
        return value

    @field_validator("unset")
    @classmethod
    def _something_and_not_the_id(cls, value: list[str], info: ValidationInfo) -> list[str]:
        if "id" in value:
            raise ValueError("the id of an entry cannot be overridden")
        if not value and not info.data.get("set") and "set" in info.data:
            raise ValueError("give at least one field in set or unset")
        return value
