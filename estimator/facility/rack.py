"""Node power and rack planning: watts per node, heat, and how many nodes fit a rack by power and by space.

The one implementation of these figures: the estimate's host sizing (:mod:`estimator.host.sizing`) and the TCO model
(:mod:`estimator.tco`) both call it. Pure functions; catalog objects are read by attribute.

* Per-GPU power: the server's own GPU power when its vendor ships a different SKU (Dell's XE9680 lists the
  A100 SXM4 80GB at 500 W; the catalog GPU is the 400 W part), else the GPU's TDP.
* Peak (provisioning) power of a node: the catalog's maximum power, less the TDP of empty GPU slots; without
  a catalog figure, GPUs x TDP x 1.82 (DGX H100: 10.2 kW for 8 x 700 W; epoch-research/training-cost-trends
  energy.py, NVIDIA datasheet).
* Power at load: GPUs x TDP + the rest of the server (lynx-cortex datacenter economics: 8 x 700 W + 500 W
  host + 100 W network = 6.2 kW per H100 node); average power scales the GPU part by utilisation.
* Heat: 1 W = 3.412 BTU/h (1 BTU_IT/h = 0.29307107 W, NIST).
* A rack holds ``floor(rack kW / node kW)`` nodes by power and ``floor((rack U - reserved U) / node U)`` by
  space (42U less 4U for switches and PDUs by default, :func:`default_rack_units`); the smaller number wins.
  Example: a DGX H100 at 10.2 kW in a 40.8 kW rack -> 4 nodes (unanswered.io, citing the NVIDIA user guide:
  4 DGX H100 per rack).
* The default rack budget is one fact in one table: ``rack_kw`` of ``hardware_catalog/data/tco_defaults.yaml``
  (40.8 kW, with its source), read by :func:`default_rack_kw` for the host sizing (``host.rack_kw_budget``), the
  TCO assumptions (``rack_kw``), the cluster design and every page.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from estimator.errors import UnknownHardwareError
from estimator.host_options import host_defaults
from hardware_catalog import Catalog, Gpu, Server, load_catalog

__all__ = [
    "BTU_PER_HOUR_PER_W",
    "DEFAULT_RACK_UNITS",
    "PowerBasis",
    "RackPlan",
    "btu_per_hour",
    "default_rack_kw",
    "default_rack_units",
    "gpu_power_w",
    "node_average_power_w",
    "node_non_gpu_power_w",
    "node_peak_power_w",
    "node_power_at_load_w",
    "nodes_by_power",
    "nodes_by_space",
    "nodes_per_rack",
    "plan_rack",
    "plan_rack_for_server",
    "racks_needed",
]

BTU_PER_HOUR_PER_W = 3.412  # 1 W = 3.412 BTU/h (NIST: 1 BTU_IT/h = 0.29307107 W)
DEFAULT_RACK_UNITS = int(host_defaults().num("power", "rack_units"))  # 42U (EIA-310), host_defaults.yaml
_EPS = 1e-9
_DEFAULT_TDP_W = 700.0

PowerBasis = Literal["max", "load"]


class RackPlan(BaseModel):
    """How many nodes one rack holds. ``limited_by`` says whether power or space ran out first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kw_per_node: float = Field(gt=0)
    btu_per_hour_per_node: float
    rack_units_per_node: int = Field(ge=1)
    rack_kw: float = Field(gt=0)
    rack_units: int = Field(ge=1)
    reserved_units: int = Field(default=0, ge=0, description="units kept for switches, PDUs and cabling")
    nodes_by_power: int
    nodes_by_space: int
    nodes_per_rack: int
    limited_by: Literal["power", "space"]
    rack_kw_used: float
    btu_per_hour_per_rack: float
    gpus_per_rack: int
    power_basis: str


# ------------------------------------------------------------------------------------------------- power


def _attr(obj: Any, name: str, default: Any = None) -> Any:
    return getattr(obj, name, default) if obj is not None else default


def gpu_power_w(gpu: Gpu, server: Server | None = None) -> float:
    """Watts of one GPU in this server: the server's ``gpu_tdp_w`` (a vendor SKU, e.g. Dell's 500 W A100 SXM4)
    when set, else the GPU's ``tdp_w`` (700 W when neither is known)."""
    return float(_attr(server, "gpu_tdp_w") or _attr(gpu, "tdp_w") or _DEFAULT_TDP_W)


def node_peak_power_w(gpu: Gpu, server: Server | None, gpus_per_node: int,
                      watts_per_gpu_tdp: float | None = None) -> float:
    """Provisioning power of one node (W): the catalog's ``max_power_kw`` less the TDP of empty GPU slots, else
    GPUs x TDP x ``watts_per_gpu_tdp`` (1.82, DGX H100: 10.2 kW for 8 x 700 W; Epoch energy.py)."""
    tdp = gpu_power_w(gpu, server)
    max_kw = _attr(server, "max_power_kw")
    if max_kw:
        slots = int(_attr(server, "gpu_count", gpus_per_node) or gpus_per_node)
        return float(max_kw) * 1000 - max(0, slots - gpus_per_node) * tdp
    ratio = watts_per_gpu_tdp if watts_per_gpu_tdp is not None else host_defaults().num(
        "power", "server_watts_per_gpu_tdp")
    return gpus_per_node * tdp * ratio


