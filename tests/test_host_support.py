"""Shared helpers of the host-sizing tests (no tests here): the hardware catalog, or, while parts of it are
still missing, the GPUs, servers and storage classes that exist, read with the catalog's own models."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


@cache
def catalog() -> Any:
    from hardware_catalog.loader import CatalogError, Gpu, Server, StorageClass, load_catalog

    try:
        return load_catalog()
    except CatalogError:
        data = ROOT / "hardware_catalog" / "data"
        gpus = {p.stem: Gpu.model_validate(yaml.safe_load(p.read_text())) for p in (data / "gpus").glob("*.yaml")}
        servers = {p.stem: Server.model_validate(yaml.safe_load(p.read_text()))
                   for p in (data / "servers").glob("*.yaml")}
        storage: dict[str, Any] = {}
        if (data / "storage.yaml").exists():
            raw = yaml.safe_load((data / "storage.yaml").read_text())
            items = raw.get("storage", raw) if isinstance(raw, dict) else raw
            for item in items:
                entry = StorageClass.model_validate(item)
                storage[entry.id] = entry
        return SimpleNamespace(gpus=gpus, servers=servers, storage=storage, version="partial")
