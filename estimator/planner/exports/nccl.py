"""NCCL (and CUDA) environment recommendations for a plan's topology, each with its reason.

Variables and semantics from the NCCL user guide ("Environment Variables"); what to set follows the topology:

- ``NCCL_NVLS_ENABLE=1`` on NVSwitch boards with NVLink 4+ (H100/H200/B200): NVLink SHARP reduces in the switch
  (all-reduce ~475 vs ~370 GB/s bus bandwidth on 8x H100, nccl-tests); A100's NVSwitch has no SHARP.
- ``NCCL_P2P_DISABLE`` is never set where NVLink connects the GPUs. Data-centre GPUs support PCIe peer-to-peer;
  it fails only where ACS / the IOMMU blocks it (VMs), so on PCIe servers it is listed as conditional.
- Between nodes: ``NCCL_IB_HCA`` names the GPU-fabric HCAs (ConnectX ``mlx5_*``) so NCCL stays off frontend and
  storage ports, ``NCCL_IB_GID_INDEX=3`` selects RoCE v2, ``NCCL_IB_DISABLE=1`` + sockets on plain Ethernet,
  ``NCCL_SOCKET_IFNAME`` keeps bootstrap off loopback and container bridges, ``NCCL_CROSS_NIC=0`` keeps rings on
  their rail and ``NCCL_MIN_NCHANNELS`` gives every rail a channel.
- ``CUDA_DEVICE_MAX_CONNECTIONS=1`` for Megatron with TP/SP (Megatron asserts it: communication kernels are
  queued before the GEMMs they overlap).
"""

from __future__ import annotations

from typing import Final

from estimator.messages import Text
from estimator.planner.contract import EnvVar, PlanLayout
from estimator.training.comm import gpu_fabric, scale_up_gpus
from hardware_catalog import Gpu, Server

__all__ = ["EnvVar", "environment", "nccl_tests_commands", "plan_nccl_tests"]

DEFAULT_RAILS: Final = 8  # no server chosen, 8 GPUs a node: one 400 Gb/s NIC per GPU (DGX H100 layout)


def _intra(gpu: Gpu, fabric: str) -> list[EnvVar]:
    out = []
    if fabric == "nvswitch" and (getattr(gpu, "nvlink_gen", None) or 0) >= 4:
        out.append(EnvVar(name="NCCL_NVLS_ENABLE", value="1",
                          reason=Text("NVLink SHARP on this NVSwitch reduces inside the switch (~475 vs ~370 GB/s "
                                      "all-reduce bus bandwidth on 8 GPUs); NCCL picks it when enabled (needs "
                                      "nvidia-fabricmanager), so keep a container default of 0 from disabling it")))
    if fabric == "pcie":
        out.append(EnvVar(name="NCCL_P2P_DISABLE", value="1",
                          reason=Text("PCIe peer-to-peer is blocked by ACS/IOMMU on some hosts (VMs): NCCL then "
                                      "hangs or fails instead of falling back to host memory"),
                          when=Text("only if `nvidia-smi topo -p2p r` reports peer-to-peer unsupported")))
    return out


def _rails(server: Server | None, gpus_per_node: int = DEFAULT_RAILS) -> tuple[int, str]:
    """(GPU-fabric NIC ports per node, their kind): the catalog server's, else one InfiniBand NIC per GPU of the
    node, as the step-time model assumes (``estimator.training.comm.node_nics``)."""
    if server is None:
        return gpus_per_node, "infiniband-ndr"
    fabric = [n for n in getattr(server, "nics", ()) or () if n.purpose == "gpu-fabric"]
    if not fabric:
        return 0, "ethernet"
    return sum(int(n.count) for n in fabric), str(fabric[0].kind)


