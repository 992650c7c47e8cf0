"""A cluster's compute fabric as parts, power, racks and money: :func:`design_cluster`.

The topology comes from :mod:`estimator.cluster.fabric`; every part, its power and its price from the catalog's
``fabric.yaml`` (switches, optics, cables, each with its sources); nodes' power and racks from
:mod:`estimator.facility.rack`; the ownership TCO from :mod:`estimator.tco` with the designed fabric's cost as its
networking capex (in place of the flat ``networking_usd_per_node`` assumption) and the fabric's own power added.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final, Literal

from estimator.cluster.contract import (
    ClusterCost,
    ClusterDesign,
    ClusterPower,
    ClusterRack,
    ClusterRequest,
    ClusterResponse,
    ClusterTco,
    FabricChoice,
    OtherFabric,
    PartLine,
)
from estimator.cluster.fabric import Topology, design_topology
from estimator.cluster.scaling import scaling_curve
from estimator.errors import InvalidRequestError, UnknownHardwareError
from estimator.facility.rack import (
    DEFAULT_RACK_UNITS,
    default_rack_kw,
    node_peak_power_w,
    plan_rack_for_server,
    racks_needed,
)
from estimator.training.comm import scale_up_gpus
from hardware_catalog import UnknownCatalogIdError

if TYPE_CHECKING:
    from hardware_catalog import Cable, Catalog, Optic, Server, Switch

__all__ = ["PROFILES", "FabricProfile", "design_cluster", "fabric_rails", "nccl_commands"]

#: rack units of a network rack kept for patch panels and cable management (assumption, stated on the page)
PATCH_UNITS: Final = 2


class FabricProfile:
    """Which catalog parts one fabric choice uses."""

    def __init__(self, name: str, switch: str, gbit: float, switch_optic: str, node_twin_optic: str | None,
                 node_optic: str, cable: str, ufm: bool) -> None:
        self.name = name
        self.switch = switch
        self.gbit = gbit
        self.switch_optic = switch_optic
        self.node_twin_optic = node_twin_optic
        self.node_optic = node_optic
        self.cable = cable
        self.ufm = ufm


#: the four fabric choices: InfiniBand (NVIDIA DGX SuperPOD reference architecture) and Spectrum-X Ethernet
#: (NVIDIA HGX AI factory reference architecture: SN5600, 64 x 800G / 128 x 400G)
PROFILES: Final[dict[str, FabricProfile]] = {
    "ib-ndr": FabricProfile("InfiniBand NDR 400G (Quantum-2 QM9700)", "nvidia-qm9700", 400.0, "mms4x00-ns",
                            "mms4x00-ns-flt", "mms4x00-ns400", "mfp7e30", True),
    "ib-xdr": FabricProfile("InfiniBand XDR 800G (Quantum-X800 Q3400)", "nvidia-q3400", 800.0,
                            "osfp-1p6t-twin-xdr", None, "osfp-800g-node", "mfp7e30", True),
    "roce-400": FabricProfile("Spectrum-X RoCE 400GbE (Spectrum-4 SN5600, 128 x 400G)", "nvidia-sn5600", 400.0,
                              "mms4x00-ns", "mms4x00-ns-flt", "mms4x00-ns400", "mfp7e30", False),
    "roce-800": FabricProfile("Spectrum-X RoCE 800GbE (Spectrum-4 SN5600, 64 x 800G)", "nvidia-sn5600", 800.0,
                              "osfp-800g-eth", None, "osfp-800g-node", "mfp7e30", False),
}


def fabric_rails(server: Server) -> tuple[int, float, int]:
    """(GPU-fabric ports per node, their Gb/s, the cages they leave the node by); none for a server of a catalog
    without NIC data (a test's minimal catalog)."""
    nics = [n for n in getattr(server, "nics", ()) if n.purpose == "gpu-fabric"]
    rails = sum(int(n.count) for n in nics)
    gbit = max((float(n.gbps) for n in nics), default=0.0)
    cages = sum(int(n.cages) if n.cages is not None else int(n.count) for n in nics)
    return rails, gbit, cages


def _first_source(entry: Server | Switch | Optic | Cable, field: str = "price_usd") -> str:
    sources = entry.sources_for(field)
    return str(sources[0].citation) if sources else ""


def _line(kind: Literal["switch", "optic", "cable"], entry: Switch | Optic | Cable, role: str, quantity: int,
          rack_units: int = 0) -> PartLine:
    price = entry.price_usd
    power = getattr(entry, "power_w", None)
    return PartLine(kind=kind, sku=entry.id, name=entry.name, role=role, quantity=quantity,
                    unit_price_usd=price, total_usd=None if price is None else price * quantity,
                    unit_power_w=power, total_power_w=None if power is None else float(power) * quantity,
                    rack_units=rack_units * quantity, source=_first_source(entry, "price_usd" if price else "id"))


def _lookup(catalog: Catalog, req: ClusterRequest) -> tuple[Server, FabricProfile, Switch, Optic, Optic | None, Optic,
                                                             Cable]:
    try:
        server = catalog.server(req.server)
    except UnknownCatalogIdError as exc:
        raise UnknownHardwareError(str(exc), "server") from None
    profile = PROFILES[req.fabric]
    return (server, profile, catalog.switch(profile.switch), catalog.optic(profile.switch_optic),
            catalog.optic(profile.node_twin_optic) if profile.node_twin_optic else None,
            catalog.optic(profile.node_optic), catalog.cable(profile.cable))


def _radix(req: ClusterRequest, switch: Switch, gbit: float) -> int:
    full = switch.radix(gbit)
    if req.switch_ports is None:
        return full
    if req.switch_ports > full:
        raise InvalidRequestError(f"switch_ports={req.switch_ports} is more than the {switch.name} has at "
                                  f"{gbit:g} Gb/s ({full})", "switch_ports")
    return req.switch_ports


def design_cluster(req: ClusterRequest, catalog: Catalog) -> ClusterResponse:
    """The fabric of ``req.num_nodes`` x ``req.server`` on ``req.fabric``: design, parts, power, racks, cost, TCO.
    Bad sizes and combinations raise :class:`InvalidRequestError` naming the field."""
    server, profile, switch, s_optic, twin, single, cable = _lookup(catalog, req)
    rails, nic_gbit, cages = fabric_rails(server)
    if rails == 0:
        raise InvalidRequestError(f"{server.name} has no GPU-fabric NIC", "server")
    if abs(nic_gbit - profile.gbit) > 1e-9:
        raise InvalidRequestError(
            f"{server.name}'s GPU-fabric NICs run at {nic_gbit:g} Gb/s; the {profile.name} fabric needs "
            f"{profile.gbit:g} Gb/s NICs", "fabric")
    radix = _radix(req, switch, profile.gbit)
    ufm = req.ufm and profile.ufm
    topo = design_topology(req.num_nodes, rails, radix, req.oversubscription, ufm)
    twin_nodes = twin is not None and cages < rails
    parts = _parts(req, topo, server, switch, s_optic, twin if twin_nodes else None, single, cable, cages, ufm)
    design = _design(req, profile, switch, server, topo, radix, twin_nodes, parts)
    power = _power(catalog, server, req.num_nodes, parts)
    rack = _rack(catalog, req, parts, power)
    cost = _cost(server, req.num_nodes, parts)
    scaling = [] if req.job is None else scaling_curve(req.job, server, req.num_nodes, catalog,
                                                        req.scaling_threshold)
    return ClusterResponse(request=req, design=design, parts=parts, power=power, rack=rack, cost=cost,
                           tco=_tco(catalog, req, cost, power), other_fabrics=_other_fabrics(req.fabric),
                           scaling=scaling,
                           nccl_commands=nccl_commands(server, req.num_nodes, req.fabric),
                           catalog_version=catalog.version)


def _switch_modules(optic: Optic, ports: int, cages: int) -> int:
    """Switch-side modules for ``ports`` used ports: one per cage pair when the module is twin-port."""
    return cages if optic.ports == 2 else ports


def _parts(req: ClusterRequest, t: Topology, server: Server, switch: Switch, s_optic: Optic, twin: Optic | None,
           single: Optic, cable: Cable, cages: int, ufm: bool) -> list[PartLine]:
    out = [PartLine(kind="server", sku=server.id, name=server.name, role="compute node", quantity=req.num_nodes,
                    unit_price_usd=server.price_usd,
                    total_usd=None if server.price_usd is None else server.price_usd * req.num_nodes,
                    unit_power_w=None if server.max_power_kw is None else server.max_power_kw * 1000,
                    total_power_w=None if server.max_power_kw is None else server.max_power_kw * 1000 * req.num_nodes,
                    rack_units=server.rack_units * req.num_nodes, source=_first_source(server))]
    for role, count in (("leaf", t.leaves), ("spine", t.spines), ("core", t.cores)):
        if count:
            out.append(_line("switch", switch, role, count, switch.rack_units))
    leaf_ports = t.node_links + t.ufm_links + t.leaf_spine_links
    for role, ports, cages_used in (("leaf ports", leaf_ports, t.leaf_cages),
                                    ("spine ports", t.leaf_spine_links + t.spine_core_links, t.spine_cages),
                                    ("core ports", t.spine_core_links, t.core_cages)):
        if ports:
            out.append(_line("optic", s_optic, role, _switch_modules(s_optic, ports, cages_used)))
    if twin is not None:
        out.append(_line("optic", twin, "node side (twin-port cages)", req.num_nodes * cages))
    else:
        out.append(_line("optic", single, "node side (one per NIC)", t.node_links))
    if ufm:
        out.append(_line("optic", single, "UFM side", t.ufm_links))
        out.append(PartLine(kind="appliance", sku="nvidia-ufm-appliance", name="NVIDIA UFM fabric manager appliance",
                            role="fabric management (one node slot)", quantity=1, unit_price_usd=None,
                            total_usd=None, unit_power_w=None, total_power_w=None, rack_units=0,
                            source="DGX H100 SuperPOD reference architecture, network fabrics: 1 SU = 31 nodes + UFM"))
    out.append(_line("cable", cable, "node-leaf and UFM", t.node_links + t.ufm_links))
    if t.leaf_spine_links:
        out.append(_line("cable", cable, "leaf-spine", t.leaf_spine_links))
    if t.spine_core_links:
        out.append(_line("cable", cable, "spine-core", t.spine_core_links))
    return out


def _shape_notes(t: Topology) -> list[str]:
    """What shape the fabric took: one switch, a leaf tier sized by the ports, or whole scalable units."""
    if t.tiers == 1:
        return [f"one switch: all {t.node_links + t.ufm_links} ports ({t.nodes} nodes x {t.rails} rails"
                + (f" + {t.ufm_links} UFM" if t.ufm_links else "") + f") fit its {t.radix}, so no spine tier "
                "(NVIDIA DGX BasePOD: 2-8 DGX nodes on a QM9700 compute fabric)"]
    if t.by_ports and t.rails_per_leaf > 1:
        return [f"fewer nodes than a scalable unit of {t.slots_per_unit} slots: {t.leaves} leaves of "
                f"{t.rails_per_leaf} rails each (NIC r of every node on the same leaf), sized by the ports",
                f"{t.leaf_up} uplinks a leaf and {t.spines} spine(s): as many as the leaves' downlinks need"]
    if t.by_ports and t.leaf_up < t.leaf_down:
        return [f"rail-optimised: {t.rails} rails, one leaf per rail; fewer nodes than a scalable unit of "
                f"{t.slots_per_unit} slots, so {t.leaf_up} uplinks a leaf and {t.spines} spine(s), as many "
                "as the nodes' ports need"]
    notes = [f"rail-optimised: {t.rails} rails, one leaf per rail in each scalable unit of {t.slots_per_unit} node "
             "slots"]
    if t.tiers == 2 and t.last_unit_up < t.leaf_up:
        notes.append(f"the last unit is partial: its {t.rails} leaves have {t.last_unit_up} uplinks each (as many as "
                     f"its nodes need, a multiple of the {t.spines} spines), the full units' {t.leaf_up}")
    else:
        notes.append("leaf uplinks cabled in full, as the reference architecture's scalable units are")
    return notes


def _count(parts: list[PartLine], kind: str, role_prefix: str = "") -> int:
    return sum(p.quantity for p in parts if p.kind == kind and p.role.startswith(role_prefix))


def _design(req: ClusterRequest, profile: FabricProfile, switch: Switch, server: Server, t: Topology, radix: int,
            twin: bool, parts: list[PartLine]) -> ClusterDesign:
    notes = _shape_notes(t)
    if t.tiers == 3:
        notes.append(f"three tiers: past the two-tier limit of {radix} leaves; {t.pods} pods with core switches sized "
                     "by ports (fat-tree arithmetic, not an NVIDIA table)")
    if req.oversubscription > 1:
        notes.append(f"oversubscribed {req.oversubscription:g}:1 at the leaves: traffic between leaves gets "
                     f"1/{req.oversubscription:g} of the node bandwidth")
    if req.ufm and not profile.ufm:
        notes.append("no UFM on an Ethernet fabric (Spectrum-X is managed by the switches' own software)")
    domain = server.nvlink_domain
    domain_nodes = scale_up_gpus(server, server.gpu_count) // server.gpu_count
    domains = math.ceil(req.num_nodes / domain_nodes)
    if domain_nodes > 1:
        notes.append(f"NVLink domain of {domain} GPUs over {domain_nodes} nodes: tensor, expert and context "
                     f"parallelism up to {domain} ranks stay on NVLink, so this fabric joins {domains} domain(s) "
                     "and carries data parallelism and pipeline stages only")
        if req.num_nodes % domain_nodes:
            notes.append(f"{req.num_nodes} nodes are not a whole number of {domain_nodes}-node domains: the last "
                         f"domain is partial ({req.num_nodes % domain_nodes} nodes)")
    return ClusterDesign(
        nvlink_domain_nodes=domain_nodes, nvlink_domains=domains,
        fabric=req.fabric, fabric_name=profile.name, switch=switch.id, switch_name=switch.name, radix=radix,
        link_gbit=profile.gbit, rails=t.rails, twin_port_node_cages=twin, tiers=t.tiers, scalable_units=t.units,
        slots_per_unit=t.slots_per_unit, pods=t.pods, leaves=t.leaves, spines=t.spines, cores=t.cores,
        switches=t.switches, leaf_down_ports=t.leaf_down, leaf_up_ports=t.leaf_up,
        oversubscription=req.oversubscription, node_links=t.node_links, ufm_links=t.ufm_links,
        leaf_spine_links=t.leaf_spine_links, spine_core_links=t.spine_core_links,
        node_and_ufm_cables=t.node_links + t.ufm_links, cables=t.cables,
        switch_transceivers=_count(parts, "optic", "leaf") + _count(parts, "optic", "spine")
        + _count(parts, "optic", "core"),
        node_transceivers=_count(parts, "optic", "node") + _count(parts, "optic", "UFM"),
        gpus=req.num_nodes * server.gpu_count, nvlink_domain_gpus=domain, notes=notes)


def _sum_w(parts: list[PartLine], kind: str, node_side: bool | None = None) -> float:
    total = 0.0
    for p in parts:
        if p.kind != kind or p.total_power_w is None:
            continue
        is_node = p.role.startswith("node") or p.role.startswith("UFM")
        if node_side is None or node_side == is_node:
            total += p.total_power_w
    return total


def _power(catalog: Catalog, server: Server, nodes: int, parts: list[PartLine]) -> ClusterPower:
    gpu = catalog.gpu(server.gpu_id)
    switches = _sum_w(parts, "switch")
    switch_optics = _sum_w(parts, "optic", node_side=False)
    node_optics = _sum_w(parts, "optic", node_side=True)
    nodes_w = node_peak_power_w(gpu, server, server.gpu_count) * nodes
    return ClusterPower(switches_w=switches, switch_optics_w=switch_optics, fabric_w=switches + switch_optics,
                        node_optics_w=node_optics, nodes_w=nodes_w,
                        total_kw=(nodes_w + switches + switch_optics) / 1000)


def _rack_kw(catalog: Catalog, req: ClusterRequest) -> float:
    if req.rack_kw is not None:
        return req.rack_kw
    return default_rack_kw(catalog)


def _rack(catalog: Catalog, req: ClusterRequest, parts: list[PartLine], power: ClusterPower) -> ClusterRack:
    rack_kw = _rack_kw(catalog, req)
    plan = plan_rack_for_server(req.server, rack_kw, catalog=catalog)
    if plan.nodes_per_rack == 0:
        raise InvalidRequestError(f"one {req.server} node does not fit a {rack_kw:g} kW rack (power or space): "
                                  "raise rack_kw", "rack_kw")
    compute = racks_needed(req.num_nodes, plan)
    switch_units = sum(p.rack_units for p in parts if p.kind == "switch")
    by_space = math.ceil(switch_units / (DEFAULT_RACK_UNITS - PATCH_UNITS))
    by_power = math.ceil(power.fabric_w / 1000 / rack_kw)
    network = max(by_space, by_power, 1)
    return ClusterRack(nodes_per_rack=plan.nodes_per_rack, compute_racks=compute, switch_rack_units=switch_units,
                       network_racks=network, rack_kw=rack_kw, network_rack_kw=power.fabric_w / 1000 / network)


def _cost(server: Server, nodes: int, parts: list[PartLine]) -> ClusterCost:
    fabric = [p for p in parts if p.kind != "server"]
    usd = sum(p.total_usd for p in fabric if p.total_usd is not None)
    unpriced = sorted({p.name for p in fabric if p.total_usd is None})
    servers = None if server.price_usd is None else server.price_usd * nodes
    return ClusterCost(fabric_usd=usd, fabric_usd_per_node=usd / nodes,
                       fabric_usd_per_gpu=usd / (nodes * server.gpu_count), servers_usd=servers,
                       total_usd=None if servers is None else servers + usd, unpriced_parts=unpriced)


def _tco(catalog: Catalog, req: ClusterRequest, cost: ClusterCost, power: ClusterPower) -> ClusterTco | None:
    """The ownership TCO with this fabric as the cluster network (its parts' cost per node as the networking capex,
    its switches' and optics' power all year): :func:`estimator.tco.ownership_tco` given the network just designed,
    the one place the estimate's cost to train, ``/tco`` and the planner take it from too
    (:func:`estimator.tco.network.owned_network`)."""
    from estimator.tco import HOURS_PER_YEAR, TcoAssumptions, ownership_tco, power_cost_usd
    from estimator.tco.network import designed_network

    server = catalog.server(req.server)
    if server.price_usd is None:
        return None
    per_node = cost.fabric_usd_per_node
    a = TcoAssumptions(rack_kw=_rack_kw(catalog, req))
    net = designed_network(per_node, power.fabric_w, req.fabric, PROFILES[req.fabric].name)
    own = ownership_tco(req.server, req.num_nodes, a, catalog, network=net)
    years = int(own.years)
    fabric_power = float(own.opex_per_year.network_power_usd)
    nodes_power = power_cost_usd(own.opex_per_year.average_power_kw, HOURS_PER_YEAR, a.pue, a.electricity_usd_per_kwh)
    note = ("capex: the servers at the catalog price and this fabric's parts (as the TCO's networking); opex: the "
            "TCO's power, colocation, maintenance and staff, plus the fabric's switches and optics running all year")
    if req.num_nodes == 1:
        note += "; one node has no fabric cost in the TCO"
    return ClusterTco(years=years, capex_usd=float(own.capex.total_usd), fabric_power_usd_per_year=fabric_power,
                      nodes_power_usd_per_year=nodes_power, total_usd=float(own.total_usd), note=note)


def _other_fabrics(fabric: FabricChoice) -> list[OtherFabric]:
    return [
        OtherFabric(name="storage fabric", purpose="shared file system / object storage traffic",
                    note="separate from the compute fabric and sized with the storage system (NVIDIA's "
                         "reference architectures: a converged Ethernet fabric, 2 x 200-400 GbE per node); not sized "
                         "here"),
        OtherFabric(name="in-band management / converged Ethernet", purpose="provisioning, users, job control",
                    note="the nodes' frontend ports on a separate leaf pair per rack group; not sized here"),
        OtherFabric(name="out-of-band management", purpose="BMC (IPMI/Redfish) and switch management ports",
                    note="1 GbE management switches, one per rack; not sized here"),
    ]


def nccl_commands(server: Server, nodes: int, fabric: str) -> list[str]:
    """nccl-tests command lines to run on the delivered nodes (the planner's exports give the same)."""
    from estimator.planner.exports.nccl import nccl_tests_commands

    return nccl_tests_commands(server.gpu_count, nodes, fabric.startswith("ib"),
                               scale_up_gpus(server, server.gpu_count))
