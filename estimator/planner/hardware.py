"""Which hardware the planner may use, and what an hour of it costs.

Hardware options come from the request (pinned ``hardware`` fields) and ``constraints`` (GPU and server ids),
looked up in :mod:`hardware_catalog`. Without either, the planner searches every catalog GPU that has a price
for the chosen pricing (a cloud offer, or a server to own), eight to a node (a GPU sold only in a rack-scale
system, GB200 / GB300 NVL72, in that system's four-GPU trays and 72-GPU NVLink domain).

Prices per GPU-hour come from the one cost basis (:mod:`estimator.tco.run_cost`): the cheapest hyperscaler on-demand
or reserved offer of the GPU, or owning the server (:func:`estimator.tco.ownership_tco`: capex over its
depreciation life plus opex, per useful GPU-hour). A GPU option without a server under ``owned`` pricing falls
back to the cheapest server that carries the GPU; an option that can only be priced the other way is flagged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from estimator.errors import InvalidRequestError, UnknownHardwareError
from estimator.tco.run_cost import CostBasis, CostChoice, choose_basis
from estimator.training.comm import scale_up_gpus
from hardware_catalog import Catalog, Gpu, Server

if TYPE_CHECKING:
    from estimator.planner.contract import PlanRequest

__all__ = ["HourlyPrice", "HwOption", "PriceBook", "World", "cost_choice", "hardware_options", "worlds_for"]

DEFAULT_GPUS_PER_NODE: Final = 8


@dataclass(frozen=True)
class HwOption:
    """A GPU type, optionally in a catalog server, ``gpus_per_node`` to a node."""

    gpu: Gpu
    server: Server | None
    gpus_per_node: int
    # the key, computed once (it keys the search's caches): set in ``__post_init__``, so that the class also
    # compiles as a native class (docs/native.md)
    _key: str = field(default="", init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_key", f"server:{self.server.id}" if self.server is not None
                           else f"gpu:{self.gpu.id}")

    @property
    def key(self) -> str:
        return self._key

    @property
    def name(self) -> str:
        return str(self.server.name if self.server is not None else self.gpu.name)

    @property
    def capacity_bytes(self) -> int:
        return int(self.gpu.memory_bytes)


@dataclass(frozen=True)
class World:
    """One group of the search: a hardware option on ``num_nodes`` nodes of ``gpus_per_node`` GPUs used."""

    hw: HwOption
    num_nodes: int
    gpus_per_node: int

    @property
    def size(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True)
class HourlyPrice:
    usd_per_gpu_hour: float
    pricing: str
    source: str
    date: str | None
    basis: CostBasis | None = None


def cost_choice(pricing: str, cost: CostChoice | None = None) -> CostChoice:
    """The cost basis of a plan request's ``pricing``: owned servers, or the cloud on its on-demand / reserved
    price (the same basis :func:`estimator.estimate` then reports as the plan estimate's ``cost``), refined by
    the request's ``cost`` (utilisation, $/kWh and PUE when owned, the provider class when rented)."""
    refine = {} if cost is None else cost.model_dump(
        include={"provider_class", "utilisation", "electricity_usd_per_kwh", "pue"}, exclude_unset=True)
    if pricing == "owned":
        return CostChoice(basis="own", **refine)
    return CostChoice(basis="rent", pricing="reserved" if pricing == "reserved" else "on-demand", **refine)


def _pinned(model: Any | None, field: str) -> bool:
    return model is not None and field in model.model_fields_set


def _gpu(catalog: Catalog, gpu_id: str, field: str) -> Any:
    gpu = catalog.gpus.get(gpu_id)
    if gpu is None:
        raise UnknownHardwareError(f"unknown GPU {gpu_id!r}; GET /api/v1/catalog/gpus lists them", field)
    return gpu


def _server(catalog: Catalog, server_id: str, field: str) -> Any:
    server = catalog.servers.get(server_id)
    if server is None:
        raise UnknownHardwareError(f"unknown server {server_id!r}; GET /api/v1/catalog/servers lists them", field)
    return server


def _priced_gpus(req: PlanRequest, catalog: Catalog) -> list[str]:
    if req.pricing == "owned":
        return sorted({s.gpu_id for s in catalog.servers.values()})
    key = "reserved_usd_per_gpu_hour" if req.pricing == "reserved" else "on_demand_usd_per_gpu_hour"
    return sorted({o.gpu_id for o in catalog.cloud_offers if getattr(o, key, None)})


def hardware_options(req: PlanRequest, catalog: Catalog) -> list[HwOption]:
    """The hardware options of a request, in a stable order."""
    hw, c = req.hardware, req.constraints
    gpn = hw.gpus_per_node if _pinned(hw, "gpus_per_node") and hw is not None else None
    server_ids = list(dict.fromkeys(c.servers or ()))  # each id once, in the order given
    if hw is not None and hw.server is not None:
        server_ids = [hw.server]
    gpu_ids = list(dict.fromkeys(c.gpus or ()))
    if _pinned(hw, "gpu") and hw is not None:
        gpu_ids = [hw.gpu]
    servers = [_server(catalog, s, "constraints.servers") for s in server_ids]
    gpus = [_gpu(catalog, g, "constraints.gpus") for g in gpu_ids]
    if gpus and servers:
        servers = [s for s in servers if s.gpu_id in {g.id for g in gpus}]
        gpus = []
    if not gpus and not servers:
        gpus = [catalog.gpus[g] for g in _priced_gpus(req, catalog)]
    options = [HwOption(catalog.gpus[s.gpu_id], s, _server_gpn(s, gpn)) for s in servers]
    options += [_gpu_option(catalog, g, gpn) for g in gpus]
    if not options:
        raise InvalidRequestError("no hardware is left after the constraints: check constraints.gpus/servers",
                                  "constraints")
    return options


def _gpu_option(catalog: Catalog, gpu: Gpu, gpn: int | None) -> HwOption:
    """A GPU without a server: ``DEFAULT_GPUS_PER_NODE`` to a node, except a GPU that only comes in a rack-scale
    system (GB200 / GB300: the compute trays of an NVL72 rack), which takes that system's node and its NVLink
    domain: a "GB200 node of eight" does not exist, and its TP groups span trays over NVLink, not the NICs."""
    carriers = [s for s in catalog.servers.values() if s.gpu_id == gpu.id]
    if carriers and all(scale_up_gpus(s, s.gpu_count) > s.gpu_count for s in carriers):
        server = min(carriers, key=lambda s: s.id)
        return HwOption(gpu, server, _server_gpn(server, gpn))
    return HwOption(gpu, None, gpn or DEFAULT_GPUS_PER_NODE)


def _server_gpn(server: Server, gpn: int | None) -> int:
    if gpn is not None and gpn > server.gpu_count:
        raise InvalidRequestError(f"{server.name} holds {server.gpu_count} GPUs, not {gpn}",
                                  "hardware.gpus_per_node")
    return gpn or int(server.gpu_count)


def worlds_for(req: PlanRequest, hw: HwOption) -> list[World]:
    """Node counts 1..max_nodes (or the pinned one); a single node may also use 1, 2, 4 ... of its GPUs."""
    pinned = req.hardware
    if _pinned(pinned, "num_nodes") and pinned is not None:
        nodes = [pinned.num_nodes]
    else:
        nodes = list(range(1, req.constraints.max_nodes + 1))
    out: list[World] = []
    partial = not _pinned(pinned, "gpus_per_node")
    for n in nodes:
        if n == 1 and partial:
            g = 1
            while g < hw.gpus_per_node:
                out.append(World(hw, 1, g))
                g *= 2
        out.append(World(hw, n, hw.gpus_per_node))
    return out


class PriceBook:
    """$/GPU-hour of each world under the request's pricing (``None`` when the catalog has no price), cached."""

    def __init__(self, pricing: str, catalog: Catalog, cost: CostChoice | None = None) -> None:
        self.pricing = pricing
        self.catalog = catalog
        self.choice = cost_choice(pricing, cost)
        self._cache: dict[tuple[str, int, int], HourlyPrice | None] = {}

    def price(self, world: World) -> HourlyPrice | None:
        key = (world.hw.key, world.num_nodes, world.gpus_per_node)
        if key not in self._cache:
            self._cache[key] = self._price(world)
        return self._cache[key]

    def _price(self, world: World) -> HourlyPrice | None:
        """The world's cost basis (:func:`estimator.tco.run_cost.choose_basis`, as the plan's estimate reports it)."""
        hw = world.hw
        basis, _notes = choose_basis(self.catalog, hw.gpu.id, hw.server.id if hw.server is not None else None,
                                     world.num_nodes, world.gpus_per_node, self.choice, strict=True)
        if basis is None:
            return None
        return HourlyPrice(basis.usd_per_gpu_hour, basis.pricing, basis.label, basis.date, basis)