def _mnnvl(server: Server | None, gpus_per_node: int) -> list[EnvVar]:
    """Multi-node NVLink: an NVLink domain spanning nodes (NVL72 trays) needs NCCL's MNNVL transport, which runs
    over IMEX channels between the trays (``NCCL_MNNVL_ENABLE``; NVIDIA's multi-node NVLink tuning guide,
    docs.nvidia.com/multi-node-nvlink-systems/multi-node-tuning-guide/nccl.html: GB200 MNNVL needs NCCL 2.25.2 or
    later and the IMEX service on every node of the domain)."""
    domain = scale_up_gpus(server, gpus_per_node)
    if domain <= gpus_per_node:
        return []
    return [EnvVar(name="NCCL_MNNVL_ENABLE", value="1",
                   reason=Text("the NVLink domain spans %(domain)s GPUs over %(trays)s nodes: collectives within it "
                               "run over NVLink between the nodes (multi-node NVLink), not the NICs; 1 makes NCCL "
                               "fail rather than fall back to the network when the IMEX channels are missing",
                               domain=domain, trays=domain // gpus_per_node))]


def _inter(server: Server | None, gpus_per_node: int = DEFAULT_RAILS) -> list[EnvVar]:
    rails, kind = _rails(server, gpus_per_node)
    where = Text("no server chosen: assumed one InfiniBand NIC per GPU") if server is None else f"{server.name}"
    out = [EnvVar(name="NCCL_SOCKET_IFNAME", value="^lo,docker0",
                  reason=Text("bootstrap and out-of-band traffic over the host's real interface, never loopback or "
                              "a container bridge (name the frontend interface instead if there are several)"))]
    if rails == 0 or kind == "ethernet":
        return [
            *out,
            EnvVar(name="NCCL_IB_DISABLE", value="1",
                   reason=Text("%(where)s has no RDMA NICs for GPU traffic: use TCP sockets", where=where)),
            EnvVar(name="NCCL_SOCKET_NTHREADS", value="4",
                   reason=Text("more socket threads to fill a fast Ethernet link")),
            EnvVar(name="NCCL_NSOCKS_PERTHREAD", value="4", reason=Text("several sockets per thread for bandwidth")),
        ]
    out.append(EnvVar(name="NCCL_IB_HCA", value="mlx5",
                      reason=Text("%(where)s: %(rails)s %(kind)s ports carry the GPU traffic (ConnectX mlx5_* HCAs); "
                                  "listing them keeps NCCL off frontend and storage ports", where=where, rails=rails,
                                  kind=kind)))
    if kind == "roce":
        out.append(EnvVar(name="NCCL_IB_GID_INDEX", value="3",
                          reason=Text("RoCE v2 (routable, IPv4) GID of the ports")))
    if rails >= 2:
        out.append(EnvVar(name="NCCL_CROSS_NIC", value="0",
                          reason=Text("rail-optimised fabric: each of the %(rails)s rings stays on its own rail",
                                      rails=rails)))
    if rails >= 4:
        out.append(EnvVar(name="NCCL_MIN_NCHANNELS", value=str(rails),
                          reason=Text("at least one channel per NIC so all %(rails)s rails carry traffic, also for "
                                      "the smaller messages of bucketed gradient reductions", rails=rails)))
    return out


def environment(layout: PlanLayout, gpu: Gpu, server: Server | None) -> list[EnvVar]:
    """Variables to export on every node of ``layout``; empty for a single GPU."""
    if layout.world_size <= 1:
        return []
    out = _intra(gpu, gpu_fabric(gpu, server))
    if layout.num_nodes > 1:
        out += _mnnvl(server, layout.gpus_per_node)
        out += _inter(server, layout.gpus_per_node)
    if layout.framework == "megatron" and (layout.tp > 1 or layout.sequence_parallel):
        out.append(EnvVar(name="CUDA_DEVICE_MAX_CONNECTIONS", value="1",
                          reason=Text("Megatron requires it with tensor/sequence parallelism: its communication "
                                      "kernels must be queued before the GEMMs they overlap")))
    return out


def nccl_tests_commands(gpus_per_node: int, nodes: int, infiniband: bool = True, domain: int = 0) -> list[str]:
    """nccl-tests command lines to run on delivered nodes (NVIDIA/nccl-tests README: ``-b``/``-e``/``-f`` sweep,
    ``-g`` GPUs per process): each collective in one node, all-reduce with rings forced, then across two nodes with
    rings forced (two nodes otherwise pick tree, which can reach twice the network bandwidth: NVIDIA/nccl issue
    307) and across all of them. Sizes up to 16 GB: below a few hundred MB the peak is not reached (nccl-tests
    issue 212). Where the NVLink ``domain`` spans nodes (NVL72 trays), an all-reduce over one whole domain with
    multi-node NVLink required (``NCCL_MNNVL_ENABLE=1``) measures the NVLink figure before the cross-domain runs.
    ``capplan nccl-check`` reads their output."""
    if gpus_per_node < 1 or nodes < 1:
        return []
    sweep = "-b 8 -e 16G -f 2"
    g = gpus_per_node
    out = [f"all_reduce_perf {sweep} -g {g}", f"all_gather_perf {sweep} -g {g}",
           f"reduce_scatter_perf {sweep} -g {g}", f"alltoall_perf {sweep} -g {g}",
           f"NCCL_ALGO=Ring all_reduce_perf {sweep} -g {g}"]
    domain_nodes = domain // g if domain > g else 1
    if nodes > 1 and domain_nodes > 1:
        n = min(nodes, domain_nodes)
        out.append(f"mpirun -np {n * g} -N {g} -x NCCL_MNNVL_ENABLE=1 all_reduce_perf {sweep} -g 1")
    if nodes > 1:
        net = "-x NCCL_IB_HCA=mlx5 " if infiniband else "-x NCCL_IB_GID_INDEX=3 "
        # two trays of one NVLink domain would talk over NVLink: keep the network test on the NICs
        off = "-x NCCL_MNNVL_ENABLE=0 " if domain_nodes > 1 else ""
        out.append(f"mpirun -np {2 * g} -N {g} {net}{off}-x NCCL_ALGO=Ring all_reduce_perf {sweep} -g 1")
        if nodes > 2:
            out.append(f"mpirun -np {nodes * g} -N {g} {net}all_reduce_perf {sweep} -g 1")
    return out


def plan_nccl_tests(layout: PlanLayout, server: Server | None) -> list[str]:
    """:func:`nccl_tests_commands` for a plan's nodes; empty for a single GPU."""
    if layout.world_size <= 1:
        return []
    rails, kind = _rails(server, layout.gpus_per_node)
    return nccl_tests_commands(layout.gpus_per_node, layout.num_nodes, kind.startswith("infiniband") or rails == 0,
                               scale_up_gpus(server, layout.gpus_per_node))
