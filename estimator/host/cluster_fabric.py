"""The compute fabric of a multi-node estimate (issue 32): one call of :func:`estimator.cluster.design_cluster`, the
function behind ``POST /api/v1/clusters`` and the ``/cluster`` page, so the estimate, its bill of materials, its
fabric TCO and rack plan, and every quote saved from it show the same figures as ``/cluster`` for the same server,
node count and fabric.

* :func:`estimate_fabric`: the fabric of ``num_nodes`` x the bill of materials' server on the request's
  ``cluster.fabric`` (null: InfiniBand NDR on 400G GPU-fabric NICs, XDR on 800G ones), with its oversubscription
  and UFM choice; ``None`` on one node or without a server. A fabric the request names that the server cannot
  take (NICs of another speed, more nodes than three tiers hold) is an :class:`InvalidRequestError` naming the
  request's field; without a choice the estimate goes on without a designed fabric and says why.
* :func:`with_fabric_lines`: the bill of materials with the designed fabric's switches, optics, cables and UFM
  appliance in place of the host sizing's simple switch count (:func:`estimator.host.bom.switch_counts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from estimator.cluster import ClusterRequest, design_cluster
from estimator.cluster.design import fabric_rails
from estimator.errors import InvalidRequestError
from estimator.host.bom import is_switch_count_line
from estimator.messages import Money, Num, Text
from estimator.request import ClusterChoice, EstimateRequest, FabricKind
from estimator.response import EstimateFabric
from estimator.tco.network import owned_network
from estimator.tco.run_cost_models import CostChoice, CostResult

if TYPE_CHECKING:
    from hardware_catalog import Catalog, Server

__all__ = ["AUTO_FABRIC", "estimate_fabric", "with_cost_note", "with_fabric_lines"]

#: the fabric a request without ``cluster.fabric`` gets, by its server's GPU-fabric NIC speed (Gb/s):
#: ``POST /api/v1/clusters``' default (InfiniBand NDR) where the NICs run at 400G, XDR where they run at 800G
AUTO_FABRIC: Final[dict[float, FabricKind]] = {400.0: "ib-ndr", 800.0: "ib-xdr"}

#: the cluster request's field -> the estimate request's field it comes from
_FIELDS: Final[dict[str, str]] = {"fabric": "cluster.fabric", "oversubscription": "cluster.oversubscription",
                                  "ufm": "cluster.ufm", "num_nodes": "hardware.num_nodes",
                                  "server": "hardware.server", "rack_kw": "host.rack_kw_budget"}

_DEFAULT_CHOICE: Final = ClusterChoice()


def cluster_request(req: EstimateRequest, server: Server, num_nodes: int) -> ClusterRequest | None:
    """The cluster request of this estimate (what ``POST /api/v1/clusters`` is asked), or ``None`` when no fabric
    choice fits the server's GPU-fabric NICs and the request names none."""
    choice = req.cluster if req.cluster is not None else _DEFAULT_CHOICE
    kind = choice.fabric
    if kind is None:
        rails, gbit, _cages = fabric_rails(server)
        kind = AUTO_FABRIC.get(gbit) if rails else None
        if kind is None:
            return None
    rack_kw = req.host.rack_kw_budget if req.host is not None else None
    return ClusterRequest(server=server.id, num_nodes=num_nodes, fabric=kind,
                          oversubscription=choice.oversubscription, ufm=choice.ufm, rack_kw=rack_kw)


def estimate_fabric(req: EstimateRequest, server: Server | None, num_nodes: int,
                    catalog: Catalog) -> tuple[EstimateFabric | None, list[str]]:
    """(the fabric, notes for the response's assumptions: why none was designed): see the module docstring."""
    if num_nodes <= 1 or server is None:
        return None, []
    creq = cluster_request(req, server, num_nodes)
    if creq is None:
        rails, gbit, _cages = fabric_rails(server)
        why = (Text("its %(gbit)s Gb/s GPU-fabric NICs are not what a fabric choice takes without one named "
                    "(request.cluster.fabric)", gbit=f"{gbit:g}") if rails
               else Text("the catalog gives it no GPU-fabric NIC"))
        return None, [Text("No compute fabric designed for %(server)s: %(why)s; the bill of materials counts 64-port "
                           "switches by the two-tier rule", server=server.name, why=why)]
    try:
        designed = design_cluster(creq, catalog)
    except InvalidRequestError as exc:
        if req.cluster is not None and req.cluster.fabric is not None:
            raise InvalidRequestError(exc.message, _FIELDS.get(exc.field or "", "cluster")) from None
        return None, [Text("No compute fabric designed: %(why)s; the bill of materials counts 64-port switches by "
                           "the two-tier rule", why=exc.message)]
    fabric = EstimateFabric(request=creq, design=designed.design,
                            parts=[p for p in designed.parts if p.kind != "server"], power=designed.power,
                            rack=designed.rack, cost=designed.cost, tco=designed.tco)
    return fabric, []


def with_cost_note(fabric: EstimateFabric, req: EstimateRequest, cost: CostResult | None,
                   catalog: Catalog) -> EstimateFabric:
    """``fabric`` with a note when the run is priced as owned on this fabric's server: the run's cost basis prices
    the cluster network with :func:`estimator.tco.network.owned_network` (through :func:`estimator.tco.ownership_tco`),
    which is this same fabric (its parts' cost per node and its switches' and optics' power, as ``fabric.tco``), or
    says which other figure it took and why (the fabric has unpriced parts)."""
    if cost is None or cost.basis != "own" or cost.server_id != fabric.request.server:
        return fabric
    a = (req.cost or CostChoice()).tco_assumptions()
    net = owned_network(catalog, cost.server_id, fabric.request.num_nodes, a, req.cluster)
    if net.fabric == fabric.request.fabric and abs(net.usd_per_node - fabric.cost.fabric_usd_per_node) < 1e-6:
        note = Text("The cost to train prices the cluster network at this fabric: %(designed)s per node for its "
                    "parts, and its switches and optics drawing %(kw)s kW all year (as the TCO with this fabric does)",
                    designed=Money(fabric.cost.fabric_usd_per_node), kw=Num(fabric.power.fabric_w / 1000, ",.1f"))
    else:
        note = Text("The cost to train does not price this fabric: %(which)s", which=net.note or "")
    return fabric.model_copy(update={"notes": [*fabric.notes, note]})


def with_fabric_lines(items: list[dict[str, object]], fabric: EstimateFabric) -> list[dict[str, object]]:
    """``items`` with the simple switch and cable lines replaced by the fabric's parts, one line each (its
    ``fabric_role`` says where the part sits: leaf, spine, core, node side, node-leaf, ...)."""
    kept = [i for i in items if not is_switch_count_line(i)]
    for p in fabric.parts:
        source: object = f"catalog: {p.source}" if p.source else Text("no catalog source")
        kept.append({"item": Text("Fabric, %(role)s: %(name)s", role=p.role, name=p.name), "sku": p.sku,
                     "quantity": p.quantity, "unit_price_usd": p.unit_price_usd, "source": source,
                     "fabric_role": p.role})
    return kept
