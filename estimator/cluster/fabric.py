"""The compute fabric of N nodes: rail-optimised leaf / spine (/ core) counts, links, cables and transceivers.

How the reference architectures build it (NVIDIA DGX H100 SuperPOD reference architecture, "Network fabrics";
the table is reproduced by ``tests/test_cluster_fabric.py``):

* **Rails.** Each of a node's R fabric NICs is a rail; NIC r of every node of a scalable unit (SU) goes to the
  same leaf, so a SU has R leaves. A leaf has ``radix / 2`` ports down and ``radix / 2`` up (non-blocking), so
  an SU holds ``radix / 2`` node slots: 32 with 64-port QM9700s. One slot of the cluster goes to the UFM (fabric
  manager) appliance, which takes :data:`UFM_LINKS` links (DGX H100 SuperPOD table: 1 SU = 31 nodes + UFM,
  252 node and UFM cables = 31 x 8 + 4).
* **Leaf uplinks** of a full SU are cabled in full (``radix / 2`` per leaf, or ``down / k`` with an explicit
  oversubscription k): 8 leaves x 32 = 256 leaf-spine cables per SU in the table.
* **Small clusters by their ports.** When every port (nodes x rails + the UFM's) fits one switch, one switch and
  no spine tier (NVIDIA DGX BasePOD reference architecture, NDR400 compute fabric: 2-8 DGX nodes on QM9700
  switches). Fewer nodes than one SU but more ports: the fewest leaves that divide the rails and hold their
  ports, each carrying whole rails, with the uplinks and spines those need (:func:`_within_one_unit`). A
  partial last SU of several: its leaves get the uplinks its nodes need (:func:`_last_unit_uplinks`). Full SUs
  come out as the table's.
* **Spines.** Every leaf reaches every spine with the same number of links, so the spine count divides the
  leaf's uplinks; the fewest spines whose ports hold all the leaves' uplinks: 4 spines for 1 SU (8 leaves x 8
  links), 8 for 2, 16 for 3 and 4 (3 SU: 24 leaves x 2 links = 48 ports of 64; 8 spines would need 96).
* **Two tiers up to the radix.** With one link per leaf per spine, a spine holds ``radix`` leaves: 64 leaves =
  8 SUs of 8 rails = 256 slots (2,048 GPUs with 64-port switches). Beyond it, a **third tier**: pods of
  ``radix / 2`` leaves (whole SUs) with up to ``uplinks`` spines each (the last pod as few as hold its leaves, by
  the same rule as two tiers), every spine ``radix / 2`` down and as many up, and
  core switches sized by ports (each spine's uplinks spread over the core group). The three-tier counts are this
  textbook fat tree (Al-Fares et al., SIGCOMM 2008: k-ary fat tree, k^3/4 hosts), not an NVIDIA table.
* **Cables**: one per link. **Transceivers**: a twin-port OSFP per two switch ports (QM9700: 32 cages = 64
  ports); on a node, one per cage (DGX: four twin-port cages for eight NICs; an HGX box with PCIe NICs: one
  single-port module per NIC).

Pure functions on ints; :mod:`estimator.cluster.design` prices, powers and racks the result.
"""

from __future__ import annotations

from typing import Final

from estimator.errors import InvalidRequestError

__all__ = ["MAX_OVERSUBSCRIPTION", "UFM_LINKS", "Topology", "design_topology", "leaf_ports", "spine_count"]

#: links of the UFM appliance into the compute fabric: DGX H100 SuperPOD table, 252 node + UFM cables for 31
#: nodes x 8 NICs (248) -> 4
UFM_LINKS: Final = 4
MAX_OVERSUBSCRIPTION: Final = 8.0


class Topology:
    """Switch and link counts of one compute fabric. ``tiers`` is 1 (one leaf), 2 (leaf/spine) or 3 (+ core)."""

    def __init__(self, nodes: int, rails: int, radix: int, tiers: int, units: int, leaves: int, spines: int,
                 cores: int, pods: int, leaf_down: int, leaf_up: int, node_links: int, ufm_links: int,
                 leaf_spine_links: int, spine_core_links: int, leaf_cages: int, spine_cages: int,
                 core_cages: int, slots_per_unit: int, rails_per_leaf: int = 1) -> None:
        self.nodes = nodes
        self.rails = rails
        self.radix = radix
        self.tiers = tiers
        self.units = units
        self.leaves = leaves
        self.spines = spines
        self.cores = cores
        self.pods = pods
        self.leaf_down = leaf_down
        self.leaf_up = leaf_up
        self.node_links = node_links
        self.ufm_links = ufm_links
        self.leaf_spine_links = leaf_spine_links
        self.spine_core_links = spine_core_links
        self.leaf_cages = leaf_cages
        self.spine_cages = spine_cages
        self.core_cages = core_cages
        self.slots_per_unit = slots_per_unit
        #: rails a leaf carries: 1 in a full scalable unit, several on the fewer leaves of a small cluster, all of
        #: them on one switch
        self.rails_per_leaf = rails_per_leaf
        #: a leaf tier within one scalable unit sized by the ports it needs (:func:`_within_one_unit`)
        self.by_ports = False
        #: uplinks of each leaf of the last scalable unit (fewer than ``leaf_up`` when that unit is partial)
        self.last_unit_up = leaf_up

    @property
    def switches(self) -> int:
        return self.leaves + self.spines + self.cores

    @property
    def switch_ports_used(self) -> int:
        """Switch ports with a cable: both ends of every inter-switch link, one end of every node / UFM link."""
        return self.node_links + self.ufm_links + 2 * self.leaf_spine_links + 2 * self.spine_core_links

    @property
    def cables(self) -> int:
        return self.node_links + self.ufm_links + self.leaf_spine_links + self.spine_core_links


