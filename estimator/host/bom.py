"""Bill of materials of one option: servers, their RAM, NVMe and NIC configuration, and the switches of a
multi-node fabric, priced from the catalog where it has a price.

Each item is ``{"item", "sku", "quantity", "unit_price_usd", "source"}``. The DIMM line follows the server's
memory type (DDR4 or DDR5); a fixed-configuration server (configured RAM = maximum, the DGX systems) gets no
DIMM line: its RAM is in the server's price. ``unit_price_usd`` is the catalog's
figure (``Server.price_usd``; a GPU's mid price when no server is chosen) or ``None`` where the catalog has no
price (memory, drives, NICs and switches are priced by sales; the app layer applies its price overrides).

Switch count: one 64-port 400 Gb/s switch (NVIDIA QM9700 / Spectrum-4 class) serves up to 64 NIC ports; beyond
that a non-blocking two-tier fat tree, leaves with half their ports down and half up, and spines for the uplinks
(ceil(ports / 32) leaves, ceil(leaves x 32 / 64) spines). A multi-node estimate on a server whose NICs a fabric
takes replaces these lines with the designed fabric's parts (:mod:`estimator.host.cluster_fabric`, issue 32).
"""

from __future__ import annotations

import math
from typing import Any, Final

from estimator.host.sizing import (
    DimmConfig,
    HostSizing,
    NicConfig,
    NvmeConfig,
    host_sizing,
    recommend_dimms,
    recommend_nics,
    recommend_nvme,
)
from estimator.host_options import host_defaults
from estimator.job import Job
from estimator.memo import ObjectMemo
from estimator.messages import Num, Text
from estimator.response import HostResult
from estimator.training.layout import Layout
from hardware_catalog import Catalog, Gpu, Server

__all__ = ["bill_of_materials", "choose_server", "is_switch_count_line", "switch_counts"]

Item = dict[str, object]


_RECOMMENDED: Final = Text("recommended by host sizing; no catalog price")


def _item(item: str, sku: str, quantity: int, price: float | None, source: str) -> Item:
    return {"item": item, "sku": sku, "quantity": quantity, "unit_price_usd": price, "source": source}


def _price_source(entry: Any, field: str) -> str:
    getter = getattr(entry, "sources_for", None)
    sources = getter(field) if callable(getter) else ()
    if not sources:
        return "catalog"
    s = sources[0]
    return f"catalog: {s.citation} ({s.date})"


def choose_server(job: Job, server: Server | None, gpu: Gpu | None, catalog: Catalog) -> Server | None:
    """The request's server, else the catalog's cheapest (then first) non-placeholder server carrying the
    request's GPU with at least ``gpus_per_node`` of them; ``None`` if there is none."""
    if server is not None:
        return server
    gpu_id = getattr(gpu, "id", job.hardware.gpu)
    gpn = job.hardware.gpus_per_node
    return _SUGGESTED.get_or_compute((catalog,), (gpu_id, gpn), lambda: _cheapest_server(catalog, gpu_id, gpn))


#: the suggested server per catalog object (an effective catalog with overrides is a new object), GPU and count
_SUGGESTED: Final[ObjectMemo[Server | None]] = ObjectMemo(1024)


def _cheapest_server(catalog: Catalog, gpu_id: str, gpus_per_node: int) -> Server | None:
    servers = getattr(catalog, "servers", {}) or {}
    fits = [s for s in servers.values() if s.gpu_id == gpu_id and s.gpu_count >= gpus_per_node
            and not getattr(s, "placeholder", False)]
    if not fits:
        return None
    best: Server = min(fits, key=lambda s: (s.price_usd is None, s.price_usd or 0.0, s.gpu_count, s.id))
    return best


