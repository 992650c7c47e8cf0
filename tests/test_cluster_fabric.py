"""The compute fabric of N nodes (issue 32): the DGX H100 SuperPOD table reproduced exactly, then any node count,
partial units, oversubscription, three tiers, node-side optics, and the refusals that name their field."""

from __future__ import annotations

import pytest

from estimator.cluster import ClusterRequest, design_cluster, design_topology
from estimator.cluster.fabric import leaf_ports, spine_count
from estimator.errors import InvalidRequestError
from hardware_catalog import Catalog, load_catalog


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


# NVIDIA DGX SuperPOD reference architecture (H100), "Network fabrics", compute fabric table
# (docs.nvidia.com; /work/shared/reference/stacks-fabrics-nccl.md): SUs, nodes, GPUs, leaf, spine,
# node + UFM cables, leaf-spine cables
SUPERPOD_H100 = [
    (1, 31, 248, 8, 4, 252, 256),
    (2, 63, 504, 16, 8, 508, 512),
    (3, 95, 760, 24, 16, 764, 768),
    (4, 127, 1016, 32, 16, 1020, 1024),
]


@pytest.mark.parametrize(("units", "nodes", "gpus", "leaves", "spines", "node_cables", "leaf_spine"), SUPERPOD_H100)
def test_dgx_h100_superpod_network_table_is_reproduced(
    catalog: Catalog, units: int, nodes: int, gpus: int, leaves: int, spines: int, node_cables: int,
    leaf_spine: int,
) -> None:
    d = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=nodes), catalog).design
    assert (d.scalable_units, d.gpus, d.leaves, d.spines, d.cores, d.tiers) == (units, gpus, leaves, spines, 0, 2)
    assert (d.node_and_ufm_cables, d.leaf_spine_links) == (node_cables, leaf_spine)


def test_one_more_node_than_a_unit_holds_opens_the_next_unit(catalog: Catalog) -> None:
    d = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=32), catalog).design
    assert d.scalable_units == 2 and d.leaves == 16 and d.spines == 8
    assert d.node_and_ufm_cables == 32 * 8 + 4


def test_partial_unit_is_sized_by_the_ports_it_needs(catalog: Catalog) -> None:
    # 16 nodes + UFM: two rails a leaf would need 16 x 2 + 1 = 33 downlinks of 32, so one leaf per rail; each leaf
    # has 16 node links and at most one UFM link (17), uplinks rounded up to a multiple of the ceil(8 x 17 / 64) = 3
    # spines: 18 each, 144 leaf-spine links (was 8 x 32 = 256 on 4 spines: a full unit's uplinks)
    d = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=16), catalog).design
    assert (d.leaves, d.spines, d.tiers, d.leaf_up_ports) == (8, 3, 2, 18)
    assert d.node_links == 128 and d.ufm_links == 4 and d.leaf_spine_links == 8 * 18
    assert d.leaf_spine_links % d.spines == 0 and d.leaf_spine_links // d.spines <= d.radix


def _dgx(catalog: Catalog, nodes: int, server: str = "nvidia-dgx-h100", **kw: object):  # type: ignore[no-untyped-def]
    return design_cluster(ClusterRequest(server=server, num_nodes=nodes, **kw), catalog)  # type: ignore[arg-type]


@pytest.mark.parametrize("server", ["nvidia-dgx-h100", "hgx-b200-8gpu-cx7"])
def test_two_and_four_nodes_are_one_switch(catalog: Catalog, server: str) -> None:
    # every GPU-fabric port and the UFM's fit one 64-port QM9700 (NVIDIA DGX BasePOD: 2-8 nodes, QM9700 compute
    # fabric, no spine tier): 2 x 8 + 4 = 20 and 4 x 8 + 4 = 36 ports
    for nodes in (2, 4):
        r = _dgx(catalog, nodes, server)
        d = r.design
        assert (d.tiers, d.leaves, d.spines, d.cores, d.switches) == (1, 1, 0, 0, 1)
        assert d.leaf_spine_links == 0 and d.cables == d.node_and_ufm_cables == nodes * 8 + 4
        assert [p.role for p in r.parts if p.kind == "switch"] == ["leaf"]
        leaf_optics = next(p for p in r.parts if p.role == "leaf ports")
        assert leaf_optics.quantity == (nodes * 8 + 4) // 2  # twin-port modules, two ports each
        assert any(n.startswith("one switch") for n in d.notes)


