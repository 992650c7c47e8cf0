"""The compute network of an owned multi-node cluster, priced once (issue 32, one number one function): what
:func:`estimator.tco.ownership_tco` charges as networking capex and fabric power, so the estimate's cost to train,
the planner's cost ranking, ``/compare``, ``/tco`` and ``/cluster`` price the same network.

:func:`owned_network` is, in order:

* one node: no network (as the TCO always had it);
* the user's own figure, when they set ``networking_usd_per_node_ib_ndr`` / ``_roce`` for the chosen
  ``network_fabric`` (:meth:`estimator.tco.TcoAssumptions.networking_override`, pydantic's ``model_fields_set``): an
  explicit value wins, with no fabric power (their figure is all they told us);
* the designed fabric: :func:`estimator.cluster.design_cluster` for that server and node count, on the request's
  ``cluster`` choice when given, else by the server's GPU-fabric NIC speed and the TCO's ``network_fabric``
  (InfiniBand: NDR on 400G NICs, XDR on 800G, as the estimate's ``AUTO_FABRIC``; RoCE: ``roce-400`` / ``roce-800``):
  its parts' cost per node (``cost.fabric_usd_per_node``) and its switches' and switch-side optics' power
  (``power.fabric_w``, all year, as ``/cluster``'s TCO adds it); memoised per catalog and arguments as
  :func:`estimator.tco.run_cost.choose_basis` is;
* else the flat TCO assumption (``networking_usd_per_node``), with a note saying why no fabric was designed (no
  server, no GPU-fabric NIC, NICs no fabric choice takes, more nodes than three tiers hold, or unpriced switches,
  optics or cables: a fabric priced without them would understate the network).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from estimator.errors import InvalidRequestError
from estimator.memo import BoundedMemo
from estimator.messages import Money, Num, Text

if TYPE_CHECKING:
    from estimator.request import ClusterChoice
    from estimator.tco.assumptions import NetworkFabric, TcoAssumptions
    from hardware_catalog import Catalog, Server

__all__ = ["OwnedNetwork", "default_fabric", "designed_network", "owned_network", "tco_query"]

#: RoCE fabric choices by GPU-fabric NIC speed (Gb/s), for a TCO whose ``network_fabric`` is ``roce``
ROCE_FABRIC: Final[dict[float, str]] = {400.0: "roce-400", 800.0: "roce-800"}
#: InfiniBand fabric choices by GPU-fabric NIC speed (the estimate's ``AUTO_FABRIC``)
IB_FABRIC: Final[dict[float, str]] = {400.0: "ib-ndr", 800.0: "ib-xdr"}


class OwnedNetwork:
    """An owned cluster's compute network: capex per node, the power it draws all year (W, switches and their
    optics; node-side optics are in the nodes' supplies), the fabric choice designed (``None``: not designed) and a
    line saying which figure this is."""

    def __init__(self, usd_per_node: float, power_w: float, fabric: str | None, note: str | None) -> None:
        self.usd_per_node = usd_per_node
        self.power_w = power_w
        self.fabric = fabric
        self.note = note


_NONE: Final = OwnedNetwork(0.0, 0.0, None, None)
_DESIGNED: Final[BoundedMemo[tuple[object, ...], OwnedNetwork | str]] = BoundedMemo(4096)


def default_fabric(server: Server, network_fabric: NetworkFabric) -> str | None:
    """The fabric choice a TCO without a ``cluster`` choice designs: by the server's GPU-fabric NIC speed and
    ``network_fabric``; ``None`` when the server has no GPU-fabric NIC or NICs no choice takes."""
    from estimator.cluster.design import fabric_rails

    rails, gbit, _cages = fabric_rails(server)
    if not rails:
        return None
    return (ROCE_FABRIC if network_fabric == "roce" else IB_FABRIC).get(gbit)


def owned_network(catalog: Catalog, server_id: str | None, num_nodes: int, a: TcoAssumptions,
                  cluster: ClusterChoice | None = None) -> OwnedNetwork:
    """The network :func:`estimator.tco.ownership_tco` charges for ``num_nodes`` of ``server_id``: see the module
    docstring."""
    if num_nodes <= 1:
        return _NONE
    kind: NetworkFabric | None = None  # a named fabric's family picks which of the user's figures applies
    if cluster is not None and cluster.fabric is not None:
        kind = "roce" if cluster.fabric.startswith("roce") else "infiniband-ndr"
    override = a.networking_override(kind)
    if override is not None:
        return OwnedNetwork(override, 0.0, None, Text("Cluster network: your own figure, %(usd)s a node.",
                                                      usd=Money(override)))
    key = (id(catalog), str(getattr(catalog, "version", "")), server_id, num_nodes, a.network_fabric,
           None if cluster is None else (cluster.fabric, cluster.oversubscription, cluster.ufm))
    found = _DESIGNED.get(key)
    if found is None:
        found = _DESIGNED.remember(key, _design(catalog, server_id, num_nodes, a.network_fabric, cluster))
    if isinstance(found, OwnedNetwork):
        return found
    flat = a.networking_for(kind)
    return OwnedNetwork(flat, 0.0, None, Text("Cluster network: the TCO assumption of %(usd)s per node (no fabric "
                                              "designed: %(why)s).", usd=Money(flat), why=found))


def _design(catalog: Catalog, server_id: str | None, num_nodes: int, network_fabric: NetworkFabric,
            cluster: ClusterChoice | None) -> OwnedNetwork | str:
    """The designed network, or why none was designed."""
    server = catalog.servers.get(server_id) if server_id else None
    if server is None:
        return Text("no server chosen")
    try:
        return _design_for(catalog, server, num_nodes, network_fabric, cluster)
    except AttributeError:  # a catalog without NIC or fabric data (a test's, an override's)
        return Text("the catalog gives %(server)s no GPU-fabric NIC", server=server.name)


def _design_for(catalog: Catalog, server: Server, num_nodes: int, network_fabric: NetworkFabric,
                cluster: ClusterChoice | None) -> OwnedNetwork | str:
    from estimator.cluster import ClusterRequest, design_cluster

    kind = cluster.fabric if cluster is not None and cluster.fabric is not None else default_fabric(server,
                                                                                                     network_fabric)
    if kind is None:
        from estimator.cluster.design import fabric_rails

        rails, gbit, _cages = fabric_rails(server)
        if not rails:
            return Text("the catalog gives %(server)s no GPU-fabric NIC", server=server.name)
        return Text("no fabric choice takes %(server)s's %(gbit)s Gb/s GPU-fabric NICs", server=server.name,
                    gbit=Num(gbit, "g"))
    over = cluster.oversubscription if cluster is not None else 1.0
    ufm = cluster.ufm if cluster is not None else True
    try:
        req = ClusterRequest(server=server.id, num_nodes=num_nodes, fabric=kind, oversubscription=over, ufm=ufm)
        designed = design_cluster(req, catalog)
    except (InvalidRequestError, ValueError) as exc:  # a size three tiers do not hold, NICs of another speed
        return str(getattr(exc, "message", exc))
    unpriced = sorted({p.name for p in designed.parts
                       if p.kind in ("switch", "optic", "cable") and p.total_usd is None})
    if unpriced:
        return Text("the catalog has no price for %(parts)s", parts=", ".join(unpriced))
    return designed_network(float(designed.cost.fabric_usd_per_node), float(designed.power.fabric_w), kind,
                            designed.design.fabric_name)


def designed_network(usd_per_node: float, fabric_w: float, fabric: str, fabric_name: str) -> OwnedNetwork:
    """A designed fabric as the owned cluster's network: its cost per node and its switches' and switch-side
    optics' power (``/cluster``'s ``cost.fabric_usd_per_node`` and ``power.fabric_w``)."""
    note = Text("Cluster network: the designed %(fabric)s fabric at %(usd)s per node (its switches, optics and "
                "cables, as /cluster designs it), and its switches and optics drawing %(kw)s kW all year.",
                fabric=fabric_name, usd=Money(usd_per_node), kw=Num(fabric_w / 1000, ",.1f"))
    return OwnedNetwork(usd_per_node, fabric_w, fabric, note)


def tco_query(server_id: str, num_nodes: int, fabric: str, oversubscription: float, ufm: bool,
              usd_per_node: float, nic_gbit: float) -> dict[str, str]:
    """The ``/tco`` query that prices this designed fabric as the estimate and ``/cluster`` do: the server, the
    node count and the TCO's ``network_fabric``; the fabric's cost per node as an explicit networking figure only
    when ``/tco`` would design another fabric (it designs a non-blocking, UFM-managed fabric of the kind
    :func:`default_fabric` picks for ``nic_gbit`` NICs)."""
    roce = fabric.startswith("roce")
    query = {"server": server_id, "nodes": str(num_nodes), "a.network_fabric": "roce" if roce else "infiniband-ndr"}
    default = (ROCE_FABRIC if roce else IB_FABRIC).get(nic_gbit)
    if default != fabric or oversubscription != 1 or (not ufm and not roce):
        key = "a.networking_usd_per_node_roce" if roce else "a.networking_usd_per_node_ib_ndr"
        query[key] = f"{usd_per_node:.0f}"
    return query
