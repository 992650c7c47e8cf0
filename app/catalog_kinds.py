"""The three kinds of catalog entry and how to read them off a ``hardware_catalog.Catalog``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["KINDS", "Kind", "item_id", "source_items"]

Kind = Literal["gpu", "server", "cloud_offer"]

#: kind -> attribute of the Catalog that holds it
KINDS: dict[Kind, str] = {"gpu": "gpus", "server": "servers", "cloud_offer": "cloud_offers"}


def item_id(item: Any) -> str:
    return str(item.id)


def source_items(catalog: Catalog, kind: Kind) -> dict[str, Any]:
    """The entries of ``kind`` by id, whether the catalog keeps them in a dict or a list."""
    collection = getattr(catalog, KINDS[kind], None) or {}
    if isinstance(collection, dict):
        return {str(k): v for k, v in collection.items()}
    return {item_id(item): item for item in collection}
