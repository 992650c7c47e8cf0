"""The systems buyers compare today (issue 32 part 4): B300 / DGX B300 and the rack-scale GB200 / GB300 NVL72,
whose NVLink domain of 72 GPUs spans 18 four-GPU trays. The domain is a property of the system: the step-time
model keeps TP / EP / CP groups up to it on NVLink, the planner offers TP up to it, the cluster's fabric carries
only data parallelism and pipeline stages between domains, and the rack comes whole."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from estimator import EstimateRequest, estimate
from estimator.cluster import ClusterRequest, design_cluster
from estimator.cluster.scaling import traffic
from estimator.errors import InvalidRequestError
from estimator.facility.rack import plan_rack_for_server
from estimator.model.spec import resolve_model, shape_for
from estimator.planner.exports.nccl import environment, nccl_tests_commands, plan_nccl_tests
from estimator.planner.space import Pins, structures
from estimator.request import MAX_GPUS_PER_NODE, Hardware, Training
from estimator.training.comm import (
    NIC_EFF,
    collective_time,
    fabric_for,
    place_group,
    scale_up_gpus,
)
from hardware_catalog import Catalog, Server, load_catalog

TRAYS = ("gb200-nvl72-tray", "gb300-nvl72-tray")
NEW_GPUS = ("b300-sxm-288gb", "gb200-186gb", "gb300-288gb")


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return load_catalog()


# ------------------------------------------------------------------------------------------------ catalog
@pytest.mark.parametrize("gpu_id", NEW_GPUS)
def test_the_new_gpus_load_with_sources(catalog: Catalog, gpu_id: str) -> None:
    gpu = catalog.gpu(gpu_id)
    assert gpu.arch == "Blackwell" and gpu.nvlink_gen == 5 and gpu.nvlink_gbps_bidir == 1800
    assert gpu.sources and all(s.date for s in gpu.sources)
    # dense figures: FP8 twice BF16, never a sparse figure (the loader checks the order too)
    assert gpu.fp8_tflops_dense == 2 * gpu.bf16_tflops_dense
    assert gpu.memory_bytes <= gpu.memory_gb * 1e9


def test_the_rack_scale_gpus_run_hotter_and_faster_than_the_hgx_b200(catalog: Catalog) -> None:
    b200, gb200, gb300 = (catalog.gpu(g) for g in ("b200-sxm-180gb", "gb200-186gb", "gb300-288gb"))
    assert (gb200.tdp_w, gb300.tdp_w) == (1200, 1400) and b200.tdp_w == 1000
    assert gb200.bf16_tflops_dense > b200.bf16_tflops_dense
    assert gb300.memory_bytes > gb200.memory_bytes > b200.memory_bytes * 0.95


@pytest.mark.parametrize("server_id", TRAYS)
def test_an_nvl72_is_eighteen_four_gpu_trays_in_one_nvlink_domain(catalog: Catalog, server_id: str) -> None:
    tray = catalog.server(server_id)
    assert (tray.gpu_count, tray.nvlink_domain_gpus, tray.rack_nodes) == (4, 72, 18)
    assert tray.nvlink_domain == tray.scale_up_gpus == 72
    assert tray.cpu_sockets == 2 and tray.memory_type == "LPDDR5X" and tray.max_ram_gib == tray.ram_gib_configured
    assert tray.rack_power_kw is not None and tray.max_power_kw is not None
    assert tray.max_power_kw == pytest.approx(tray.rack_power_kw / 18, rel=0.01)
    fabric = [n for n in tray.nics if n.purpose == "gpu-fabric"]
    assert sum(n.count for n in fabric) == 4  # one NIC per GPU
    # the shared-out price is a derived figure and said to be uncertain
    assert tray.is_uncertain("price_usd") and tray.sources_for("price_usd")[0].kind == "derived"


def test_gb200_has_400g_cx7_and_gb300_800g_cx8(catalog: Catalog) -> None:
    speeds = {s: [n.gbps for n in catalog.server(s).nics if n.purpose == "gpu-fabric"]
              for s in (*TRAYS, "nvidia-dgx-b300", "asus-xa-nb3i-e12-b300")}
    assert speeds == {"gb200-nvl72-tray": [400], "gb300-nvl72-tray": [800], "nvidia-dgx-b300": [800],
                      "asus-xa-nb3i-e12-b300": [800]}
    assert catalog.server("asus-xa-nb3i-e12-b300").price_usd is None  # no OEM price: none invented
    dgx = catalog.server("nvidia-dgx-b300")
    assert dgx.gpu_count == dgx.nvlink_domain == dgx.scale_up_gpus == 8 and dgx.nvlink_domain_gpus is None


def test_existing_servers_keep_their_domain(catalog: Catalog) -> None:
    assert catalog.server("nvidia-dgx-h100").scale_up_gpus == 8
    assert catalog.server("dell-r760xa-h100-nvl").nvlink_domain == 2  # bridged pairs
    assert all(s.rack_nodes is None for s in catalog.servers.values() if s.id not in TRAYS)


def _tray_data(catalog: Catalog, **change: Any) -> dict[str, Any]:
    return {**catalog.server("gb200-nvl72-tray").model_dump(), **change}


@pytest.mark.parametrize(("change", "words"), [
    ({"nvlink_domain_gpus": 70}, "multiple of gpu_count"),
    ({"rack_power_kw": None}, "go together"),
    ({"gpu_count": 73}, "less than or equal to 72"),
    ({"memory_type": "HBM"}, "memory_type"),
])
def test_bad_rack_scale_entries_are_refused(catalog: Catalog, change: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        Server.model_validate(_tray_data(catalog, **change))


# -------------------------------------------------------------------------------------------- comm model
def test_a_tp16_group_stays_on_nvlink_in_the_nvl72_and_crosses_the_nic_on_hgx(catalog: Catalog) -> None:
    tray, dgx = catalog.server("gb200-nvl72-tray"), catalog.server("nvidia-dgx-b200")
    f_nvl = fabric_for(catalog.gpu(tray.gpu_id), tray, 4)
    f_hgx = fabric_for(catalog.gpu(dgx.gpu_id), dgx, 8)
    assert (f_nvl.scale_up, f_hgx.scale_up) == (72, 8)
    # both NVLink 5 boards: the same in-domain bus bandwidth
    assert f_nvl.intra_other == f_hgx.intra_other
    g_nvl, g_hgx = place_group(16, 1, f_nvl.scale_up), place_group(16, 1, f_hgx.scale_up)
    assert (g_nvl.nodes, g_hgx.nodes) == (1, 2)
    nbytes = 64e6
    t_nvl = collective_time("allgather", nbytes, g_nvl, f_nvl)
    t_hgx = collective_time("allgather", nbytes, g_hgx, f_hgx)
    # inside the domain: the NVLink ring; across two HGX nodes: the 8 ranks per node share 8 NICs
    assert t_nvl == pytest.approx(10e-6 + nbytes * 15 / 16 / f_nvl.intra_other)
    nic = 8 * 400e9 / 8 * NIC_EFF  # 8 x 400G ConnectX-7 at NIC_EFF
    assert t_hgx == pytest.approx(20e-6 + 2e-6 + nbytes * 15 / 16 / nic)
    # 8 NICs x 45 GB/s = 360 GB/s against NVLink 5's ~740 GB/s ring bus bandwidth
    assert t_hgx > 1.8 * t_nvl


def test_a_group_larger_than_the_domain_rides_the_nics(catalog: Catalog) -> None:
    tray = catalog.server("gb200-nvl72-tray")
    f = fabric_for(catalog.gpu(tray.gpu_id), tray, 4)
    g = place_group(144, 1, f.scale_up)
    assert (g.per_node, g.nodes) == (72, 2)
    # 72 ranks per domain, each with its own 400G NIC
    t = collective_time("allreduce", 1e9, g, f)
    per_gpu = 400e9 / 8 * NIC_EFF
    assert t == pytest.approx(20e-6 + 2e-6 + 1e9 * 2 * 143 / 144 / min(f.intra_allreduce, 72 * per_gpu))


def test_without_a_wider_domain_the_node_is_the_domain(catalog: Catalog) -> None:
    assert scale_up_gpus(None, 8) == 8 and scale_up_gpus(catalog.server("nvidia-dgx-h100"), 4) == 4
    assert scale_up_gpus(catalog.server("gb300-nvl72-tray"), 2) == 72


def _job(server: str, nodes: int, tp: int, gpn: int, ep: int = 1, model: str = "llama-3.1-405b") -> EstimateRequest:
    return EstimateRequest.model_validate({
        "model": model,
        "training": {"seq_len": 8192, "micro_batch_size": 1, "gradient_accumulation_steps": 16,
                     "activation_checkpointing": "full"},
        "parallelism": {"tp": tp, "pp": 4, "ep": ep, "framework": "megatron", "sharding": "zero1"},
        "hardware": {"server": server, "num_nodes": nodes, "gpus_per_node": gpn}})


def test_llama_405b_with_tp16_on_gb200_nvl72_times_tp_on_nvlink(catalog: Catalog) -> None:
    nvl = estimate(_job("gb200-nvl72-tray", 16, 16, 4), catalog)
    hgx = estimate(_job("nvidia-dgx-b200", 8, 16, 8), catalog)
    assert nvl.layout.tp == hgx.layout.tp == 16 and nvl.layout.world_size == hgx.layout.world_size == 64
    assert nvl.time is not None and hgx.time is not None
    tp_nvl, tp_hgx = nvl.time.breakdown_s["tensor_parallel_s"], hgx.time.breakdown_s["tensor_parallel_s"]
    assert tp_hgx > 1.5 * tp_nvl  # the HGX's TP-16 group crosses two nodes' NICs
    spans = "Tensor parallelism spans nodes"
    assert not any(spans in w for w in nvl.warnings) and any(spans in w for w in hgx.warnings)


def test_expert_parallelism_across_trays_stays_in_the_domain(catalog: Catalog) -> None:
    # Mixtral 8x22B: 8 experts, EP 8 over two 4-GPU trays (NVLink) vs two 4-GPU groups of an 8-GPU node
    nvl = estimate(_job("gb200-nvl72-tray", 8, 1, 4, ep=8, model="mixtral-8x22b"), catalog)
    pcie = estimate(_job("gb200-nvl72-tray", 8, 1, 4, ep=8, model="mixtral-8x22b").model_copy(update={
        "hardware": Hardware(gpu="gb200-186gb", num_nodes=8, gpus_per_node=4)}), catalog)
    assert nvl.layout.ep == 8 and nvl.time is not None and pcie.time is not None
    assert pcie.time.breakdown_s["expert_parallel_s"] > 2 * nvl.time.breakdown_s["expert_parallel_s"]


# --------------------------------------------------------------------------------------------- planner
def _tps(catalog: Catalog, gpn: int, nodes: int, domain: int) -> set[int]:
    shape = shape_for(resolve_model("llama-3.1-405b"))
    training = Training(seq_len=8192)
    world = gpn * nodes
    return {s.tp for s in structures(shape, training, world, nodes, gpn, world, Pins.of(None, training), domain)}


def test_the_planner_offers_tp_up_to_the_nvlink_domain(catalog: Catalog) -> None:
    # 16 trays = 64 GPUs of one NVL72 domain: TP 16, 32 and 64 are offered; one tray alone, or HGX nodes, stop at
    # the node (72 GPUs would not divide by TP 16: the world must)
    assert {16, 32, 64} <= _tps(catalog, 4, 16, 72) and max(_tps(catalog, 4, 16, 72)) == 64
    assert max(_tps(catalog, 4, 16, 4)) == 4
    assert max(_tps(catalog, 8, 8, 8)) == 8


def test_a_plan_on_gb200_nvl72_runs_tp16_inside_the_domain(catalog: Catalog) -> None:
    from estimator.planner.plan import PlanRequest, plan

    req = PlanRequest.model_validate({
        "model": "llama-3.1-405b", "pricing": "owned", "training": {"seq_len": 8192, "train_tokens": 1e9},
        "parallelism": {"framework": "megatron", "tp": 16},
        "hardware": {"server": "gb200-nvl72-tray", "num_nodes": 16}, "top_k": 3})
    res = plan(req, catalog)
    best = res.plans[0]
    assert best.layout.tp == 16 and best.layout.nvlink_domain_gpus == 72 and best.layout.gpus_per_node == 4
    assert best.estimate.time is not None
    env = {e.name: e.value for e in best.exports.environment}
    assert env["NCCL_MNNVL_ENABLE"] == "1"
    assert any("NCCL_MNNVL_ENABLE=1" in c for c in best.exports.nccl_tests)


def test_a_rack_scale_only_gpu_is_searched_in_its_tray(catalog: Catalog) -> None:
    from estimator.planner.hardware import hardware_options
    from estimator.planner.plan import PlanRequest

    req = PlanRequest.model_validate({"model": "llama-3.1-8b", "pricing": "owned",
                                      "constraints": {"gpus": ["gb200-186gb", "b200-sxm-180gb"]}})
    opts = {o.gpu.id: o for o in hardware_options(req, catalog)}
    assert opts["gb200-186gb"].server is not None and opts["gb200-186gb"].gpus_per_node == 4
    assert opts["b200-sxm-180gb"].server is None and opts["b200-sxm-180gb"].gpus_per_node == 8


# ------------------------------------------------------------------------------------------------ cluster
def test_traffic_on_the_fabric_by_domain() -> None:
    # TP 16 x PP 4 x DP 8 = 512 GPUs
    assert traffic(8, 16, 4, 1, 1, 72) == (["data", "pipeline"], ["tensor"])
    assert traffic(8, 16, 4, 1, 1, 8) == (["tensor", "data", "pipeline"], [])
    assert traffic(2, 8, 1, 2, 1, 72) == ([], ["tensor", "context", "data"])


def test_n_nvl72_racks_carry_only_data_and_pipeline_on_the_fabric(catalog: Catalog) -> None:
    job = _job("gb200-nvl72-tray", 1, 16, 4)
    res = design_cluster(ClusterRequest(server="gb200-nvl72-tray", num_nodes=72, fabric="ib-ndr", job=job), catalog)
    d = res.design
    assert (d.nvlink_domain_gpus, d.nvlink_domain_nodes, d.nvlink_domains, d.rails, d.gpus) == (72, 18, 4, 4, 288)
    assert any("data parallelism and pipeline stages only" in n for n in d.notes)
    assert (res.rack.nodes_per_rack, res.rack.compute_racks) == (18, 4)
    points = res.scaling  # from 16 trays (TP 16 x PP 4 = 64 GPUs) doubling: 16, 32, 64
    assert [p.nodes for p in points] == [16, 32, 64]
    for p in points:
        assert "tensor" not in p.fabric_traffic and "tensor" in p.nvlink_traffic
        assert set(p.fabric_traffic) <= {"data", "pipeline"}
    assert points[0].fabric_traffic == []  # one model replica inside one rack: nothing on the fabric
    assert points[-1].fabric_traffic  # four replicas over four racks
    hgx = design_cluster(ClusterRequest(server="nvidia-dgx-b200", num_nodes=36, fabric="ib-ndr",
                                        job=_job("nvidia-dgx-b200", 1, 16, 8)), catalog)
    assert all("tensor" in p.fabric_traffic for p in hgx.scaling)
    assert hgx.design.nvlink_domain_nodes == 1 and hgx.design.nvlink_domains == 36


def test_two_nvl72_racks_are_fabric_sized_by_their_trays_ports(catalog: Catalog) -> None:
    # 2 GB200 racks = 36 trays x 4 ConnectX-7 rails + 4 UFM links = 148 NDR ports: more than a QM9700's 64, and
    # 37 slots, one more than a 4-leaf unit of 32 holds: unit 1 (31 trays + UFM) with its 4 leaves' uplinks in full
    # (32), unit 2's 4 leaves carry 5 trays each and get 8 uplinks (5 rounded up to a multiple of the 4 spines)
    one = design_cluster(ClusterRequest(server="gb200-nvl72-tray", num_nodes=18, fabric="ib-ndr"), catalog)
    two = design_cluster(ClusterRequest(server="gb200-nvl72-tray", num_nodes=36, fabric="ib-ndr"), catalog)
    d = two.design
    assert (d.nvlink_domains, d.rails, d.tiers, d.scalable_units, d.leaves, d.spines) == (2, 4, 2, 2, 8, 4)
    assert d.node_and_ufm_cables == 36 * 4 + 4
    assert d.leaf_spine_links == 4 * 32 + 4 * 8  # was 8 x 32 = 256: the partial unit's uplinks in full
    assert any("last unit is partial" in n for n in d.notes)
    # one rack: 72 + 4 = 76 ports, one leaf per rail (two rails a leaf would be 36 + 2 of 32 down), 19 links down
    # a leaf and 20 up for 2 spines
    assert (one.design.leaves, one.design.spines, one.design.leaf_up_ports) == (4, 2, 20)
    assert two.cost.fabric_usd_per_node <= 1.1 * one.cost.fabric_usd_per_node
    # GB300 on XDR: 144-port Q3400s, a unit of 72 slots: 2 racks are one unit of 4 leaves (37 down, 38 up) + 2 spines
    xdr = design_cluster(ClusterRequest(server="gb300-nvl72-tray", num_nodes=36, fabric="ib-xdr"), catalog).design
    assert (xdr.tiers, xdr.scalable_units, xdr.leaves, xdr.spines, xdr.leaf_up_ports) == (2, 1, 4, 2, 38)


def test_a_partial_domain_is_said(catalog: Catalog) -> None:
    res = design_cluster(ClusterRequest(server="gb300-nvl72-tray", num_nodes=20, fabric="ib-xdr"), catalog)
    assert res.design.nvlink_domains == 2 and any("partial" in n for n in res.design.notes)


def test_gb300_needs_an_800g_fabric(catalog: Catalog) -> None:
    with pytest.raises(InvalidRequestError) as err:
        design_cluster(ClusterRequest(server="gb300-nvl72-tray", num_nodes=18, fabric="ib-ndr"), catalog)
    assert err.value.field == "fabric"
    assert design_cluster(ClusterRequest(server="nvidia-dgx-b300", num_nodes=16, fabric="roce-800"),
                          catalog).design.rails == 8


def test_an_nvl72_rack_comes_whole_at_its_own_power(catalog: Catalog) -> None:
    plan = plan_rack_for_server("gb200-nvl72-tray", 40, catalog=catalog)
    assert (plan.nodes_per_rack, plan.gpus_per_rack, plan.rack_kw) == (18, 72, 120)
    assert plan_rack_for_server("nvidia-dgx-b200", 40, catalog=catalog).nodes_per_rack == 2  # unchanged rule


@pytest.mark.parametrize("server_id", ["gb200-nvl72-tray", "gb300-nvl72-tray"])
def test_a_trays_power_is_its_share_of_the_rack_everywhere(catalog: Catalog, server_id: str) -> None:
    """One function (estimator.facility.rack.node_non_gpu_power_w): a tray at load draws its rack's power over its
    trays, in the TCO's yearly power, the node panel (app.services.power) and the rack plan alike, not GPU TDP + the
    TCO's default 600 W for the rest of a server."""
    from app.services.power import node_power
    from estimator.tco import TcoAssumptions, ownership_tco

    server = catalog.servers[server_id]
    gpu = catalog.gpus[server.gpu_id]
    share_kw = float(server.rack_power_kw) / int(server.rack_nodes)
    default_kw = (server.gpu_count * float(gpu.tdp_w) + float(TcoAssumptions().server_non_gpu_power_w)) / 1000
    assert abs(share_kw - default_kw) > 0.3, "the rack's share is not the TDP + default figure"
    plan = plan_rack_for_server(server_id, 40, catalog=catalog)
    assert plan.kw_per_node == pytest.approx(share_kw)
    panel = node_power(catalog, server_id)
    assert panel.at_load_kw == pytest.approx(share_kw)
    own = ownership_tco(server_id, 18, None, catalog)  # one whole rack
    assert own.opex_per_year.load_power_kw == pytest.approx(float(server.rack_power_kw))
    rest_kw = share_kw - server.gpu_count * float(gpu.tdp_w) / 1000  # Grace, NVLink switch trays, power shelves
    util = own.utilisation
    assert own.opex_per_year.average_power_kw == pytest.approx(18 * (share_kw - rest_kw) * util + 18 * rest_kw)
    assert panel.average_kw == pytest.approx(own.opex_per_year.average_power_kw / 18)
    # an HGX / DGX box keeps GPU TDP + the rest of the server
    h100 = node_power(catalog, "nvidia-dgx-h100")
    assert h100.at_load_kw == pytest.approx((8 * 700 + float(TcoAssumptions().server_non_gpu_power_w)) / 1000)


