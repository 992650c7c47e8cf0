"""Rack planning: kW and heat per node at load, and how many nodes fit a rack by power and by space.

Pure functions. 1 W = 3.412 BTU/h (1 BTU/h = 0.29307 W). A rack holds ``floor(rack kW / node kW)`` nodes by
power and ``floor((rack U - reserved U) / node U)`` by space; the smaller number wins. Example: a DGX H100 at
10.2 kW in a 40.8 kW rack -> 4 nodes (unanswered.io, citing the NVIDIA user guide: 4 DGX H100 per rack).
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from estimator.tco import TcoAssumptions, node_power_at_load_w, resolve_server
from hardware_catalog import Catalog, load_catalog

__all__ = [
    "BTU_PER_HOUR_PER_W",
    "DEFAULT_RACK_UNITS",
    "RackPlan",
    "btu_per_hour",
    "nodes_by_power",
    "nodes_by_space",
    "plan_rack",
    "plan_rack_for_server",
    "racks_needed",
]

BTU_PER_HOUR_PER_W = 3.412  # 1 W = 3.412 BTU/h (NIST: 1 BTU_IT/h = 0.29307107 W)
DEFAULT_RACK_UNITS = 42
_EPS = 1e-9

PowerBasis = Literal["max", "load"]


class RackPlan(BaseModel):
    """How many nodes one rack holds. ``limited_by`` says whether power or space ran out first."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kw_per_node: float = Field(gt=0)
    btu_per_hour_per_node: float
    rack_units_per_node: int = Field(ge=1)
    rack_kw: float = Field(gt=0)
    rack_units: int = Field(ge=1)
    nodes_by_power: int
    nodes_by_space: int
    nodes_per_rack: int
    limited_by: Literal["power", "space"]
    rack_kw_used: float
    btu_per_hour_per_rack: float
    gpus_per_rack: int
    power_basis: str


def btu_per_hour(watts: float) -> float:
    """Heat to remove, BTU/h = W x 3.412."""
    return watts * BTU_PER_HOUR_PER_W


def nodes_by_power(kw_per_node: float, rack_kw: float) -> int:
    """Nodes a rack's power budget feeds: floor(rack kW / node kW)."""
    return math.floor(rack_kw / kw_per_node + _EPS)


def nodes_by_space(rack_units_per_node: int, rack_units: int = DEFAULT_RACK_UNITS, reserved_units: int = 0) -> int:
    """Nodes that fit the rack's height: floor((rack U - reserved U for switches/PDUs) / node U)."""
    return max(rack_units - reserved_units, 0) // rack_units_per_node


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
        nodes_by_power=by_power,
        nodes_by_space=by_space,
        nodes_per_rack=nodes,
        limited_by="power" if by_power <= by_space else "space",
        rack_kw_used=nodes * kw_per_node,
        btu_per_hour_per_rack=btu_per_hour(nodes * kw_per_node * 1000),
        gpus_per_rack=nodes * gpus_per_node,
        power_basis=power_basis,
    )


def plan_rack_for_server(
    server_id: str,
    rack_kw: float,
    rack_units: int = DEFAULT_RACK_UNITS,
    reserved_units: int = 0,
    basis: PowerBasis = "max",
    assumptions: TcoAssumptions | None = None,
    catalog: Catalog | None = None,
) -> RackPlan:
    """Rack plan for a catalog server. ``basis="max"`` budgets the server's published maximum power when the
    catalog has one (else its power at load); ``"load"`` budgets GPUs at TDP + the rest of the server."""
    a, cat = assumptions or TcoAssumptions(), catalog or load_catalog()
    server, gpu = resolve_server(cat, server_id)
    load_kw = node_power_at_load_w(gpu, server.gpu_count, a.server_non_gpu_power_w) / 1000
    use_max = basis == "max" and server.max_power_kw is not None
    kw = server.max_power_kw if use_max and server.max_power_kw is not None else load_kw
    label = "max power (catalog)" if use_max else "power at load (GPU TDP + rest of server)"
    return plan_rack(kw, server.rack_units, rack_kw, rack_units, reserved_units, server.gpu_count, label)


def racks_needed(num_nodes: int, plan: RackPlan) -> int:
    """Racks for ``num_nodes``: ceil(nodes / nodes per rack)."""
    if plan.nodes_per_rack == 0:
        raise ValueError("a node does not fit this rack (power or space)")
    return math.ceil(num_nodes / plan.nodes_per_rack)
