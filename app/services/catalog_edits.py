"""Custom catalog entries and sales overrides, validated against the catalog's own models."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from app.catalog_kinds import Kind, source_items
from app.core.catalog_cache import entry_model
from app.errors import Conflict, NotFound, field_error
from app.models import CatalogEntry
from app.repositories.catalog import add_custom, apply_override, get_entry
from app.schemas.catalog import OverridePatch

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["create_custom_entry", "find_entry", "mentioned_fields", "override_entry"]


def mentioned_fields(cls: type[BaseModel], message: str) -> list[str]:
    """The fields of ``cls`` that a model-level (cross-field) error message names, e.g. ``price_usd`` and
    ``price_date`` in "price_usd needs price_date"."""
    return [name for name in cls.model_fields if re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", message)]


def _validate(cls: type[BaseModel], data: dict[str, Any], where: Any) -> BaseModel:
    """Validate ``data``; errors are raised with body locations chosen by ``where(loc, message)``, which returns
    one location per field to name (a cross-field rule has no location of its own: ``where`` names the fields)."""
    try:  # strict JSON types, as everywhere in the API (app.api.strict): "8" is not an integer
        return cls.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise RequestValidationError(
            [{**e, "loc": ("body", *loc)} for e in exc.errors(include_url=False)
             for loc in where(tuple(e["loc"]), mentioned_fields(cls, str(e.get("msg", ""))))]
        ) from None


def _create_loc(loc: tuple[Any, ...], mentioned: list[str]) -> list[tuple[Any, ...]]:
    """A posted entry: its own location; for a cross-field rule, the fields the message names."""
    if loc:
        return [loc]
    return [(name,) for name in mentioned] or [()]


def _check_gpu_ref(kind: Kind, data: dict[str, Any], catalog: Catalog, loc: tuple[str, ...]) -> None:
    if kind == "gpu" or "gpu_id" not in data:
        return
    if str(data["gpu_id"]) not in source_items(catalog, "gpu"):
        raise RequestValidationError(
            [{"loc": ("body", *loc), "msg": f"no GPU {data['gpu_id']!r} in the catalog", "type": "unknown_gpu"}]
        )


def find_entry(*, session: Session, kind: Kind, entry_id: str) -> CatalogEntry:
    row = get_entry(session=session, kind=kind, entry_id=entry_id)
    if row is None:
        raise NotFound(f"no {kind.replace('_', ' ')} {entry_id!r} in the catalog")
    return row


def create_custom_entry(
    *, session: Session, source: Any, catalog: Catalog, kind: Kind, body: dict[str, Any], actor: str
) -> CatalogEntry:
    data = _validate(entry_model(source, kind), body, _create_loc).model_dump(mode="json")
    _check_gpu_ref(kind, data, catalog, ("gpu_id",))
    if get_entry(session=session, kind=kind, entry_id=str(data["id"])) is not None:
        raise Conflict(f"{kind.replace('_', ' ')} {data['id']!r} already exists; PATCH it to override fields",
                       [field_error(["id"], "already exists", "conflict")])
    return add_custom(session=session, kind=kind, data=data, actor=actor)


def _patch_loc(set_fields: dict[str, Any], unset: Sequence[str]) -> Any:
    """A patch: errors of set fields are under ``set``, of unset fields at ``unset``. A cross-field rule names
    the patched fields its message mentions, else every patched field (the patch is what broke the rule)."""

    def one(loc: tuple[Any, ...]) -> tuple[Any, ...]:
        if loc and loc[0] in set_fields:
            return ("set", *loc)
        return ("unset",) if loc and loc[0] in unset else loc

    def where(loc: tuple[Any, ...], mentioned: list[str]) -> list[tuple[Any, ...]]:
        if loc:
            return [one(loc)]
        named = [n for n in mentioned if n in set_fields or n in unset] or [*set_fields, *unset]
        return list(dict.fromkeys(one((n,)) for n in named)) or [("set",)]

    return where


def override_entry(
    *, session: Session, source: Any, catalog: Catalog, kind: Kind, entry_id: str, patch: OverridePatch, actor: str
) -> CatalogEntry:
    row = find_entry(session=session, kind=kind, entry_id=entry_id)
    not_overridden = [f for f in patch.unset if f not in row.overrides]
    if not_overridden:
        raise RequestValidationError(
            [{"loc": ("body", "unset"), "msg": f"not overridden: {', '.join(not_overridden)}", "type": "value_error"}]
        )
    kept = {k: v for k, v in row.overrides.items() if k not in patch.unset}
    merged = {**row.data, **kept, **patch.set}
    model = _validate(entry_model(source, kind), merged, _patch_loc(patch.set, patch.unset))
    normalized = model.model_dump(mode="json")
    _check_gpu_ref(kind, normalized, catalog, ("set", "gpu_id"))
    set_fields = {k: normalized[k] for k in patch.set}
    apply_override(entry=row, set_fields=set_fields, unset=patch.unset, actor=actor, reason=patch.reason)
    return row
