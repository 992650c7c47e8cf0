"""Power and rack figures of one node, one function each, for every page (issue 28): the estimate's node panel,
/tco, /compare's node table and quotes read them from here, with the same three labels.

- **peak**: the server's provisioning maximum (the catalog's ``max_power_kw``, else 1.82 x the GPUs' TDP):
  :func:`estimator.facility.rack.node_peak_power_w` (via
  :func:`estimator.facility.rack.plan_rack_for_server`); what a rack and
  its PDUs must be sized for.
- **at load**: every GPU at its TDP plus the rest of the server: :func:`estimator.facility.rack.node_power_at_load_w`
  (lynx-cortex datacenter economics: 8 x 700 W + 500 W host + 100 W network = 6.2 kW per H100 node).
- **average**: GPU TDP x utilisation + the rest of the server: :func:`estimator.facility.rack.node_average_power_w`
  (issue 4's formula), the draw the TCO's electricity bill uses, at the stated utilisation.
- **default rack budget**: :func:`estimator.facility.rack.default_rack_kw` (re-exported here), the catalog's one
  ``rack_kw``, also the default of a request's ``host.rack_kw_budget``.
- **nodes per rack** for a stated rack budget: :func:`estimator.facility.rack.plan_rack_for_server` (the smaller of
  rack kW / peak kW per node and the rack's free units / node height).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from estimator.facility.rack import (
    RackPlan,
    default_rack_kw,
    node_average_power_w,
    node_peak_power_w,
    node_power_at_load_w,
    plan_rack_for_server,
)
from estimator.tco import TcoAssumptions

if TYPE_CHECKING:
    from hardware_catalog import Catalog

__all__ = ["NodePower", "default_rack_kw", "node_power", "rack_fit"]


@dataclass(frozen=True)
class NodePower:
    peak_kw: float
    at_load_kw: float
    average_kw: float
    utilisation: float


def node_power(catalog: Catalog, server_id: str | None, assumptions: TcoAssumptions | None = None, *,
               gpu_id: str | None = None, gpus_per_node: int | None = None) -> NodePower:
    """Peak, at-load and average power of one node (kW): of the catalog server ``server_id``, else of
    ``gpus_per_node`` x ``gpu_id`` without a server; the average at the assumptions' utilisation and non-GPU
    power (the TCO defaults when none are given)."""
    a = assumptions or TcoAssumptions()
    server = catalog.servers[server_id] if server_id else None
    gpu = catalog.gpus[server.gpu_id if server is not None else str(gpu_id)]
    count = int(server.gpu_count) if server is not None else int(gpus_per_node or 8)
    peak = node_peak_power_w(gpu, server, count) / 1000
    at_load = node_power_at_load_w(gpu, count, a.server_non_gpu_power_w, server) / 1000
    average = node_average_power_w(gpu, count, a.utilisation, a.server_non_gpu_power_w, server) / 1000
    return NodePower(peak_kw=float(peak), at_load_kw=float(at_load), average_kw=float(average),
                     utilisation=float(a.utilisation))


def rack_fit(catalog: Catalog, server_id: str, rack_kw: float | None = None,
             assumptions: TcoAssumptions | None = None) -> RackPlan:
    """How many nodes of ``server_id`` a rack of ``rack_kw`` holds (the pages' one default when ``None``)."""
    a = assumptions or TcoAssumptions()
    return plan_rack_for_server(server_id, rack_kw if rack_kw is not None else a.rack_kw, assumptions=a,
                                catalog=catalog)
