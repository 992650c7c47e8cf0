"""The alpha-beta collective model of estimator.training.comm against nccl-tests' formulas and measured busbw.

Figures: ``../shared/reference/hardware-facts.md`` Sec. 2.2 (NVIDIA/nccl-tests ``doc/PERFORMANCE.md``:
all-reduce moves ``2(n-1)/n`` of the buffer, all-gather / reduce-scatter ``(n-1)/n``; busbw 475 GB/s for
8x H200 all-reduce, ~370 GB/s for the other collectives on NVLink 4, ~205 GB/s on 8x A100, 116 GB/s for an
NVLink-bridged H100 PCIe pair; 46-48 GB/s per 400G NDR NIC between nodes).
"""

from __future__ import annotations

from functools import cache

import pytest

from estimator.training.comm import (
    INTER_LATENCY_S,
    INTRA_LATENCY_S,
    Fabric,
    Group,
    collective_time,
    fabric_for,
    network_warnings,
    node_nics,
    place_group,
)
from hardware_catalog import Catalog, load_catalog

GB = 1e9


@cache
def catalog() -> Catalog:
    return load_catalog()


def _fabric(gpu: str, server: str | None = None, per_node: int = 8) -> Fabric:
    c = catalog()
    return fabric_for(c.gpus[gpu], c.servers[server] if server else None, per_node)


@pytest.mark.parametrize(("kind", "factor", "busbw"), [
    ("allreduce", 2 * 7 / 8, 475.0), ("allgather", 7 / 8, 370.0), ("reducescatter", 7 / 8, 370.0),
    ("alltoall", 7 / 8, 370.0)])
def test_single_node_collectives_follow_nccl_factors(kind: str, factor: float, busbw: float) -> None:
    fabric = _fabric("h200-sxm-141gb", "nvidia-dgx-h200")
    t = collective_time(kind, 1 * GB, Group(8, 8), fabric)
    assert t == pytest.approx(INTRA_LATENCY_S + factor * GB / (busbw * GB))


def test_a100_nvswitch_uses_its_measured_busbw() -> None:
    fabric = _fabric("a100-sxm4-80gb", "nvidia-dgx-a100-640gb")
    assert fabric.intra_allreduce == pytest.approx(205 * GB)
    h200 = _fabric("h200-sxm-141gb")
    assert collective_time("allreduce", GB, Group(8, 8), fabric) > 2 * collective_time("allreduce", GB,
                                                                                        Group(8, 8), h200)


def test_nvlink_bridge_pairs_are_fast_within_a_pair_and_pcie_beyond() -> None:
    fabric = _fabric("h100-pcie-80gb", "dell-r760xa-h100-pcie", per_node=4)
    pair = collective_time("allreduce", GB, Group(2, 2), fabric)
    four = collective_time("allreduce", GB, Group(4, 4), fabric)
    assert fabric.pair == pytest.approx(116 * GB)
    assert four > 2.5 * pair  # beyond the bridge the ring runs over PCIe Gen5


def test_pcie_only_server_is_bound_by_its_pcie_links() -> None:
    fabric = _fabric("l40s-48gb", "dell-r760xa-l40s", per_node=4)
    assert fabric.kind == "pcie"
    assert fabric.intra_allreduce < 32 * GB  # Gen4 x16, one direction


def test_inter_node_ring_runs_at_the_nics() -> None:
    fabric = _fabric("h100-sxm5-80gb", "nvidia-dgx-h100")
    assert fabric.node_nic == pytest.approx(8 * 400 / 8 * GB * 0.9)  # the 4 frontend ports do not count
    # One rank per node (data parallel across TP=8 nodes): each GPU has one 400G NIC.
    t = collective_time("allreduce", GB, Group(16, 1), fabric)
    per_gpu = fabric.node_nic / 8
    assert t == pytest.approx(INTER_LATENCY_S + 2e-6 * 8 + 2 * 15 / 16 * GB / per_gpu)
    # Eight ranks per node share all eight NICs: the ring is bounded by min(NVLink, NICs).
    full = collective_time("reducescatter", GB, Group(64, 8), fabric)
    assert full == pytest.approx(INTER_LATENCY_S + 2e-6 * 7 + 63 / 64 * GB / min(370 * GB, fabric.node_nic))