@pytest.mark.parametrize("server", ["nvidia-dgx-h100", "hgx-b200-8gpu-cx7"])
def test_eight_nodes_with_ufm_take_rail_group_leaves_and_two_spines(catalog: Catalog, server: str) -> None:
    # 8 x 8 + 4 = 68 ports > 64: 4 leaves of 2 rails (16 node links + 1 UFM link = 17 of 32 down), 17 uplinks
    # rounded to 18 for ceil(4 x 17 / 64) = 2 spines
    d = _dgx(catalog, 8, server).design
    assert (d.tiers, d.leaves, d.spines, d.leaf_up_ports, d.leaf_spine_links) == (2, 4, 2, 18, 72)
    assert d.cables == 8 * 8 + 4 + 72
    assert any("4 leaves of 2 rails" in n for n in d.notes)
    # without the UFM appliance the 64 NIC ports fill exactly one switch
    bare = _dgx(catalog, 8, server, ufm=False).design
    assert (bare.tiers, bare.switches, bare.cables) == (1, 1, 64)


@pytest.mark.parametrize("server", ["nvidia-dgx-h100", "hgx-b200-8gpu-cx7"])
def test_small_clusters_no_longer_pay_for_a_full_unit(catalog: Catalog, server: str) -> None:
    per_node = {n: _dgx(catalog, n, server).cost.fabric_usd_per_node for n in (2, 4, 8, 16, 31, 32)}
    full_unit = per_node[31]  # the SuperPOD's 1 SU
    # on one switch a small cluster costs less a node than a full unit (it was 10x at 2 nodes, 5.2x at 4)
    assert max(per_node[2], per_node[4]) < full_unit
    # with a spine tier, at most 1.3x a full unit's (it was 2.8x at 8 nodes, 1.6x at 16)
    assert max(per_node[8], per_node[16]) <= 1.3 * full_unit
    # within a tier the cost a node falls as nodes share the switches
    assert per_node[4] < per_node[2]
    assert per_node[8] > per_node[16] > per_node[31]
    # switches grow with the nodes, never shrink
    switches = [_dgx(catalog, n, server).design.switches for n in (2, 4, 8, 16, 31, 32, 64)]
    assert switches == sorted(switches)


def test_oversubscription_within_one_unit_cuts_uplinks(catalog: Catalog) -> None:
    full = _dgx(catalog, 16).design
    over = _dgx(catalog, 16, oversubscription=2).design
    assert over.leaf_spine_links < full.leaf_spine_links and over.spines <= full.spines
    assert over.leaf_up_ports * 2 >= 17  # 17 downlinks at 2:1


def test_roce_on_128_ports_holds_16_nodes_on_one_switch(catalog: Catalog) -> None:
    d = _dgx(catalog, 16, fabric="roce-400").design  # SN5600 at 128 x 400G, no UFM: 128 ports
    assert (d.tiers, d.switches) == (1, 1)
    assert _dgx(catalog, 17, fabric="roce-400").design.tiers == 2


def test_a_partial_last_unit_gets_the_uplinks_its_nodes_need(catalog: Catalog) -> None:
    # 32 nodes + UFM = 33 slots: unit 1 is the table's (31 nodes + UFM, 8 leaves x 32 uplinks), unit 2 holds one
    # node on its 8 leaves: 1 uplink rounded up to a multiple of the 8 spines (4 spines would need 72 ports of 64)
    d = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=32), catalog).design
    assert (d.leaves, d.spines, d.leaf_up_ports) == (16, 8, 32)
    assert d.leaf_spine_links == 8 * 32 + 8 * 8
    assert d.leaf_spine_links // d.spines <= d.radix