def node_non_gpu_power_w(gpu: Gpu, server: Server | None, non_gpu_power_w: float) -> float:
    """The rest of one node at load, beside its GPUs (W): for a rack-scale system (a GB200 / GB300 NVL72 tray: the
    catalog's ``rack_nodes`` and ``rack_power_kw``), the tray's share of the rack's power less its GPUs at TDP (its
    Grace CPUs and its share of the NVLink switch trays and power shelves: the catalog's figure, as
    :func:`plan_rack_for_server` racks it); else ``non_gpu_power_w`` (the TCO's ``server_non_gpu_power_w``, "when
    the catalog has no figure")."""
    rack_nodes = _attr(server, "rack_nodes")
    rack_kw = _attr(server, "rack_power_kw")
    if rack_nodes and rack_kw:
        slots = int(_attr(server, "gpu_count", 0) or 0)
        return max(0.0, float(rack_kw) * 1000 / int(rack_nodes) - slots * gpu_power_w(gpu, server))
    return non_gpu_power_w


def node_power_at_load_w(gpu: Gpu, gpus_per_node: int, non_gpu_power_w: float, server: Server | None = None) -> float:
    """IT power of one node at load: every GPU at its TDP plus the rest of the server (W,
    :func:`node_non_gpu_power_w`: a rack-scale tray's share of its rack, else ``non_gpu_power_w``).

    Source: lynx-cortex datacenter economics (8 x 700 W + 500 W host + 100 W network = 6.2 kW per H100 node).
    """
    return gpus_per_node * gpu_power_w(gpu, server) + node_non_gpu_power_w(gpu, server, non_gpu_power_w)


def node_average_power_w(
    gpu: Gpu, gpus_per_node: int, utilisation: float, non_gpu_power_w: float, server: Server | None = None
) -> float:
    """Average IT power of one node: GPU TDP x utilisation + the rest of the server (W, :func:`node_non_gpu_power_w`)
    - issue 4's formula."""
    return (gpus_per_node * gpu_power_w(gpu, server) * utilisation
            + node_non_gpu_power_w(gpu, server, non_gpu_power_w))


def btu_per_hour(watts: float) -> float:
    """Heat to remove, BTU/h = W x 3.412."""
    return watts * BTU_PER_HOUR_PER_W


# -------------------------------------------------------------------------------------------------- rack


def default_rack_kw(catalog: Catalog | None = None) -> float:
    """The default power budget of one rack (kW): the catalog's ``tco_defaults.yaml`` ``rack_kw`` (4 DGX H100 of
    10.2 kW per 40.8 kW rack, NVIDIA DGX H100 user guide via unanswered.io). The one source of the default:
    the request's ``host.rack_kw_budget``, the TCO's ``rack_kw`` and the cluster's racks all take it from here."""
    catalog = catalog if catalog is not None else load_catalog()
    return float(catalog.tco_defaults.value("rack_kw"))


def default_rack_units() -> tuple[int, int]:
    """The default rack's height and the units kept free in it for top-of-rack switches, PDUs and cabling:
    ``power.rack_units`` (42U, EIA-310) and ``power.rack_units_reserved`` (4U) of ``host_defaults.yaml``, the one
    table of the rack's geometry. The host sizing and :func:`plan_rack_for_server` (the TCO, the pages, the
    cluster) both take it from here, so a 4U node reads the same nodes per rack everywhere."""
    d = host_defaults()
    return int(d.num("power", "rack_units")), int(d.num("power", "rack_units_reserved"))


def nodes_by_power(kw_per_node: float, rack_kw: float) -> int:
    """Nodes a rack's power budget feeds: floor(rack kW / node kW); 0 for a node of no power."""
    if kw_per_node <= 0:
        return 0
    return math.floor(rack_kw / kw_per_node + _EPS)


def nodes_by_space(rack_units_per_node: int, rack_units: int = DEFAULT_RACK_UNITS, reserved_units: int = 0) -> int:
    """Nodes that fit the rack's height: floor((rack U - reserved U for switches/PDUs) / node U)."""
    return max(rack_units - reserved_units, 0) // rack_units_per_node


def nodes_per_rack(
    kw_per_node: float,
    rack_kw: float,
    rack_units_per_node: int | None,
    rack_units: int = DEFAULT_RACK_UNITS,
    reserved_units: int = 0,
) -> int:
    """min(nodes by power, nodes by space); by power alone when the node's height is unknown."""
    by_power = nodes_by_power(kw_per_node, rack_kw)
    if not rack_units_per_node:
        return by_power
    return min(by_power, nodes_by_space(rack_units_per_node, rack_units, reserved_units))


