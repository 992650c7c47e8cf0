"""Collective communication: an alpha-beta model with NCCL's algorithm factors and measured bus bandwidths.

``t = alpha + S * factor(n) / busbw`` (Hockney's alpha-beta model; factors from ``NVIDIA/nccl-tests``
``doc/PERFORMANCE.md``): all-reduce ``2(n-1)/n``, all-gather and reduce-scatter ``(n-1)/n``, all-to-all
``(n-1)/n``, send/recv ``1``. ``busbw`` is what nccl-tests measures, not the link's line rate
(``../shared/reference/hardware-facts.md`` Sec. 2.2):

- NVSwitch, NVLink 4 (8x H100/H200): all-reduce ~475-480 GB/s (NVLS), ring and the other collectives ~370 GB/s
  (nccl-tests#212, #272, #290). NVLink 3 (8x A100): 200-208 GB/s (nccl-tests#149, #178). Other NVLink rates
  (B200's NVLink 5) scale the NVLink-4 figures by the per-GPU link rate (assumption).
- NVLink bridge pairs (H100 PCIe/NVL): ~116 GB/s within a pair (nccl#1161); beyond a pair and on PCIe-only
  servers the ring runs over PCIe at ``PCIE_RING_EFF`` of one direction of the GPU's x16 link (assumption:
  no nccl-tests figure in the references).
- Between nodes: each GPU's share of the node's NICs (count x speed; the compute-fabric NICs, else whatever
  NICs the server lists, see :func:`node_nics`) at ``NIC_EFF`` = 0.9 (46-48 GB/s per
  400G NDR NIC, nccl-tests#290; 85-96 of 100 GB/s for 4x HDR, nccl-tests#119). A ring spanning nodes with
  ``r`` of its ranks on each node moves ``r / gpus_per_node`` of the node's NIC bandwidth; groups placed one
  GPU per node (data parallel across TP=8 nodes) use one NIC each. NCCL picks a ring or a tree: the tree has
  ``log2(nodes)`` latency hops instead of ``nodes - 1`` and the same bandwidth term at scale.
- The scale-up domain: groups within it use the NVLink figures, groups that cross it the NICs. It is the node,
  or the NVLink domain when the catalog says it spans nodes (``Server.nvlink_domain_gpus``: GB200 / GB300 NVL72,
  72 GPUs over 18 four-GPU trays; NVIDIA DGX GB200 user guide). The NVL72's domain takes the scaled NVLink-5
  figure (all-reduce 950 GB/s): one published multi-node NVLink run, 8 GB200 GPUs over 2 trays, measured about
  811 GB/s (lixueduan.com, "GB200 MNNVL nccl-test"), so in-domain collectives there may be ~15 % optimistic.
- The figures equal the catalog's ``collective_efficiency`` entries (``hardware_catalog/data/interconnects.yaml``);
  a 4-GPU NVLink mesh (Dell XE8640) is priced as NVSwitch.
- Latency: 10 us within a node, 20 us plus 2 us per ring hop between nodes (Calculon's NVLink and InfiniBand
  tiers, ``systems/h100_80g_nvl8.json``).

Rank order follows Megatron-LM and torchtitan's device mesh: tensor parallel innermost, then context, then
data (shard, then replicate), pipeline outermost (Narayanan et al. 2021, arXiv 2104.04473, Sec. 3.3).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

from estimator.memo import ObjectMemo
from estimator.messages import Num, Text
from hardware_catalog import Gpu, Server
from hardware_catalog.loader import GpuFabric

__all__ = ["Fabric", "Group", "NodeNics", "ServerSpec", "collective_time", "fabric_for", "gpu_fabric",
           "network_warnings", "node_nics", "place_group", "scale_up_gpus"]

# Measured all-reduce / other-collective busbw (GB/s) on 8-GPU NVSwitch boards, keyed by per-GPU NVLink GB/s.
NVSWITCH_BUSBW_GBPS: Final[dict[int, tuple[float, float]]] = {600: (205.0, 205.0), 900: (475.0, 370.0)}
NVLINK_PAIR_BUSBW_GBPS: Final = 116.0
PCIE_RING_EFF: Final = 0.70
NIC_EFF: Final = 0.90
INFINITY_FABRIC_EFF: Final = 0.70
INTRA_LATENCY_S: Final = 10e-6
INTER_LATENCY_S: Final = 20e-6
INTER_HOP_S: Final = 2e-6
# Without a server in the request (or when the server lists no NICs at all): one NIC per GPU, 200 Gb/s for
# Ampere (DGX A100: 8x HDR ConnectX-6), 400 Gb/s otherwise (DGX H100/H200: 8x ConnectX-7 NDR) --
# hardware-facts.md Sec. 3. Keyed on the GPU's architecture: the NVLink rate would give the H100 PCIe/NVL
# (NVLink bridges at 600 GB/s) the A100's HDR default.
DEFAULT_NIC_GBITS: Final = {"Ampere": 200.0}
DEFAULT_NIC_GBITS_OTHER: Final = 400.0
_COMPUTE_PURPOSES: Final = ("compute", "gpu", "east", "backend", "rdma", "training")


class ServerSpec(Protocol):
    """The catalog server fields read here (``hardware_catalog`` ``Server``)."""

    @property
    def gpu_fabric(self) -> str: ...

    @property
    def nics(self) -> Any: ...


@dataclass(frozen=True)
class Fabric:
    """Bandwidths in bytes/s: within the scale-up domain per collective kind, and each node's NICs in total.
    ``domain`` is the GPUs a collective reaches without the NICs (:func:`scale_up_gpus`): the node's, or the
    NVLink domain when it spans nodes (GB200 / GB300 NVL72: 72 GPUs over 18 four-GPU trays)."""

    kind: str
    intra_allreduce: float
    intra_other: float
    pair: float  # within an NVLink-bridged pair (== intra_other elsewhere)
    node_nic: float
    gpus_per_node: int
    domain: int = 0

    @property
    def scale_up(self) -> int:
        """GPUs one group may span and stay off the NICs (``domain``, at least the node)."""
        return max(self.domain, self.gpus_per_node)

    @property
    def nic_per_gpu(self) -> float:
        """Each GPU's share of its node's NICs (bytes/s)."""
        return self.node_nic / self.gpus_per_node


class Group:
    """A process group: ``size`` ranks, ``per_node`` of them on each node it spans."""

    size: Final[int]
    per_node: Final[int]

    def __init__(self, size: int, per_node: int) -> None:
        self.size = size
        self.per_node = per_node

    @property
    def nodes(self) -> int:
        return math.ceil(self.size / max(1, self.per_node))


def _field(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def gpu_fabric(gpu: Gpu, server: Server | None) -> GpuFabric:
    """The GPU fabric of one node, for the step time and the NCCL exports alike: the server's (the catalog's
    ``gpu_fabric``), else what the GPU implies (no server chosen, or a custom entry that does not say): an AMD
    accelerator's Infinity Fabric, an SXM board's NVSwitch, NVLink-bridged pairs of PCIe/NVL cards, else PCIe."""
    kind = _field(server, "gpu_fabric", None) if server is not None else None
    if kind:
        return cast(GpuFabric, str(kind))
    if str(_field(gpu, "vendor", "")).upper() == "AMD":
        return "infinity-fabric"
    if _field(gpu, "form_factor", "") == "SXM":
        return "nvswitch"
    return "nvlink-bridge-pairs" if float(_field(gpu, "nvlink_gbps_bidir", 0) or 0) > 0 else "pcie"


def _nvswitch(nvlink_gbps: float) -> tuple[float, float]:
    key = round(nvlink_gbps)
    if key in NVSWITCH_BUSBW_GBPS:
        return NVSWITCH_BUSBW_GBPS[key]
    ar, other = NVSWITCH_BUSBW_GBPS[900]
    scale = nvlink_gbps / 900.0 if nvlink_gbps > 0 else 1.0
    return ar * scale, other * scale


def _pcie_gbps(gpu: Gpu) -> float:
    rate = _field(gpu, "pcie_gbps_per_direction", None)
    if rate:
        return float(rate)
    gen = int(_field(gpu, "pcie_gen", 4) or 4)
    return {3: 15.75, 4: 31.5, 5: 63.0, 6: 121.0}.get(gen, 31.5)


def _nic_gbits(server: Server, compute: bool) -> float:
    """Gb/s of a server's NICs: those that carry GPU traffic (purpose names the compute/GPU fabric, or is
    unset) when ``compute``, else all of them."""
    total = 0.0
    for nic in _field(server, "nics", None) or []:
        purpose = str(_field(nic, "purpose", "") or "").lower()
        if compute and purpose and not any(p in purpose for p in _COMPUTE_PURPOSES):
            continue
        total += float(_field(nic, "count", 1) or 1) * float(_field(nic, "gbps", 0) or 0)
    return total


@dataclass(frozen=True)
class NodeNics:
    """The NIC bandwidth a node's inter-node collectives run on, and where the figure comes from:
    ``compute`` (the server's GPU-fabric NICs), ``frontend`` (no compute NICs listed: the frontend ones),
    ``assumed`` (the server lists no NICs: the default below), ``default`` (no server in the request)."""

    gbits: float
    source: str


def node_nics(gpu: Gpu, server: Server | None, gpus_per_node: int) -> NodeNics:
    """What the server has: its compute NICs, else its frontend NICs; a server without any NIC, and a request
    without a server, get one default NIC per GPU (``DEFAULT_NIC_GBITS``, by GPU architecture)."""
    if server is not None:
        compute = _nic_gbits(server, compute=True)
        if compute > 0:
            return NodeNics(compute, "compute")
        frontend = _nic_gbits(server, compute=False)
        if frontend > 0:
            return NodeNics(frontend, "frontend")
    per_gpu = DEFAULT_NIC_GBITS.get(str(_field(gpu, "arch", "") or ""), DEFAULT_NIC_GBITS_OTHER)
    return NodeNics(per_gpu * gpus_per_node, "default" if server is None else "assumed")


def network_warnings(gpu: Gpu, server: Server | None, num_nodes: int, gpus_per_node: int) -> list[str]:
    """Plain-words warnings about the NICs a multi-node step time is priced on (none on one node)."""
    if num_nodes <= 1 or server is None:
        return []
    nics = node_nics(gpu, server, gpus_per_node)
    name = str(_field(server, "name", None) or _field(server, "id", "the server"))
    if nics.source == "frontend":
        return [Text("Multi-node: %(server)s lists no compute-fabric NICs, so the %(nodes)s nodes talk over its "
                     "frontend NICs (%(gbits)s Gb/s per node in all); inter-node communication will be very slow. "
                     "Add InfiniBand or RoCE NICs (one 200-400 Gb/s NIC per GPU is usual).", server=name,
                     nodes=num_nodes, gbits=Num(nics.gbits, "g"))]
    if nics.source == "assumed":
        return [Text("Multi-node: %(server)s lists no NICs; the step time assumes %(gbits)s Gb/s per node "
                     "(%(per_gpu)s Gb/s per GPU, DGX-class). Without such NICs inter-node communication will be "
                     "much slower.", server=name, gbits=Num(nics.gbits, "g"),
                     per_gpu=Num(nics.gbits / gpus_per_node, "g"))]
    return []


def _node_nic_bytes(gpu: Gpu, server: Server | None, gpus_per_node: int) -> float:
    return node_nics(gpu, server, gpus_per_node).gbits / 8.0 * 1e9 * NIC_EFF


# a fabric is a pure function of the catalog GPU and server objects and the GPUs per node: once each
_FABRICS: Final[ObjectMemo[Fabric]] = ObjectMemo(1024)


def scale_up_gpus(server: Server | None, gpus_per_node: int) -> int:
    """GPUs a collective reaches without the NICs: the server's NVLink domain when the catalog says it spans
    nodes (``nvlink_domain_gpus``: 72 on an NVL72 rack of four-GPU trays), else the ``gpus_per_node`` in use
    (the node: NVSwitch, or PCIe between bridged pairs). A domain that spans nodes is a whole number of them."""
    domain = _field(server, "nvlink_domain_gpus", None) if server is not None else None
    return max(gpus_per_node, int(domain)) if domain else gpus_per_node


def fabric_for(gpu: Gpu, server: Server | None, gpus_per_node: int) -> Fabric:
    """The fabric of one node of ``gpus_per_node`` GPUs (server from the catalog, or inferred from the GPU),
    memoised per GPU and server object and GPUs per node."""
    return _FABRICS.get_or_compute((gpu, server), (gpus_per_node,), lambda: _fabric_for(gpu, server, gpus_per_node))


def _fabric_for(gpu: Gpu, server: Server | None, gpus_per_node: int) -> Fabric:
    kind = gpu_fabric(gpu, server)
    nvlink = float(_field(gpu, "nvlink_gbps_bidir", 0) or 0)
    if server is not None and _field(server, "intra_node_gbps_bidir_per_gpu", None):
        nvlink = float(_field(server, "intra_node_gbps_bidir_per_gpu"))
    pcie = _pcie_gbps(gpu) * PCIE_RING_EFF
    if kind in ("nvswitch", "nvlink-mesh"):
        ar, other = _nvswitch(nvlink or 900.0)
        pair = other
    elif kind == "infinity-fabric":
        ar = other = pair = (nvlink or 896.0) / 2.0 * INFINITY_FABRIC_EFF
    elif kind == "nvlink-bridge-pairs":
        ar = other = pcie
        pair = NVLINK_PAIR_BUSBW_GBPS * (nvlink / 600.0 if nvlink else 1.0)
    else:
        ar = other = pair = pcie
    nic = _node_nic_bytes(gpu, server, gpus_per_node)
    return Fabric(kind, ar * 1e9, other * 1e9, pair * 1e9, nic, gpus_per_node, scale_up_gpus(server, gpus_per_node))


def place_group(size: int, stride: int, domain: int) -> Group:
    """A group of ``size`` ranks ``stride`` apart in rank order: how many share one scale-up domain of
    ``domain`` GPUs (the node, or an NVLink domain spanning nodes: :attr:`Fabric.scale_up`). A group whose span
    fits the domain stays on NVLink; one that crosses it runs over the NICs, ``per_node`` ranks per domain.
    A domain that is not a power of two (NVL72) holds ``domain // span`` whole groups: the launcher places jobs
    so that no group straddles two racks (Slurm topology/block segments), as NVIDIA's NVL72 guides do."""
    per_node = max(1, min(size, domain // max(1, stride)))
    return Group(size=size, per_node=per_node)


def _intra_busbw(kind: str, group: Group, fabric: Fabric) -> float:
    if fabric.kind == "nvlink-bridge-pairs" and group.per_node <= 2:
        return fabric.pair
    return fabric.intra_allreduce if kind == "allreduce" else fabric.intra_other


def _factor(kind: str, n: int) -> float:
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind == "sendrecv":
        return 1.0
    return (n - 1) / n


def _latency(kind: str, group: Group) -> float:
    if group.nodes <= 1:
        return INTRA_LATENCY_S
    ring_hops = group.nodes - 1
    tree_hops = 2 * math.ceil(math.log2(group.nodes))
    hops = min(ring_hops, tree_hops) if kind == "allreduce" else ring_hops
    return INTER_LATENCY_S + INTER_HOP_S * hops


def collective_time(kind: str, nbytes: float, group: Group, fabric: Fabric) -> float:
    """Seconds for one collective of ``nbytes`` (the per-rank buffer NCCL counts as S) on ``group``.

    ``kind``: allreduce | allgather | reducescatter | alltoall | sendrecv. For all-gather ``nbytes`` is the
    gathered (output) size, for reduce-scatter the input size, as nccl-tests counts them.
    """
    if nbytes <= 0 or (group.size <= 1 and kind != "sendrecv"):
        return 0.0
    intra = _intra_busbw(kind, group, fabric)
    n = max(2, group.size)
    if group.nodes <= 1:
        return _latency(kind, group) + nbytes * _factor(kind, n) / intra
    # the ranks of the group in one domain each reach the network through their own share of a node's NICs
    nic_share = fabric.node_nic * group.per_node / fabric.gpus_per_node
    if kind == "alltoall":
        on_node = nbytes * (group.per_node - 1) / n / intra
        off_node = nbytes * (n - group.per_node) / n / fabric.nic_per_gpu
        return _latency(kind, group) + max(on_node, off_node)
    if kind == "sendrecv":
        return _latency(kind, group) + nbytes / fabric.nic_per_gpu
    return _latency(kind, group) + nbytes * _factor(kind, n) / min(intra, nic_share)