def test_without_ufm_a_unit_holds_32_nodes(catalog: Catalog) -> None:
    d = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=32, ufm=False), catalog).design
    assert d.scalable_units == 1 and d.ufm_links == 0 and d.node_and_ufm_cables == 256


def test_two_tiers_end_at_the_radix_and_three_begin(catalog: Catalog) -> None:
    # 64 leaves of 64 ports: 8 units x 32 slots = 256 slots = 255 nodes + UFM (2,040 GPUs)
    two = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=255), catalog).design
    assert (two.tiers, two.leaves, two.spines) == (2, 64, 32)
    three = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=256), catalog).design
    assert three.tiers == 3 and three.leaves == 72 and three.pods == 3
    assert three.spines == 32 + 32 + 8  # the last pod holds one unit: 8 leaves x 32 links over 8 spines
    assert three.spine_core_links == three.leaf_spine_links  # non-blocking spines
    assert three.cores * 64 >= three.spine_core_links > (three.cores - 1) * 64


def test_3_tier_limit_is_a_422_naming_num_nodes(catalog: Catalog) -> None:
    design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=4096), catalog)
    with pytest.raises(InvalidRequestError) as err:
        design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=8192), catalog)
    assert err.value.field == "num_nodes" and "8,191" in str(err.value)


def test_zero_nodes_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidRequestError) as err:
        design_topology(0, 8, 64)
    assert err.value.field == "num_nodes"


def test_more_switch_ports_than_the_switch_has_is_refused(catalog: Catalog) -> None:
    with pytest.raises(InvalidRequestError) as err:
        design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=16, switch_ports=65), catalog)
    assert err.value.field == "switch_ports" and "64" in str(err.value)


def test_fewer_switch_ports_make_smaller_units(catalog: Catalog) -> None:
    d = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=31, switch_ports=32), catalog).design
    assert d.slots_per_unit == 16 and d.scalable_units == 2 and d.leaves == 16


def test_a_nic_speed_the_fabric_cannot_take_names_fabric(catalog: Catalog) -> None:
    with pytest.raises(InvalidRequestError) as err:
        design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=16, fabric="ib-xdr"), catalog)
    assert err.value.field == "fabric" and "800" in str(err.value)


def test_xdr_on_800g_nics_uses_144_port_switches(catalog: Catalog) -> None:
    server = catalog.server("nvidia-dgx-b200")
    nics = tuple(n.model_copy(update={"gbps": 800.0}) if n.purpose == "gpu-fabric" else n for n in server.nics)
    fast = server.model_copy(update={"id": "b200-cx8", "nics": nics})
    cat = catalog.model_copy(update={"servers": {**catalog.servers, "b200-cx8": fast}})
    d = design_cluster(ClusterRequest(server="b200-cx8", num_nodes=143, fabric="ib-xdr"), cat).design
    # 144-port leaves: 72 down / 72 up, 72 slots a unit; 144 slots -> 2 units x 8 rails
    assert (d.radix, d.leaf_down_ports, d.scalable_units, d.leaves, d.tiers) == (144, 72, 2, 16, 2)
    assert d.spines == spine_count(16, 72, 144) == 8


def test_oversubscription_is_explicit_and_cuts_uplinks(catalog: Catalog) -> None:
    assert leaf_ports(64, 1.0) == (32, 32)
    assert leaf_ports(64, 3.0) == (48, 16)
    assert leaf_ports(64, 2.0) == (42, 21)
    full = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=127), catalog)
    over = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=127, oversubscription=3), catalog)
    assert over.design.leaf_up_ports == 16 and over.design.leaf_spine_links < full.design.leaf_spine_links
    assert over.cost.fabric_usd < full.cost.fabric_usd
    assert any("oversubscribed 3:1" in n for n in over.design.notes)