def plan_rack(
    kw_per_node: float,
    rack_units_per_node: int,
    rack_kw: float,
    rack_units: int = DEFAULT_RACK_UNITS,
    reserved_units: int = 0,
    gpus_per_node: int = 0,
    power_basis: str = "given",
) -> RackPlan:
    """Nodes per rack = min(by power, by space), with the heat and GPUs per rack."""
    by_power = nodes_by_power(kw_per_node, rack_kw)
    by_space = nodes_by_space(rack_units_per_node, rack_units, reserved_units)
    nodes = min(by_power, by_space)
    return RackPlan(
        kw_per_node=kw_per_node,
        btu_per_hour_per_node=btu_per_hour(kw_per_node * 1000),
        rack_units_per_node=rack_units_per_node,
        rack_kw=rack_kw,
        rack_units=rack_units,
        reserved_units=reserved_units,
        nodes_by_power=by_power,
        nodes_by_space=by_space,
        nodes_per_rack=nodes,
        limited_by="power" if by_power <= by_space else "space",
        rack_kw_used=nodes * kw_per_node,
        btu_per_hour_per_rack=btu_per_hour(nodes * kw_per_node * 1000),
        gpus_per_rack=nodes * gpus_per_node,
        power_basis=power_basis,
    )


def resolve_server(catalog: Catalog, server_id: str) -> tuple[Server, Gpu]:
    """The server and its GPU; an unknown id raises :class:`UnknownHardwareError` naming close matches."""
    try:
        server = catalog.server(server_id)
        return server, catalog.gpu(server.gpu_id)
    except KeyError as exc:
        raise UnknownHardwareError(str(exc), "server_id") from None


def plan_rack_for_server(
    server_id: str,
    rack_kw: float,
    rack_units: int | None = None,
    reserved_units: int | None = None,
    basis: PowerBasis = "max",
    assumptions: Any = None,
    catalog: Catalog | None = None,
) -> RackPlan:
    """Rack plan for a catalog server. ``basis="max"`` budgets the node's provisioning power
    (:func:`node_peak_power_w`: the catalog maximum, else 1.82 x GPU TDP); ``"load"`` budgets GPUs at TDP + the
    rest of the server (``assumptions.server_non_gpu_power_w``, default from the TCO defaults). The rack's height
    and reserved units default to :func:`default_rack_units` (42U less 4U), as in the host sizing."""
    default_units, default_reserved = default_rack_units()
    rack_units = default_units if rack_units is None else rack_units
    reserved_units = default_reserved if reserved_units is None else reserved_units
    catalog = catalog if catalog is not None else load_catalog()
    server, gpu = resolve_server(catalog, server_id)
    rack_nodes = _attr(server, "rack_nodes")
    if rack_nodes:
        return _rack_scale_plan(server, int(rack_nodes), rack_units)
    if basis == "max":
        kw = node_peak_power_w(gpu, server, server.gpu_count) / 1000
        label = "max power (catalog)" if server.max_power_kw else "max power (estimated: 1.82 x GPU TDP)"
    else:
        non_gpu = _attr(assumptions, "server_non_gpu_power_w")
        if non_gpu is None:
            non_gpu = float(catalog.tco_defaults.value("server_non_gpu_power_w"))
        kw = node_power_at_load_w(gpu, server.gpu_count, float(non_gpu), server) / 1000
        label = "power at load (GPU TDP + rest of server)"
    return plan_rack(kw, server.rack_units, rack_kw, rack_units, reserved_units, server.gpu_count, label)


def _rack_scale_plan(server: Server, rack_nodes: int, rack_units: int) -> RackPlan:
    """A rack-scale system (GB200 / GB300 NVL72): its rack comes whole, ``rack_nodes`` compute trays with their
    NVLink switch trays and power shelves, at the system's own rack power (``rack_power_kw``) whatever budget
    an ordinary rack is given; the trays' share of it is their ``max_power_kw``."""
    rack_kw = float(_attr(server, "rack_power_kw"))
    kw = rack_kw / rack_nodes
    return RackPlan(kw_per_node=kw, btu_per_hour_per_node=btu_per_hour(kw * 1000),
                    rack_units_per_node=max(1, int(server.rack_units)), rack_kw=rack_kw,
                    rack_units=max(rack_units, rack_nodes * int(server.rack_units)), nodes_by_power=rack_nodes,
                    nodes_by_space=rack_nodes, nodes_per_rack=rack_nodes, limited_by="space", rack_kw_used=rack_kw,
                    btu_per_hour_per_rack=btu_per_hour(rack_kw * 1000), gpus_per_rack=rack_nodes * server.gpu_count,
                    power_basis="rack-scale system: its whole rack at the catalog rack power")


def racks_needed(num_nodes: int, plan: RackPlan) -> int:
    """Racks for ``num_nodes``: ceil(nodes / nodes per rack)."""
    if plan.nodes_per_rack == 0:
        raise ValueError("a node does not fit this rack (power or space)")
    return math.ceil(num_nodes / plan.nodes_per_rack)
