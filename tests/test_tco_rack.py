"""Node power and rack planning: kW and BTU/h per node, nodes per rack by power and by space."""

from __future__ import annotations

import pytest

from estimator.facility.rack import (
    btu_per_hour,
    gpu_power_w,
    node_peak_power_w,
    node_power_at_load_w,
    nodes_by_power,
    nodes_by_space,
    nodes_per_rack,
    plan_rack,
    plan_rack_for_server,
    racks_needed,
)
from estimator.tco import TcoAssumptions
from hardware_catalog import load_catalog


@pytest.mark.parametrize(("watts", "btu"), [(1, 3.412), (1000, 3412), (10_200, 34_802.4)])
def test_btu_per_hour(watts: float, btu: float) -> None:
    assert btu_per_hour(watts) == pytest.approx(btu)  # 1 W = 3.412 BTU/h


@pytest.mark.parametrize(
    ("kw_per_node", "rack_kw", "nodes"),
    [
        (10.2, 40, 3),  # an XE9680-class node at 10.2 kW in a 40 kW rack: floor(3.92)
        (10.2, 40.8, 4),  # 4 DGX H100 per 40.8 kW rack (unanswered.io, NVIDIA user guide)
        (6.5, 15, 2),  # DGX A100 in a legacy 15 kW rack
        (6.2, 6.1, 0),
    ],
)
def test_nodes_by_power(kw_per_node: float, rack_kw: float, nodes: int) -> None:
    assert nodes_by_power(kw_per_node, rack_kw) == nodes


@pytest.mark.parametrize(("units", "rack", "reserved", "nodes"), [(6, 42, 0, 7), (8, 42, 0, 5), (8, 42, 4, 4)])
def test_nodes_by_space(units: int, rack: int, reserved: int, nodes: int) -> None:
    assert nodes_by_space(units, rack, reserved) == nodes


def test_plan_rack_takes_the_tighter_limit() -> None:
    plan = plan_rack(10.2, 6, 40, gpus_per_node=8)
    assert (plan.nodes_by_power, plan.nodes_by_space, plan.nodes_per_rack) == (3, 7, 3)
    assert plan.limited_by == "power" and plan.gpus_per_rack == 24
    assert plan.rack_kw_used == pytest.approx(30.6) and plan.btu_per_hour_per_rack == pytest.approx(30_600 * 3.412)
    dense = plan_rack(10.2, 8, 120)
    assert dense.nodes_per_rack == 5 and dense.limited_by == "space"


def test_plan_for_a_catalog_server_uses_max_power_when_known() -> None:
    plan = plan_rack_for_server("nvidia-dgx-h100", 40.8)  # 10.2 kW max, 8U
    assert plan.kw_per_node == 10.2 and plan.nodes_per_rack == 4 and "max" in plan.power_basis


def test_plan_for_a_server_without_max_power_estimates_it_from_gpu_tdp() -> None:
    # no published maximum: 1.82 x GPU TDP (DGX H100: 10.2 kW for 8 x 700 W) -> 8 x 700 x 1.82 = 10.192 kW, 6U
    plan = plan_rack_for_server("dell-xe9680-h100", 40)
    assert plan.kw_per_node == pytest.approx(10.192) and plan.nodes_per_rack == 3 and "estimated" in plan.power_basis


def test_plan_at_load_is_gpu_tdp_plus_the_rest_of_the_server() -> None:
    a = TcoAssumptions(server_non_gpu_power_w=600)
    plan = plan_rack_for_server("dell-xe9680-h100", 40, basis="load", assumptions=a)  # 8 x 700 W + 600 W = 6.2 kW
    assert plan.kw_per_node == pytest.approx(6.2) and plan.nodes_per_rack == 6
    load = plan_rack_for_server("nvidia-dgx-h100", 40.8, basis="load", assumptions=a)
    # 6 by power, 4 by space: 42U less the 4U kept for switches and PDUs (host_defaults.yaml), 8U a node
    assert load.kw_per_node == pytest.approx(6.2) and load.nodes_per_rack == 4 and load.reserved_units == 4


def test_a_server_with_its_own_gpu_sku_uses_that_power() -> None:
    # Dell ships the A100 SXM4 80GB at 500 W in the XE9680 (the catalog GPU is the 400 W part)
    server, gpu = load_catalog().server("dell-xe9680-a100"), load_catalog().gpu("a100-sxm4-80gb")
    assert (gpu_power_w(gpu), gpu_power_w(gpu, server)) == (400, 500)
    assert node_power_at_load_w(gpu, 8, 1000, server) == 8 * 500 + 1000
    assert node_peak_power_w(gpu, server, 8) == pytest.approx(8 * 500 * 1.82)
    assert plan_rack_for_server("dell-xe9680-a100", 40).kw_per_node == pytest.approx(7.28)


def test_peak_power_takes_empty_slots_out_of_the_catalog_maximum() -> None:
    cat = load_catalog()
    server, gpu = cat.server("nvidia-dgx-h100"), cat.gpu("h100-sxm5-80gb")
    assert node_peak_power_w(gpu, server, 8) == 10_200
    assert node_peak_power_w(gpu, server, 4) == 10_200 - 4 * 700


def test_dgx_b200_rack_plan() -> None:
    # DGX B200 user guide: 14.3 kW max, 10U -> 2 per 40.8 kW rack by power (3 by space in 42U less 4U reserved)
    plan = plan_rack_for_server("nvidia-dgx-b200", 40.8)
    assert (plan.kw_per_node, plan.nodes_by_power, plan.nodes_by_space, plan.nodes_per_rack) == (14.3, 2, 3, 2)
    assert plan.btu_per_hour_per_node == pytest.approx(14_300 * 3.412)


@pytest.mark.parametrize(("kw", "rack_kw", "ru", "nodes"), [(10.2, 40.8, 8, 4), (10.2, 40.8, None, 4), (0, 40, 8, 0),
                                                        (6.2, 100, 8, 5)])
def test_nodes_per_rack(kw: float, rack_kw: float, ru: int | None, nodes: int) -> None:
    assert nodes_per_rack(kw, rack_kw, ru) == nodes


def test_racks_needed() -> None:
    plan = plan_rack(10.2, 8, 40.8)
    assert [racks_needed(n, plan) for n in (1, 4, 5, 127)] == [1, 1, 2, 32]
    with pytest.raises(ValueError, match="does not fit"):
        racks_needed(1, plan_rack(10.2, 8, 5))
