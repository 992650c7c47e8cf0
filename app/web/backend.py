"""What the pages need from the estimator and the hardware catalog, in one place."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from app.services.estimates import run_estimate
from estimator import list_presets

if TYPE_CHECKING:
    from hardware_catalog import Catalog, Gpu

__all__ = ["Option", "gpu_name", "gpu_options", "model_options", "run_estimate", "server_name", "server_options"]


@dataclass(frozen=True)
class Option:
    """One ``<option>`` of a select."""

    value: str
    label: str
    detail: str = ""
    gpu: str = ""  # a server's GPU id (the form sets the GPU field to it)


def _params(value: int | None) -> str:
    if not value:
        return ""
    return f"{value / 1e9:.3g}B" if value >= 1e9 else f"{value / 1e6:.3g}M"


def model_options() -> list[Option]:
    return [
        Option(p["id"], p["name"], _params(p.get("published_params")))
        for p in list_presets()
    ]


def _memory(gpu: Gpu) -> str:
    """The datasheet memory (``80 GB``) when the catalog has it, else the bytes in GiB."""
    datasheet = getattr(gpu, "memory_gb", None)
    return f"{datasheet:g} GB" if datasheet else f"{gpu.memory_bytes / 2**30:.0f} GiB"


def gpu_options(catalog: Catalog) -> list[Option]:
    gpus = catalog.gpus.values()
    return [Option(g.id, g.name, _memory(g)) for g in sorted(gpus, key=lambda g: g.name)]


def server_options(catalog: Catalog) -> list[Option]:
    servers = catalog.servers.values()
    return [Option(s.id, s.name, f"{s.gpu_count}x {gpu_name(catalog, s.gpu_id)}", gpu=s.gpu_id)
            for s in sorted(servers, key=lambda s: s.name)]


def gpu_name(catalog: Catalog, gpu_id: str) -> str:
    gpu = catalog.gpus.get(gpu_id)
    return str(gpu.name) if gpu is not None else gpu_id


def server_name(catalog: Catalog, server_id: str | None) -> str | None:
    if server_id is None:
        return None
    server = catalog.servers.get(server_id)
    return str(server.name) if server is not None else server_id