def test_dgx_uses_twin_port_node_cages_and_hgx_single_port_optics(catalog: Catalog) -> None:
    dgx = design_cluster(ClusterRequest(server="nvidia-dgx-b200", num_nodes=64), catalog)
    hgx = design_cluster(ClusterRequest(server="hgx-b200-8gpu-cx7", num_nodes=64), catalog)
    node = {p.sku: p.quantity for p in dgx.parts if p.role.startswith("node side")}
    assert dgx.design.twin_port_node_cages and node == {"mms4x00-ns-flt": 64 * 4}
    node = {p.sku: p.quantity for p in hgx.parts if p.role.startswith("node side")}
    assert not hgx.design.twin_port_node_cages and node == {"mms4x00-ns400": 64 * 8}
    # same switches either way
    assert dgx.design.leaves == hgx.design.leaves and dgx.design.spines == hgx.design.spines


def test_switch_optics_are_one_twin_port_module_per_two_used_ports(catalog: Catalog) -> None:
    r = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=31), catalog)
    leaf = next(p for p in r.parts if p.role == "leaf ports")
    spine = next(p for p in r.parts if p.role == "spine ports")
    assert leaf.quantity == 8 * 16 + 2 + 8 * 16  # 31 nodes on 16 cages per rail leaf, UFM's 4 ports, 32 uplinks
    assert spine.quantity == 256 // 2
    assert r.design.switch_transceivers == leaf.quantity + spine.quantity


def test_parts_power_and_cost_add_up(catalog: Catalog) -> None:
    r = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=64), catalog)
    switches = [p for p in r.parts if p.kind == "switch"]
    qm = catalog.switch("nvidia-qm9700")
    assert sum(p.quantity for p in switches) == r.design.switches
    assert r.power.switches_w == pytest.approx(r.design.switches * qm.power_w)
    assert r.rack.switch_rack_units == r.design.switches * qm.rack_units
    fabric = sum(p.total_usd or 0 for p in r.parts if p.kind != "server")
    assert r.cost.fabric_usd == pytest.approx(fabric)
    assert r.cost.servers_usd == pytest.approx(64 * catalog.server("nvidia-dgx-h100").price_usd)  # type: ignore[operator]
    assert "NVIDIA UFM fabric manager appliance" in r.cost.unpriced_parts
    storage = float(catalog.tco_defaults.value("storage_tb")) * float(catalog.tco_defaults.value("storage_usd_per_tb"))
    assert r.tco is not None  # the designed fabric is the TCO's networking capex (not the flat per-node figure)
    assert r.tco.capex_usd == pytest.approx(r.cost.servers_usd + r.cost.fabric_usd + storage)
    assert r.tco.fabric_power_usd_per_year > 0


def test_roce_400_uses_the_sn5600_at_128_ports_and_no_ufm(catalog: Catalog) -> None:
    r = design_cluster(ClusterRequest(server="nvidia-dgx-h100", num_nodes=64, fabric="roce-400"), catalog)
    d = r.design
    assert d.switch == "nvidia-sn5600" and d.radix == 128 and d.leaf_down_ports == 64
    assert d.ufm_links == 0 and not any(p.kind == "appliance" for p in r.parts)
    assert (d.scalable_units, d.leaves) == (1, 8)  # 64 nodes on one 64-slot unit


def test_every_fabric_part_is_sourced(catalog: Catalog) -> None:
    for entry in (*catalog.switches.values(), *catalog.optics.values(), *catalog.cables.values()):
        for field in entry.figures():
            sources = entry.sources_for(field)
            assert sources and all(len(s.citation) > 10 and s.date for s in sources), (entry.id, field)
        for field in ("power_w", "price_usd"):
            assumed = any(s.kind == "assumption" for s in entry.sources_for(field))
            if getattr(entry, field, None) is not None and assumed:
                assert field in entry.uncertain, (entry.id, field)


def test_nvlink_domain_is_a_property_of_the_system(catalog: Catalog) -> None:
    assert catalog.server("nvidia-dgx-h100").nvlink_domain == 8
    nvl72 = catalog.server("nvidia-dgx-b200").model_copy(update={"nvlink_domain_gpus": 72})
    assert nvl72.nvlink_domain == 72
    pcie = next(s for s in catalog.servers.values() if s.gpu_fabric == "pcie")
    assert pcie.nvlink_domain == 1