# ------------------------------------------------------------------------------------------- nccl exports
def test_nccl_tests_on_nvl72_measure_the_domain_then_the_nics() -> None:
    cmds = nccl_tests_commands(4, 36, True, 72)
    assert "mpirun -np 72 -N 4 -x NCCL_MNNVL_ENABLE=1 all_reduce_perf -b 8 -e 16G -f 2 -g 1" in cmds
    two = next(c for c in cmds if c.startswith("mpirun -np 8 "))
    assert "NCCL_MNNVL_ENABLE=0" in two and "NCCL_ALGO=Ring" in two
    assert not any("MNNVL" in c for c in nccl_tests_commands(8, 4, True, 8))


def test_without_a_server_the_rails_are_the_gpus_of_the_node(catalog: Catalog) -> None:
    from estimator.planner.contract import PlanLayout

    base = dict(gpu="h100-sxm5-80gb", server=None, num_nodes=2, world_size=8, framework="pytorch",
                sharding="zero3", offload="none", dp=8, tp=1, pp=1, virtual_stages=1, cp=1, ep=1,
                sequence_parallel=False, hsdp_shard_size=None, activation_checkpointing="none", micro_batch_size=1,
                gradient_accumulation_steps=1, global_batch_size=8, seq_len=4096)
    env = {e.name: e.value for e in environment(PlanLayout(gpus_per_node=4, **base),  # type: ignore[arg-type]
                                                  catalog.gpu("h100-sxm5-80gb"), None)}
    assert env["NCCL_MIN_NCHANNELS"] == "4" and "NCCL_MNNVL_ENABLE" not in env
    assert plan_nccl_tests(PlanLayout(gpus_per_node=4, **base), None)[5].startswith("mpirun -np 8 -N 4")  # type: ignore[arg-type]


def test_the_request_caps_gpus_per_node_at_the_largest_domain() -> None:
    assert MAX_GPUS_PER_NODE == 72
    assert Hardware(gpus_per_node=72).world_size == 72
    with pytest.raises(ValidationError) as err:
        Hardware(gpus_per_node=73)
    assert err.value.errors()[0]["loc"] == ("gpus_per_node",)


def test_an_nccl_check_inside_one_nvl72_is_not_judged_against_the_nics(catalog: Catalog) -> None:
    from estimator.cluster.nccl import expected_busbw

    value, _, path = expected_busbw(catalog, catalog.server("gb200-nvl72-tray"), "all_reduce", 2, True)
    assert value is None and "multi-node NVLink" in path  # no measured NVLink-5 row: unknown, not "overstated"
    across, _, path = expected_busbw(catalog, catalog.server("gb200-nvl72-tray"), "all_reduce", 19, True)
    assert across == pytest.approx(4 * 46.0) and path.startswith("across 19 nodes")
    h100, _, path = expected_busbw(catalog, catalog.server("nvidia-dgx-h100"), "all_reduce", 2, True)
    assert h100 is not None and path.startswith("across 2 nodes")