def test_a100_default_nics_are_8x200g() -> None:
    fabric = _fabric("a100-sxm4-80gb")  # no server: DGX A100's 8 x HDR
    assert fabric.node_nic == pytest.approx(8 * 200 / 8 * GB * 0.9)


@pytest.mark.parametrize("gpu", ["h100-nvl-94gb", "h100-pcie-80gb", "h200-nvl-141gb"])
def test_hopper_bridge_parts_default_to_400g_not_the_a100s_200g(gpu: str) -> None:
    """The default NIC follows the architecture, not the NVLink rate (H100 NVL/PCIe bridges run 600 GB/s too)."""
    assert _fabric(gpu).node_nic == pytest.approx(8 * 400 / 8 * GB * 0.9)


def test_server_without_compute_nics_talks_over_its_frontend_nics() -> None:
    """Dell R760xa H100 NVL lists only 2 x 1 GbE frontend ports: that is all two nodes have between them."""
    c = catalog()
    gpu, server = c.gpus["h100-nvl-94gb"], c.servers["dell-r760xa-h100-nvl"]
    nics = node_nics(gpu, server, 4)
    assert (nics.gbits, nics.source) == (2.0, "frontend")
    assert _fabric("h100-nvl-94gb", "dell-r760xa-h100-nvl", 4).node_nic == pytest.approx(2 / 8 * GB * 0.9)
    assert any("frontend" in w for w in network_warnings(gpu, server, 2, 4))
    assert network_warnings(gpu, server, 1, 4) == []


@pytest.mark.parametrize("server", ["dell-r760xa-h100-pcie", "hpe-dl380a-gen12-h200-nvl"])
def test_server_listing_no_nics_gets_an_assumed_nic_and_a_warning(server: str) -> None:
    c = catalog()
    srv = c.servers[server]
    gpu = c.gpus[srv.gpu_id]
    nics = node_nics(gpu, srv, 4)
    assert (nics.gbits, nics.source) == (4 * 400.0, "assumed")
    assert any("lists no NICs" in w for w in network_warnings(gpu, srv, 2, 4))


def test_dgx_uses_its_compute_nics_and_warns_nothing() -> None:
    c = catalog()
    gpu, server = c.gpus["h100-sxm5-80gb"], c.servers["nvidia-dgx-h100"]
    assert node_nics(gpu, server, 8) == node_nics(gpu, server, 8).__class__(8 * 400.0, "compute")
    assert network_warnings(gpu, server, 4, 8) == []


def test_all_to_all_across_nodes_pays_the_off_node_share_at_nic_speed() -> None:
    fabric = _fabric("h100-sxm5-80gb", "nvidia-dgx-h100")
    intra = collective_time("alltoall", GB, Group(8, 8), fabric)
    inter = collective_time("alltoall", GB, Group(16, 8), fabric)
    assert inter > 3 * intra


def test_latency_dominates_small_messages_and_tree_beats_ring_at_scale() -> None:
    fabric = _fabric("h100-sxm5-80gb")
    assert collective_time("allreduce", 1024, Group(8, 8), fabric) == pytest.approx(INTRA_LATENCY_S, rel=0.01)
    ring_like = collective_time("allgather", 1024, Group(512, 8), fabric)
    tree = collective_time("allreduce", 1024, Group(512, 8), fabric)
    assert tree < ring_like


def test_nothing_to_do_costs_nothing() -> None:
    fabric = _fabric("h100-sxm5-80gb")
    assert collective_time("allreduce", GB, Group(1, 1), fabric) == 0.0
    assert collective_time("allreduce", 0, Group(8, 8), fabric) == 0.0


@pytest.mark.parametrize(("size", "stride", "per_node", "nodes"), [
    (8, 1, 8, 1), (16, 1, 8, 2), (4, 8, 1, 4), (32, 2, 4, 8), (2, 64, 1, 2)])
def test_rank_placement(size: int, stride: int, per_node: int, nodes: int) -> None:
    g = place_group(size, stride, 8)
    assert (g.per_node, g.nodes) == (per_node, nodes)


@pytest.mark.parametrize("gpu", sorted(load_catalog().gpus))
def test_every_catalog_gpu_has_a_fabric(gpu: str) -> None:
    fabric = _fabric(gpu)
    assert fabric.intra_allreduce > 0 and fabric.node_nic > 0