def switch_counts(ports: int) -> tuple[int, int]:
    """(leaf switches, spine switches) for ``ports`` 400 Gb/s NIC ports (module docstring)."""
    radix = int(host_defaults().num("network", "switch_ports_400g"))
    if ports <= 0:
        return 0, 0
    if ports <= radix:
        return 1, 0
    leaves = math.ceil(ports / (radix // 2))
    return leaves, math.ceil(leaves * (radix // 2) / radix)


def is_switch_count_line(item: Item) -> bool:
    """A line of :func:`switch_counts`' simple fabric (its leaf and spine switches and the links' cables): what a
    designed fabric (:mod:`estimator.host.cluster_fabric`) replaces."""
    sku = str(item.get("sku"))
    return sku.startswith("switch-") or sku == "cable-400g"


def _dimm_sku(dimms: DimmConfig) -> str:
    return f"{dimms.memory_type.lower()}-rdimm-{dimms.size_gib}gb"


def bill_of_materials(job: Job, layout: Layout, server: Server | None, catalog: Catalog,
                      host: HostResult | HostSizing | None = None, *, gpu: Gpu | None = None,
                      sizing: HostSizing | None = None) -> list[Item]:
    """Items for ``layout.num_nodes`` nodes of ``server`` (see the module docstring). ``host`` is the
    response's host block or a :class:`HostSizing`; the RAM, NVMe and NIC lines follow its recommendation."""
    gpu = gpu if gpu is not None else (getattr(catalog, "gpus", {}) or {}).get(
        getattr(server, "gpu_id", None) or job.hardware.gpu)
    chosen = choose_server(job, server, gpu, catalog)
    if isinstance(host, HostSizing):
        sizing = host
    dimms, nvme, nic = _configs(layout, chosen, catalog, host, sizing)
    key = (server is None, layout.num_nodes, layout.world_size, layout.gpus_per_node, dimms, nvme, nic)
    items = _ITEMS.get_or_compute((chosen, gpu), key, lambda: tuple(_items(layout, server is None, chosen, gpu,
                                                                            dimms, nvme, nic)))
    return [dict(item) for item in items]  # the caller's own dicts


#: the items per chosen server and GPU object, nodes and configurations (none of it depends on the step time)
_ITEMS: Final[ObjectMemo[tuple[Item, ...]]] = ObjectMemo(1024)


def _items(layout: Layout, no_server: bool, chosen: Server | None, gpu: Gpu | None, dimms: DimmConfig | None,
           nvme: NvmeConfig | None, nic: NicConfig | None) -> list[Item]:
    nodes = layout.num_nodes
    items: list[Item] = []
    if chosen is not None:
        suggested = " (suggested: the request names no server)" if no_server else ""
        if dimms is not None and dimms.fixed:
            label = Text("Server: %(server)s%(suggested)s, with its %(gib)s GiB %(type)s system memory",
                         server=chosen.name, suggested=Text(suggested) if suggested else "",
                         gib=Num(dimms.total_gib, ","), type=dimms.memory_type)
        else:
            label = Text("Server: %(server)s%(suggested)s", server=chosen.name,
                         suggested=Text(suggested) if suggested else "")
        items.append(_item(label, chosen.id, nodes, chosen.price_usd, _price_source(chosen, "price_usd")))
    elif gpu is not None:
        price = getattr(gpu, "price_usd_mid", None)
        items.append(_item(Text("GPU: %(gpu)s (no catalog server carries it)", gpu=gpu.name), gpu.id,
                           layout.world_size, price, _price_source(gpu, "price_usd_low")))
    if dimms is not None and not dimms.fixed:  # a fixed configuration's RAM is part of the server's price
        items.append(_item(Text("System memory: %(dimms)s per node", dimms=str(dimms)), _dimm_sku(dimms),
                           dimms.count * nodes, None, _RECOMMENDED))
    if nvme is not None:
        items.append(_item(Text("NVMe: %(nvme)s per node", nvme=str(nvme)), f"nvme-{nvme.size_tb:g}tb",
                           nvme.count * nodes,
                           None, _RECOMMENDED))
    if nodes > 1:
        count = nic.count if nic else layout.gpus_per_node
        gbps = nic.gbps if nic else 400
        fabric = {400: Text("InfiniBand NDR or 400 GbE RoCE"), 800: Text("InfiniBand XDR or 800 GbE"),
                  200: Text("InfiniBand HDR or 200 GbE RoCE")}.get(gbps, f"{gbps} GbE")
        items.append(_item(Text("GPU-fabric NIC: %(gbps)s Gb/s (%(fabric)s), %(count)s per node", gbps=gbps,
                                fabric=fabric, count=count), f"nic-{gbps}g", count * nodes, None, _RECOMMENDED))
        ports = count * nodes
        leaves, spines = switch_counts(ports)
        radix = int(host_defaults().num("network", "switch_ports_400g"))
        src = host_defaults().source("network", "switch_ports_400g")
        items.append(_item(Text("Leaf switch: %(radix)s-port 400 Gb/s", radix=radix), f"switch-{radix}x400g",
                           leaves, None, src))
        if spines:
            items.append(_item(Text("Spine switch: %(radix)s-port 400 Gb/s", radix=radix), f"switch-{radix}x400g",
                               spines, None, src))
        uplinks = leaves * (radix // 2) if spines else 0
        items.append(_item(Text("Cables / transceivers (node-to-leaf and leaf-to-spine links)"), "cable-400g",
                           ports + uplinks, None, Text("one per link; no catalog price")))
    return items


def _configs(layout: Layout, server: Server | None, catalog: Catalog, host: HostResult | HostSizing | None,
             sizing: HostSizing | None) -> tuple[DimmConfig | None, NvmeConfig | None, NicConfig | None]:
    """The DIMM, NVMe and NIC configuration: the sizing's, or re-derived from a response's host block."""
    if sizing is not None:
        return sizing.dimms, sizing.nvme, sizing.nics
    if not isinstance(host, HostResult):
        return None, None, None
    dimms = recommend_dimms(host.ram_bytes_per_node, server)
    nvme = recommend_nvme(host.nvme_bytes, 0.0, server, catalog)
    eff = host_defaults().num("network", "nic_efficiency")
    if layout.num_nodes <= 1:
        return dimms, nvme, None
    pcie = int(getattr(server, "pcie_gen", 5) or 5)
    nic = recommend_nics(host.network_bytes_per_s_per_node * 8 / 1e9 / eff, layout.gpus_per_node, pcie)
    return dimms, nvme, nic


def bill_of_materials_for(job: Job, shape: Any, layout: Layout, gpu: Gpu, server: Server | None,
                          catalog: Catalog, time: Any = None) -> list[Item]:
    """Convenience: size the host and list the materials in one call."""
    sizing = host_sizing(job, shape, layout, gpu, choose_server(job, server, gpu, catalog), catalog, time=time)
    return bill_of_materials(job, layout, server, catalog, sizing, gpu=gpu)