def leaf_ports(radix: int, oversubscription: float) -> tuple[int, int]:
    """Ports down (to nodes) and up (to spines) of a leaf: the most downlinks ``d`` with ``d + ceil(d / k)`` within
    the radix. Non-blocking (k = 1): half and half (QM9700: 32 / 32)."""
    down = radix // 2
    for d in range(radix - 1, 0, -1):
        if d + _ceil_div_f(d, oversubscription) <= radix:
            down = d
            break
    return down, _ceil_div_f(down, oversubscription)


def _ceil_div_f(a: int, k: float) -> int:
    q = a / k
    n = int(q)
    return n if n >= q - 1e-9 else n + 1


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def spine_count(leaves: int, uplinks: int, radix: int) -> int:
    """The fewest spines ``s`` that divide a leaf's ``uplinks`` (every leaf the same links to every spine) and whose
    ports hold them all (``leaves x uplinks / s <= radix``); 0 when none does (a third tier is needed)."""
    for s in range(1, uplinks + 1):
        if uplinks % s == 0 and leaves * (uplinks // s) <= radix:
            return s
    return 0


def design_topology(nodes: int, rails: int, radix: int, oversubscription: float = 1.0, ufm: bool = True
                    ) -> Topology:
    """The rail-optimised fabric of ``nodes`` nodes with ``rails`` fabric NICs each on ``radix``-port switches.

    Raises :class:`InvalidRequestError` naming ``num_nodes`` (0 nodes, or more than three tiers hold),
    ``oversubscription`` or ``server`` (more rails than a leaf has ports)."""
    if nodes < 1:
        raise InvalidRequestError(f"num_nodes must be at least 1, not {nodes}", "num_nodes")
    if not 1.0 <= oversubscription <= MAX_OVERSUBSCRIPTION:
        raise InvalidRequestError(
            f"oversubscription must be between 1 (non-blocking) and {MAX_OVERSUBSCRIPTION:g}, not "
            f"{oversubscription:g}", "oversubscription")
    if rails < 1:
        raise InvalidRequestError("the server has no GPU-fabric NIC to build a compute fabric on", "server")
    down, up = leaf_ports(radix, oversubscription)
    if rails > radix:
        raise InvalidRequestError(f"the server has {rails} fabric ports, more than a {radix}-port switch has",
                                  "server")
    ufm_links = UFM_LINKS if ufm else 0
    slots = nodes + (1 if ufm else 0)
    per_rail = _ceil_div(slots, down)  # scalable units: one leaf per rail each
    leaves = per_rail * rails
    node_links = nodes * rails
    leaf_cages = _leaf_cages(nodes, rails, down, per_rail, ufm_links) + leaves * _ceil_div(up, 2)
    if leaves == 1 or node_links + ufm_links <= radix:  # every port on one switch: no spine tier
        return Topology(nodes, rails, radix, 1, 1, 1, 0, 0, 1, radix, 0, node_links, ufm_links, 0, 0,
                        _ceil_div(node_links + ufm_links, 2), 0, 0, down, rails_per_leaf=rails)
    if per_rail == 1:
        sized = _within_one_unit(nodes, rails, radix, down, oversubscription, node_links, ufm_links)
        if sized is not None:
            return sized
    spines = spine_count(leaves, up, radix)
    leaf_spine = leaves * up
    if spines > 0:
        last = _last_unit_uplinks(slots - (per_rail - 1) * down, down, up, oversubscription, leaves - rails, rails,
                                  radix)
        last_up = up
        if last is not None:
            spines, last_up = last
            leaf_spine = (leaves - rails) * up + rails * last_up
            leaf_cages -= rails * (_ceil_div(up, 2) - _ceil_div(last_up, 2))
        spine_cages = spines * _ceil_div(leaf_spine // spines, 2)
        topo = Topology(nodes, rails, radix, 2, per_rail, leaves, spines, 0, 1, down, up, node_links, ufm_links,
                        leaf_spine, 0, leaf_cages, spine_cages, 0, down)
        topo.last_unit_up = last_up
        return topo
    return _three_tier(nodes, rails, radix, down, up, per_rail, node_links, ufm_links, leaf_cages)


def _last_unit_uplinks(last_slots: int, down: int, up: int, oversubscription: float, full_leaves: int, rails: int,
                       radix: int) -> tuple[int, int] | None:
    """(spines, uplinks of each of the last unit's leaves) when the last of several scalable units is partial: its
    leaves carry ``last_slots`` nodes each and get the uplinks those need (``ceil(d / k)``), rounded up to a multiple
    of the spine count; the fewest spines dividing a full leaf's ``up`` whose ports hold every leaf's links. ``None``
    when the last unit is full (the reference architecture's table: every leaf ``up`` links)."""
    if last_slots >= down or full_leaves < 1:
        return None
    need = _ceil_div_f(max(1, last_slots), oversubscription)
    for spines in (n for n in range(1, up + 1) if up % n == 0):
        last_up = _ceil_div(need, spines) * spines
        if last_up <= up and (full_leaves * up + rails * last_up) // spines <= radix:
            return spines, last_up
    return None


def _within_one_unit(nodes: int, rails: int, radix: int, down: int, oversubscription: float, node_links: int,
                     ufm_links: int) -> Topology | None:
    """Fewer nodes than one scalable unit holds, more ports than one switch has: a leaf tier sized by the ports.

    The fewest leaves ``L`` (a divisor of the rails, so every leaf carries ``rails / L`` whole rails: NIC r of every
    node still meets the others' NIC r on one leaf) whose downlinks hold each leaf's nodes' ports and its share of
    the UFM's links; every leaf the same uplinks ``ceil(d / k)`` for its most-loaded ``d`` downlinks; the fewest
    spines whose ports hold them, each leaf's uplinks rounded up to a multiple of the spine count so that every
    leaf reaches every spine with the same links. A full unit comes out as the reference architecture's (one leaf
    per rail, ``radix / 2`` uplinks each, 4 spines on 64 ports); ``None`` when no leaf count fits (the caller keeps
    the scalable-unit design)."""
    for leaves in (n for n in range(2, rails + 1) if rails % n == 0):
        per_leaf = rails // leaves
        loads = [nodes * per_leaf + ufm_links // leaves + (1 if i < ufm_links % leaves else 0)
                 for i in range(leaves)]
        if max(loads) <= down:
            break
    else:
        return None
    most = max(loads)
    up = _ceil_div_f(most, oversubscription)
    for spines in range(max(1, _ceil_div(leaves * up, radix)), leaves * up + 1):
        links = _ceil_div(up, spines) * spines
        if most + links <= radix and leaves * links // spines <= radix:
            break
    else:
        return None
    leaf_spine = leaves * links
    leaf_cages = leaves * _ceil_div(nodes * per_leaf, 2) + _ceil_div(ufm_links, 2) + leaves * _ceil_div(links, 2)
    spine_cages = spines * _ceil_div(leaf_spine // spines, 2)
    topo = Topology(nodes, rails, radix, 2, 1, leaves, spines, 0, 1, down, links, node_links, ufm_links, leaf_spine,
                    0, leaf_cages, spine_cages, 0, down, rails_per_leaf=per_leaf)
    topo.by_ports = True
    return topo


def _leaf_cages(nodes: int, rails: int, down: int, per_rail: int, ufm_links: int) -> int:
    """Twin-port cages for the leaves' downlinks: rail by rail, SU by SU (the last one partial), then the UFM's."""
    cages = 0
    for unit in range(per_rail):
        in_unit = min(down, nodes - unit * down)
        if in_unit > 0:
            cages += rails * _ceil_div(in_unit, 2)
    return cages + _ceil_div(ufm_links, 2)


def _three_tier(nodes: int, rails: int, radix: int, down: int, up: int, per_rail: int, node_links: int,
                ufm_links: int, leaf_cages: int) -> Topology:
    spine_down = radix // 2
    units_per_pod = spine_down // rails
    if units_per_pod < 1:
        raise InvalidRequestError(f"{rails} rails do not fit a {radix}-port spine's {spine_down} downlinks",
                                  "server")
    pods = _ceil_div(per_rail, units_per_pod)
    if pods > radix:
        most = radix * units_per_pod * down - (1 if ufm_links else 0)
        raise InvalidRequestError(
            f"{nodes:,} nodes need {pods} pods; a three-tier fabric of {radix}-port switches holds {radix} pods "
            f"({most:,} nodes)", "num_nodes")
    leaves = per_rail * rails
    spines = 0
    for pod in range(pods):  # a full pod has `up` spines; the last one as few as hold its leaves
        pod_leaves = min(units_per_pod, per_rail - pod * units_per_pod) * rails
        spines += spine_count(pod_leaves, up, spine_down)
    leaf_spine = leaves * up
    spine_core = leaf_spine  # non-blocking spines: as many links up as down
    cores = _ceil_div(spine_core, radix)
    spine_cages = 2 * _ceil_div(leaf_spine, 2)  # each spine: its downlinks and as many uplinks, in pairs
    core_cages = _ceil_div(spine_core, 2)
    return Topology(nodes, rails, radix, 3, per_rail, leaves, spines, cores, pods, down, up, node_links, ufm_links,
                    leaf_spine, spine_core, leaf_cages, spine_cages, core_cages, down)
