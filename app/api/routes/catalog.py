"""``/api/v1/catalog``: GPUs, servers and cloud offers as seeded, with custom entries and audited overrides.

For each kind: ``GET`` list, ``GET /{id}`` (with its history), ``POST`` a custom entry, ``PATCH /{id}``
overrides. Writes need an API key; the seeded data is never changed by them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, status

from app.catalog_kinds import Kind
from app.deps import CatalogDep, SessionDep, SourceCatalogDep, WriterDep
from app.repositories.catalog import get_entry, list_entries
from app.schemas.catalog import CatalogEntryDetail, CatalogEntryOut, CatalogList, ModelPreset, OverridePatch
from app.schemas.problem import problem_responses
from app.services.catalog_edits import create_custom_entry, find_entry, override_entry
from estimator import list_presets

router = APIRouter(prefix="/catalog", tags=["catalog"])

EntryId = Annotated[str, Path(min_length=1, max_length=200)]


@router.get("/models", response_model=list[ModelPreset], summary="Model presets")
def list_models() -> list[dict[str, Any]]:
    """Preset ids accepted as `model` in an estimate request, with their published parameter counts."""
    return list_presets()


def _list(kind: Kind) -> Callable[..., CatalogList]:
    def list_kind(session: SessionDep, catalog: CatalogDep) -> CatalogList:
        rows = list_entries(session=session, kind=kind)
        return CatalogList(catalog_version=str(catalog.version), items=[CatalogEntryOut.of(r) for r in rows])

    return list_kind


def _get(kind: Kind) -> Callable[..., CatalogEntryDetail]:
    def get_kind(entry_id: EntryId, session: SessionDep) -> CatalogEntryDetail:
        return CatalogEntryDetail.of(find_entry(session=session, kind=kind, entry_id=entry_id))

    return get_kind


def _create(kind: Kind) -> Callable[..., CatalogEntryDetail]:
    def create_kind(
        body: Annotated[dict[str, Any], Body()], session: SessionDep, source: SourceCatalogDep,
        catalog: CatalogDep, writer: WriterDep,
    ) -> CatalogEntryDetail:
        row = create_custom_entry(session=session, source=source, catalog=catalog, kind=kind, body=body,
                                  actor=writer.name)
        session.commit()
        return CatalogEntryDetail.of(row)

    return create_kind


def _patch(kind: Kind) -> Callable[..., CatalogEntryDetail]:
    def patch_kind(
        entry_id: EntryId, patch: OverridePatch, session: SessionDep, source: SourceCatalogDep,
        catalog: CatalogDep, writer: WriterDep,
    ) -> CatalogEntryDetail:
        override_entry(session=session, source=source, catalog=catalog, kind=kind, entry_id=entry_id,
                       patch=patch, actor=writer.name)
        session.commit()
        row = get_entry(session=session, kind=kind, entry_id=entry_id)
        assert row is not None
        return CatalogEntryDetail.of(row)

    return patch_kind


_KINDS: tuple[tuple[Kind, str, str], ...] = (
    ("gpu", "gpus", "gpu"), ("server", "servers", "server"), ("cloud_offer", "cloud-offers", "cloud_offer"),
)
_SCHEMAS: dict[Kind, str] = {"gpu": "Gpu", "server": "Server", "cloud_offer": "CloudOffer"}


def _body(kind: Kind) -> dict[str, Any]:
    """Document the posted entry as the catalog's own model (validated against it in the service)."""
    ref = {"$ref": f"#/components/schemas/{_SCHEMAS[kind]}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


for _kind, _plural, _one in _KINDS:
    _name = _plural.replace("-", "_")
    router.add_api_route(f"/{_plural}", _list(_kind), methods=["GET"], response_model=CatalogList,
                         name=f"list_{_name}", summary=f"List {_plural.replace('-', ' ')}")
    router.add_api_route(f"/{_plural}/{{entry_id}}", _get(_kind), methods=["GET"],
                         response_model=CatalogEntryDetail, name=f"get_{_one}", responses=problem_responses(404),
                         summary=f"One {_one.replace('_', ' ')} with its seeded data, overrides and history")
    router.add_api_route(f"/{_plural}", _create(_kind), methods=["POST"], response_model=CatalogEntryDetail,
                         status_code=status.HTTP_201_CREATED, name=f"create_{_one}",
                         responses=problem_responses(409, 422), openapi_extra=_body(_kind),
                         summary=f"Add a custom {_one.replace('_', ' ')} (audited)")
    router.add_api_route(f"/{_plural}/{{entry_id}}", _patch(_kind), methods=["PATCH"],
                         response_model=CatalogEntryDetail, name=f"override_{_one}",
                         responses=problem_responses(404, 422),
                         summary=f"Override fields of a {_one.replace('_', ' ')} (audited; seeded data kept)")
