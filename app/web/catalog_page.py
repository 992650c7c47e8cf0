"""``/catalog``: browse GPUs, servers and cloud offers, every figure with its sources."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from app.catalog_kinds import Kind, source_items
from app.core.i18n import N_
from app.deps import CatalogDep
from app.errors import NotFound
from app.web.templating import render

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["router"]

router = APIRouter()

Tab = Literal["gpus", "servers", "cloud-offers"]
_KIND: dict[str, Kind] = {"gpus": "gpu", "servers": "server", "cloud-offers": "cloud_offer"}
_TITLES = {"gpus": N_("GPUs"), "servers": N_("Servers"), "cloud-offers": N_("Cloud offers")}
_SKIP = {"sources", "field_sources", "uncertain", "notes", "id"}


def _figure_rows(entry: Any) -> list[dict[str, Any]]:
    """Every field of an entry with its value, its sources and whether sources disagree."""
    rows = []
    for name in type(entry).model_fields:
        value = getattr(entry, name)
        if name in _SKIP or value is None or value == () or value == []:
            continue
        sources_for = getattr(entry, "sources_for", None)
        own = name in getattr(entry, "field_sources", {})
        rows.append({
            "name": name, "value": value, "own_sources": sources_for(name) if own and sources_for else (),
            "uncertain": name in getattr(entry, "uncertain", ()),
        })
    return rows


def _tab(request: Request, catalog: Catalog, tab: Tab) -> HTMLResponse:
    items = sorted(source_items(catalog, _KIND[tab]).values(), key=lambda e: str(getattr(e, "name", e.id)))
    context = {
        "tab": tab, "tabs": _TITLES, "items": items, "version": getattr(catalog, "version", ""),
        "as_of": getattr(catalog, "as_of", ""), "gpus": source_items(catalog, "gpu"), "active": "catalog",
    }
    return render(request, "catalog.html", context)


@router.get("/catalog", response_class=HTMLResponse, name="catalog_page")
def catalog_page(request: Request, catalog: CatalogDep) -> HTMLResponse:
    return _tab(request, catalog, "gpus")


@router.get("/catalog/{tab}", response_class=HTMLResponse, name="catalog_tab_page")
def catalog_tab_page(request: Request, catalog: CatalogDep, tab: Tab) -> HTMLResponse:
    return _tab(request, catalog, tab)


@router.get("/catalog/{tab}/{entry_id}", response_class=HTMLResponse, name="catalog_entry_page")
def catalog_entry_page(request: Request, catalog: CatalogDep, tab: Tab, entry_id: str) -> HTMLResponse:
    entry = source_items(catalog, _KIND[tab]).get(entry_id)
    if entry is None:
        raise NotFound(f"no {_KIND[tab].replace('_', ' ')} {entry_id!r} in the catalog")
    context = {
        "tab": tab, "tabs": _TITLES, "entry": entry, "rows": _figure_rows(entry), "active": "catalog",
        "version": getattr(catalog, "version", ""),
    }
    return render(request, "catalog_entry.html", context)
