"""The effective hardware catalog: seeded data updated by sales overrides, plus custom entries.

Estimates, comparisons and quotes run against this catalog, so an override or a custom server takes effect
at once. Its ``version`` is the source catalog's version, suffixed ``+db.<hash>`` when overrides or custom
entries change anything, so a saved quote records exactly which data it used.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from app.catalog_kinds import KINDS, Kind, source_items
from app.models import CatalogEntry
from app.repositories.catalog import catalog_fingerprint, list_entries

__all__ = ["CatalogCache", "build_effective", "entry_model"]

log = logging.getLogger("capplan.catalog")

_CLASS_NAMES: dict[Kind, str] = {"gpu": "Gpu", "server": "Server", "cloud_offer": "CloudOffer"}


def entry_model(source: Any, kind: Kind) -> type[BaseModel]:
    """The pydantic model of ``kind``: the type of the source catalog's entries, else the catalog package's."""
    items = list(source_items(source, kind).values())
    if items:
        return type(items[0])
    import hardware_catalog

    cls = getattr(hardware_catalog, _CLASS_NAMES[kind], None)
    if isinstance(cls, type) and issubclass(cls, BaseModel):
        return cls
    raise LookupError(f"cannot tell the model of {kind} entries")


def _validated(cls: type[BaseModel], row: CatalogEntry) -> BaseModel | None:
    try:
        return cls.model_validate(row.effective)
    except ValidationError:
        log.warning("%s %r: overrides no longer valid; using its %s data", row.kind, row.entry_id, row.origin)
    try:
        return cls.model_validate(row.data)
    except ValidationError:
        log.warning("%s %r: no longer valid; left out of the effective catalog", row.kind, row.entry_id)
        return None


def _version(source: Any, rows: list[CatalogEntry]) -> str:
    changed = sorted(
        (r.kind, r.entry_id, r.effective) for r in rows if r.overrides or r.origin == "custom"
    )
    if not changed:
        return str(source.version)
    digest = hashlib.sha256(json.dumps(changed, sort_keys=True, default=str).encode()).hexdigest()[:10]
    return f"{source.version}+db.{digest}"


def _rebuild(source: Any, fields: dict[str, Any]) -> Any:
    if isinstance(source, BaseModel):
        return source.model_copy(update=fields)
    return dataclasses.replace(source, **fields)


def build_effective(source: Any, rows: list[CatalogEntry]) -> Any:
    """A catalog of the same type as ``source`` holding the effective value of every row."""
    fields: dict[str, Any] = {}
    for kind, attr in KINDS.items():
        kind_rows = [r for r in rows if r.kind == kind]
        cls = entry_model(source, kind) if kind_rows else None
        items = {r.entry_id: m for r in kind_rows if cls and (m := _validated(cls, r)) is not None}
        original = getattr(source, attr, None)
        fields[attr] = items if isinstance(original, dict) else list(items.values())
    fields["version"] = _version(source, rows)
    return _rebuild(source, fields)


class CatalogCache:
    """Rebuilds the effective catalog only when the rows changed (checked with one cheap query)."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self._key: tuple[int, str] | None = None
        self._catalog: Any = None

    def get(self, session: Session) -> Any:
        key = catalog_fingerprint(session=session)
        if key != self._key or self._catalog is None:
            rows = list_entries(session=session)
            self._catalog = build_effective(self.source, rows) if rows else self.source
            self._key = key
        return self._catalog
